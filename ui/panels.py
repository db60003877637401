"""The main area's panels. Each draws one part of the core's report; none computes a byte.

Order of the page: the title line, the verdict (which stages fit on the chosen GPU, at what peak and headroom) and
the share link as one HTML block, what would make the checked stage fit, then views that run only when open: the
overview (per-stage model states beside the peak against the GPU), model states (cluster, scaling, ledger,
DeepSpeed's estimator), peak and step, layouts and ranks, compare, calibrate, framework configs, and how to read
the page.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import streamlit as st

from zerocalc.step.formulas import LEGEND
from zerocalc.answers.fixes import sentence as fix_sentence
from zerocalc.units import format_bytes

from . import figures, finetune, plain, tables
from .figures import PLOTLY_CONFIG, STAGE_LABELS
from .state import PRECISION_FIELDS, default_for
from .widgets import set_fields

_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*_{}[]()<>#+-.!|~$"})
DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC_PAGES = ("peak-memory.md", "parallelism.md", "benchmarks.md")


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
    """A table (scrolling sideways when narrow) and its CSV download, stamped with the version and convention."""
    st.dataframe(df, hide_index=True, key=f"{name}_table")
    stamp = "zerocalc" if report is None else f"zerocalc-{report['zerocalc_version']}-{report['convention']}"
    st.download_button(f"CSV: {name}", lambda: _csv(df), file_name=f"{stamp}-{name}.csv", mime="text/csv",
                       key=f"csv_{name}", on_click="ignore")   # built on click, not on every rerun


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
    arch = report.get("architecture")
    params = f"{report['params']:,} parameters"
    if arch and arch.get("expert_params"):
        params += f" ({arch['active_params']:,} active per token, {arch['expert_params']:,} in experts)"
    training = finetune.summary(report)
    training = f" · {training}; the ledger applies to what trains" if training else ""
    line = (f"{model_name} · {params}{training} · {report['workers']:,} data-parallel workers · shard group "
            f"{report['shard_group']:,}{world} · {ledger_caption(report, state)}. Sizes in "
            f"{UNIT_WORDS[state['units']]}; units and bars under Display).")
    return (f'{PAGE_CSS}<div class="zc-head" data-testid="zc-header"><h4>zerocalc · does it fit?</h4>'
            f'<p>{html.escape(line)}</p></div>')


def caveats(report: dict) -> None:
    for caveat in report.get("finetune", {}).get("caveats", []):
        st.warning(f"Not counted: {caveat}", icon="⚠️")


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
.zc-band.zc-bad { color: #7f1d1d; }
@media (max-width: 640px) { .zc-peak { font-size: 1.05rem; } }
</style>"""


def _card(p: dict, unit: str, checked: bool, band: dict = None, states: int = None) -> str:
    fits = p["fits"]
    head = "✓ fits" if fits else "✗ does not fit"
    room = format_bytes(abs(p["headroom_bytes"]), unit)
    headroom = (f'<span class="zc-pos">{room} headroom</span>' if fits else
                f'<span class="zc-neg">−{room} over</span>')
    band_html = ""
    if band is not None:
        words, tone = RANGE_WORDS.get(band["verdict"], (band["verdict"], "ok"))
        if tone == "warn":      # only where the assumptions' range changes the answer
            band_html = (f'<div class="zc-band zc-{tone}">{html.escape(words)}: '
                         f'{format_bytes(band["low_bytes"], unit)} to {format_bytes(band["high_bytes"], unit)}</div>')
    return (f'<div class="zc-card {"zc-fit" if fits else "zc-nofit"}{" zc-checked" if checked else ""}" '
            f'data-stage="{p["stage"]}" data-fits="{str(fits).lower()}">'
            f'<div class="zc-stage">{STAGE_LABELS[p["stage"]]}{" (checked)" if checked else ""} · {head}</div>'
            f'<div class="zc-peak">{format_bytes(p["peak_bytes"], unit)} peak</div>'
            f'<div class="zc-sub">{100 * p["utilisation"]:.0f}% of {format_bytes(p["capacity_bytes"], unit)} · '
            f'{headroom}</div>{band_html}'
            f'<div class="zc-states">of which model states {format_bytes(states, unit)} per worker</div>'
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


def verdict_html(report: dict, ranges: dict, stage: int, unit: str) -> str:
    """The answer first: which stages fit on the chosen GPU, at what peak and headroom (red over, green under),
    the model-state subtotal beneath each, labelled as such ("" without a peak: see no_peak)."""
    if "peak" not in report:
        return ""
    peaks, gpu = report["peak"], report["gpu"]["name"]
    fit = [p["stage"] for p in peaks if p["fits"]]
    nofit = [p["stage"] for p in peaks if not p["fits"]]
    workers = f"{report['layout']['world_size']:,} x {gpu}"
    if not nofit:
        answer = "every ZeRO stage fits"
    elif not fit:
        answer = "no ZeRO stage fits"
    else:
        answer = f"{_names(fit)} fit{'s' if len(fit) == 1 else ''}; {_names(nofit)} do{'es' if len(nofit) == 1 else ''} not"
    p = peaks[stage]
    check = (f"Checking {STAGE_LABELS[stage]}: peak {format_bytes(p['peak_bytes'], unit)}, "
             f"{100 * p['utilisation']:.0f}% of {format_bytes(p['capacity_bytes'], unit)} "
             + ("(fits)." if p["fits"] else "(does not fit).") + (f" Worst rank: {p['rank']}."
                                                                  if len(report["ranks"]) > 1 else ""))
    sentence = (f'<p class="zc-answer" data-testid="zc-answer"><strong>Does it fit on {html.escape(workers)}?'
                f'</strong> {html.escape(answer[:1].upper() + answer[1:])}. {html.escape(check)}</p>')
    bands = {b["stage"]: b for b in (ranges or {}).get("stages", [])}
    # The whole answer is one HTML block: the sentence, then a card per stage ending with its model-state subtotal
    # (parameters + gradients + optimizer state), not a markdown, a caption and a metric per stage.
    cards = "".join(_card(p, unit, p["stage"] == stage, bands.get(p["stage"]), s["per_worker_total_bytes"])
                    for p, s in zip(peaks, report["stages"]))
    return CARD_CSS + sentence + f'<div class="zc-cards" data-testid="zc-verdict">{cards}</div>'


FIELD_OF = {"shard_group": lambda v: 0 if v is None else v}


def fix_fields(fix) -> dict:
    """A fix's changes as widget values (no shard group -> 0, a catalogued GPU clears a custom capacity)."""
    values = {"stage": fix.stage}
    for part in (fix.scenario, fix.workload, fix.layout):
        for name, value in part.items():
            if name == "gpu_memory":
                continue
            values[name] = FIELD_OF[name](value) if name in FIELD_OF else value
    return values


def fixes(found: list, resolved, stage: int, unit: str, limit: int = 6) -> None:
    """What would make the checked stage fit: the core's cheapest changes, each with its peak and what it holds,
    and a button that applies it."""
    if not found:
        return
    st.markdown(f"**What would make {STAGE_LABELS[stage]} fit** (cheapest first; each changes one thing and "
                f"holds the rest):")
    for i, fix in enumerate(found[:limit]):
        left, right = st.columns([6, 1], vertical_alignment="center")
        left.markdown(f"{i + 1}. {escape_markdown(fix_sentence(fix, resolved.scenario, resolved.workload, unit, stage))}")
        right.button("Apply", key=f"fix_apply_{i}", on_click=set_fields, args=(fix_fields(fix),),
                     help="Sets these values in the sidebar.")
    if len(found) > limit:
        with st.expander(f"{len(found) - limit} more"):
            for fix in found[limit:]:
                st.markdown(f"- {escape_markdown(fix_sentence(fix, resolved.scenario, resolved.workload, unit, stage))}")


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
    """The overview chart; the legend and the notes under it are one HTML block. Its "bars by" choice lives in the
    sidebar's Display section with the units (a control drawn here cost every rerun a widget: benchmarks.md)."""
    if "peak" not in report:
        chart(figures.per_worker(report, unit, breakdown, stage), "fig_per_worker")
        legend = ""
    else:
        fig = figures.overview(report, unit, breakdown, stage)
        chart(fig, "fig_overview")
        legend = figures.legend_html(fig)
    st.html(f'{legend}<p class="zc-notes" style="font-size:.875rem;color:rgba(49,51,63,.6);margin:.4rem 0 0 0">'
            f'{html.escape(" ".join(_overview_notes(report, unit, stage, breakdown)))}</p>')


BARS_BY = {"category": "by category (parameters, gradients, optimizer)", "entry": "by ledger entry"}


def _overview_notes(report: dict, unit: str, stage: int, breakdown: str) -> list:
    notes = []
    states = f"model states per worker {BARS_BY[breakdown]}"
    if "peak" in report:
        notes.append(f"Left bar at each stage: the {states} (persistent); right bar: the peak per GPU at its "
                     "peak phase, model states included, against the dashed capacity. One colour per term (see "
                     "\"How to read it\"); the assumptions' range is under \"Peak and step\".")
    else:
        notes.append(f"Bars: the {states}.")
    groups = report["stages"][stage].get("per_worker_group_bytes")
    if groups and len(groups) > 1:
        labels = figures.group_names(report)
        hatches = "crossed: frozen; dotted: fp32 adapters or copies" if labels else \
            "hatched: experts; dotted: fp32 routers"
        notes.append(f"{STAGE_LABELS[stage]} model states per worker by parameter group: " +
                     "; ".join(f"{labels.get(g, g)} {format_bytes(b, unit)}" for g, b in groups.items()) +
                     f" ({hatches}).")
    elif report.get("architecture", {}).get("expert_params"):
        notes.append("Hatched: the experts' entries (their ZeRO state lives on the expert-data-parallel group); "
                     "dotted: routers kept in fp32.")
    return notes


# --- tabs -----------------------------------------------------------------------------------------------------

@st.fragment
def ledger(report: dict, unit: str, stage: int) -> None:
    """The ledger's worked formulas with a stage picker of its own (a change reruns this panel alone)."""
    if "ledger_stage" not in st.session_state:
        st.session_state["ledger_stage"] = stage
    chosen = st.radio("Ledger cells for", range(4), key="ledger_stage", horizontal=True,
                      format_func=STAGE_LABELS.__getitem__, help="Defaults to the stage being checked.")
    st.markdown(f"**Ledger:** {report['bytes_per_param']:g} bytes per parameter. Each cell: elements (split across "
                f"the shard group from the stage that shards it, rounded up) × width.")
    table_with_csv(tables.ledger_table(report, unit, chosen), "ledger", report)


def model_states_tab(report: dict, unit: str, stage: int, imported: str = None) -> None:
    """Model states: the cluster's one copy vs redundant copies, the stage table, the ledger's worked formulas,
    the scaling sweep and DeepSpeed's own estimator."""
    left, right = st.columns(2)
    with left:
        chart(figures.cluster(report, unit), "fig_cluster")
    with right:
        chart(figures.scaling(report, unit), "fig_scaling")
    s = report["stages"][stage]
    st.caption(f"{STAGE_LABELS[stage]}: {format_bytes(s['cluster_redundant_bytes'], unit)} of the cluster's "
               f"{format_bytes(s['cluster_total_bytes'], unit)} is redundant ({tables.redundancy_share(s)} of it; "
               f"{s['redundancy_factor']:.2f}x one copy).")
    table_with_csv(tables.stage_table(report, unit, stage, imported), "stages", report)
    ledger(report, unit, stage)
    heading = finetune.group_ledgers_heading(report)
    if heading:
        st.markdown(heading)
        table_with_csv(finetune.group_ledger_table(report), "group_ledgers", report)
    with st.expander("DeepSpeed's own estimator for the same inputs, and why it differs"):
        deepspeed_tab(report, unit)


@st.fragment
def step_timeline(report: dict, unit: str, stage: int) -> None:
    """The step timeline with its stage picker beside it, defaulting to the stage being checked."""
    if "timeline_stage" not in st.session_state:
        st.session_state["timeline_stage"] = stage
    left, right = st.columns([1, 4])
    chosen = left.radio("Timeline stage", range(4), key="timeline_stage", format_func=STAGE_LABELS.__getitem__,
                        help="Defaults to the stage being checked.")
    with right:
        chart(figures.timeline(report, chosen, unit), "fig_timeline")


def peak_tab(report: dict, ranges: dict, unit: str, stage: int, formulas: dict = None) -> None:
    if "peak" not in report:
        st.info("The peak needs an architecture: pick a model, edit its fields, or load a config.json.")
        return
    chart(figures.peak(report, unit, ranges, stage), "fig_peak")
    table_with_csv(tables.verdicts(report, unit, ranges), "peak", report)
    for sentence in tables.solver_sentences(report):
        st.markdown(f"- {sentence}")
    step_timeline(report, unit, stage)
    if ranges:
        st.markdown("**Assumption ranges** (each alone, the others at their point values):")
        table_with_csv(tables.ranges_table(ranges, unit), "ranges", report)
        for note in ranges.get("notes", []):
            st.caption(escape_markdown(note))
    st.markdown(f"**Activation terms** saved for backward ({report['activation_bits']}-bit activations; "
                f"{format_bytes(report['activation_bytes_per_layer'], tables.SYSTEM[unit])} per layer, "
                f"{format_bytes(report['activation_bytes'], tables.SYSTEM[unit])} in flight on "
                f"{escape_markdown(report['activation_rank'])}). Each formula in bits, then with the values "
                f"plugged in, as the core computes it: {escape_markdown(LEGEND)}.")
    table_with_csv(tables.activation_table(report, unit, formulas or {}), "activations", report)
    st.markdown("**Fits on** (the same job on each catalogued GPU):")
    table_with_csv(tables.fits_on_table(report, unit), "fits-on", report)


def ranks_tab(report: dict, unit: str, stage: int) -> None:
    if "peak" not in report:
        st.info("Ranks and layouts need an architecture: pick a model.")
        return
    if len(report["ranks"]) > 1:
        st.caption(f"Ranks that hold the same bytes form a class; the verdict is the worst class's "
                   f"({STAGE_LABELS[stage]}, the stage being checked).")
        chart(figures.ranks(report, stage, unit), "fig_ranks")
        table_with_csv(tables.rank_table(report, unit, stage), "ranks", report)
    else:
        st.caption("One rank class: every GPU holds the same bytes. Set tp, pp or cp under \"Model parallelism\" "
                   "for a per-rank view.")
    layouts(report, unit)


def layouts(report: dict, unit: str) -> None:
    """Every layout of the same GPUs that fits: computed only when asked (it evaluates hundreds of plans)."""
    gpus = report["layout"]["world_size"]
    st.markdown(f"**Layouts of {gpus:,} GPUs that fit**")
    st.toggle("Search every tp x pp x cp x dp layout, ZeRO stage, recompute and offload", key="show_layouts",
              help="Tensor parallel within a node, dividing heads, KV heads and FFN; pp dividing the layers; the "
                   "micro-batch and the global batch held. Cheapest first: no offload, then the least time "
                   "overhead (recompute and pipeline bubble), then the least communication.")
    if "layouts" not in report["solve"]:
        return
    solve = report["solve"]
    if solve.get("layouts_refused"):
        plain.alert("warning", f"Not searched: {solve['layouts_refused']}.")
        return
    if not solve["layouts"]:
        st.warning(f"No layout of {gpus:,} GPUs fits, even with full recompute and offload.")
        return
    st.caption(f"{solve['layouts_count']:,} fit; the cheapest {len(solve['layouts'])} are listed.")
    table_with_csv(tables.layouts_table(report, unit), "layouts", report)


def deepspeed_tab(report: dict, unit: str) -> None:
    if "deepspeed_estimator" not in report:
        st.info("DeepSpeed's ZeRO-3 rows need the largest layer: pick a model with an architecture.")
        return
    ds = report["deepspeed_estimator"]["inputs"]
    st.caption(f"estimate_zero2/3_model_states_mem_needs with {ds['params']:,} params, largest layer "
               f"{ds['largest_layer_params']:,}, {ds['nodes']} node(s) x {ds['gpus_per_node']} GPUs, "
               f"buffer factor {ds['buffer_factor']:g}.")
    table_with_csv(tables.deepspeed_table(report, unit), "deepspeed", report)
    for note in report["deepspeed_estimator"]["differences"]:
        st.markdown(f"- {note}")


ASSUMPTIONS = """
**Modelled.** Persistent model state from the ledger (every tensor, its dtype, its ZeRO ownership, partitions
rounded up to whole elements); optimizer and parameter offload; activations saved for backward, validated against
real Hugging Face models within 10%; logits and the fp32 loss; ZeRO-3 gathered parameters, prefetch and persistent
small parameters; gradient reduce buckets (doubled with overlap_comm) and the all-gather bucket; the fp32 gradient
copy at the optimizer step; one rebuilt block under full recompute; a CUDA context and an allocator reserve.

**Assumed (editable).** CUDA context and framework overhead 1 GiB (range 0.5-1.5 GiB); allocator reserve 5%
(range 0-15%); DeepSpeed's defaults for bucket sizes, prefetch, live parameters and the persistence threshold;
balanced expert routing; no KV cache during training.

**Parallel layouts and experts.** Tensor, sequence, context, pipeline and expert parallelism per rank: each
rank's split of every tensor, ZeRO over dp x cp (experts over the expert-data-parallel group), in-flight
micro-batches per schedule, communication per kind.

**Not modelled.** Zero-bubble pipeline schedules; optimizer temporaries other than the fp32 gradient copy;
activation offload; allocator behaviour beyond a flat percentage. Capacities are what nvidia-smi / rocm-smi
report, not the marketing "GB". GB = 10^9 bytes, GiB = 2^30 bytes.
"""


def about_tab(report: dict) -> None:
    st.markdown("**One colour per memory term**, the same in every chart and every view:")
    st.dataframe(tables.colour_table(), hide_index=True, key="colours_table",
                 column_config={"colour": st.column_config.TextColumn("colour")})
    swatches = "".join(f'<span style="display:inline-block;margin:0 0.5rem 0.3rem 0"><span style="display:inline-'
                       f'block;width:0.9rem;height:0.9rem;background:{c};vertical-align:middle;margin-right:0.25rem">'
                       f'</span>{html.escape(t)}</span>' for t, c in figures.TERM_COLORS.items())
    st.html(f'<div data-testid="zc-swatches">{swatches}</div>')
    st.markdown("Hatched bars: a parameter group (experts `/`, fp32 routers `.`) in its category's colour.")
    st.markdown(ASSUMPTIONS)
    st.markdown("Every term, formula, source and editable assumption is in docs/peak-memory.md, the parallel "
                "layouts in docs/parallelism.md: read them here.")
    page = st.selectbox("Read", DOC_PAGES, index=None, key="doc_page", placeholder="docs/... (choose a page)",
                        format_func=lambda p: f"docs/{p}")
    if page and (DOCS / page).exists():
        st.markdown((DOCS / page).read_text(encoding="utf-8"))
    st.download_button("JSON: full report", lambda: json.dumps(report, indent=2).encode("utf-8"),
                       file_name=f"zerocalc-{report['zerocalc_version']}-{report['convention']}-report.json",
                       mime="application/json", key="json_report", on_click="ignore")
