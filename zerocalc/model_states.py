"""Persistent model state per worker for ZeRO stages 0-3, cluster totals, redundancy and communication.

The one loop of the seed's example, over ledger entries instead of three fixed categories: an entry is split
across the shard group when its category is partitioned at that stage (tables.PARTITIONED), rounded up to whole
elements per worker, and placed on the GPU unless an offload switch moves that partitioned shard off it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Dict, NamedTuple, Tuple

from .ledger import LedgerEntry, build_ledger
from .tables import CATEGORIES, COMM_TERMS, DTYPE_BITS, OFFLOADED_CATEGORIES, PARTITIONED, STAGES


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
    """Category -> where a worker keeps it at this stage."""
    where = {c: "gpu" for c in CATEGORIES}
    for switch in ("offload_optimizer", "offload_params"):
        target = getattr(scenario, switch)
        if target != "none":
            for category in OFFLOADED_CATEGORIES[switch] & PARTITIONED[stage]:
                where[category] = target
    return where


def communication_bytes(scenario, stage: int) -> int:
    """Bytes one worker sends per step: ZeRO paper section 7 (2 Psi at stages 0-2, 3 Psi at stage 3)."""
    if scenario.workers == 1:
        return 0
    width = {
        "gradients": DTYPE_BITS[scenario.comm_dtype or scenario.grad_dtype],
        "parameters": DTYPE_BITS[scenario.comm_dtype or scenario.param_dtype],
    }
    return sum(times * -(-scenario.params * width[tensor] // 8) for tensor, times in COMM_TERMS[stage])


def model_states(scenario) -> ModelStatesReport:
    ledger = build_ledger(scenario)
    params, workers, group = scenario.params, scenario.workers, scenario.group
    full_elements = [e.elements(params) for e in ledger]
    unique_by_entry = tuple(e.nbytes(n) for e, n in zip(ledger, full_elements))
    unique_total = sum(unique_by_entry)

    stages = []
    for stage in STAGES:
        partitioned = PARTITIONED[stage]
        where = _placement(scenario, stage)
        by_category = dict.fromkeys(CATEGORIES, 0)
        by_location = {"gpu": 0, "cpu": 0, "nvme": 0}
        by_entry, locations = [], []
        for entry, elements in zip(ledger, full_elements):
            if entry.category in partitioned:
                elements = -(-elements // group)
            nbytes = entry.nbytes(elements)
            by_entry.append(nbytes)
            locations.append(where[entry.category])
            by_category[entry.category] += nbytes
            by_location[where[entry.category]] += nbytes
        total = sum(by_entry)
        stages.append(StageResult(stage, by_category, tuple(by_entry), tuple(locations), total,
                                  by_location["gpu"], by_location["cpu"], by_location["nvme"],
                                  total * workers, unique_total, communication_bytes(scenario, stage)))
    return ModelStatesReport(scenario, ledger, unique_by_entry, tuple(stages))


def workers_per_node(scenario) -> int:
    """Workers sharing one node's host memory (the fullest node)."""
    return min(scenario.gpus_per_node, scenario.workers)
