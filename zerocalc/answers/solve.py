"""Inverse questions, answered exactly by search over the peak model (monotone in each unknown): the largest
micro-batch that fits, the longest sequence that fits, the fewest data-parallel workers (and GPUs) for which it
fits, the lowest ZeRO stage that fits, all for the worst rank of the layout as given. Every candidate is evaluated
as a whole scenario: an answer set back as the input reproduces the verdict exactly (the fewest-workers answer once
reused the original worker count for part of the working set, and could name a count that did not fit).

Bounds: each search runs over its field's own range (micro-batch up to 10^6, workers up to 10^7, the sequence up
to 10^8 tokens in steps the layout allows): the micro-batch and workers gallop then bisect, the sequence narrows by
interpolation with a bisection after any step that does not halve the bracket. Each evaluates at most
2 log2(range) + 3 candidates per stage (tests/test_budgets.py counts them), whatever the input.
Under the allocator's model (the default: each candidate replays a step, and the replayed reserve moves in jumps)
each search runs on the smooth peak (the reserve at 5 %, no replay), again with the model's reserve at that answer
added, and then gallops on the model's own peak from there, one stage per candidate: three such searches at most,
the last one, usually 2-4 candidates, replaying. The answer is the model's crossing nearest that guess.
"""

from __future__ import annotations

from math import lcm
from typing import Callable, Dict, NamedTuple, Optional

from ..parallel.ranks import layout_report, peaks_at_micro_batch, peaks_at_seq_len, peaks_at_workers, unreplayed_report
from ..scenario import INT_LIMITS
from ..step.allocator import replays
from ..step.host import host_rows
from ..step.workload import WORKLOAD_LIMITS
from ..tables import STAGES


class Solution(NamedTuple):
    max_micro_batch: Dict[int, int]            # 0: not even a micro-batch of 1 fits
    min_workers: Dict[int, Optional[int]]      # None: no worker count up to the limit fits
    lowest_stage: Optional[int]
    model_parallel: int = 1                    # tp x pp x cp: GPUs per data-parallel worker
    max_seq_len: Optional[Dict[int, int]] = None   # 0: not even the shortest sequence the layout allows fits

    @property
    def min_gpus(self) -> Dict[int, Optional[int]]:
        return {s: None if n is None else n * self.model_parallel for s, n in self.min_workers.items()}


def largest_true(fits: Callable[[int], bool], lo: int, hi: int, guess: int = None) -> int:
    """Largest n in [lo, hi] with fits(n), for fits true up to some point then false; lo - 1 if none.
    Gallops from lo (or from a guess) then bisects: O(log distance) evaluations."""
    if not fits(lo):
        return lo - 1
    good = lo
    if guess is not None and lo < guess <= hi:
        if fits(guess):
            good = guess
        else:
            return _bisect_down(fits, good, guess)
    probe, step = good + 1, 1
    while probe <= hi and fits(probe):
        good, step = probe, step * 2
        probe = good + step
    return _bisect_down(fits, good, min(probe, hi + 1))


def _bisect_down(fits, good: int, bad: int) -> int:
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def _smallest_true(fits: Callable[[int], bool], lo: int, hi: int, guess: int = None) -> Optional[int]:
    """Smallest n in [lo, hi] with fits(n), for fits false up to some point then true; None if none.
    Gallops away from a guess (or up from lo) then bisects: O(log distance) evaluations."""
    if not fits(hi):
        return None
    if guess is None or not lo <= guess <= hi:
        guess = lo
    if fits(guess):
        good, step = guess, 1
        while good - step >= lo and fits(good - step):
            good, step = good - step, step * 2
        bad = max(good - step, lo - 1)             # not fits(bad), or bad below lo
    else:
        bad, step = guess, 1
        while bad + step < hi and not fits(bad + step):
            bad, step = bad + step, step * 2
        good = min(bad + step, hi)
    while good - bad > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def _linear_guess(peak1: int, peak2: int, capacity: int) -> Optional[int]:
    """Where a peak growing linearly in the micro-batch (activations and logits are) meets the capacity."""
    slope = peak2 - peak1
    if slope <= 0:
        return None
    return max(1, 1 + (capacity - peak1) // slope)


def _replayed_or_floor(at, report, value: int, stage: int, capacity: int) -> int:
    """One stage's peak under the allocator's model at another value (at: a ranks.peaks_at_* function), or its
    floor (no reserve, no replay) where that is already above the card, or the first rank class replayed above
    it (ranks._stage_worst): every search asks only whether it fits, and a figure above the card answers that."""
    return at(report, value, stage, True, capacity).peak_bytes


class _Peaks:
    """A search's peaks per (value, stage), cached: `at(report, value, stage)` gives one stage's StagePeak. Under
    the allocator's model, `smooth` gives the same plan's peak with the reserve at DEFAULT_PERCENT (no replay), on
    which a search finds its guess; `model` the model's own, one stage (one replay per rank) per candidate."""

    def __init__(self, scenario, workload, at):
        self.at, self.modelled = at, replays(workload)
        self.cheap = unreplayed_report(scenario, workload) if self.modelled else layout_report(scenario, workload)
        # The rank views' model states and shapes do not depend on the reserve: the model's own peaks are asked
        # of the cheap report under the workload's model (only the stages asked replay, not all four up front).
        self.base = self.cheap._replace(workload=workload)
        self.seen: Dict[tuple, int] = {}
        self.capacity = workload.capacity_bytes

    def smooth(self, n: int, s: int) -> int:
        if (n, s, 0) not in self.seen:
            peaks = self.at(self.cheap, n)                     # every stage at once: no replay
            self.seen.update(((n, t, 0), p.peak_bytes) for t, p in enumerate(peaks))
        return self.seen[n, s, 0]

    def model(self, n: int, s: int) -> int:
        """The model's peak where it may fit, else its floor (_replayed_or_floor)."""
        if not self.modelled:
            return self.smooth(n, s)
        if (n, s, 1) not in self.seen:
            self.seen[n, s, 1] = _replayed_or_floor(self.at, self.base, n, s, self.capacity)
        return self.seen[n, s, 1]

    def moved(self, n: Optional[int], s: int) -> int:
        """The model's reserve beyond the smooth one at n (0 without the model or an n)."""
        return self.model(n, s) - self.smooth(n, s) if self.modelled and n is not None else 0


def max_micro_batch(scenario, workload, stages=STAGES) -> Dict[int, int]:
    """Largest micro-batch for which each of `stages` fits. Under the allocator's model the answer is found on the
    smooth peak, moved by the model's reserve there, then galloped to on the model's own peak (a few replays)."""
    p = _Peaks(scenario, workload, peaks_at_micro_batch)
    hi = WORKLOAD_LIMITS["micro_batch"][1]
    out = {}
    for s in stages:
        guess = _linear_guess(p.smooth(1, s), p.smooth(2, s), p.capacity)
        near = largest_true(lambda b, s=s: p.smooth(b, s) <= p.capacity, 1, hi, guess)
        if p.modelled:
            moved = p.moved(max(1, near), s)
            guess = largest_true(lambda b, s=s: p.smooth(b, s) + moved <= p.capacity, 1, hi, near)
            near = largest_true(lambda b, s=s: p.model(b, s) <= p.capacity, 1, hi, guess)
        out[s] = near
    return out


def seq_len_step(workload) -> int:
    """The sequence lengths the layout allows are multiples of this (zerocalc.layout.check_against): 2 x cp under
    context parallelism (causal load balancing), cp x tp with sequence parallelism."""
    lay = workload.layout
    step = 2 * lay.cp if lay.cp > 1 else 1
    if lay.sequence_parallel and lay.tp > 1:
        step = lcm(step, lay.cp * lay.tp)
    return step


def _estimate(seen: Dict[int, int], good: int, bad: int, capacity: int) -> int:
    """Where the peak meets the capacity between good and bad: on the parabola through good, bad and the nearest
    other point evaluated (a step's bytes are at most quadratic in the sequence: eager attention's scores), else
    on the line through good and bad."""
    pg, pb = seen[good], seen[bad]
    linear = good + int((capacity - pg) * (bad - good) / (pb - pg)) if pb > pg else (good + bad) // 2
    others = sorted((k for k in seen if k not in (good, bad)), key=lambda k: min(abs(k - good), abs(k - bad)))
    if not others:
        return linear
    (x1, y1), (x2, y2), (x3, y3) = (good, pg), (bad, pb), (others[0], seen[others[0]])
    d = (x1 - x2) * (x1 - x3) * (x2 - x3)
    a = (x3 * (y2 - y1) + x2 * (y1 - y3) + x1 * (y3 - y2)) / d
    b = (x3 * x3 * (y1 - y2) + x2 * x2 * (y3 - y1) + x1 * x1 * (y2 - y3)) / d
    c = y1 - a * x1 * x1 - b * x1 - capacity
    if abs(a) * (bad - good) ** 2 < 1e-9 * max(1, abs(pb - pg)):
        return linear
    disc = b * b - 4 * a * c
    if disc < 0:
        return linear
    roots = [(-b + sign * disc ** 0.5) / (2 * a) for sign in (1, -1)]
    inside = [r for r in roots if good <= r <= bad]
    return int(inside[0]) if inside else linear


def interpolated_largest(peak: Callable[[int], int], capacity: int, lo: int, hi: int, start: int) -> int:
    """Largest k in [lo, hi] with peak(k) <= capacity, for peak non-decreasing in k; lo - 1 if none. Starts at
    `start`, then narrows the bracket by interpolation (_estimate), probing each estimate's neighbour so that an
    exact estimate ends the search; a step that does not halve the bracket is followed by a bisection, so the
    evaluations stay O(log(hi - lo))."""
    seen: Dict[int, int] = {}

    def p(k: int) -> int:
        if k not in seen:
            seen[k] = peak(k)
        return seen[k]
    if p(lo) > capacity:
        return lo - 1
    if p(hi) <= capacity:
        return hi
    good, bad, halve, first = lo, hi, False, True
    while bad - good > 1:
        width = bad - good
        if first and good < start < bad:
            est = start
        elif halve:
            est = (good + bad) // 2
        else:
            est = min(bad - 1, max(good + 1, _estimate(seen, good, bad, capacity)))
        first = False
        if p(est) <= capacity:
            good = est
            if est + 1 < bad and p(est + 1) > capacity:
                bad = est + 1
        else:
            bad = est
            if est - 1 > good and p(est - 1) <= capacity:
                good = est - 1
        halve = not halve and bad - good > width // 2
    return good


def max_seq_len(scenario, workload) -> Dict[int, int]:
    """Longest sequence (tokens, a multiple of seq_len_step) for which each stage fits, everything else held."""
    step = seq_len_step(workload)
    # one stage per candidate: each stage's search has its own candidates (under the allocator's model each
    # stage's peak replays a step). Under the model the rank views come from the report that replays nothing (their
    # model states and shapes do not depend on the reserve, as in _Peaks), so the search replays only what it asks
    # and needs no replayed report first (a worker process asked for this alone has none cached).
    if replays(workload):
        base, cache = unreplayed_report(scenario, workload)._replace(workload=workload), {}
    else:
        base = layout_report(scenario, workload)
        cache: Dict[tuple, int] = {(workload.seq_len // step, p.stage): p.peak_bytes for p in base.peaks}

    def peak(k: int, s: int) -> int:          # under the model, a floor above the card stands for the peak
        if (k, s) not in cache:
            cache[k, s] = _replayed_or_floor(peaks_at_seq_len, base, k * step, s, capacity) if replays(workload) \
                else peaks_at_seq_len(base, k * step, s).peak_bytes
        return cache[k, s]

    hi, start, capacity = WORKLOAD_LIMITS["seq_len"][1] // step, workload.seq_len // step, workload.capacity_bytes
    lo = workload.vision_tokens.text_tokens // step + 1       # a sample's images take their tokens of any sequence
    if replays(workload):
        found = {s: _modelled_largest(lambda k, s=s: peak(k, s), scenario, workload, s, lo, hi, start)
                 for s in STAGES}
    else:
        found = {s: interpolated_largest(lambda k, s=s: peak(k, s), capacity, lo, hi, start) for s in STAGES}
    return {s: step * k if k >= lo else 0 for s, k in found.items()}


def _modelled_largest(peak: Callable[[int], int], scenario, workload, stage: int, lo: int, hi: int,
                      start: int) -> int:
    """max_seq_len for one stage under the allocator's model, whose replayed reserve moves in jumps (a tensor
    crossing into another segment class moves it by a GiB), so interpolation on it takes 35-80 replays where a
    smooth peak takes 8. The answer is found on the smooth peak with the reserve at 5 % (no replay), moved by the
    model's reserve there over the slope (then along the secant through the model's two peaks where that moves it
    little), then galloped to from that guess on the model's own peak: about 2
    log2(distance) + 2 replays, at most 2 (2 log2(range) + 3) + 2 evaluations in all. The peak is not monotone
    everywhere under the model (a few MiB down at places): the answer is the crossing nearest the guess, a
    length that fits one step below a length that does not."""
    step, capacity = seq_len_step(workload), workload.capacity_bytes
    cheap_base = unreplayed_report(scenario, workload)
    seen: Dict[int, int] = {}

    def p5(k: int) -> int:
        if k not in seen:
            seen[k] = peaks_at_seq_len(cheap_base, k * step, stage).peak_bytes
        return seen[k]
    near = interpolated_largest(p5, capacity, lo, hi, start)     # lo: above a sample's image tokens
    if not lo <= near < hi:
        near = min(hi, max(lo, near))
        return _crossing_from(lambda k: peak(k) <= capacity, lo, hi, near)
    slope = max(1, p5(near + 1) - p5(near))
    guess = min(hi, max(lo, near - (peak(near) - p5(near)) // slope))
    if peak(guess) > capacity and guess - (peak(guess) - capacity) // slope <= lo:
        guess = lo        # still over by more than the slope leaves down to the shortest length: ask that first
    elif (peak(guess) - peak(near)) * (guess - near) > 0:
        # the secant through the model's own two peaks; taken where it moves the guess by at most half as far as
        # the reserve moved it (a smooth stretch; across a jump of the reserve the line points far off)
        secant = guess + (capacity - peak(guess)) * (guess - near) // (peak(guess) - peak(near))
        if 2 * abs(secant - guess) <= abs(guess - near):
            guess = min(hi, max(lo, secant))
    return _crossing_from(lambda k: peak(k) <= capacity, lo, hi, guess)     # (one replay where none fits)


def _crossing_from(fits: Callable[[int], bool], lo: int, hi: int, guess: int) -> int:
    """Largest n in [lo, hi] with fits(n), for fits true up to some point then false, galloping from `guess`
    up or down then bisecting: O(log |answer - guess|) evaluations; lo - 1 if none. Each gallop probe is the
    roundest length (most trailing zero bits) of its window, and the bracket's first probe is the length just above
    its fitting end: under the allocator's model the peak jumps where a length's tensors cross a block size (2 MiB
    rounding), just above a round length, so the crossing is often found there in one probe (tests/
    test_seq_len_model.py counts them)."""
    guess = min(hi, max(lo, guess))
    if fits(guess):
        good, j = guess, 0
        while good < hi:
            j += 1
            top = min(hi, guess + (1 << j) - 1)          # windows end at guess + 1, + 3, + 7, ...
            if top > good:
                probe = _roundest(good + 1, top)
                if not fits(probe):
                    return _bisect_round(fits, good, probe)
                good = probe
        return good
    bad, j = guess, 0
    while bad > lo:
        j += 1
        bottom = max(lo, guess - (1 << j) + 1)
        if bottom < bad:
            probe = _roundest(bottom, bad - 1)
            if fits(probe):
                return _bisect_round(fits, probe, bad)
            bad = probe
    return lo - 1


def _roundest(lo: int, hi: int) -> int:
    """The number in [lo, hi] (lo <= hi) with the most trailing zero bits."""
    bit = 1 << hi.bit_length()
    while bit > 1 and hi - hi % bit < lo:
        bit >>= 1
    return hi - hi % bit


def _bisect_round(fits: Callable[[int], bool], good: int, bad: int) -> int:
    """_bisect_down from fits(good) and not fits(bad), good + 1 probed first."""
    if bad - good > 1:
        if not fits(good + 1):
            return good
        good += 1
    return _bisect_down(fits, good, bad)


def min_workers(scenario, workload, stages=STAGES) -> Dict[int, Optional[int]]:
    """Fewest data-parallel workers (shard group = all of them) for which each of `stages` fits, the layout kept.
    Under the allocator's model: found on the smooth peak, moved by the model's reserve, then on the model's."""
    p = _Peaks(scenario, workload, peaks_at_workers)
    hi = INT_LIMITS["workers"][1]
    out = {}
    for s in stages:
        one, two = p.smooth(1, s), p.smooth(2, s)
        # The sharded part of the peak falls as 1 / n: peak(n) ~ fixed + sharded / n, fitted at n = 1 and 2.
        sharded = 2 * (one - two)
        fixed = one - sharded
        room = p.capacity - fixed
        guess = -(-sharded // room) if sharded > 0 and room > 0 else None
        near = _smallest_true(lambda n, s=s: p.smooth(n, s) <= p.capacity, 1, hi, guess)
        if p.modelled:
            moved = p.moved(near or hi, s)
            guess = _smallest_true(lambda n, s=s: p.smooth(n, s) + moved <= p.capacity, 1, hi, near)
            for _ in range(2):       # the model's reserve at the guess moves it again (the peak falls slowly with
                if guess is None:    # many workers, so one move can leave it hundreds of workers short)
                    break
                moved, before = p.moved(guess, s), guess
                guess = _smallest_true(lambda n, s=s: p.smooth(n, s) + moved <= p.capacity, 1, hi, guess)
                if guess == before:
                    break
            fits = lambda n, s=s: p.model(n, s) <= p.capacity              # noqa: E731
            if guess is not None:
                fits(guess)
            known = {n: v <= p.capacity for (n, t, m), v in p.seen.items() if t == s and m == 1}
            good = min((n for n, ok in known.items() if ok), default=None)
            bad = max((n for n, ok in known.items() if not ok and good is not None and n < good), default=None)
            # a fitting and a failing count already replayed bracket a crossing: gallop down to it from the fitting
            # one, which the moved guesses leave near it (a bisection from a far failing count took 8 replays where
            # the crossing was 1 below; Gemma-3-27B over 8 workers, ZeRO-3: 201 of the bracket 56..202)
            near = _smallest_true(fits, bad + 1, good, good) if bad is not None else _smallest_true(fits, 1, hi,
                                                                                                  guess)
        out[s] = near
    return out


def lowest_stage(scenario, workload) -> Optional[int]:
    """The lowest stage whose verdict is "fits" (answers/verdict.py): its GPU peak and, where the plan gives it, the
    node's host RAM (issue 33: the CLI said "lowest stage that fits: 1" beside a verdict failing every stage on it)."""
    report = layout_report(scenario, workload)
    host = {r["stage"]: r.get("fits_host") for r in host_rows(report)}
    fitting = [p.stage for p in report.peaks if p.fits and host.get(p.stage) is not False]
    return min(fitting) if fitting else None


def solve(scenario, workload, sequences: bool = True) -> Solution:
    """Every answer; `sequences=False` leaves out the longest sequence (max_seq_len None), the costliest search."""
    return Solution(max_micro_batch(scenario, workload), min_workers(scenario, workload),
                    lowest_stage(scenario, workload), workload.layout.model_parallel,
                    max_seq_len(scenario, workload) if sequences else None)
