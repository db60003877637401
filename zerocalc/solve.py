"""Inverse questions, answered exactly by search over the peak model (it is monotone in each unknown):
the largest micro-batch that fits, the fewest workers for which it fits, the lowest ZeRO stage that fits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, NamedTuple, Optional

from .model_states import model_states
from .peak import peaks, stage_peak, step_shape
from .scenario import INT_LIMITS
from .tables import STAGES
from .workload import WORKLOAD_LIMITS


class Solution(NamedTuple):
    max_micro_batch: Dict[int, int]            # 0: not even a micro-batch of 1 fits
    min_workers: Dict[int, Optional[int]]      # None: no worker count up to the limit fits
    lowest_stage: Optional[int]


def _largest_true(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """Largest n in [lo, hi] with fits(n), for fits true up to some point then false; lo - 1 if none.
    Gallops (lo + 1, lo + 3, lo + 7, ...) then bisects: O(log answer) evaluations."""
    if not fits(lo):
        return lo - 1
    good, probe = lo, lo + 1
    while probe <= hi and fits(probe):
        good, probe = probe, probe + (probe - lo) + 1
    bad = min(probe, hi + 1)                       # fits(good) and not fits(bad) (or bad beyond hi)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def _smallest_true(fits: Callable[[int], bool], lo: int, hi: int) -> Optional[int]:
    """Smallest n in [lo, hi] with fits(n), for fits false up to some point then true; None if none."""
    if not fits(hi):
        return None
    bad, probe = lo - 1, lo
    while probe < hi and not fits(probe):
        bad, probe = probe, probe + (probe - lo) + 1
    good = min(probe, hi)                          # fits(good) and not fits(bad) (or bad below lo)
    while good - bad > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def max_micro_batch(scenario, workload, report=None) -> Dict[int, int]:
    report = report or model_states(scenario)
    cache: Dict[int, tuple] = {}

    def shaped(b: int):
        if b not in cache:
            w = replace(workload, micro_batch=b)
            cache[b] = (w, step_shape(scenario, w))
        return cache[b]

    def fits(stage: int) -> Callable[[int], bool]:
        return lambda b: stage_peak(scenario, shaped(b)[0], report.stage(stage), shaped(b)[1]).fits

    return {s: _largest_true(fits(s), 1, WORKLOAD_LIMITS["micro_batch"][1]) for s in STAGES}


def min_workers(scenario, workload) -> Dict[int, Optional[int]]:
    """Fewest workers (shard group = all workers) for which each stage fits."""
    shape = step_shape(scenario, workload)
    cache: Dict[int, object] = {}

    def report(n: int):
        if n not in cache:
            cache[n] = model_states(replace(scenario, workers=n, shard_group=None))
        return cache[n]

    def fits(stage: int) -> Callable[[int], bool]:
        return lambda n: stage_peak(scenario, workload, report(n).stage(stage), shape).fits

    return {s: _smallest_true(fits(s), 1, INT_LIMITS["workers"][1]) for s in STAGES}


def lowest_stage(scenario, workload, report=None) -> Optional[int]:
    fitting = [p.stage for p in peaks(scenario, workload, report or model_states(scenario)) if p.fits]
    return min(fitting) if fitting else None


def solve(scenario, workload, report=None) -> Solution:
    report = report or model_states(scenario)
    return Solution(max_micro_batch(scenario, workload, report), min_workers(scenario, workload),
                    lowest_stage(scenario, workload, report))
