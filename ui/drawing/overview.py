"""The overview view: each ZeRO stage's peak per GPU term by term, as one static HTML table, and the chart of model
states beside the peak in a section drawn only while open. The chart is Plotly, whose script (4.7 MB) compiles in
about 2 s on this machine: with no chart on the first page, a first load is the verdict and a table, 1.8 s against
5.7 s for the same page with a chart (benchmarks/elements.py, docs/benchmarks.md; issue 36). Reads the report;
computes no byte."""

from __future__ import annotations

import html

import streamlit as st

from zerocalc.units import format_bytes

from . import figures, static_table
from .figures import PHASE_LABELS, STAGE_LABELS
from .panels import OVERVIEW_CHART, chart, lazy

BARS_BY = {"category": "by category (parameters, gradients, optimizer)", "entry": "by ledger entry"}


def terms_table(report: dict, unit: str, stage: int):
    """Rows: each term of the peak (at each stage's own peak phase), then the peak, the capacity and the model
    states per worker; columns: the ZeRO stages (the checked one marked). Every cell is one of the report's figures."""
    from .tables import frame
    peaks, stages = report["peak"], report["stages"]
    tops = [p["phases"][p["peak_phase"]] for p in peaks]
    heads = [STAGE_LABELS[p["stage"]] + (" (checked)" if p["stage"] == stage else "") for p in peaks]
    terms = [t for t in dict.fromkeys(t for top in tops for t in top) if any(top.get(t) for top in tops)]
    rows = [{"memory term": term, **{h: format_bytes(top[term], unit) if top.get(term) else "–"
                                     for h, top in zip(heads, tops)}} for term in terms]
    for label, cells in (("peak per GPU", [format_bytes(p["peak_bytes"], unit) for p in peaks]),
                         ("at the phase", [PHASE_LABELS[p["peak_phase"]] for p in peaks]),
                         ("PyTorch can use", [format_bytes(p["capacity_bytes"], unit) for p in peaks]),
                         ("model states per worker (the ledger)",
                          [format_bytes(s["per_worker_total_bytes"], unit) for s in stages])):
        rows.append({"memory term": label, **dict(zip(heads, cells))})
    return frame(rows)


def draw(report: dict, unit: str, stage: int, breakdown: str) -> None:
    """The terms table, then the chart (with its HTML legend and notes) when its section is open. Without a peak
    (a parameter count alone) the chart of model states is the view, drawn at once."""
    if "peak" not in report:
        chart(figures.per_worker(report, unit, breakdown, stage), "fig_per_worker")
        _notes("", report, unit, stage, breakdown)
        return
    st.html('<p class="zc-notes" style="font-size:.875rem;margin:0 0 .3rem 0"><strong>The peak per GPU, term by '
            'term</strong>, at each stage\'s peak phase (the worst rank):</p>'
            + static_table.html_table(terms_table(report, unit, stage), "overview"))
    if box := lazy("Chart: model states and peak per GPU, by ZeRO stage", OVERVIEW_CHART):
        with box:
            fig = figures.overview(report, unit, breakdown, stage)
            chart(fig, "fig_overview")
            _notes(figures.legend_html(fig), report, unit, stage, breakdown)


def _notes(legend: str, report: dict, unit: str, stage: int, breakdown: str) -> None:
    st.html(f'{legend}<p class="zc-notes" style="font-size:.875rem;color:rgba(49,51,63,.6);margin:.4rem 0 0 0">'
            f'{html.escape(" ".join(notes(report, unit, stage, breakdown)))}</p>')


def notes(report: dict, unit: str, stage: int, breakdown: str) -> list:
    found = []
    states = f"model states per worker {BARS_BY[breakdown]}"
    if "peak" in report:
        found.append(f"Left bar at each stage: the {states} (persistent); right bar: the peak per GPU at its "
                     "peak phase, model states included, against the dashed capacity. One colour per term (see "
                     "\"How to read it\"); the assumptions' range is under \"Peak and step\".")
    else:
        found.append(f"Bars: the {states}.")
    groups = report["stages"][stage].get("per_worker_group_bytes")
    if groups and len(groups) > 1:
        labels = figures.group_names(report)
        hatches = "crossed: frozen; dotted: fp32 adapters or copies" if labels else \
            "hatched: experts; dotted: fp32 routers"
        found.append(f"{STAGE_LABELS[stage]} model states per worker by parameter group: " +
                     "; ".join(f"{labels.get(g, g)} {format_bytes(b, unit)}" for g, b in groups.items()) +
                     f" ({hatches}).")
    elif report.get("architecture", {}).get("expert_params"):
        found.append("Hatched: the experts' entries (their ZeRO state lives on the expert-data-parallel group); "
                     "dotted: routers kept in fp32.")
    return found
