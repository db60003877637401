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

from .costs import data_parallel_communication, layout_communication, recompute_flops
from .layout import check_experts
from .finetune import QUANT_TYPES, quantized_storage
from .ledger import LedgerEntry, build_ledger
from .model_states import StageResult, StateRow, gpu_bytes_by_stage, row_bytes, stage_results
from .peak import ParamGroup, StagePeak, StepShape, param_groups, rank_shape, stage_peak_bytes, stage_peaks
from .placement import RankClass, rank_classes, stored_holdings, stored_params
from .scenario import Scenario
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
        w = self.workload
        return stored_params(w.arch, w.layout, w.implementation, w.finetune, self.scenario.param_dtype)


# The scenario fields a ledger is built from (ledger.build_ledger): all that group_ledger reads of the scenario.
_LEDGER_FIELDS = ("param_dtype", "grad_dtype", "master_dtype", "grad_accum_dtype", "optimizer", "optimizer_dtype",
                  "factored_dim")
_ledger_fields = attrgetter(*_LEDGER_FIELDS)     # scenario -> the tuple of those fields


def group_ledger(scenario, ledger, group: str) -> Tuple[LedgerEntry, ...]:
    """The ledger of one parameter group, its entries named after the group. A fixed storage dtype (a router kept
    in fp32, fp32 adapters, a bf16 base) sets the parameters' dtype, and for a trained group its gradients' (where
    they follow the parameter) and, without a master copy, its optimizer state's (torch optimizers keep state in
    the parameter's dtype); one stored at the master's width needs no master copy; a frozen group keeps only its
    parameters: no gradient, no master copy, no optimizer state."""
    if not group:            # the dense, trainable parameters: the scenario's own ledger
        return ledger
    return _group_ledger(_ledger_fields(scenario), ledger, group)


@lru_cache(maxsize=1024)     # keyed by the ledger's fields alone: a new worker count or offload finds it cached
def _group_ledger(precision: tuple, ledger, group: str) -> Tuple[LedgerEntry, ...]:
    parts = group.split(", ") if group else []
    storage = next((p for p in parts if p in DTYPE_BITS), None)
    if "frozen" in parts:
        ledger = tuple(e for e in ledger if e.category == "parameters")
        if storage:
            ledger = tuple(e._replace(dtype=storage, bits=DTYPE_BITS[storage]) for e in ledger)
    elif storage:
        scenario = Scenario(params=1, **dict(zip(_LEDGER_FIELDS, precision)))    # what the fields describe
        changes = {"param_dtype": storage}
        if scenario.grad_dtype == scenario.param_dtype:    # gradients follow their parameter, unless the ledger
            changes["grad_dtype"] = storage                # keeps them wider on purpose (Megatron's fp32 main_grad)
        if scenario.master_dtype is None:
            changes["optimizer_dtype"] = storage
        if storage == "fp32":        # a tensor kept in fp32 never narrows a wider ledger
            changes = {f: v for f, v in changes.items() if DTYPE_BITS[getattr(scenario, f)] < 32}
        # A parameter stored as wide as the master copy is its own master (Megatron's fp32_from_fp32_groups, torch
        # AMP), and its gradient its own accumulator: no second copy of either.
        for f in ("master_dtype", "grad_accum_dtype"):
            if getattr(scenario, f) and DTYPE_BITS[storage] >= DTYPE_BITS[getattr(scenario, f)]:
                changes[f] = None
        ledger = build_ledger(scenario.with_changes(**changes)) if changes else ledger
    return tuple(e._replace(name=f"{group}: {e.name}") for e in ledger) if group else ledger


def group_rows(scenario, ledger, g: ParamGroup, finetune) -> Tuple[StateRow, ...]:
    """One parameter group's ledger rows: its elements per entry, its ZeRO divisor. A quantized base is stored as
    bitsandbytes lays it out, tensor by tensor (finetune.quantized_storage)."""
    quant = next((q for q in QUANT_TYPES if q in g.name.split(", ")), None)
    if quant:
        return tuple(StateRow(entry, n, g.shard) for entry, n in _quantized_entries(g.name, g.holdings, finetune))
    per_tensor = None
    if scenario.convention == "fsdp2" and g.holdings:      # FSDP2 pads each tensor's dim-0 shard
        per_tensor = sum(h.fsdp_shard(g.shard) for h in g.holdings)
    return tuple(StateRow(e, e.elements(g.grad_params if e.category == "gradients" else g.params), g.shard,
                          None if per_tensor is None or (e.category == "gradients" and g.grad_params != g.params)
                          else e.elements(per_tensor))
                 for e in group_ledger(scenario, ledger, g.name))


@lru_cache(maxsize=256)
def _quantized_entries(group: str, holdings: tuple, finetune) -> Tuple[Tuple[LedgerEntry, int], ...]:
    """A quantized group's stored tensors summed over its holdings: (entry, elements), as bitsandbytes lays out
    each weight (cached: solvers ask again for every worker count and micro-batch)."""
    parts: Dict[str, list] = {}
    for h in holdings:
        for name, (dtype, n) in quantized_storage(h.local_elements, h.tensor.shape[0], finetune).items():
            parts.setdefault(name, [dtype, 0])[1] += n * h.instances
    return tuple((LedgerEntry(f"{group}: {name}", "parameters", dtype, "finetune", 1, 1, DTYPE_BITS[dtype]), n)
                 for name, (dtype, n) in parts.items())


def state_rows(scenario, ledger, shape: StepShape, finetune=None) -> Tuple[StateRow, ...]:
    """The ledger applied to each of one rank's parameter groups (gradients where DTensor keeps more of them)."""
    return tuple(row for g in shape.groups for row in group_rows(scenario, ledger, g, finetune))


def _rank_view(scenario, workload, rank: RankClass, ledger, unique_total: int) -> RankView:
    shape = rank_shape(scenario, workload, rank)
    rows = state_rows(scenario, ledger, shape, workload.finetune)
    mp = layout_communication(scenario, workload, rank, shape)
    comm = tuple({"data parallel": data_parallel_communication(scenario, workload, shape, stage), **mp}
                 for stage in STAGES)
    stages = stage_results(scenario, rows, rank.count, unique_total, lambda stage: sum(comm[stage].values()))
    peaks = stage_peaks(scenario, workload, stages, shape)
    return RankView(rank, shape, stages, peaks, comm, recompute_flops(workload, rank), rows)


@lru_cache(maxsize=256)
def layout_report(scenario, workload) -> LayoutReport:
    """Every rank class of the workload's layout, and the worst one per ZeRO stage (largest peak)."""
    check_experts(workload.layout, workload.arch, scenario.workers)
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


def fitting_stages(scenario, workload) -> Tuple[int, ...]:
    """The ZeRO stages at which layout_report(scenario, workload) fits, without the rest of its report (no
    communication, cluster totals or one-copy sums): every rank has the same capacity, so the worst rank fits
    exactly when every rank does. The layout search asks this of settings it may never list."""
    check_experts(workload.layout, workload.arch, scenario.workers)
    ledger = build_ledger(scenario)
    classes = rank_classes(workload.arch, workload.layout, scenario.workers, workload.implementation,
                           workload.finetune, scenario.param_dtype)
    fits = set(STAGES)
    for c in classes:
        shape = rank_shape(scenario, workload, c)
        on_gpu = gpu_bytes_by_stage(scenario, state_rows(scenario, ledger, shape, workload.finetune))
        fits -= {s for s, peak in enumerate(stage_peak_bytes(scenario, workload, on_gpu, shape))
                 if peak > workload.capacity_bytes}
    return tuple(sorted(fits))


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
    for group, members in groups.items():
        n = sum(h.elements for h in members)
        one = ParamGroup(group, n, n if not group.endswith("frozen") else 0, 1, tuple(members))
        for row in group_rows(scenario, ledger, one, finetune):
            base = row.entry.name.split(": ", 1)[1] if group else row.entry.name
            out[names.index(base) if base in names else names.index("parameters")] += row_bytes(row, 0)
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
        candidates.append(stage_peaks(s, w, v.stages, rank_shape(s, w, v.rank)))
    return _worst(candidates)


def peaks_at_workers(report: LayoutReport, workers: int) -> Tuple[StagePeak, ...]:
    """The worst rank's peaks with another data-parallel degree (shard group = all of it): activations do not
    depend on it, so only the model states and what follows the shard divisor are recomputed."""
    s, w = replace(report.scenario, workers=workers, shard_group=None), report.workload
    candidates = []
    for v in report.ranks:
        shape = v.shape._replace(groups=param_groups(s, w, v.rank))
        stages = stage_results(s, state_rows(s, report.ledger, shape, w.finetune), 1, 0)
        candidates.append(stage_peaks(s, w, stages, shape))
    return _worst(candidates)
