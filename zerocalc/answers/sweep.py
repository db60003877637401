"""Sweeps: every ZeRO stage's peak against one input (sequence length, micro-batch, LoRA rank or data-parallel
workers), everything else held. Each point is the whole plan with that value set (layout_report of it: the numbers
the page shows once the value is typed in), and the edge is the solvers' exact answer (zerocalc.answers.solve), not
read off the grid: the last value that fits (the first, for workers, where more of them shard more).

The grid is step x 2^k up to twice the largest of the plan's own value and the stages' edges (the top MAX_POINTS
of them), and holds the plan's value and each edge with its neighbour beyond it, so that the chart crosses the
capacity where the solver says it does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, Optional

from ..parallel.ranks import layout_report, peaks_at_micro_batch, peaks_at_seq_len, peaks_at_workers
from ..scenario import INT_LIMITS, FieldError, require_choice
from ..step.workload import WORKLOAD_LIMITS
from ..tables import STAGES
from .solve import largest_true, max_micro_batch, max_seq_len, min_workers, seq_len_step

MAX_POINTS = 10
LORA_RANK_LIMIT = 4096              # the page's own bound (ui.state.fields); peft allows more, nobody trains them


@dataclass(frozen=True)
class Axis:
    field: str
    label: str
    grows: bool                     # the peak grows with the value (False: more workers shard the states thinner)
    limit: int                      # the largest value searched


AXES = {
    "seq_len": Axis("seq_len", "sequence length (tokens)", True, WORKLOAD_LIMITS["seq_len"][1]),
    "micro_batch": Axis("micro_batch", "micro-batch (sequences per GPU)", True, WORKLOAD_LIMITS["micro_batch"][1]),
    "lora_rank": Axis("lora_rank", "LoRA rank", True, LORA_RANK_LIMIT),
    "workers": Axis("workers", "data-parallel workers", False, INT_LIMITS["workers"][1]),
}


def axes_for(workload) -> tuple:
    """The inputs a plan can be swept over: the LoRA rank only where adapters train."""
    return tuple(name for name in AXES if name != "lora_rank" or workload.finetune.adapters)


def plan_with(scenario, workload, field: str, value: int):
    """The plan with one input set (a whole scenario and workload; the workers shard as one group)."""
    if field == "workers":
        return replace(scenario, workers=value, shard_group=None), workload
    if field == "lora_rank":
        return scenario, replace(workload, finetune=replace(workload.finetune, lora_rank=value))
    return scenario, replace(workload, **{field: value})


def _current(scenario, workload, field: str) -> int:
    if field == "workers":
        return scenario.workers
    if field == "lora_rank":
        return workload.finetune.lora_rank
    return getattr(workload, field)


def edges(scenario, workload, field: str) -> Dict[int, Optional[int]]:
    """Per stage, the last value that fits (the first for workers); 0 / None where none does."""
    if field == "seq_len":
        return max_seq_len(scenario, workload)
    if field == "micro_batch":
        return max_micro_batch(scenario, workload)
    if field == "workers":
        return min_workers(scenario, workload)
    cache: Dict[int, tuple] = {}

    def peaks(r: int):
        if r not in cache:
            cache[r] = layout_report(*plan_with(scenario, workload, field, r)).peaks
        return cache[r]
    return {s: largest_true(lambda r, s=s: peaks(r)[s].fits, 1, LORA_RANK_LIMIT, workload.finetune.lora_rank)
            for s in STAGES}


def _grid(axis: Axis, step: int, current: int, edge_values: list) -> list:
    top = min(axis.limit, 2 * max([current] + [e for e in edge_values if e]))
    doubling, v = [], step
    while v <= top:                                       # step x 2^k up to twice the largest value of interest
        doubling.append(v)
        v *= 2
    values = set(doubling[-MAX_POINTS:])
    marks = {current}
    for e in edge_values:
        if e:
            marks.add(e)
            beyond = e + step if axis.grows else e - step
            if step <= beyond <= axis.limit:
                marks.add(beyond)
    return sorted(values | marks)


def sweep(scenario, workload, field: str, stage: int) -> dict:
    """The peaks along one input, as plain data: {"field", "label", "current", "step", "stage", "capacity_bytes",
    "points": [{"value", "peak_bytes": [per stage], "fits": [per stage]}], "edge": {stage: value or None},
    "edge_kind": "last that fits" | "first that fits"}."""
    require_choice("sweep", field, axes_for(workload))
    if stage not in STAGES:
        raise FieldError("stage", stage, "0, 1, 2 or 3")
    axis = AXES[field]
    step = seq_len_step(workload) if field == "seq_len" else 1
    edge = edges(scenario, workload, field)
    values = _grid(axis, step, _current(scenario, workload, field), list(edge.values()))
    base = layout_report(scenario, workload)
    cheap = {"seq_len": peaks_at_seq_len, "micro_batch": peaks_at_micro_batch, "workers": peaks_at_workers}
    points = []
    for value in values:          # the step alone where the model states do not change (ranks.peaks_at_*)
        try:
            peaks = cheap[field](base, value) if field in cheap else \
                layout_report(*plan_with(scenario, workload, field, value)).peaks
        except FieldError:        # a value the plan refuses: a sequence shorter than its images' tokens
            continue
        points.append({"value": value, "peak_bytes": [p.peak_bytes for p in peaks], "fits": [p.fits for p in peaks]})
    return {"field": field, "label": axis.label, "current": _current(scenario, workload, field), "step": step,
            "stage": stage, "capacity_bytes": workload.capacity_bytes, "points": points,
            "edge": {str(s): (v or None) for s, v in edge.items()},
            "edge_kind": "last that fits" if axis.grows else "first that fits"}


def sweep_sentence(result: dict, stage_label: Callable[[int], str] = lambda s: f"ZeRO-{s}") -> str:
    """Where the checked stage stops fitting, in words."""
    s, edge, label = result["stage"], result["edge"][str(result["stage"])], result["label"]
    name = label.split(" (")[0]
    if result["edge_kind"] == "first that fits":
        return (f"{stage_label(s)} fits from {edge:,} {name} on (fewer do not)." if edge else
                f"{stage_label(s)} fits at no {name} count up to {AXES[result['field']].limit:,}.")
    if not edge:
        return f"{stage_label(s)} does not fit even at the smallest {name} ({result['step']:,})."
    if edge >= AXES[result["field"]].limit:
        return f"{stage_label(s)} fits up to the largest {name} searched ({edge:,})."
    return f"{stage_label(s)} fits up to {name} {edge:,}; at {edge + result['step']:,} it does not."
