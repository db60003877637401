"""The main area's first panels. Each draws one part of the core's report; none computes a byte.

Order of the page: the title line and the verdict (which stages fit on the chosen GPU, at what peak and headroom)
as one block of plain HTML, the share link, what would make the checked stage fit, then views that run only when
open: the overview (here: per-stage model states beside the peak against the GPU), and in ui/views/details.py model
states, peak and step, layouts and ranks and how to read the page (compare, calibrate and framework configs have
modules of their own).
"""

from __future__ import annotations

import html

import streamlit as st

from zerocalc.answers.fixes import sentence as fix_sentence
from zerocalc.answers.verdict import headline, stage_verdicts
from zerocalc.units import format_bytes, percent_text

from . import finetune, plain, static_table
from .figures import PHASE_LABELS, PLOTLY_CONFIG, STAGE_LABELS
from ..state.fields import PRECISION_FIELDS, default_for
from ..state.stages import NONE as STAGE_NONE, ui_value
from ..sidebar.widgets import set_fields

_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*_{}[]()<>#+-.!|~$"})


def escape_markdown(text: str) -> str:
    """Text shown literally: link parameters and uploaded files can carry markdown (links, images, emphasis)."""
    return text.translate(_MARKDOWN)


def warnings(messages) -> None:
    """Link and input warnings: they quote what a link or a field held, so they are shown as plain text."""
    for message in messages:
        if message:
            plain.alert("warning", message)


def _csv(df) -> bytes:
    return df.to_csv(index=False).encode("utf-8")


def table_with_csv(df, name: str, report) -> None:
    """A table (scrolling sideways when narrow) and its CSV download, stamped with the version and convention. A
    small table is one static HTML block (ui/drawing/static_table.py), a long one the data grid."""
    if len(df) <= static_table.MAX_ROWS:
        st.html(static_table.html_table(df, name))
    else:
        st.dataframe(df, hide_index=True, key=f"{name}_table")
    stamp = "zerocalc" if report is None else f"zerocalc-{report['zerocalc_version']}-{report['convention']}"
    st.download_button(f"CSV: {name}", lambda: _csv(df), file_name=f"{stamp}-{name}.csv", mime="text/csv",
                       key=f"csv_{name}", on_click="ignore")   # built on click, not on every rerun


# The keys of the views' sections drawn only while open (lazy); the tests open them through LAZY_SECTIONS.
PEAK_TIMELINE, PEAK_RANGES, PEAK_ACTIVATIONS, PEAK_FITS_ON = (
    "open_timeline", "open_ranges", "open_activations", "open_fits_on")
DEEPSPEED, CATALOGUE, PROBE, SCALING = "open_deepspeed", "open_catalogue", "open_probe", "open_scaling"
PEAK_SWEEP, OVERVIEW_CHART, CLUSTER = "open_sweep", "open_overview_chart", "open_cluster"
EXPORTS = {fmt: f"open_export_{fmt}" for fmt in ("deepspeed", "accelerate", "torchtitan")}
LAZY_SECTIONS = (OVERVIEW_CHART, PEAK_SWEEP, PEAK_TIMELINE, PEAK_RANGES, PEAK_ACTIVATIONS, PEAK_FITS_ON, DEEPSPEED,
                 CATALOGUE, PROBE, SCALING, CLUSTER, *EXPORTS.values())


def lazy(label: str, key: str):
    """An expander whose content runs only while it is open (on_change="rerun" and .open, Streamlit 1.67): the
    expander when open, else None. Closed, it costs the browser one row instead of the chart or table inside."""
    box = st.expander(label, key=key, on_change="rerun")
    return box if box.open else None


def chart(fig, key: str) -> None:
    st.plotly_chart(fig, key=key, config=PLOTLY_CONFIG, theme=None)


# --- header, verdict, fixes ------------------------------------------------------------------------------------

def ledger_caption(report: dict, state: dict) -> str:
    """Bytes per parameter as the ledger has them (not as the convention names them)."""
    parts = " + ".join(f"{e['bytes_per_param']:g} {e['name']}" for e in report["ledger"])
    modified = [n for n in PRECISION_FIELDS if state[n] != default_for(n, state)]
    convention = f"convention {report['convention']}" + (", modified" if modified else "")
    return f"{convention}: {parts} = {report['bytes_per_param']:g} bytes per parameter"


UNIT_WORDS = {"GB": "GB (10^9 bytes", "GiB": "GiB (2^30 bytes"}


def header_html(report: dict, state: dict, model_name: str) -> str:
    """The title and the one line that says what is being checked, in which unit (with the page's CSS)."""
    layout = report.get("layout")
    world = "" if layout is None or layout["world_size"] == layout["dp"] else \
        (f" · world {layout['world_size']:,} GPUs = dp {layout['dp']:,} x tp {layout['tp']} x pp {layout['pp']} "
         f"x cp {layout['cp']}; per-worker numbers are the worst rank's")
    experts = report.get("experts")
    if experts and layout is not None:     # ep folds inside dp x tp x cp (it multiplies no world size)
        world += (f" · experts: ep {experts['ep']} x etp {experts['etp']}, {experts['experts_per_gpu']:,} of "
                  f"{experts['routed_experts']:,} routed experts per GPU, their ZeRO group edp "
                  f"{experts['expert_data_parallel']:,}")
    arch = report.get("architecture")
    params = f"{report['params']:,} parameters"
    if arch and arch.get("expert_params"):
        params += f" ({arch['active_params']:,} active per token, {arch['expert_params']:,} in experts)"
    recipe = f" · recipe: {report['recipe']}" if report.get("recipe") else ""       # none with parameters only
    training = finetune.summary(report)
    training = f" · {training}; the ledger applies to what trains" if training else ""
    sc = report["scenario"]
    offloaded = [what for what, where in (("optimizer state", sc["offload_optimizer"]),
                                          ("parameters", sc["offload_params"])) if where != "none"]
    where = {"cpu": "CPU", "nvme": "NVMe"}.get(sc["offload_optimizer"] if sc["offload_optimizer"] != "none"
                                              else sc["offload_params"], "")
    offload = f" · offload: {' and '.join(offloaded)} to the {where}" if offloaded else ""
    workers = f"{report['workers']:,} data-parallel worker{'s' if report['workers'] != 1 else ''}"
    line = (f"{model_name} · {params}{training} · {workers} · shard group "
            f"{report['shard_group']:,}{world}{offload}{recipe} · {ledger_caption(report, state)}. Sizes in "
            f"{UNIT_WORDS[state['units']]}; units and bars under Display).")
    return (f'{PAGE_CSS}<div class="zc-head" data-testid="zc-header"><h4>zerocalc · does it fit?</h4>'
            f'<p>{html.escape(line)}</p></div>')


def experts_line(report: dict, stage: int) -> None:
    """Why ep moves the model states at the checked stage, or does not (zerocalc.output.experts)."""
    e = report.get("experts")
    if not e:
        return
    name, ranks, split = STAGE_LABELS[stage], e["stage_ranks"], e["ep"] * e["etp"]
    words = {"parameters": "parameters", "gradients": "gradients", "optimizer": "optimizer states"}

    def listed(cats):
        names = [words[c] for c in cats]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    alone = e["split_by_ep_alone"][str(stage)]
    sharded = e["sharded"][str(stage)]
    text = (f"Experts: each GPU holds {e['experts_per_gpu']:,} of the {e['routed_experts']:,} routed experts "
            f"(ep {e['ep']} x etp {e['etp']}); their ZeRO group is edp = dp x tp x cp / (ep x etp) = {ranks:,} / "
            f"{split:,} = {e['expert_data_parallel']:,}. ")
    if sharded:
        text += (f"At {name} the experts' {listed(sharded)} are sharded over edp, so they are divided by "
                 f"ep x etp x edp = dp x tp x cp = {ranks:,} whatever ep is. ")
    text += (f"Their {listed(alone)} are divided by ep x etp = {split:,} alone: a larger ep shrinks those."
             if alone else f"So at {name} ep does not move the model states; it moves the all-to-all and the "
             "expert activations.")
    st.caption(text)


def host_line(report: dict, stage: int, unit: str) -> None:
    """The host RAM a node needs for the checked stage (the core's host_memory: the larger of the start-up and the
    step's offloads), against the node's RAM where it is given; shown when the plan offloads or gives the RAM."""
    row = next((r for r in report.get("host_memory", []) if r["stage"] == stage), None)
    if row is None or not row["per_node_bytes"] or not (row["step_bytes_per_node"] or row["host_capacity_bytes"]):
        return
    when = (f"at start-up: {row['loading_why']}" if row["decided_by"] == "start-up" else
            f"in the step: {row['gpus_per_node']} GPUs x {format_bytes(row['per_worker_bytes'], unit)} offloaded")
    need = f"Host RAM per node for {STAGE_LABELS[stage]}: {format_bytes(row['per_node_bytes'], unit)}, {when}"
    if row["fits_host"] is None:
        st.caption(need + ". Give the node's RAM under Sharding (Host RAM per node) to check it.")
    elif row["fits_host"]:
        st.caption(need + f"; within the {format_bytes(row['host_capacity_bytes'], unit)} given.")
    else:
        st.error(need + f"; more than the {format_bytes(row['host_capacity_bytes'], unit)} the node has: it does "
                 "not fit in host memory.")


def caveats(report: dict) -> None:
    for caveat in report.get("finetune", {}).get("caveats", []):
        st.warning(f"Not counted: {caveat}", icon="⚠️")
    work = report.get("workload", {})
    if work.get("recompute") == "selective" and work.get("attention") == "flash":
        st.caption("Selective recompute (Korthikanti et al.) re-runs eager attention's s x s scores, which flash "
                   "attention never keeps: under flash it changes nothing. op (torchtitan's op-level) or full "
                   "recompute are the ones that save memory here.")


RANGE_WORDS = {"fits even at the high end": ("across the assumptions' range", "ok"),
               "fits": ("not at the high end of the assumptions' range", "warn"),
               "fits at the low end only": ("fits at the low end only", "warn"),
               "does not fit even at the low end": ("not even at the low end", "bad")}
PAGE_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.6rem; }
[data-testid="stSidebarContent"] [data-testid="stSidebarUserContent"] { padding-top: 0.5rem; }
.st-key-zc_subtotals [data-testid="stMetricValue"] { font-size: 1.1rem; }
.st-key-zc_subtotals [data-testid="stMetricLabel"] p { font-size: 0.8rem; }
.zc-head { padding-top: 0.75rem; }
.zc-head h4 { font-size: 1.25rem; font-weight: 600; margin: 0 0 0.4rem 0; padding: 0; line-height: 1.3; }
.zc-head p { font-size: 0.875rem; color: rgba(49, 51, 63, 0.6); margin: 0; }
</style>"""
CARD_CSS = """<style>
.zc-answer { margin: 0 0 0.6rem 0; font-size: 1rem; line-height: 1.5; }
.zc-cards { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 0.5rem; }
@media (max-width: 640px) { .zc-cards { grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 0.35rem; } }
.zc-card { border-radius: 0.5rem; padding: 0.45rem 0.6rem; border: 1px solid; line-height: 1.3; }
.zc-fit { background: #e6f4ea; border-color: #7cbf8e; color: #14532d; }
.zc-nofit { background: #fde8e8; border-color: #e29a9a; color: #7f1d1d; }
.zc-checked { border-width: 3px; }
.zc-stage { font-weight: 700; font-size: 0.95rem; }
.zc-peak { font-size: 1.25rem; font-weight: 700; }
.zc-sub, .zc-band, .zc-states { font-size: 0.8rem; }
.zc-states { opacity: 0.85; border-top: 1px solid rgba(0, 0, 0, 0.12); margin-top: 0.25rem; padding-top: 0.2rem; }
.zc-neg { color: #b91c1c; font-weight: 700; }
.zc-pos { color: #15803d; font-weight: 700; }
.zc-band.zc-warn { color: #92400e; font-weight: 600; }
.zc-band.zc-bad { color: #7f1d1d; font-weight: 600; }
.zc-band.zc-ok { color: #14532d; }
@media (max-width: 640px) { .zc-peak { font-size: 1.05rem; } }
</style>"""


def peak_states(p: dict) -> int:
    """The model states the peak holds (its phase's part: gradients freed each step are not there; none when all
    are offloaded), not the stage's whole ledger (issue 33: 64.73 GB shown, 34.27 GB in the peak)."""
    return p["phases"][p["peak_phase"]].get("model states", 0)


def _card(p: dict, unit: str, checked: bool, verdict: dict, band: dict = None, states: int = None,
          measured: dict = None) -> str:
    fits = verdict["fits"]                 # the core's verdict (answers/verdict.py): the GPU, host RAM, the band
    head = "✓ fits" if fits else ("✗ " + verdict["answer"])
    if not fits and "host RAM per node" in verdict["failing"]:
        head += " (host RAM)"
    room = format_bytes(abs(p["headroom_bytes"]), unit)
    headroom = (f'<span class="zc-pos">{room} headroom</span>' if fits else
                f'<span class="zc-neg">−{room} over</span>')
    band_html = ""
    if measured is not None:       # measured beats estimated: the run's figure decides this card
        head = "✓ fits (measured)" if fits else "✗ does not fit (measured)"
        what = "needed at least" if measured["out_of_memory"] else "measured peak"
        headroom = f'estimate {format_bytes(p["peak_bytes"], unit)}'
        band_html = (f'<div class="zc-band zc-{"ok" if fits else "bad"}">{what} '
                     f'{format_bytes(measured["bytes"], unit)} (Calibrate)</div>')
        band = None
    if band is not None:
        words, tone = RANGE_WORDS.get(band["verdict"], (band["verdict"], "ok"))
        if tone == "warn":      # only where the assumptions' range changes the answer
            band_html = (f'<div class="zc-band zc-{tone}">{html.escape(words)}: '
                         f'{format_bytes(band["low_bytes"], unit)} to {format_bytes(band["high_bytes"], unit)}</div>')
    return (f'<div class="zc-card {"zc-fit" if fits else "zc-nofit"}{" zc-checked" if checked else ""}" '
            f'data-stage="{p["stage"]}" data-fits="{str(fits).lower()}">'
            f'<div class="zc-stage">{STAGE_LABELS[p["stage"]]}{" (checked)" if checked else ""} · {head}</div>'
            f'<div class="zc-peak">{format_bytes(p["peak_bytes"], unit)} peak</div>'
            f'<div class="zc-sub">{percent_text(p["peak_bytes"], p["capacity_bytes"], 0)} of '
            f'{format_bytes(p["capacity_bytes"], unit)} · '
            f'{headroom}</div>{band_html}'
            f'<div class="zc-states">of which model states {format_bytes(states, unit)} per worker in the peak '
            f'({PHASE_LABELS[p["peak_phase"]]})</div>'
            f'</div>')


def subtotals(report: dict, unit: str, stage: int, label: str) -> None:
    """The model-state subtotal per worker at each stage, labelled as such (a part of the peak, not the answer)."""
    st.caption(label)
    with st.container(horizontal=True, wrap=True, gap="small", key="zc_subtotals"):
        for s in report["stages"]:
            st.metric(f"{STAGE_LABELS[s['stage']]} model states", format_bytes(s["per_worker_total_bytes"], unit),
                      width=160)


def _names(stages) -> str:
    names = [STAGE_LABELS[s] for s in stages]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def no_peak(report: dict, unit: str, stage: int) -> None:
    """Without an architecture there is no peak to check: the model-state subtotals stand in for the answer."""
    if "peak" in report:
        return
    st.markdown("**No peak without an architecture**: pick a model, edit its fields, or load a config.json. "
                "Model states per worker:")
    subtotals(report, unit, stage, "Model-state subtotal per worker (parameters + gradients + optimizer "
                                   "state), by ZeRO stage:")


def _pipeline_words(layout: dict) -> str:
    """Under pipeline parallelism, how much of the step the pipeline idles (and the peak's micro-batch caveat)."""
    pp, m = layout["pp"], layout["micro_batches"]
    if pp == 1:
        return ""
    idle = f" The pipeline idles {100 * layout['pipeline_idle_share']:.0f}% of the step ({m:,} micro-batch" + \
        ("es" if m != 1 else "") + f" per step over {pp} stages)."
    if m < pp:
        idle += (f" With fewer micro-batches than stages the peak holds fewer in flight than a run at {pp} or more "
                 "would: raise the micro-batches per step (Megatron and torchtitan run a multiple of pp).")
    return idle


def _batch_words(batch, stage: int, unit: str) -> str:
    """Padded or packed batches (issue 37): the verdict judges the worst step; the typical step's peak beside it."""
    if not batch or batch["mode"] == "fixed":
        return ""
    worst, typical = batch["worst"], batch["typical"]
    said = f" Judged at {worst['words']}"
    if typical["tokens"] != worst["tokens"]:
        said += (f"; {typical['words']} peaks at {format_bytes(typical['peak_bytes'][stage], unit)}"
                 f" ({'fits' if typical['fits'][stage] else 'does not fit'})")
    return said + "."


def verdict_html(report: dict, ranges: dict, stage: int, unit: str, measured: dict = None) -> str:
    """The answer first: which stages fit on the chosen GPU, at what peak and headroom (red over, green under),
    the model-state subtotal beneath each, labelled as such ("" without a peak: see no_peak). `measured`: a
    pasted measurement's verdict of one stage (ui.views.calibration.measured_verdict), which that card follows."""
    if "peak" not in report:
        return ""
    peaks, gpu = report["peak"], report["gpu"]["name"]
    on = {} if measured is None else {measured["stage"]: measured}
    verdicts = stage_verdicts(peaks, report.get("host_memory", ()), (ranges or {}).get("stages", ()), on,
                              step=(report.get("batch") or {}).get("decides"))      # the worst step (issue 37)
    answer = headline(verdicts)
    workers = f"{report['layout']['world_size']:,} x {gpu}"
    p, v = peaks[stage], verdicts[stage]
    check = (f"Checking {STAGE_LABELS[stage]}: peak {format_bytes(p['peak_bytes'], unit)}, "
             f"{percent_text(p['peak_bytes'], p['capacity_bytes'], 0)} of the "
             f"{format_bytes(p['capacity_bytes'], unit)} PyTorch can use "
             + (f"({v['answer']})." if v["fits"] or v["deciding"].startswith("GPU memory")
                else f"({v['answer']}: {v['deciding']}).")
             + (f" Worst rank: {p['rank']}." if len(report["ranks"]) > 1 else "")
             + (" " + measured["sentence"] if measured is not None and measured["stage"] == stage else ""))
    check += _pipeline_words(report["layout"]) + _batch_words(report.get("batch"), stage, unit)
    sentence = (f'<p class="zc-answer" data-testid="zc-answer"><strong>Does it fit on {html.escape(workers)}?'
                f'</strong> {html.escape(answer[:1].upper() + answer[1:])}. {html.escape(check)}</p>')
    bands = {b["stage"]: b for b in (ranges or {}).get("stages", [])}
    # The whole answer is one HTML block: the sentence, then a card per stage ending with its model-state subtotal
    # on the GPU (parameters + gradients + optimizer state the peak holds; offloaded state is host memory), not a
    # markdown, a caption and a metric per stage.
    shown = list(zip(peaks, verdicts))
    if len({(p["peak_bytes"], v["answer"]) for p, v in shown}) == 1 and stage not in on:   # nothing to shard
        shown = [shown[stage]]
        sentence += ('<p class="zc-answer">One data-parallel worker: nothing is sharded, so every ZeRO stage holds '
                     'the same bytes (one card).</p>')
    cards = "".join(_card(p, unit, p["stage"] == stage, v, bands.get(p["stage"]), peak_states(p),
                          on.get(p["stage"])) for p, v in shown)
    return CARD_CSS + sentence + f'<div class="zc-cards" data-testid="zc-verdict">{cards}</div>'


FIELD_OF = {"shard_group": lambda v: 0 if v is None else v,
            **{name: (lambda v, n=name: ui_value(n, v)) for name in STAGE_NONE}}    # a layout's stage split


def fix_fields(fix, image_tokens: int = 0) -> dict:
    """A fix's changes as widget values (no shard group -> 0, a catalogued GPU clears a custom capacity; the
    sequence field is the text: the images' tokens come off a fix's sequence)."""
    values = {"stage": fix.stage}
    for part in (fix.scenario, fix.workload, fix.layout):
        for name, value in part.items():
            if name == "gpu_memory":
                continue
            if name == "seq_len":
                value -= image_tokens
            values[name] = FIELD_OF[name](value) if name in FIELD_OF else value
    return values


def fix_label(i: int, text: str, stage: int) -> str:
    """The picker's line for a fix: its number and the change (the sentence before its peak), as the list reads."""
    return f"{i + 1}. {text.partition(f': {STAGE_LABELS[stage]} peak ')[0]}"


def fixes(found: list, resolved, stage: int, unit: str, limit: int = 6) -> None:
    """What would make the checked stage fit: the core's cheapest changes, each with its peak and what it holds, as
    one markdown list, and one picker with one Apply button (a row of buttons per fix cost the browser an element
    each on every rerun: issue 36)."""
    if not found:
        return
    name = STAGE_LABELS[stage]
    texts = [fix_sentence(fix, resolved.scenario, resolved.workload, unit, stage) for fix in found]
    if not found[0].fits:              # answers/combined.py: nothing tried fits; the closest it came
        fix = found[0]
        st.markdown(f"**Nothing zerocalc tries makes {name} fit**, one change or up to three together. The "
                    f"closest comes to {percent_text(fix.peak_bytes, fix.capacity_bytes)} of the capacity: "
                    f"{escape_markdown(texts[0])} "
                    "A smaller model, fine-tuning instead of full training, or more GPUs with model parallelism "
                    "(Layouts and ranks) are the next steps.")
        return
    how = ("no single change is enough: changes joined, the cheapest sum of costs first"
           if all(f.parts for f in found) else "cheapest first; each changes one thing and holds the rest"
           if not any(f.parts for f in found) else "cheapest first: single changes, and changes joined where "
           "together they cost less than any single one")
    numbered = [f"{i + 1}. {escape_markdown(t)}" for i, t in enumerate(texts)]
    st.markdown(f"**What would make {name} fit** ({how}):\n\n" + "\n".join(numbered[:limit]))
    if len(found) > limit:
        with st.expander(f"{len(found) - limit} more"):
            st.markdown("\n".join(numbered[limit:]))
    left, right = st.columns([4, 1], vertical_alignment="bottom")
    pick = left.selectbox("Apply a change", range(len(found)), key="fix_pick",
                          format_func=lambda i: fix_label(i, texts[i], found[i].stage))
    pick = pick if pick is not None and pick < len(found) else 0
    right.button("Apply", key="fix_apply", on_click=set_fields,
                 args=(fix_fields(found[pick], resolved.workload.vision_tokens.text_tokens),),
                 help="Sets the chosen change's values in the sidebar.")


def import_message() -> None:
    message = st.session_state.get("import_message")
    if not message:
        return
    kind, text, details = message        # file names, config strings and Hub answers: plain text
    plain.alert("success" if kind == "success" else "error", text)
    if details:
        with st.expander(f"Details ({len(details)})"):
            plain.alert("info", f"{len(details)} line(s):", details)


# --- overview -------------------------------------------------------------------------------------------------

def overview(report: dict, unit: str, stage: int, breakdown: str) -> None:
    """The overview view (ui/drawing/overview.py: a table of the peak's terms; the chart drawn when its section
    opens)."""
    from .overview import draw        # it draws with this module's chart and lazy
    draw(report, unit, stage, breakdown)
