"""Report dict -> Plotly figures. Plain lists only (Plotly 7 would base64-encode numpy arrays), exact bytes in
customdata for the hover, values divided into the display unit and nothing else computed.

One colour per memory term everywhere (TERM_COLORS, shown as a table in the app): a term keeps its colour in
every chart and every view, whatever the settings. Parameter groups (mixture-of-experts experts, fp32 routers,
and later frozen / trainable tensors) keep their category's colour and get a hatch pattern of their own.
"""

from __future__ import annotations

import zlib

import plotly.graph_objects as go

from zerocalc.step.losses import CACHED_MOMENT, GRAPH, HELD, PREVIOUS
from zerocalc.units import UNIT_BYTES

STAGE_LABELS = ["ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
PHASE_LABELS = {"forward": "forward", "backward": "backward", "optimizer_step": "optimizer step"}
TERM_COLORS = {   # Tableau 20, one hue family per kind of memory
    "parameters": "#4E79A7", "gradients": "#F28E2B", "optimizer": "#59A14F",
    "model states": "#499894",
    "activations": "#E15759", "logits and loss": "#B07AA1", "recompute (one block)": "#FF9D9A",
    "gathered parameters": "#A0CBE8", "persistent parameters": "#86BCB6",
    "gradient buckets": "#FFBE7D", "all-gather bucket": "#F1CE63", "fp32 gradient copy": "#8CD17D",
    "allocator reserve": "#BAB0AC", "CUDA context": "#79706E", "NCCL buffers": "#5C4F4A",
    "library workspaces": "#D7B5A6",
    "one copy": "#9D7660", "redundant": "#D37295",
    "unsharded parameters (reshard_after_forward off)": "#2F5F8A", "unit gradient before accumulation": "#D4A6C8",
    "accumulated unsharded gradients (sync at the last micro-batch)": "#FABFD2",
    "CPU offload: a unit's shard and gradient shard on the GPU": "#B6992D",
    "float8 casts (one linear)": "#7B4F8E", "one gradient (optimizer in backward)": "#C25A1E",
    "measured beyond the estimate": "#1F1F1F",
    HELD: "#9C755F", GRAPH: "#E8A0BF", PREVIOUS: "#6B5B95", CACHED_MOMENT: "#FFC9C7",
}
TERM_MEANING = {
    "parameters": "the compute copy of the weights (ledger category)",
    "gradients": "gradients and any gradient accumulation buffer (ledger category)",
    "optimizer": "master copy, moments and other optimizer state (ledger category)",
    "model states": "parameters + gradients + optimizer state on the GPU (the three above, in the peak)",
    "activations": "tensors saved for backward, every in-flight micro-batch",
    "logits and loss": "the logits and their fp32 upcast / gradient for the loss",
    "recompute (one block)": "what backward rebuilds at once: one block under full recompute (Megatron's uniform "
                             "method: its group of N), one block's recomputed part under op or Megatron's modules",
    CACHED_MOMENT: "full recompute: the smaller of two backward moments run in turn; reserved, not allocated",
    "gathered parameters": "ZeRO-3 / FSDP: parameters gathered for the running unit, prefetch included",
    "persistent parameters": "ZeRO-3: small parameters kept whole on every worker",
    "gradient buckets": "gradients being reduced: DeepSpeed's buckets (twice with overlap_comm) or FSDP's unit",
    "all-gather bucket": "ZeRO-1/2: the bucket that gathers updated parameters",
    "fp32 gradient copy": "the optimizer step's fp32 copy of narrower gradients",
    "allocator reserve": "the caching allocator's reserve: its model's at the point (or a set percent), its band "
                         "by allocator (step/allocator.py)",
    "CUDA context": "CUDA context, the kernels it loads and library handles, outside the allocator (an assumption)",
    "NCCL buffers": "NCCL's buffers per communicator of the plan (dp, tp, cp, ep, pp), outside the allocator: "
                    "ring channels, NVLS on NVSwitch, channels per peer for all-to-all and pipeline sends (nccl.py)",
    "library workspaces": "GEMM workspaces held in PyTorch's allocator: cuBLAS, Transformer Engine (by GPU)",
    "unsharded parameters (reshard_after_forward off)": "FSDP2: a stage's parameters kept gathered for the step",
    "unit gradient before accumulation": "FSDP2: one unit's gradient before its cast to the reduce dtype",
    "accumulated unsharded gradients (sync at the last micro-batch)": "FSDP2 under pipeline parallelism: "
                                                                      "gradients summed unsharded until the last "
                                                                      "micro-batch",
    "CPU offload: a unit's shard and gradient shard on the GPU": "FSDP with offloaded parameters: a unit's shard "
                                                                 "copied in and its gradient shard out",
    "float8 casts (one linear)": "torchao float8: the dynamic casts of the largest linear (step/float8.py)",
    "one gradient (optimizer in backward)": "the optimizer steps each parameter in backward: one gradient lives",
    "measured beyond the estimate": "live tensors a pasted measurement of this plan showed beyond the estimate "
                                    "(Calibrate's Set)",
    HELD: "the logits the model returned, kept by a loop that holds its output or its last loss (step/losses.py)",
    GRAPH: "the autograd graph's bitsandbytes 8-bit (and pre-0.43.2 4-bit) inputs, kept while the loop holds the loss",
    PREVIOUS: "the last step's logits and graph, alive in this forward until the loop takes the new (LitGPT's loop)",
    "one copy": "cluster bytes of one copy of every state",
    "redundant": "cluster bytes that duplicate a copy held elsewhere",
}
SPARE_COLORS = ("#B6992D", "#D4A6C8", "#D7B5A6", "#FABFD2", "#9D7660", "#86BCB6")
GROUP_PATTERNS = {"": "", "experts": "/", "fp32": ".", "frozen": "x", "adapters": "+", "trainable": ""}
SPARE_PATTERNS = ("\\", "-", "|", "+", "x")
ENTRY_SHADES = {"master parameters": "#59A14F", "exp_avg": "#8CD17D", "exp_avg_sq": "#B6992D",
                "gradient accumulation buffer": "#FFBE7D"}
PLOTLY_CONFIG = {"displayModeBar": False, "responsive": True}   # no toolbar over a title
# Streamlit's chart theme re-lays the legend out in one column on a narrow screen: charts draw with theme=None.


def color(term: str) -> str:
    """The term's fixed colour; a term not in the table gets one from its name (stable across views)."""
    if term in TERM_COLORS:
        return TERM_COLORS[term]
    return SPARE_COLORS[zlib.crc32(term.encode("utf-8")) % len(SPARE_COLORS)]


def split_entry(name: str) -> tuple:
    """("experts", "parameters") for "experts: parameters"; ("", name) for a dense entry."""
    group, sep, base = name.partition(": ")
    return (group, base) if sep else ("", name)


def pattern(group: str) -> str:
    """A group's hatch: frozen crossed, experts hatched, fp32 dotted, whatever else the group also is ("nf4, frozen"
    is frozen first); a group of none of these gets a spare one from its name."""
    if group in GROUP_PATTERNS:
        return GROUP_PATTERNS[group]
    parts = group.split(", ")
    for known in ("frozen", "experts", "fp32"):
        if known in parts:
            return GROUP_PATTERNS[known]
    return SPARE_PATTERNS[zlib.crc32(group.encode("utf-8")) % len(SPARE_PATTERNS)]


def _group_rank(group: str) -> tuple:
    """Stacking order: dense first, then experts, fp32 and frozen groups, then the rest by name."""
    known = list(GROUP_PATTERNS)
    first = next((p for p in (group, *group.split(", ")) if p in GROUP_PATTERNS), None)
    return (known.index(first) if first is not None else 99, group)


def _scaled(values, unit):
    return [v / UNIT_BYTES[unit] for v in values]


class Spec(go.Figure):
    """A figure held as its plain spec: traces and layout as dicts of known properties. st.plotly_chart reads a
    Plotly figure through to_dict(), so the page never builds Plotly's object tree (building it and copying it back
    cost 3.8 ms a chart); tests/test_app_figures.py builds every spec again as a go.Figure with full validation."""

    def __init__(self, spec: dict):    # deliberately not go.Figure.__init__: nothing reads the object tree
        self._spec = spec

    def to_dict(self) -> dict:
        return self._spec


def _figure(traces, unit, title, barmode="stack", capacity=None, xaxis=None, height=400, subtitle=None,
            annotations=None, showlegend=True) -> "Spec":
    """One figure as its plain spec, built in a single pass. The capacity is a dashed line named in the subtitle,
    never a label over a bar."""
    head = dict(text=title, x=0, xanchor="left", font=dict(size=15))
    if subtitle:
        head["subtitle"] = dict(text=subtitle, font=dict(size=12))
    axis = dict(automargin=True, gridcolor="#E5E5E5", zerolinecolor="#BDBDBD")
    layout = dict(title=head, barmode=barmode, yaxis=dict(title=dict(text=unit), **axis),
                  legend=dict(title=dict(text=""), orientation="h", yanchor="top", y=-0.22, x=0,
                              entrywidth=140, entrywidthmode="pixels"),
                  height=height, margin=dict(l=10, r=10, t=72 if subtitle else 50, b=10),
                  font=dict(family="Source Sans Pro, sans-serif", size=12), paper_bgcolor="rgba(0,0,0,0)",
                  plot_bgcolor="rgba(0,0,0,0)", hovermode="x unified",
                  xaxis={**axis, **(xaxis or {})})
    if capacity is not None:
        lines = capacity if isinstance(capacity, list) else [capacity]
        shapes = []
        for value, dash in zip(lines, ("dash", "dot")):
            y = value / UNIT_BYTES[unit]
            shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                               line=dict(color="#B22222", dash=dash, width=2)))
        layout["shapes"] = shapes
    if annotations:
        layout["annotations"] = annotations
    if not showlegend:
        layout["showlegend"] = False
    return Spec({"data": traces, "layout": layout})


CLIP_BEYOND = 2.0        # a bar over twice the checked stage's scale is clipped, so the checked one stays readable


def _clip(fig: "Spec", labels, totals, capacity: int, checked_top, unit: str) -> None:
    """Keep the checked stage readable: when another stage's bar is over CLIP_BEYOND times the larger of the
    capacity and the checked stage's top (ZeRO-0 of a large model), the y axis ends a little above that scale and
    each clipped bar says its height."""
    scale = max(capacity, checked_top or 0)
    if max(totals) <= CLIP_BEYOND * scale:
        return
    layout, top = fig.to_dict()["layout"], 1.25 * scale / UNIT_BYTES[unit]
    layout.setdefault("yaxis", {})["range"] = [0, top]
    layout["annotations"] = list(layout.get("annotations") or []) + [
        dict(x=label, y=top, text=f"↑ {total / UNIT_BYTES[unit]:,.2f} {unit} (clipped)", showarrow=False,
             yanchor="top", font=dict(size=11, color="#222222"), bgcolor="rgba(255,255,255,0.85)")
        for label, total in zip(labels, totals) if total / UNIT_BYTES[unit] > top]


def _bar(name, x, values, unit, term=None, outline=None, group="", legendgroup=None, showlegend=True):
    marker = dict(color=color(term or name))
    if group is not None and pattern(group):
        marker["pattern"] = dict(shape=pattern(group), fgcolor="#FFFFFF", fillmode="overlay", size=6, solidity=0.3)
    if outline is not None:                     # per-bar outline widths: the highlighted bar gets a frame
        marker["line"] = dict(width=list(outline), color="#222222")
    trace = dict(type="bar", name=name, x=list(x) if not isinstance(x[0], list) else x, y=_scaled(values, unit),
                 customdata=list(values), marker=marker,
                 hovertemplate=f"{name}: %{{y:,.2f}} {unit} (%{{customdata:,}} bytes)<extra></extra>")
    if legendgroup is not None:
        trace.update(legendgroup=legendgroup, showlegend=showlegend)
    return trace


def capacity_title(report: dict, unit: str) -> str:
    cap = report["gpu"]["capacity_bytes"] / UNIT_BYTES[unit]
    return f"dashed line: {cap:,.2f} {unit}, {report['gpu']['name']}"


def _marker(x, y_bytes, unit: str, text: str = "checked") -> dict:
    """An arrow above one bar (the stage being checked): a frame would hide a thin bar."""
    return dict(x=x, y=y_bytes / UNIT_BYTES[unit], text=text, showarrow=True, arrowhead=2, arrowsize=1, ax=0,
                ay=-22, font=dict(size=11, color="#222222"), yanchor="bottom")


def _grouped(stages) -> bool:
    return any(": " in name for name in stages[0]["per_worker_entry_bytes"])


def per_worker(report: dict, unit: str, breakdown: str = "category", highlight: int = None) -> Spec:
    """Persistent model state per worker, one bar per stage, stacked by category or by ledger entry; `highlight`
    marks one stage's bar."""
    stages = report["stages"]
    marks = None if highlight is None else [_marker(STAGE_LABELS[highlight],
                                                    stages[highlight]["per_worker_total_bytes"], unit)]
    return _figure(state_traces(report, unit, breakdown), unit, "Model states per worker",
                   subtitle="persistent state only: not the peak", annotations=marks)


def state_traces(report: dict, unit: str, breakdown: str = "category", **extra) -> list:
    """The model-state bars' traces. A model with parameter groups (experts, fp32 routers, a frozen base beside
    trained adapters) stacks each group's entries in its category's colour and the group's hatch, one legend item
    per group and category. A fine-tuning view names its groups as the report does ("frozen (nf4)")."""
    stages = report["stages"]
    if breakdown == "category" and not _grouped(stages):
        return [{**_bar(name, STAGE_LABELS, [s["per_worker_bytes"][name] for s in stages], unit), **extra}
                for name in stages[0]["per_worker_bytes"]]
    categories = {e["name"]: e["category"] for e in report["ledger"]}
    labels = group_names(report)
    rows = {}                                   # legend label -> (term, group, bytes per stage)
    for name in sorted(stages[0]["per_worker_entry_bytes"], key=lambda n: _group_rank(split_entry(n)[0])):
        group, base = split_entry(name)
        category = categories.get(base, "parameters")        # a quantized weight's parts are its parameters
        shown = labels.get(group, group)
        term = category if breakdown == "category" else ENTRY_SHADES.get(base, category)
        label = category if breakdown == "category" else base
        label = f"{shown}: {label}" if shown else label
        values = [s["per_worker_entry_bytes"][name] for s in stages]
        if label in rows:                       # one bar per group and category: entries of a category add up
            values = [a + b for a, b in zip(rows[label][2], values)]
        rows[label] = (term, group, values)
    traces = [_bar(label, STAGE_LABELS, values, unit, term=term, group=group)
              for label, (term, group, values) in rows.items()]
    return [{**trace, **extra} for trace in traces]


def group_names(report: dict) -> dict:
    """Group key -> the name a bar shows: the report's label in a fine-tuning view ("frozen (nf4)", "trained
    (fp32)"), the key itself otherwise ("experts", "fp32")."""
    if report.get("finetune", {}).get("mode", "full") == "full":
        return {}
    names = {g["group"]: g["label"] for g in report.get("group_ledgers", {}).get("groups", [])}
    if "dense" in names:                      # the ungrouped entries: "" in the bars, "dense" in group bytes
        names[""] = names["dense"]
    return names


def overview(report: dict, unit: str, breakdown: str = "category", highlight: int = None) -> Spec:
    """The overview in one chart: at each ZeRO stage, the model states per worker (left bar, by category or
    ledger entry) beside the peak per GPU (right bar, by component), against the GPU's capacity. One chart, not
    two: the page updates faster, and the subtotal sits beside the peak it is a part of."""
    traces = state_traces(report, unit, breakdown, offsetgroup="states", legendgroup="states",
                          legendgrouptitle=dict(text="model states (left)"))
    peaks = report["peak"]
    tops = [p["phases"][p["peak_phase"]] for p in peaks]
    for name in _names(tops):
        trace = _bar(name, STAGE_LABELS, [top.get(name, 0) for top in tops], unit)
        trace.update(offsetgroup="peak", legendgroup="peak",
                     legendgrouptitle=dict(text="peak (right)"))
        traces.append(trace)
    marks = None
    if highlight is not None:
        marks = [_marker(STAGE_LABELS[highlight], peaks[highlight]["peak_bytes"], unit,
                         f"checked: {PHASE_LABELS[peaks[highlight]['peak_phase']]}")]
    fig = _figure(traces, unit, "Model states and peak per GPU, by ZeRO stage",
                  subtitle=capacity_title(report, unit), capacity=report["gpu"]["capacity_bytes"],
                  annotations=marks, height=400, showlegend=False)   # legend_html draws it: lighter, and it wraps
    totals = [max(p["peak_bytes"], s["per_worker_total_bytes"]) for p, s in zip(peaks, report["stages"])]
    _clip(fig, STAGE_LABELS, totals, report["gpu"]["capacity_bytes"], None if highlight is None else totals[highlight],
          unit)
    return fig


PATTERN_CSS = {"/": "repeating-linear-gradient(135deg, rgba(255,255,255,.75) 0 2px, transparent 2px 5px)",
               ".": "radial-gradient(rgba(255,255,255,.8) 1px, transparent 1.2px) 0 0 / 4px 4px",
               "x": "repeating-linear-gradient(45deg, rgba(255,255,255,.7) 0 1px, transparent 1px 4px), "
                    "repeating-linear-gradient(135deg, rgba(255,255,255,.7) 0 1px, transparent 1px 4px)"}


def legend_html(fig: Spec) -> str:
    """The figure's legend as HTML: one swatch per term (its fixed colour, its group's hatch), grouped as the bars
    are (model states on the left bar, the peak on the right)."""
    import html
    groups = {"states": "left bar, model states per worker:", "peak": "right bar, peak per GPU:"}
    seen, parts = set(), {}
    for t in fig.to_dict()["data"]:
        name, group = t["name"], t.get("offsetgroup")
        key = (group, name)
        if key in seen or t["type"] != "bar":
            continue
        seen.add(key)
        shape = (t["marker"].get("pattern") or {}).get("shape")
        hatch = PATTERN_CSS.get(shape or "", "")
        style = f"background:{t['marker']['color']};" + (f"background-image:{hatch};" if hatch else "")
        parts.setdefault(group, []).append(
            f'<span class="zc-key"><span class="zc-swatch" style="{style}"></span>{html.escape(name)}</span>')
    rows = "".join(f'<div class="zc-legend-row"><span class="zc-legend-group">{groups.get(g, "")}</span>'
                   f'{"".join(items)}</div>' for g, items in parts.items())
    return ('<style>.zc-legend-row{font-size:.8rem;line-height:1.6;margin:.1rem 0}.zc-legend-group{color:#555;'
            'margin-right:.5rem}.zc-key{display:inline-block;margin-right:.8rem;white-space:nowrap}.zc-swatch{'
            'display:inline-block;width:.8rem;height:.8rem;vertical-align:-.1rem;margin-right:.3rem;'
            f'border-radius:2px}}</style><div data-testid="zc-legend">{rows}</div>')


def cluster(report: dict, unit: str) -> Spec:
    """Cluster-wide bytes per stage, split into one copy and redundant copies."""
    stages = report["stages"]
    traces = [_bar("one copy", STAGE_LABELS, [s["cluster_unique_bytes"] for s in stages], unit),
              _bar("redundant", STAGE_LABELS, [s["cluster_redundant_bytes"] for s in stages], unit)]
    return _figure(traces, unit, f"Whole cluster, {report['workers']:,} workers",
                   subtitle="one copy of every state vs redundant copies")


def _names(parts_list) -> list:
    names = []
    for parts in parts_list:
        names += [n for n in parts if n not in names]
    return names


def _band_trace(report: dict, ranges: dict, labels, unit: str):
    """The low-high band of each stage's peak (zerocalc.answers.ranges) as a vertical segment over each bar: drawn from
    the core's two ends, no difference taken."""
    x, y, data = [], [], []
    for label, b in zip(labels, ranges["stages"]):
        x += [label, label, None]
        y += [b["low_bytes"] / UNIT_BYTES[unit], b["high_bytes"] / UNIT_BYTES[unit], None]
        data += [b["low_bytes"], b["high_bytes"], None]
    return dict(type="scatter", mode="lines+markers", name="assumption range", x=x, y=y,
                customdata=data, line=dict(color="#222222", width=2), marker=dict(symbol="line-ew", size=12,
                                                                                   line=dict(width=2)),
                hovertemplate=f"range end: %{{y:,.2f}} {unit} (%{{customdata:,}} bytes)<extra></extra>")


def peak(report: dict, unit: str, ranges: dict = None, highlight: int = None) -> Spec:
    """Each stage's peak phase, stacked by component, against the GPU's capacity (and the assumption band)."""
    peaks = report["peak"]
    tops = [p["phases"][p["peak_phase"]] for p in peaks]
    labels = [STAGE_LABELS[p["stage"]] for p in peaks]
    traces = [_bar(name, labels, [top.get(name, 0) for top in tops], unit) for name in _names(tops)]
    top = peaks[highlight]["peak_bytes"] if highlight is not None else None
    if ranges:
        traces.append(_band_trace(report, ranges, labels, unit))
        if highlight is not None:
            top = ranges["stages"][highlight]["high_bytes"]
    marks = None if highlight is None else [_marker(labels[highlight], top, unit)]
    fig = _figure(traces, unit, "Peak per GPU", subtitle=capacity_title(report, unit),
                  capacity=report["gpu"]["capacity_bytes"], annotations=marks)
    totals = [p["peak_bytes"] for p in peaks]
    if ranges:
        totals = [max(t, b["high_bytes"]) for t, b in zip(totals, ranges["stages"])]
    _clip(fig, labels, totals, report["gpu"]["capacity_bytes"], top, unit)
    return fig


def timeline(report: dict, stage: int, unit: str) -> Spec:
    """The live set in each phase of one step, for one stage."""
    p = report["peak"][stage]
    phases = list(p["phases"])
    traces = [_bar(name, [PHASE_LABELS[ph] for ph in phases], [p["phases"][ph].get(name, 0) for ph in phases], unit)
              for name in _names(p["phases"].values())]
    return _figure(traces, unit, f"Live memory over one step, {STAGE_LABELS[stage]}",
                   subtitle=capacity_title(report, unit), capacity=p["capacity_bytes"])


def ranks(report: dict, stage: int, unit: str) -> Spec:
    """Each rank class's peak at one ZeRO stage, stacked by component, against the GPU; the worst one framed."""
    rows = report["ranks"]
    worst = report["peak"][stage]["rank"]
    tops = [r["peak"][stage]["phases"][r["peak"][stage]["peak_phase"]] for r in rows]
    labels = [f"{r['name']}{' (worst)' if r['name'] == worst else ''}<br>{r['count']:,} ranks" for r in rows]
    outline = [3 if r["name"] == worst else 0 for r in rows]
    traces = [_bar(name, labels, [top.get(name, 0) for top in tops], unit, outline=outline)
              for name in _names(tops)]
    return _figure(traces, unit, f"Peak per rank class, {STAGE_LABELS[stage]}", subtitle=capacity_title(report, unit),
                   capacity=report["gpu"]["capacity_bytes"])


def scaling(report: dict, unit: str) -> Spec:
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


def sweep(result: dict, unit: str, gpu_name: str) -> Spec:
    """Each stage's peak along one input (zerocalc.answers.sweep), the checked stage drawn solid and the others
    thin, the capacity dashed, and an arrow at the checked stage's edge: where the solver says it stops fitting."""
    checked, x = result["stage"], [p["value"] for p in result["points"]]
    traces = []
    for stage in range(4):
        values = [p["peak_bytes"][stage] for p in result["points"]]
        line = dict(width=3) if stage == checked else dict(width=1, dash="dot")
        traces.append(dict(type="scatter", name=STAGE_LABELS[stage] + (" (checked)" if stage == checked else ""),
                           x=x, y=_scaled(values, unit), customdata=values, mode="lines+markers", line=line,
                           opacity=1.0 if stage == checked else 0.55,
                           hovertemplate=f"{STAGE_LABELS[stage]}: %{{y:,.2f}} {unit} "
                                         f"(%{{customdata:,}} bytes)<extra></extra>"))
    edge = result["edge"][str(checked)]
    notes = []
    if edge:
        point = next(p for p in result["points"] if p["value"] == edge)
        notes.append(_marker(edge, point["peak_bytes"][checked], unit,
                             f"{result['edge_kind']}: {edge:,}"))
    cap = result["capacity_bytes"] / UNIT_BYTES[unit]
    return _figure(traces, unit, f"Peak against {result['label']}", barmode="group",
                   capacity=result["capacity_bytes"], annotations=notes,
                   subtitle=f"dashed line: {cap:,.2f} {unit}, {gpu_name}; the other inputs as set",
                   xaxis=dict(type="log", title=dict(text=result["label"])))


def _pair_x(names=("A", "B")):
    """A multicategory axis: each stage with plan A's bar and plan B's."""
    return [[label for label in STAGE_LABELS for _ in names], [n for _ in STAGE_LABELS for n in names]]


def compare_states(a: dict, b: dict, unit: str) -> Spec:
    """Model states per worker by category, plan A and plan B side by side at each stage."""
    x = _pair_x()
    traces = []
    for name in a["stages"][0]["per_worker_bytes"]:
        values = [r[s]["per_worker_bytes"][name] for s in range(4) for r in (a["stages"], b["stages"])]
        traces.append(_bar(name, x, values, unit))
    return _figure(traces, unit, "Model states per worker: plan A | plan B", subtitle="persistent state only")


def compare_peak(a: dict, b: dict, unit: str) -> Spec:
    """Each stage's peak, plan A and plan B side by side, against each plan's GPU (dashed: A, dotted: B)."""
    x = _pair_x()
    tops = [r["peak"][s]["phases"][r["peak"][s]["peak_phase"]] for s in range(4) for r in (a, b)]
    traces = [_bar(name, x, [top.get(name, 0) for top in tops], unit) for name in _names(tops)]
    caps = [a["gpu"]["capacity_bytes"], b["gpu"]["capacity_bytes"]]
    same = caps[0] == caps[1]
    sub = capacity_title(a, unit) if same else f"A: {a['gpu']['name']}, dashed; B: {b['gpu']['name']}, dotted"
    return _figure(traces, unit, "Peak per GPU: plan A | plan B", subtitle=sub, capacity=caps[:1] if same else caps)
