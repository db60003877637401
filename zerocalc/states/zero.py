"""Persistent model state per worker for ZeRO stages 0-3, cluster totals, redundancy and communication.

The one loop of the seed's example, over ledger entries instead of three fixed categories: an entry is split
across the shard group when its category is partitioned at that stage (tables.PARTITIONED), rounded up to whole
elements per worker, and placed on the GPU unless an offload switch moves that partitioned shard off it.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Dict, NamedTuple, Optional, Tuple

from ..tables import CATEGORIES, COMM_TERMS, DTYPE_BITS, OFFLOADED_CATEGORIES, PARTITIONED, STAGES
from .ledger import LedgerEntry, build_ledger


class StageResult(NamedTuple):
    stage: int
    per_worker_by_category: Dict[str, int]    # bytes, wherever they live (GPU, CPU or NVMe)
    per_worker_by_entry: Tuple[int, ...]      # bytes, aligned with the report's ledger
    entry_location: Tuple[str, ...]           # "gpu" | "cpu" | "nvme", aligned with the ledger
    per_worker_total: int
    gpu_bytes: int
    cpu_bytes: int
    nvme_bytes: int
    cluster_total: int                        # workers x per-worker total
    unique_total: int                         # one copy of every entry
    communication_bytes: int                  # per worker per step, ZeRO paper section 7

    @property
    def redundant_bytes(self) -> int:
        return self.cluster_total - self.unique_total

    @property
    def redundancy_factor(self) -> Fraction:
        return Fraction(self.cluster_total, self.unique_total)


class ModelStatesReport(NamedTuple):
    scenario: object
    ledger: Tuple[LedgerEntry, ...]
    unique_by_entry: Tuple[int, ...]          # bytes of one full copy of each entry
    stages: Tuple[StageResult, ...]

    @property
    def unique_total(self) -> int:
        return sum(self.unique_by_entry)

    def stage(self, n: int) -> StageResult:
        return self.stages[n]


def _placement(scenario, stage: int) -> Dict[str, str]:
    """Category -> where a worker keeps it at this stage (a shared dict: read it, never change it)."""
    return _placement_of(scenario.offload_optimizer, scenario.offload_params, stage)


@lru_cache(maxsize=64)      # a pure function of its three arguments, which take few values
def _placement_of(offload_optimizer: str, offload_params: str, stage: int) -> Dict[str, str]:
    where = {c: "gpu" for c in CATEGORIES}
    for switch, target in (("offload_optimizer", offload_optimizer), ("offload_params", offload_params)):
        if target != "none":
            for category in OFFLOADED_CATEGORIES[switch] & PARTITIONED[stage]:
                where[category] = target
    return where


# The tensors each stage communicates at every micro-batch rather than once per step (communication_bytes).
_PER_MICRO_BATCH = {0: (), 1: (), 2: ("gradients",), 3: ("gradients", "parameters")}


def communication_bytes(scenario, stage: int, params: int = None, ranks: int = None, micro_batches: int = 1) -> int:
    """Bytes one worker sends per step for data parallelism: ZeRO paper section 7 (2 Psi at stages 0-2, 3 Psi at
    stage 3), in each tensor's communicated dtype, over `params` held (default: all) among `ranks` data-parallel
    peers (default: the workers). With gradient accumulation, stages 2-3 reduce-scatter gradients (and stage 3
    gathers parameters) at every micro-batch: their gradients and parameters are partitioned, so nothing
    accumulates unreduced (DeepSpeed stage_1_and_2.py reduces each micro-step's gradients into the partition when
    partition_gradients is on; FSDP reduce-scatters per backward); stages 0-1 accumulate locally and reduce once."""
    params = scenario.params if params is None else params
    ranks = scenario.workers if ranks is None else ranks
    if ranks == 1:
        return 0
    width = {
        "gradients": DTYPE_BITS[scenario.comm_dtype or scenario.grad_dtype],
        "parameters": DTYPE_BITS[scenario.comm_dtype or scenario.param_dtype],
    }
    per_micro = _PER_MICRO_BATCH[stage]
    return sum(times * (micro_batches if tensor in per_micro else 1) * -(-params * width[tensor] // 8)
               for tensor, times in COMM_TERMS[stage])


class StateRow(NamedTuple):
    """One ledger entry applied to one group of parameters: its elements on one rank and its ZeRO divisor."""
    entry: LedgerEntry
    elements: int       # before ZeRO sharding (whole elements of this entry for the group's parameters)
    divisor: int        # the group's shard group at stages that partition this entry's category
    sharded: Optional[int] = None   # elements once sharded, when a framework shards tensor by tensor (FSDP2)
    on_gpu: bool = False    # kept on the GPU whatever the offload switches say: a tensor the framework neither
                            # shards nor offloads (bitsandbytes' quantization state under DeepSpeed and FSDP1)


def row_sizes(row: StateRow) -> Tuple[int, int]:
    """One rank's bytes of a ledger row kept whole, and split over its divisor (at stages that partition it)."""
    entry, elements, divisor, sharded = row.entry, row.elements, row.divisor, row.sharded
    return entry.nbytes(elements), entry.nbytes(-(-elements // divisor) if sharded is None else sharded)


def row_bytes(row: StateRow, stage: int) -> int:
    """One rank's bytes of a ledger row at a stage: split over its divisor when the stage partitions it."""
    whole, split = row_sizes(row)
    return split if row.entry.category in PARTITIONED[stage] else whole


def gpu_bytes_by_stage(scenario, rows) -> Tuple[int, ...]:
    """Per stage, stage_results' gpu_bytes alone: the rows' bytes a rank keeps on its GPU."""
    sizes = [(row.entry.category, *row_sizes(row), _paged(row), row.on_gpu) for row in rows]
    out = []
    for stage in STAGES:
        where, partitioned = _placement(scenario, stage), PARTITIONED[stage]
        out.append(sum(split if category in partitioned else whole for category, whole, split, paged, on_gpu in sizes
                       if (on_gpu or where[category] == "gpu") and not paged))
    return tuple(out)


def _paged(row: StateRow) -> bool:
    """A state in CUDA managed memory (bitsandbytes' paged optimizers): on the host until the step touches it,
    so counted as host memory here and paged in one tensor at a time at the step (step/optimizer_step.py)."""
    return row.entry.state is not None and row.entry.state.place == "unified"


def stage_results(scenario, rows, copies: int, unique_total: int, comm=(0, 0, 0, 0)) -> Tuple[StageResult, ...]:
    """The seed's loop over (entry, elements, divisor) rows: per stage, bytes per rank by category and entry,
    where they live, and `copies` ranks' worth for the cluster (unique_total: one copy of everything). comm: the
    communication bytes per step at each stage, worked out by the caller (no callback into a higher layer)."""
    sizes = [(row.entry.category, *row_sizes(row), _paged(row), row.on_gpu) for row in rows]   # once for 4 stages
    stages = []
    for stage in STAGES:
        where, partitioned = _placement(scenario, stage), PARTITIONED[stage]
        by_category = dict.fromkeys(CATEGORIES, 0)
        by_location = {"gpu": 0, "cpu": 0, "nvme": 0}
        by_entry, locations = [], []
        for category, whole, split, paged, on_gpu in sizes:
            nbytes = split if category in partitioned else whole
            place = "gpu" if on_gpu else "cpu" if paged and where[category] == "gpu" else where[category]
            by_entry.append(nbytes)
            locations.append(place)
            by_category[category] += nbytes
            by_location[place] += nbytes
        total = sum(by_entry)
        stages.append(StageResult(stage, by_category, tuple(by_entry), tuple(locations), total,
                                  by_location["gpu"], by_location["cpu"], by_location["nvme"],
                                  total * copies, unique_total, comm[stage]))
    return tuple(stages)


def model_states(scenario) -> ModelStatesReport:
    """Pure data parallelism over scenario.params: every worker holds the same bytes."""
    ledger = build_ledger(scenario)
    rows = [StateRow(e, e.elements(scenario.params), scenario.group) for e in ledger]
    unique_by_entry = tuple(row.entry.nbytes(row.elements) for row in rows)
    stages = stage_results(scenario, rows, scenario.workers, sum(unique_by_entry),
                           tuple(communication_bytes(scenario, stage) for stage in STAGES))
    return ModelStatesReport(scenario, ledger, unique_by_entry, stages)


def workers_per_node(scenario) -> int:
    """Workers sharing one node's host memory (the fullest node)."""
    return min(scenario.gpus_per_node, scenario.workers)
