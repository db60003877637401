"""The per-rank report: every rank class of a layout with its model states per ZeRO stage, its working set per
phase and its peak; the cluster totals summed over all ranks; the worst rank per stage, named.

With tp = pp = cp = 1 there is one class (every rank) and every number equals model_states' pure data-parallel
result, byte for byte: the same ledger rows over the same parameter count and shard group.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict, NamedTuple, Tuple

from .costs import data_parallel_communication, layout_communication, recompute_flops
from .layout import check_experts
from .ledger import LedgerEntry, build_ledger
from .model_states import StageResult, StateRow, stage_results
from .peak import StagePeak, StepShape, param_groups, rank_shape, stage_peak
from .placement import RankClass, rank_classes, stored_groups, stored_params
from .tables import DTYPE_BITS, STAGES


class RankView(NamedTuple):
    rank: RankClass
    shape: StepShape
    stages: Tuple[StageResult, ...]          # this class's model states per ZeRO stage (cluster: its share)
    peaks: Tuple[StagePeak, ...]
    communication: Tuple[Dict[str, int], ...]   # per stage: kind -> bytes per step
    recompute_flops: int
    rows: Tuple[StateRow, ...]               # the ledger applied to each parameter group: names of per-entry bytes


class LayoutReport(NamedTuple):
    """Shaped like model_states.ModelStatesReport (scenario, ledger, unique_by_entry, stages), so every view of
    the model states reads either; its stages and peaks are the worst rank's, its cluster totals all ranks'."""
    scenario: object
    workload: object
    ledger: Tuple[LedgerEntry, ...]
    unique_by_entry: Tuple[int, ...]
    ranks: Tuple[RankView, ...]
    stages: Tuple[StageResult, ...]
    peaks: Tuple[StagePeak, ...]
    worst: Tuple[int, ...]                   # per stage: index of the worst rank class

    @property
    def unique_total(self) -> int:
        return sum(self.unique_by_entry)

    def stage(self, n: int) -> StageResult:
        return self.stages[n]

    @property
    def stored_params(self) -> int:
        return stored_params(self.workload.arch, self.workload.layout, self.workload.implementation)


@lru_cache(maxsize=1024)
def group_ledger(scenario, ledger, group: str) -> Tuple[LedgerEntry, ...]:
    """The ledger of one parameter group, its entries named after the group: a tensor kept in fp32 (a router)
    stores its parameters and gradients in fp32 when the ledger's are narrower; a frozen tensor keeps only its
    parameters (no gradient, no master copy, no optimizer state)."""
    parts = group.split(", ") if group else []
    if "fp32" in parts:
        wider = {f: "fp32" for f in ("param_dtype", "grad_dtype") if DTYPE_BITS[getattr(scenario, f)] < 32}
        ledger = build_ledger(scenario.with_changes(**wider)) if wider else ledger
    if "frozen" in parts:
        ledger = tuple(e for e in ledger if e.category == "parameters")
    return tuple(e._replace(name=f"{group}: {e.name}") for e in ledger) if group else ledger


def state_rows(scenario, ledger, shape: StepShape) -> Tuple[StateRow, ...]:
    """The ledger applied to each of one rank's parameter groups (gradients where DTensor keeps more of them)."""
    return tuple(StateRow(e, e.elements(g.grad_params if e.category == "gradients" else g.params), g.shard)
                 for g in shape.groups for e in group_ledger(scenario, ledger, g.name))


def _rank_view(scenario, workload, rank: RankClass, ledger, unique_total: int) -> RankView:
    shape = rank_shape(scenario, workload, rank)
    rows = state_rows(scenario, ledger, shape)
    mp = layout_communication(scenario, workload, rank, shape)
    comm = tuple({"data parallel": data_parallel_communication(scenario, workload, shape, stage), **mp}
                 for stage in STAGES)
    stages = stage_results(scenario, rows, rank.count, unique_total, lambda stage: sum(comm[stage].values()))
    peaks = tuple(stage_peak(scenario, workload, r, shape) for r in stages)
    return RankView(rank, shape, stages, peaks, comm, recompute_flops(workload, rank), rows)


@lru_cache(maxsize=256)
def layout_report(scenario, workload) -> LayoutReport:
    """Every rank class of the workload's layout, and the worst one per ZeRO stage (largest peak)."""
    check_experts(workload.layout, workload.arch, scenario.workers)
    ledger = build_ledger(scenario)
    unique_by_entry = _one_copy(scenario, workload, ledger)
    unique_total = sum(unique_by_entry)
    classes = rank_classes(workload.arch, workload.layout, scenario.workers, workload.implementation)
    views = tuple(_rank_view(scenario, workload, c, ledger, unique_total) for c in classes)
    stages, peaks, worst = [], [], []
    for s in STAGES:
        i = max(range(len(views)), key=lambda k: (views[k].peaks[s].peak_bytes, -k))
        cluster = sum(v.stages[s].cluster_total for v in views)
        stages.append(views[i].stages[s]._replace(cluster_total=cluster))
        peaks.append(views[i].peaks[s])
        worst.append(i)
    return LayoutReport(scenario, workload, ledger, unique_by_entry, views, tuple(stages), tuple(peaks),
                        tuple(worst))


def _one_copy(scenario, workload, ledger) -> Tuple[int, ...]:
    """Bytes of one copy of the whole model per ledger entry, summed over the parameter groups."""
    out = [0] * len(ledger)
    names = [e.name for e in ledger]
    for group, n in stored_groups(workload.arch, workload.layout, workload.implementation).items():
        for e in group_ledger(scenario, ledger, group):
            base = e.name.split(": ", 1)[1] if group else e.name
            out[names.index(base)] += e.nbytes(e.elements(n))
    return tuple(out)


def peaks(scenario, workload) -> Tuple[StagePeak, ...]:
    """The worst rank's peak at each ZeRO stage."""
    return layout_report(scenario, workload).peaks


def _worst(candidates) -> Tuple[StagePeak, ...]:
    """Per stage, the largest of each rank's peaks (candidates: one tuple of four peaks per rank)."""
    return tuple(max((c[s] for c in candidates), key=lambda p: p.peak_bytes) for s in STAGES)


def peaks_at_micro_batch(report: LayoutReport, micro_batch: int) -> Tuple[StagePeak, ...]:
    """The worst rank's peaks with another micro-batch: model states do not depend on it, so only each rank's
    step is recomputed (the same numbers layout_report gives for that micro-batch)."""
    s, w = report.scenario, replace(report.workload, micro_batch=micro_batch)
    candidates = []
    for v in report.ranks:
        shape = rank_shape(s, w, v.rank)
        candidates.append(tuple(stage_peak(s, w, r, shape) for r in v.stages))
    return _worst(candidates)


def peaks_at_workers(report: LayoutReport, workers: int) -> Tuple[StagePeak, ...]:
    """The worst rank's peaks with another data-parallel degree (shard group = all of it): activations do not
    depend on it, so only the model states and what follows the shard divisor are recomputed."""
    s, w = replace(report.scenario, workers=workers, shard_group=None), report.workload
    candidates = []
    for v in report.ranks:
        shape = v.shape._replace(groups=param_groups(s, w, v.rank))
        stages = stage_results(s, state_rows(s, report.ledger, shape), 1, 0)
        candidates.append(tuple(stage_peak(s, w, r, shape) for r in stages))
    return _worst(candidates)
