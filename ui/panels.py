"""The main area's panels. Each draws one part of the core's report; none computes a byte."""

from __future__ import annotations

import json

import streamlit as st

from zerocalc.units import format_bytes

from . import figures, tables
from .figures import STAGE_LABELS
from .widgets import widget


_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*_{}[]()<>#+-.!|~$"})


def escape_markdown(text: str) -> str:
    """Text shown literally: link parameters and uploaded files can carry markdown (links, images, emphasis)."""
    return text.translate(_MARKDOWN)


def warnings(messages) -> None:
    for message in messages:
        if message:
            st.warning(escape_markdown(message))


def _csv(df) -> bytes:
    return df.to_csv(index=False).encode("utf-8")


def table_with_csv(df, name: str, report: dict) -> None:
    """A table and its CSV download, stamped with the package version and the convention."""
    st.dataframe(df, hide_index=True, key=f"{name}_table")
    stamp = f"zerocalc-{report['zerocalc_version']}-{report['convention']}"
    st.download_button(f"CSV: {name}", lambda: _csv(df), file_name=f"{stamp}-{name}.csv", mime="text/csv",
                       key=f"csv_{name}", on_click="ignore")   # built on click, not on every rerun


def summary(report: dict, unit: str) -> None:
    stages = report["stages"]
    cols = st.columns(4)
    for col, s in zip(cols, stages):
        col.metric(f"{STAGE_LABELS[s['stage']]} per worker", format_bytes(s["per_worker_total_bytes"], unit),
                   help="Persistent model state: parameters, gradients and optimizer state.")
    layout = report.get("layout")
    world = "" if layout is None or layout["world_size"] == layout["dp"] else \
        (f" · world {layout['world_size']:,} GPUs = dp {layout['dp']:,} x tp {layout['tp']} x pp {layout['pp']} "
         f"x cp {layout['cp']}; per-worker numbers are the worst rank's")
    st.caption(f"{report['params']:,} parameters · {report['workers']:,} workers · shard group "
               f"{report['shard_group']:,}{world} · convention {report['convention']}: {report['convention_summary']}")


def model_states(report: dict, unit: str) -> None:
    st.subheader("1 · Model states by ZeRO stage")
    widget("breakdown")
    left, right = st.columns(2)
    left.plotly_chart(figures.per_worker(report, unit, st.session_state["breakdown"]), key="fig_per_worker")
    right.plotly_chart(figures.cluster(report, unit), key="fig_cluster")
    table_with_csv(tables.stage_table(report, unit), "stages", report)
    st.markdown(f"**Ledger:** {report['bytes_per_param']:g} bytes per parameter. Each cell: elements "
                f"(split across the shard group from the stage that shards it, rounded up) × width, for the "
                f"stage chosen here (also the step timeline's below).")
    widget("stage")
    table_with_csv(tables.ledger_table(report, unit, st.session_state["stage"]), "ledger", report)


def peak(report: dict, unit: str) -> None:
    st.subheader("2 · Peak memory against the GPU")
    if "peak" not in report:
        st.info("The peak needs an architecture: pick a model, edit its fields, or load a config.json.")
        return
    st.plotly_chart(figures.peak(report, unit), key="fig_peak")
    cols = st.columns(4)
    several = len(report["ranks"]) > 1
    for col, p in zip(cols, report["peak"]):
        label = "fits" if p["fits"] else "does not fit"
        col.metric(f"{STAGE_LABELS[p['stage']]}: {label}", f"{100 * p['utilisation']:.0f}% used",
                   help=f"Worst rank: {p['rank']}." if several else None,
                   delta=f"{format_bytes(p['headroom_bytes'], unit)} headroom",
                   delta_color="normal" if p["fits"] else "inverse")
    table_with_csv(tables.verdicts(report, unit), "peak", report)
    for sentence in tables.solver_sentences(report):
        st.markdown(f"- {sentence}")
    st.plotly_chart(figures.timeline(report, st.session_state["stage"], unit), key="fig_timeline")
    with st.expander("Activation terms (saved for backward)"):
        st.caption(f"{report['activation_bits']}-bit activations: "
                   f"{format_bytes(report['activation_bytes_per_layer'], unit)} per layer, "
                   f"{format_bytes(report['activation_bytes'], unit)} in all.")
        table_with_csv(tables.activation_table(report, unit), "activations", report)
    st.markdown("**Fits on** (the same job on each catalogued GPU):")
    table_with_csv(tables.fits_on_table(report, unit), "fits-on", report)


def ranks(report: dict, unit: str) -> None:
    """The per-rank view: only under a layout with more than one kind of rank."""
    if "ranks" not in report or len(report["ranks"]) < 2:
        return
    st.subheader("Per rank class (pipeline stages)")
    stage = st.session_state["stage"]
    st.caption(f"Ranks that hold the same bytes form a class; the verdict is the worst class's. Stage chosen above "
               f"({STAGE_LABELS[stage]}).")
    st.plotly_chart(figures.ranks(report, stage, unit), key="fig_ranks")
    table_with_csv(tables.rank_table(report, unit, stage), "ranks", report)


def layouts(report: dict, unit: str) -> None:
    """Every layout of the same GPUs that fits: computed only when asked (it evaluates hundreds of plans)."""
    if "peak" not in report:
        return
    gpus = report["layout"]["world_size"]
    st.subheader(f"Layouts of {gpus:,} GPUs that fit")
    st.toggle("Search every tp x pp x cp x dp layout, ZeRO stage, recompute and offload", key="show_layouts",
              help="Tensor parallel within a node, dividing heads, KV heads and FFN; pp dividing the layers; the "
                   "micro-batch and micro-batches per step held. Cheapest first: no offload, then the least time "
                   "overhead (recompute and pipeline bubble), then the least communication.")
    if "layouts" not in report["solve"]:
        return
    solve = report["solve"]
    if not solve["layouts"]:
        st.warning(f"No layout of {gpus:,} GPUs fits, even with full recompute and offload.")
        return
    st.caption(f"{solve['layouts_count']:,} fit; the cheapest {len(solve['layouts'])} are listed.")
    table_with_csv(tables.layouts_table(report, unit), "layouts", report)


def scaling(report: dict, unit: str) -> None:
    st.subheader("3 · Scaling with the number of workers")
    st.plotly_chart(figures.scaling(report, unit), key="fig_scaling")


def deepspeed(report: dict, unit: str) -> None:
    with st.expander("DeepSpeed's own estimator for the same inputs, and why it differs"):
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

**Assumed (editable).** CUDA context and framework overhead 1 GiB; allocator reserve 5%; DeepSpeed's defaults
for bucket sizes, prefetch, live parameters and the persistence threshold; no KV cache during training.

**Parallel layouts.** Tensor, sequence, context and pipeline parallelism per rank (docs/parallelism.md): each
rank's split of every tensor, ZeRO over dp x cp, in-flight micro-batches per schedule, communication per kind.

**Not modelled.** Expert parallelism; mixture-of-experts; zero-bubble pipeline schedules; optimizer temporaries
other than the fp32 gradient copy; activation offload; allocator behaviour beyond a flat percentage. Capacities
are what nvidia-smi / rocm-smi report, not the marketing "GB". GB = 10^9 bytes, GiB = 2^30 bytes.
Full list with formulas and sources: docs/peak-memory.md in the repository.
"""


def assumptions() -> None:
    with st.expander("Assumptions and limits"):
        st.markdown(ASSUMPTIONS)


def share_and_download(report: dict, link: str) -> None:
    st.subheader("Share and download")
    st.caption("This link reproduces the exact view (it updates as you change any control):")
    st.code(link, language=None)
    st.download_button("JSON: full report", lambda: json.dumps(report, indent=2).encode("utf-8"),
                       file_name=f"zerocalc-{report['zerocalc_version']}-{report['convention']}-report.json",
                       mime="application/json", key="json_report", on_click="ignore")
