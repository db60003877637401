"""The detail views, each drawn only while it is open: model states (cluster, scaling, the ledger, DeepSpeed's
estimator), peak and step, layouts and ranks, and how to read the page. Each draws one part of the core's report;
none computes a byte."""

from __future__ import annotations

import functools
import html
import json
from pathlib import Path

import streamlit as st

from zerocalc.answers.sweep import AXES, axes_for, sweep_sentence
from zerocalc.gpus import catalog_rows, estimated_names
from zerocalc.parallel.search import recompute_variant, split_for
from zerocalc.step.formulas import LEGEND
from zerocalc.units import format_bytes

from ..drawing import figures, finetune, plain, static_table, tables
from ..drawing.figures import STAGE_LABELS
from ..drawing.panels import (CATALOGUE, CLUSTER, DEEPSPEED, PEAK_ACTIVATIONS, PEAK_FITS_ON, PEAK_RANGES, PEAK_SWEEP,
                     PEAK_TIMELINE, SCALING, chart, escape_markdown, lazy, table_with_csv)
from ..state.stages import ui_value
from ..sidebar.widgets import set_fields
from ..server.worker import WorkerError, failure_text

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC_PAGES = ("validation.md", "peak-memory.md", "parallelism.md", "rl.md", "benchmarks.md")


@functools.lru_cache(maxsize=1)       # the committed ledger's summary: read once per process
def validation_summary():
    """docs/validation.json's "summary" (tools/validation_ledger.py writes it; a test checks it is current)."""
    try:
        return json.loads((DOCS / "validation.json").read_text(encoding="utf-8"))["summary"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    """Model states: the stage table, the ledger's worked formulas; the cluster's one copy vs redundant copies, the
    scaling sweep and DeepSpeed's own estimator each drawn when opened (no chart unless asked: issue 36; the page
    asks the core for the scaling and the estimator only then: page.LAZY_ANSWERS)."""
    left, right = st.columns(2)
    with left:        # the caption and the stage table's redundant share say it in words: the chart when opened
        if box := lazy("Cluster: one copy against redundant copies, by stage", CLUSTER):
            with box:
                chart(figures.cluster(report, unit), "fig_cluster")
    with right:
        if box := lazy("Scaling: model states per worker as the cluster grows", SCALING):
            with box:
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
    if box := lazy("DeepSpeed's own estimator for the same inputs, and why it differs", DEEPSPEED):
        with box:
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


@st.fragment
def sweep_panel(resolved, report: dict, unit: str, sweep_of) -> None:
    """The peak along one input the user picks, with the capacity and where the checked stage stops fitting (a
    change of input reruns this panel alone)."""
    axes = axes_for(resolved.workload)
    if st.session_state.get("sweep_axis") not in axes:        # the LoRA rank goes when the adapters do
        st.session_state["sweep_axis"] = axes[0]
    field = st.segmented_control("Sweep the peak against", axes, key="sweep_axis", required=True,
                                 format_func=lambda name: AXES[name].label.split(" (")[0])
    try:
        result = sweep_of(resolved, field)
    except WorkerError as exc:            # a sweep beyond 64 GPUs runs in a worker, with a deadline
        plain.alert("warning", failure_text(exc, "the sweep", verb="compute"))
        return
    chart(figures.sweep(result, unit, report["gpu"]["name"]), "fig_sweep")
    st.caption(escape_markdown(sweep_sentence(result, STAGE_LABELS.__getitem__)) + " Each point is the whole plan "
               "with that value set; the edge is the solver's exact answer.")


def peak_tab(report: dict, ranges: dict, unit: str, stage: int, formulas=None, resolved=None,
             sweep_of=None, longest: dict = None) -> None:
    """The peak chart, its tables and the solvers' answers; the sweep, the step timeline, the ranges, the activation
    terms and the GPUs it fits on each in a section drawn (and computed) only while it is open: a chart costs the
    browser about 0.35 s of CPU here, a table 0.13 s, and the view drew three charts and five tables (issue 36: one
    chart per view).
    `formulas`: a function returning the activation terms' formulas (computed when their section opens)."""
    if "peak" not in report:
        st.info("The peak needs an architecture: pick a model, edit its fields, or load a config.json.")
        return
    chart(figures.peak(report, unit, ranges, stage), "fig_peak")
    table_with_csv(tables.verdicts(report, unit, ranges), "peak", report)
    st.markdown(f"**{STAGE_LABELS[stage]}'s peak, term by term** (the worst rank, every phase):")
    table_with_csv(tables.peak_terms_table(report, unit, stage), "peak-terms", report)
    for sentence in tables.solver_sentences(report, longest):
        st.markdown(f"- {sentence}")
    if resolved is not None and sweep_of is not None and (
            box := lazy("Sweep: the peak along one input, and where it stops fitting", PEAK_SWEEP)):
        with box:
            sweep_panel(resolved, report, unit, sweep_of)
    if "comm_buffers" in report:
        st.caption("Communication buffers: " + escape_markdown(report["comm_buffers"]["why"]) + ". Gradients live "
                   + escape_markdown(report["grad_lifetime"]["why"]) + ".")
    host = tables.host_memory_sentence(report, unit, stage)
    if host:
        st.caption(host)
    if box := lazy("Step timeline: memory through one step, phase by phase", PEAK_TIMELINE):
        with box:
            step_timeline(report, unit, stage)
    if ranges and (box := lazy("Assumption ranges: the peak with each assumption at its ends", PEAK_RANGES)):
        with box:
            st.markdown("**Assumption ranges** (each alone, the others at their point values):")
            table_with_csv(tables.ranges_table(ranges, unit), "ranges", report)
            for note in ranges.get("notes", []):
                st.caption(escape_markdown(note))
    if box := lazy("Activation terms saved for backward, each with its formula", PEAK_ACTIVATIONS):
        with box:
            st.markdown(f"**Activation terms** saved for backward ({report['activation_bits']}-bit activations; "
                        f"{tables.per_layer_text(report, unit)}, "
                        f"{format_bytes(report['activation_bytes'], tables.SYSTEM[unit])} in flight on "
                        f"{escape_markdown(report['activation_rank'])}). Each formula in bits, then with the values "
                        f"plugged in, as the core computes it: {escape_markdown(LEGEND)}.")
            table_with_csv(tables.activation_table(report, unit, (formulas or dict)()), "activations", report)
    if box := lazy("Fits on: the same job on each catalogued GPU", PEAK_FITS_ON):
        with box:
            table_with_csv(tables.fits_on_table(report, unit), "fits-on", report)


def layout_fields(plan: dict, resolved) -> dict:
    """A searched layout as widget values: what the search evaluated (zerocalc.parallel.search), so that the page
    then shows the row's peak. The stage split goes where the search carried it (split_for); another recompute
    than the view's drops its one-in-N, activation offload and own op policy, as the search's variant does."""
    values = {f: plan[k] for k, f in tables.PLAN_FIELDS.items()}
    values.update(shard_group=0, etp=1, **recompute_variant(resolved.workload, plan["recompute"]))
    split = split_for(resolved.workload, plan["pp"], plan["vpp"]) or {"stage_split": "even", "stage_layers": None}
    values.update({name: ui_value(name, v) for name, v in split.items()})
    return values


def ranks_tab(report: dict, unit: str, stage: int, resolved=None) -> None:
    if "peak" not in report:
        st.info("Ranks and layouts need an architecture: pick a model.")
        return
    if len(report["ranks"]) > 1:
        st.caption(f"Ranks that hold the same bytes form a class; the verdict is the worst class's "
                   f"({STAGE_LABELS[stage]}, the stage being checked).")
        chart(figures.ranks(report, stage, unit), "fig_ranks")
        table_with_csv(tables.rank_table(report, unit, stage), "ranks", report)
    else:
        st.caption("One rank class: every GPU holds the same bytes. Set tp, pp or cp under \"Parallelism\" "
                   "for a per-rank view.")
    layouts(report, unit, resolved)


def layouts(report: dict, unit: str, resolved=None) -> None:
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
    found = solve["layouts"]
    state = None if resolved is None else resolved.state
    current = state is not None and any(tables.is_current(p, state) for p in found)
    at = solve.get("layouts_count_at_percent")
    st.caption(f"{solve['layouts_count']:,} fit" + (f" with a {at}% allocator reserve; the cheapest {len(found)}, "
                                                     "re-checked with the allocator's model, are listed."
                                                     if at is not None else f"; the cheapest {len(found)} are listed.")
               + ("" if current or state is None else " The plan as set is not among them (it does not fit, or "
                  "cheaper layouts of the same GPUs come first)."))
    table_with_csv(tables.layouts_table(report, unit, state), "layouts", report)
    if resolved is not None:
        left, right = st.columns([4, 1], vertical_alignment="bottom")
        pick = left.selectbox("Apply a layout", range(len(found)), key="layout_pick",
                              format_func=lambda i: tables.layout_label(i, found[i]))
        pick = pick if pick is not None and pick < len(found) else 0
        right.button("Apply", key="layout_apply", on_click=set_fields, args=(layout_fields(found[pick], resolved),),
                     help="Sets this layout, its stage, recompute and offload in the sidebar. A row whose recompute "
                          "differs from the plan's drops its one-block-in-N, activation offload and own op policy, "
                          "as the search evaluated it.")


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
copy at the optimizer step; one rebuilt block under full recompute; the library workspaces (cuBLAS, and
Transformer Engine's under Megatron, by GPU); a CUDA context and an allocator reserve.

**Assumed (editable).** CUDA context and framework overhead 1 GiB (range 0.5-1.5 GiB); allocator reserve by
default the caching allocator's model (the step's tensors replayed through PyTorch's allocator rules; a typed
percent replaces it), its band 0-35% of the tensors plus two ZeRO-3 unit cycles; DeepSpeed's defaults for bucket
sizes, prefetch, live parameters and the persistence threshold; balanced expert routing; no KV cache during training.

**Parallel layouts and experts.** Tensor, sequence, context, pipeline and expert parallelism per rank: each
rank's split of every tensor, ZeRO over dp x cp (experts over the expert-data-parallel group), in-flight
micro-batches per schedule, communication per kind.

**Not modelled.** Zero-bubble pipeline schedules; optimizer temporaries other than the fp32 gradient copy;
allocator behaviour beyond a flat percentage.

**Capacity.** The verdict compares the peak, CUDA context included, with what PyTorch can use: the device total
that `torch.cuda.get_device_properties().total_memory` and the OOM message's "total capacity" report, below
nvidia-smi's total (the driver keeps part of it: 79.11 GiB against 81,559 MiB on an H100 80GB). Each catalogued
card carries both, each with its published source; a card without a published PyTorch figure is estimated as
nvidia-smi's total less the largest gap published for its memory family (GDDR, NVIDIA HBM, AMD HBM) and marked so.
Still estimated: """ + ", ".join(estimated_names()) + """. Never the marketing "GB". GB = 10^9 bytes, GiB = 2^30 bytes.
"""


def about_tab(report: dict, unit: str = "GB") -> None:
    if "gpu" in report:                       # a peak, so a GPU to hold it (not for a bare parameter count)
        st.markdown(escape_markdown(tables.capacity_sentence(report)))
    if box := lazy("The GPU catalogue: both capacities of every card, each with its source", CATALOGUE):
        box.dataframe(tables.catalog_table(catalog_rows(), unit), hide_index=True, key="catalog_table")
    st.markdown(tables.validation_sentence(validation_summary()))
    st.markdown("**One colour per memory term**, the same in every chart and every view:")
    st.html(static_table.html_table(tables.colour_table(), "colours"))
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
