"""Report dict -> Plotly figures. Plain lists only (Plotly 7 would base64-encode numpy arrays), exact bytes in
customdata for the hover, values divided into the display unit and nothing else computed."""

from __future__ import annotations

import plotly.graph_objects as go

from zerocalc.units import UNIT_BYTES

STAGE_LABELS = ["ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
PHASE_LABELS = {"forward": "forward", "backward": "backward", "optimizer_step": "optimizer step"}
COLORS = {"parameters": "#4C78A8", "gradients": "#F58518", "optimizer": "#54A24B", "one copy": "#4C78A8",
          "redundant": "#E45756"}


def _scaled(values, unit):
    return [v / UNIT_BYTES[unit] for v in values]


def _layout(fig, unit, title, barmode="stack"):
    fig.update_layout(title=title, barmode=barmode, yaxis_title=unit, legend_title_text="", height=380,
                      margin=dict(l=10, r=10, t=50, b=10), hovermode="x unified")
    return fig


def _bar(name, x, values, unit, color=None):
    return go.Bar(name=name, x=list(x), y=_scaled(values, unit), customdata=list(values), marker_color=color,
                  hovertemplate=f"{name}: %{{y:,.2f}} {unit} (%{{customdata:,}} bytes)<extra></extra>")


def per_worker(report: dict, unit: str, breakdown: str = "category") -> go.Figure:
    """Persistent model state per worker, one bar per stage, stacked by category or by ledger entry."""
    stages = report["stages"]
    fig = go.Figure()
    key = "per_worker_bytes" if breakdown == "category" else "per_worker_entry_bytes"
    for name in stages[0][key]:
        fig.add_trace(_bar(name, STAGE_LABELS, [s[key][name] for s in stages], unit, COLORS.get(name)))
    return _layout(fig, unit, "Model states per worker")


def cluster(report: dict, unit: str) -> go.Figure:
    """Cluster-wide bytes per stage, split into one copy and redundant copies."""
    stages = report["stages"]
    fig = go.Figure()
    fig.add_trace(_bar("one copy", STAGE_LABELS, [s["cluster_unique_bytes"] for s in stages], unit,
                       COLORS["one copy"]))
    fig.add_trace(_bar("redundant", STAGE_LABELS, [s["cluster_redundant_bytes"] for s in stages], unit,
                       COLORS["redundant"]))
    return _layout(fig, unit, f"Whole cluster ({report['workers']:,} workers)")


def _capacity_line(fig, capacity: int, unit: str, label: str):
    fig.add_hline(y=capacity / UNIT_BYTES[unit], line_dash="dash", line_color="#B22222",
                  annotation_text=f"{label}: {capacity / UNIT_BYTES[unit]:,.2f} {unit}",
                  annotation_position="top left")


def peak(report: dict, unit: str) -> go.Figure:
    """Each stage's peak phase, stacked by component, against the GPU's capacity."""
    peaks = report["peak"]
    names = []
    for p in peaks:
        for name in p["phases"][p["peak_phase"]]:
            if name not in names:
                names.append(name)
    fig = go.Figure()
    labels = [f"{STAGE_LABELS[p['stage']]} ({PHASE_LABELS[p['peak_phase']]})" for p in peaks]
    for name in names:
        fig.add_trace(_bar(name, labels, [p["phases"][p["peak_phase"]].get(name, 0) for p in peaks], unit))
    _capacity_line(fig, report["gpu"]["capacity_bytes"], unit, report["gpu"]["name"])
    return _layout(fig, unit, "Peak per GPU against its capacity")


def timeline(report: dict, stage: int, unit: str) -> go.Figure:
    """The live set in each phase of one step, for one stage."""
    p = report["peak"][stage]
    names = []
    for parts in p["phases"].values():
        for name in parts:
            if name not in names:
                names.append(name)
    fig = go.Figure()
    phases = list(p["phases"])
    for name in names:
        fig.add_trace(_bar(name, [PHASE_LABELS[ph] for ph in phases], [p["phases"][ph].get(name, 0) for ph in phases],
                           unit))
    _capacity_line(fig, p["capacity_bytes"], unit, report["gpu"]["name"])
    return _layout(fig, unit, f"Live memory over one step, {STAGE_LABELS[stage]}")


def scaling(report: dict, unit: str) -> go.Figure:
    """Per-worker persistent state against the number of workers (log axis), one line per stage."""
    rows = report["scaling"]
    fig = go.Figure()
    for stage in range(4):
        values = rows[f"stage_{stage}"]
        fig.add_trace(go.Scatter(name=STAGE_LABELS[stage], x=list(rows["workers"]), y=_scaled(values, unit),
                                 customdata=list(values), mode="lines+markers",
                                 hovertemplate=f"{STAGE_LABELS[stage]}: %{{y:,.2f}} {unit} "
                                               f"(%{{customdata:,}} bytes)<extra></extra>"))
    fig.update_xaxes(type="log", title="workers")
    return _layout(fig, unit, "Model states per worker as the cluster grows", barmode="group")
