"""What one change moves, for compare views: the peak at each view's checked stage and the model states there,
from whole reports of the view before and after it."""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple


class Effect(NamedTuple):
    """What one change moves: the worst rank's peak at each view's checked stage and its model states on the GPU
    there."""
    peak_before: Optional[int]        # None without a workload (a parameter count alone has no peak)
    peak_after: Optional[int]
    states_before: int
    states_after: int

    @property
    def moved_peak_bytes(self) -> Optional[int]:
        if self.peak_before is None or self.peak_after is None:
            return None
        return self.peak_after - self.peak_before

    @property
    def moved_state_bytes(self) -> int:
        return self.states_after - self.states_before


def _stage_bytes(scenario, workload, stage: int) -> Tuple[Optional[int], int]:
    from ..parallel.ranks import report_for
    report = report_for(scenario, workload)
    peak = None if workload is None else report.peaks[stage].peak_bytes
    return peak, report.stages[stage].gpu_bytes          # on the GPU: an offload moves them off it


def change_effect(before: tuple, after: tuple) -> Effect:
    """The bytes a change moves, for compare views: `before` and `after` are (scenario, workload or None, stage)
    as each view checks it. Every number comes from whole reports of the two views."""
    p0, s0 = _stage_bytes(*before)
    p1, s1 = _stage_bytes(*after)
    return Effect(p0, p1, s0, s1)


def effect_dict(effect: Effect) -> dict:
    return {"peak_before_bytes": effect.peak_before, "peak_after_bytes": effect.peak_after,
            "moved_peak_bytes": effect.moved_peak_bytes, "states_before_bytes": effect.states_before,
            "states_after_bytes": effect.states_after, "moved_state_bytes": effect.moved_state_bytes}
