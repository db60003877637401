"""What a layout search asks of one plan: each rank class's peak per ZeRO stage, and for a stage that fits, what a
Plan lists (the worst rank, its communication, recompute and overhead). The peaks are step/peak.py's
stage_peak_bytes: layout_report's own figures, without the phases' named parts, the per-stage state results, the
cluster totals or the one-copy sums, which a search never reads. About half of layout_report's work per plan, and a
search over 4,096 GPUs asks about 1,500 plans (tests/budget_cases.py); the communication is worked out only for
the stages a plan is listed at.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional, Tuple

from ..model.placement import RankClass, rank_classes
from ..states.groups import group_state_rows
from ..states.ledger import build_ledger
from ..states.zero import gpu_bytes_by_stage
from ..step.peak import stage_peak_bytes
from ..step.shape import StepShape, rank_shape
from ..tables import STAGES
from .costs import data_parallel_communication, layout_communication, recompute_flops, time_overhead


class RankFit(NamedTuple):
    rank: RankClass
    shape: StepShape
    on_gpu: Tuple[int, ...]      # model-state bytes on the GPU per ZeRO stage


class LayoutFit:
    """The rank classes of one plan, with each one's peak per stage worked out when a stage is first asked (a
    search asks most plans about one or two stages): layout_report's ranks[i].peaks[s].peak_bytes."""

    def __init__(self, scenario, workload, ranks: Tuple[RankFit, ...]):
        self.scenario, self.workload, self.ranks = scenario, workload, ranks
        self._peaks = [{} for _ in ranks]          # per rank class: stage -> peak bytes

    def ask(self, stages) -> "LayoutFit":
        """Work out the peaks of these stages not asked yet, in one pass per rank class."""
        for r, known in zip(self.ranks, self._peaks):
            missing = tuple(s for s in stages if s not in known)
            if missing:
                known.update(zip(missing, stage_peak_bytes(self.scenario, self.workload, r.on_gpu, r.shape,
                                                           missing)))
        return self

    def worst(self, stage: int) -> int:
        """The worst rank class's index at a stage: the largest peak, the first on a tie (as layout_report)."""
        peaks = [known[stage] for known in self.ask((stage,))._peaks]
        return max(range(len(peaks)), key=lambda k: (peaks[k], -k))

    def peak(self, stage: int) -> int:
        return max(known[stage] for known in self.ask((stage,))._peaks)

    def fits(self, stage: int) -> bool:
        return self.peak(stage) <= self.workload.capacity_bytes

    def fitting(self) -> Tuple[int, ...]:
        self.ask(STAGES)
        return tuple(s for s in STAGES if self.fits(s))

    def communication(self, stage: int) -> int:
        """The most bytes one rank sends per step at a stage: ZeRO's, and tensor / pipeline / context / expert
        parallelism's (layout_report's sum of a rank view's communication)."""
        s, w = self.scenario, self.workload
        return max(data_parallel_communication(s, w, r.shape, stage) +
                   sum(layout_communication(s, w, r.rank, r.shape).values()) for r in self.ranks)

    def costs(self) -> Tuple[int, float]:
        """(the most recomputed forward FLOPs of a rank, the largest time overhead): the same for every stage."""
        flops = [recompute_flops(self.workload, r.rank) for r in self.ranks]
        return max(flops), max(time_overhead(self.workload, r.rank, f) for r, f in zip(self.ranks, flops))


def layout_fit(scenario, workload, shapes: Optional[Tuple[Tuple[RankClass, StepShape], ...]] = None) -> LayoutFit:
    """Each rank class's peak per stage, at the workload's own reserve (a percentage: the allocator's model needs
    the phases' parts, and then stage_peak_bytes is stage_peaks' figure). `shapes`: each rank class with its step
    shape (step_shapes), where the caller has them: a search's offload variants share them, since a rank's step
    does not depend on where the optimizer or parameters live (rank_shape reads no offload setting). Callers check
    the plan first (ranks.check_plan)."""
    return LayoutFit(scenario, workload, tuple(RankFit(rank, shape, _on_gpu(scenario, shape.groups, workload.finetune))
                                               for rank, shape in shapes or step_shapes(scenario, workload)))


@lru_cache(maxsize=1024)      # the same at every recompute setting a search tries (shapes share their groups)
def _on_gpu(scenario, groups, finetune) -> Tuple[int, ...]:
    """Per stage, the model-state bytes a rank with these parameter groups keeps on its GPU."""
    return gpu_bytes_by_stage(scenario, group_state_rows(scenario, build_ledger(scenario), groups, finetune))


def step_shapes(scenario, workload) -> Tuple[Tuple[RankClass, StepShape], ...]:
    """Each rank class of the workload's layout with its step shape."""
    classes = rank_classes(workload.arch, workload.layout, scenario.workers, workload.implementation,
                           workload.finetune, scenario.param_dtype)
    return tuple((c, rank_shape(scenario, workload, c)) for c in classes)


def states_floor(scenario, workload, shapes) -> Tuple[int, ...]:
    """Per stage, the most model-state bytes a rank class keeps on its GPU (the shapes' groups: every recompute
    setting has the same): a floor under the peak at every recompute setting, since each phase of the step holds
    the model states (the optimizer step's at least). With the scenario's most offloaded setting, a floor under
    every offload setting too. Not with the optimizer in backward (its step drops the gradients' bytes)."""
    on_gpu = [_on_gpu(scenario, shape.groups, workload.finetune) for _, shape in shapes]
    return tuple(max(b[s] for b in on_gpu) for s in STAGES)
