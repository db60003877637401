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


def _figure(traces, unit, title, barmode="stack", capacity=None, xaxis=None) -> go.Figure:
    """One Figure built in a single pass (Plotly validates once; update_layout and add_hline cost far more)."""
    layout = dict(title=dict(text=title), barmode=barmode, yaxis=dict(title=dict(text=unit)),
                  legend=dict(title=dict(text="")), height=380, margin=dict(l=10, r=10, t=50, b=10),
                  hovermode="x unified", xaxis=xaxis or {})
    if capacity is not None:
        value, label = capacity
        y = value / UNIT_BYTES[unit]
        layout["shapes"] = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                                 line=dict(color="#B22222", dash="dash"))]
        layout["annotations"] = [dict(xref="paper", x=0, yref="y", y=y, text=f"{label}: {y:,.2f} {unit}",
                                      showarrow=False, xanchor="left", yanchor="bottom")]
    return go.Figure(data=traces, layout=layout)


def _bar(name, x, values, unit, color=None, outline=None):
    marker = dict(color=color) if color else {}
    if outline is not None:                     # per-bar outline widths: the highlighted bar gets a frame
        marker["line"] = dict(width=list(outline), color="#222222")
    return dict(type="bar", name=name, x=list(x), y=_scaled(values, unit), customdata=list(values),
                marker=marker, hovertemplate=f"{name}: %{{y:,.2f}} {unit} (%{{customdata:,}} bytes)<extra></extra>")


def per_worker(report: dict, unit: str, breakdown: str = "category") -> go.Figure:
    """Persistent model state per worker, one bar per stage, stacked by category or by ledger entry."""
    stages = report["stages"]
    key = "per_worker_bytes" if breakdown == "category" else "per_worker_entry_bytes"
    traces = [_bar(name, STAGE_LABELS, [s[key][name] for s in stages], unit, COLORS.get(name))
              for name in stages[0][key]]
    return _figure(traces, unit, "Model states per worker")


def cluster(report: dict, unit: str) -> go.Figure:
    """Cluster-wide bytes per stage, split into one copy and redundant copies."""
    stages = report["stages"]
    traces = [_bar("one copy", STAGE_LABELS, [s["cluster_unique_bytes"] for s in stages], unit, COLORS["one copy"]),
              _bar("redundant", STAGE_LABELS, [s["cluster_redundant_bytes"] for s in stages], unit,
                   COLORS["redundant"])]
    return _figure(traces, unit, f"Whole cluster ({report['workers']:,} workers)")


def _names(parts_list) -> list:
    names = []
    for parts in parts_list:
        names += [n for n in parts if n not in names]
    return names


def peak(report: dict, unit: str) -> go.Figure:
    """Each stage's peak phase, stacked by component, against the GPU's capacity."""
    peaks = report["peak"]
    tops = [p["phases"][p["peak_phase"]] for p in peaks]
    labels = [f"{STAGE_LABELS[p['stage']]} ({PHASE_LABELS[p['peak_phase']]})" for p in peaks]
    traces = [_bar(name, labels, [top.get(name, 0) for top in tops], unit) for name in _names(tops)]
    return _figure(traces, unit, "Peak per GPU against its capacity",
                   capacity=(report["gpu"]["capacity_bytes"], report["gpu"]["name"]))


def timeline(report: dict, stage: int, unit: str) -> go.Figure:
    """The live set in each phase of one step, for one stage."""
    p = report["peak"][stage]
    phases = list(p["phases"])
    traces = [_bar(name, [PHASE_LABELS[ph] for ph in phases], [p["phases"][ph].get(name, 0) for ph in phases], unit)
              for name in _names(p["phases"].values())]
    return _figure(traces, unit, f"Live memory over one step, {STAGE_LABELS[stage]}",
                   capacity=(p["capacity_bytes"], report["gpu"]["name"]))


def ranks(report: dict, stage: int, unit: str) -> go.Figure:
    """Each rank class's peak at one ZeRO stage, stacked by component, against the GPU; the worst one framed."""
    rows = report["ranks"]
    worst = report["peak"][stage]["rank"]
    tops = [r["peak"][stage]["phases"][r["peak"][stage]["peak_phase"]] for r in rows]
    labels = [f"{r['name']}{' (worst)' if r['name'] == worst else ''}<br>{r['count']:,} ranks" for r in rows]
    outline = [3 if r["name"] == worst else 0 for r in rows]
    traces = [_bar(name, labels, [top.get(name, 0) for top in tops], unit, outline=outline)
              for name in _names(tops)]
    return _figure(traces, unit, f"Peak per rank class, {STAGE_LABELS[stage]}",
                   capacity=(report["gpu"]["capacity_bytes"], report["gpu"]["name"]))


def scaling(report: dict, unit: str) -> go.Figure:
    """Per-worker persistent state against the number of workers (log axis), one line per stage."""
    rows = report["scaling"]
    traces = []
    for stage in range(4):
        values = rows[f"stage_{stage}"]
        traces.append(dict(type="scatter", name=STAGE_LABELS[stage], x=list(rows["workers"]),
                           y=_scaled(values, unit), customdata=list(values), mode="lines+markers",
                           hovertemplate=f"{STAGE_LABELS[stage]}: %{{y:,.2f}} {unit} "
                                         f"(%{{customdata:,}} bytes)<extra></extra>"))
    return _figure(traces, unit, "Model states per worker as the cluster grows", barmode="group",
                   xaxis=dict(type="log", title=dict(text="data-parallel workers")))
