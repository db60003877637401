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
from .ledger import LedgerEntry, build_ledger
from .model_states import StageResult, StateRow, stage_results
from .peak import StagePeak, StepShape, rank_shape, stage_peak
from .placement import RankClass, rank_classes, stored_params
from .tables import STAGES


class RankView(NamedTuple):
    rank: RankClass
    shape: StepShape
    stages: Tuple[StageResult, ...]          # this class's model states per ZeRO stage (cluster: its share)
    peaks: Tuple[StagePeak, ...]
    communication: Tuple[Dict[str, int], ...]   # per stage: kind -> bytes per step
    recompute_flops: int


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


def state_rows(ledger, shape: StepShape):
    """The ledger applied to one rank's parameters (its gradients where DTensor keeps more of them)."""
    return [StateRow(e, e.elements(shape.grad_params if e.category == "gradients" else shape.params), shape.shard)
            for e in ledger]


def _rank_view(scenario, workload, rank: RankClass, ledger, unique_total: int) -> RankView:
    shape = rank_shape(scenario, workload, rank)
    rows = state_rows(ledger, shape)
    mp = layout_communication(scenario, workload, rank, shape)
    comm = tuple({"data parallel": data_parallel_communication(scenario, workload, shape, stage), **mp}
                 for stage in STAGES)
    stages = stage_results(scenario, rows, rank.count, unique_total, lambda stage: sum(comm[stage].values()))
    peaks = tuple(stage_peak(scenario, workload, r, shape) for r in stages)
    return RankView(rank, shape, stages, peaks, comm, recompute_flops(workload, rank))


@lru_cache(maxsize=256)
def layout_report(scenario, workload) -> LayoutReport:
    """Every rank class of the workload's layout, and the worst one per ZeRO stage (largest peak)."""
    ledger = build_ledger(scenario)
    stored = stored_params(workload.arch, workload.layout, workload.implementation)
    unique_by_entry = tuple(e.nbytes(e.elements(stored)) for e in ledger)
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
        shape = v.shape._replace(shard=s.group * w.layout.cp)
        stages = stage_results(s, state_rows(report.ledger, shape), 1, 0)
        candidates.append(tuple(stage_peak(s, w, r, shape) for r in stages))
    return _worst(candidates)
