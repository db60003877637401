"""The per-rank report: every rank class of a layout with its model states per ZeRO stage, its working set per
phase and its peak; the cluster totals summed over all ranks; the worst rank per stage, named.

With tp = pp = cp = 1 there is one class (every rank) and every number equals model_states' pure data-parallel
result, byte for byte: the same ledger rows over the same parameter count and shard group.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from operator import attrgetter
from typing import Dict, NamedTuple, Optional, Tuple

from ..layout import check_experts
from ..model.placement import RankClass, inventory, rank_classes, stored_holdings, stored_params
from ..states.groups import ParamGroup, group_rows, once_per_optimizer, state_rows
from ..states.ledger import LedgerEntry, build_ledger
from ..states.optimizers import check_optimizer
from ..states.zero import StageResult, StateRow, model_states, row_bytes, stage_results
from ..step.nccl import nccl_bytes
from ..step.allocator import DEFAULT_PERCENT, replays
from ..step.peak import StagePeak, stage_peaks
from ..step.shape import StepShape, param_groups, rank_shape
from ..tables import STAGES
from .costs import data_parallel_communication, layout_communication, recompute_flops
from .fit import layout_fit


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
        w = self.workload
        return stored_params(w.arch, w.layout, w.implementation, w.finetune, self.scenario.param_dtype)


def _rank_view(scenario, workload, rank: RankClass, ledger, unique_total: int) -> RankView:
    shape = rank_shape(scenario, workload, rank)
    rows = state_rows(scenario, ledger, shape, workload.finetune)
    mp = layout_communication(scenario, workload, rank, shape)
    comm = tuple({"data parallel": data_parallel_communication(scenario, workload, shape, stage), **mp}
                 for stage in STAGES)
    stages = stage_results(scenario, rows, rank.count, unique_total, tuple(sum(c.values()) for c in comm))
    peaks = stage_peaks(scenario, workload, stages, shape)
    return RankView(rank, shape, stages, peaks, comm, recompute_flops(workload, rank), rows)


def check_plan(scenario, workload) -> None:
    """FieldError for a plan the frameworks refuse: experts that do not split over ep, an optimizer that cannot step
    one of the trained tensors (states/optimizers.py check_optimizer)."""
    check_experts(workload.layout, workload.arch, scenario.workers)
    w = workload
    check_optimizer(scenario.optimizer, lambda: inventory(w.arch, w.finetune, scenario.param_dtype))


@lru_cache(maxsize=256)
def layout_report(scenario, workload) -> LayoutReport:
    """Every rank class of the workload's layout, and the worst one per ZeRO stage (largest peak)."""
    check_plan(scenario, workload)
    ledger = build_ledger(scenario)
    unique_by_entry = _one_copy(scenario, workload, ledger)
    unique_total = sum(unique_by_entry)
    classes = rank_classes(workload.arch, workload.layout, scenario.workers, workload.implementation,
                           workload.finetune, scenario.param_dtype)
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


@lru_cache(maxsize=512)
def worst_peak_at(scenario, workload, stage: int) -> Tuple[int, StagePeak]:
    """(worst rank class's index, its StagePeak) at one ZeRO stage: layout_report's, without replaying the other
    three stages under the allocator's model (fragmentation_percent None). The rank views, their model states and
    shapes do not depend on the reserve, so they are read from the report at DEFAULT_PERCENT (no replay) and only
    this stage is replayed, per rank class. The fixes and the layout search ask one stage of many plans."""
    if not replays(workload):
        report = layout_report(scenario, workload)
        return report.worst[stage], report.peaks[stage]
    peaks = [stage_peaks(scenario, workload, (v.stages[stage],), v.shape)[0] for v in _unreplayed(scenario, workload)]
    i = max(range(len(peaks)), key=lambda k: (peaks[k].peak_bytes, -k))
    return i, peaks[i]


def floor_above_card(scenario, workload, stage: int) -> bool:
    """Under the allocator's model: whether some rank's peak with no reserve at all (stage_peaks' replay=False
    floor) is above the card, so the plan cannot fit at that stage, replayed or not (no replay needed). False
    without the model."""
    return replays(workload) and any(
        stage_peaks(scenario, workload, (v.stages[stage],), v.shape, replay=False)[0].peak_bytes >
        workload.capacity_bytes for v in _unreplayed(scenario, workload))


def unreplayed_report(scenario, workload) -> LayoutReport:
    """The report at DEFAULT_PERCENT, which replays nothing: its rank views (classes, model states, shapes) and
    host RAM rows are the workload's own, none of them depending on the GPU's allocator reserve."""
    return layout_report(scenario, replace(workload, fragmentation_percent=DEFAULT_PERCENT))


def _unreplayed(scenario, workload) -> Tuple[RankView, ...]:
    return unreplayed_report(scenario, workload).ranks


def fitting_peak_at(scenario, workload, stage: int) -> Optional[Tuple[int, StagePeak]]:
    """worst_peak_at where the plan fits at that stage, else None. Under the allocator's model a plan whose floor
    is above the card (floor_above_card) is refused without a replay: most candidates a search tries are far from
    fitting, and each replay costs a step's events."""
    if floor_above_card(scenario, workload, stage):
        return None
    found = worst_peak_at(scenario, workload, stage)
    return found if found[1].fits else None


def fitting_stages(scenario, workload) -> Tuple[int, ...]:
    """The ZeRO stages at which layout_report(scenario, workload) fits, without the rest of its report
    (parallel/fit.py): every rank has the same capacity, so the worst rank fits exactly when every rank does."""
    check_plan(scenario, workload)
    return layout_fit(scenario, workload).fitting()


class _Precision(NamedTuple):
    """What one copy reads of a scenario: the groups' ledgers, and the convention (FSDP2's per-tensor padding).
    Not the workers, the shard group or offload, so a new worker count finds one copy cached; it stands in for
    the scenario in group_rows (a field read that is not here fails loudly)."""
    param_dtype: str
    grad_dtype: str
    master_dtype: Optional[str]
    grad_accum_dtype: Optional[str]
    optimizer: str
    optimizer_dtype: str
    factored_dim: int
    fallback_optimizer: str
    optimizer_rank: int
    convention: str


_precision_of = attrgetter(*_Precision._fields)


def _one_copy(scenario, workload, ledger) -> Tuple[int, ...]:
    """Bytes of one copy of the whole model per ledger entry, summed over the parameter groups."""
    w = workload
    return _one_copy_of(_Precision._make(_precision_of(scenario)), ledger,
                        stored_holdings(w.arch, w.layout, w.implementation, w.finetune, scenario.param_dtype),
                        w.finetune)


@lru_cache(maxsize=256)     # one copy does not depend on the layout: the layout search asks again for every layout
def _one_copy_of(scenario: _Precision, ledger, holdings, finetune) -> Tuple[int, ...]:
    out = [0] * len(ledger)
    names = [e.name for e in ledger]
    groups = {}
    for h in holdings:
        groups.setdefault(h.group, []).append(h)
    rows = []
    for group, members in groups.items():
        n = sum(h.elements for h in members)
        one = ParamGroup(group, n, n if not group.endswith("frozen") else 0, 1, tuple(members))
        rows += [(group, row) for row in group_rows(scenario, ledger, one, finetune)]
    kept = once_per_optimizer(tuple(row for _, row in rows))
    for (group, _), row in zip(rows, kept):
        base = row.entry.name.split(": ", 1)[1] if group else row.entry.name
        out[names.index(base) if base in names else names.index("parameters")] += row_bytes(row, 0)
    return tuple(out)


def peaks(scenario, workload) -> Tuple[StagePeak, ...]:
    """The worst rank's peak at each ZeRO stage."""
    return layout_report(scenario, workload).peaks


def _worst(candidates) -> Tuple[StagePeak, ...]:
    """Per stage, the largest of each rank's peaks (candidates: one tuple of four peaks per rank)."""
    return tuple(max((c[s] for c in candidates), key=lambda p: p.peak_bytes) for s in STAGES)


def _stage_worst(ranks, replay: bool, over: Optional[int]) -> StagePeak:
    """One stage's worst rank; `ranks`: per rank class, a function of `replay` giving its StagePeak. With `over`
    (bytes) and a replay, the classes' floors come first (no replay) and the classes are replayed from the highest
    floor down, stopping at the first peak above `over`: the plan does not fit there, and a search that asks only
    whether it fits needs no more (that peak is then a lower bound of the worst, above `over`, as a floor above
    the card already is in solve._replayed_or_floor). Below `over`, every class is replayed: the worst exactly."""
    if not replay or over is None:
        return max((peak_of(replay) for peak_of in ranks), key=attrgetter("peak_bytes"))
    floors = sorted(((peak_of(False), peak_of) for peak_of in ranks), key=lambda fp: -fp[0].peak_bytes)
    if floors[0][0].peak_bytes > over:
        return floors[0][0]
    worst = None
    for _floor, peak_of in floors:
        peak = peak_of(True)
        if peak.peak_bytes > over:
            return peak
        worst = peak if worst is None or peak.peak_bytes > worst.peak_bytes else worst
    return worst


def _peaks_with_step(report: LayoutReport, stage: int = None, replay: bool = True, over: Optional[int] = None,
                     **step):
    """The worst rank's peaks with other step fields (micro-batch, sequence length): model states do not depend
    on them, so only each rank's step is recomputed (the numbers layout_report gives for that workload; the
    Workload re-checks the layout). With `stage`, that stage's peak alone (a search that asks one stage at a time
    then replays one step per candidate, not four, under the allocator's model; replay=False: stage_peaks' floor,
    no replay; `over`: _stage_worst's early stop)."""
    s, w = report.scenario, replace(report.workload, **step)
    if stage is not None:
        def rank(v):
            shape = rank_shape(s, w, v.rank)
            return lambda r: stage_peaks(s, w, (v.stages[stage],), shape, r)[0]
        return _stage_worst([rank(v) for v in report.ranks], replay, over)
    return _worst([stage_peaks(s, w, v.stages, rank_shape(s, w, v.rank)) for v in report.ranks])


def peaks_at_micro_batch(report: LayoutReport, micro_batch: int, stage: int = None, replay: bool = True,
                         over: Optional[int] = None):
    """The worst rank's peaks at another micro-batch; with `stage`, that stage's StagePeak alone."""
    return _peaks_with_step(report, stage, replay, over, micro_batch=micro_batch)


def peaks_at_seq_len(report: LayoutReport, seq_len: int, stage: int = None, replay: bool = True,
                     over: Optional[int] = None):
    """The worst rank's peaks at another sequence length; with `stage`, that stage's StagePeak alone."""
    return _peaks_with_step(report, stage, replay, over, seq_len=seq_len)


def peaks_at_workers(report: LayoutReport, workers: int, stage: int = None, replay: bool = True,
                     over: Optional[int] = None):
    """The worst rank's peaks with another data-parallel degree (shard group = all of it): activations do not
    depend on it, so only the model states and what follows the shard divisor are recomputed. With `stage`, that
    stage's StagePeak alone (one replay per rank under the allocator's model, not four; `over`: _stage_worst's
    early stop)."""
    s, w = replace(report.scenario, workers=workers, shard_group=None), report.workload

    def rank(v):
        shape = v.shape._replace(groups=param_groups(s, w, v.rank), nccl=nccl_bytes(s, w))   # its communicators too
        return shape, stage_results(s, state_rows(s, report.ledger, shape, w.finetune), 1, 0)
    ranks = [rank(v) for v in report.ranks]
    if stage is not None:
        return _stage_worst([lambda r, shape=shape, st=stages[stage]: stage_peaks(s, w, (st,), shape, r)[0]
                             for shape, stages in ranks], replay, over)
    return _worst([stage_peaks(s, w, stages, shape, replay) for shape, stages in ranks])


def report_for(scenario, workload=None):
    """The model-state report: pure data parallelism without a workload, every rank of its layout with one."""
    return model_states(scenario) if workload is None else layout_report(scenario, workload)
