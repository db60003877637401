"""Planning questions over an RL plan, each answered by building whole plans and asking rl_phases (no shortcut that
could drift from the report):
- the longest response that fits: every phase fits and the engine starts (max_model_len = prompt + response);
- the largest group size whose step of rollouts runs in one wave: every engine holds its share of the step's
  sequences at the longest length at once (no queuing, no preemption). The GPU peaks do not grow with the group:
  the updates and scoring passes run fixed micro-batches (verl ppo_micro_batch_size_per_gpu, TRL
  per_device_train_batch_size), so the engine's KV cache is what bounds it;
- the lowest gpu_memory_utilization (in hundredths, as users write it) whose KV cache still holds one engine's
  share of a step at the longest length (at most max_num_seqs of them), and the highest at which every phase still
  fits and the engine still starts (issue 33: the engine's range, not one end of it);
- colocated against split for the same GPUs: the splits of them into rollout and training GPUs (all of them on a
  few GPUs, MAX_SPLITS evenly spaced ones on many), each plan's verdict beside the colocated one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..scenario import FieldError
from .models import refit
from .phases import rl_phases
from .plan import RLPlan

MAX_RESPONSE = 1 << 20


def with_lengths(plan: RLPlan, response: int) -> RLPlan:
    """The plan with another longest response: every model's sequence is prompt + response."""
    seq = plan.prompt_length + response
    models = {role: replace(m, workload=replace(m.workload, seq_len=seq)) for role, m in plan.models()}
    typical = plan.typical_response_length
    return refit(replace(plan, response_length=response, typical_response_length=None if typical is None else
                         min(typical, response), **models))


def _fits(build) -> bool:
    """Whether the plan build() makes fits; a plan its own rules refuse (context parallel divisibility, a token
    budget below the longest sequence, ...) does not."""
    try:
        return rl_phases(build()).fits
    except FieldError:
        return False


def _largest(ok, lo: int, hi: int) -> Optional[int]:
    """The largest n in [lo, hi] with ok(n), ok monotone (true up to some n); None when ok(lo) is false."""
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def max_response_length(plan: RLPlan) -> Optional[int]:
    return _largest(lambda r: _fits(lambda: with_lengths(plan, r)), 1, MAX_RESPONSE)


def _per_engine(plan: RLPlan, group: int) -> int:
    return -(-plan.prompts_per_step * group // plan.engine_replicas)


def max_group_size(plan: RLPlan) -> Optional[int]:
    engine = rl_phases(plan).engine
    if engine is None:
        return None
    at_once = engine.concurrent(plan.prompt_length + plan.response_length)
    return _largest(lambda g: _per_engine(plan, g) <= at_once, 1, 100_000)


def min_gpu_memory_utilization(plan: RLPlan) -> Optional[float]:
    """The lowest fraction, in hundredths, at which one engine holds its share of a step at the longest length."""
    if not plan.algo.rollout:
        return None
    need = min(_per_engine(plan, plan.group_size), rl_phases(plan).engine.max_num_seqs)
    length = plan.prompt_length + plan.response_length

    def holds(hundredths: int) -> bool:
        p = replace(plan, rollout=replace(plan.rollout, gpu_memory_utilization=hundredths / 100,
                                          kv_cache_memory_bytes=None))
        try:
            engine = rl_phases(p).engine
        except FieldError:
            return False
        return engine.refused is None and engine.concurrent(length) >= need

    # not a bisection: a fraction too high for the card's free memory is refused at startup (request_memory)
    return next((h / 100 for h in range(1, 101) if holds(h)), None)


def max_gpu_memory_utilization(plan: RLPlan, low: Optional[float] = None) -> Optional[float]:
    """The highest fraction, in hundredths, at which the whole plan fits and the engine starts: above it the engine's
    reservation puts a phase over the card, or the engine refuses to start (the fraction asks for more than is free:
    request_memory). Searched from `low` (the lowest holding one engine's share, else the plan's own fraction) up:
    a larger fraction only reserves more, so the plans that fit above `low` end at one edge. None when the plan
    does not fit at `low` either."""
    if not plan.algo.rollout:
        return None

    def fits(hundredths: int) -> bool:
        p = replace(plan, rollout=replace(plan.rollout, gpu_memory_utilization=hundredths / 100,
                                          kv_cache_memory_bytes=None))
        try:
            return rl_phases(p).fits
        except FieldError:
            return False

    start = round(100 * (low if low is not None else plan.rollout.gpu_memory_utilization))
    best = _largest(fits, max(1, start), 100)
    return None if best is None else best / 100


MAX_SPLITS = 15     # splits tried: every one on a few GPUs, else these many evenly spaced (each is a whole plan)


def _splits(total: int, tp: int, mp: int) -> list:
    """Rollout GPU counts k for a split of `total` GPUs: multiples of the engines' tp leaving training GPUs the
    trainer's model-parallel size divides; all of them up to MAX_SPLITS, else MAX_SPLITS evenly spaced shares
    (1/16 .. 15/16 of the GPUs, each moved down to the nearest allowed count), so a link naming a million GPUs
    costs what one naming sixteen does."""
    allowed = lambda k: 0 < k < total and k % tp == 0 and (total - k) % mp == 0      # noqa: E731
    if total // tp <= MAX_SPLITS + 1:
        return [k for k in range(tp, total, tp) if allowed(k)]
    out = []
    for i in range(1, MAX_SPLITS + 1):
        k = total * i // (MAX_SPLITS + 1) // tp * tp
        for _ in range(mp):                    # the allowed counts repeat every lcm(tp, mp) GPUs: mp steps at most
            if k <= 0 or allowed(k):
                break
            k -= tp
        if k > 0 and allowed(k) and k not in out:
            out.append(k)
    return out


def placements(plan: RLPlan) -> list:
    """The same GPUs colocated, and split every way the engines' tp and the trainer's layout allow."""
    trainer = plan.trainer
    mp = trainer.workload.layout.model_parallel
    total = trainer.gpus if plan.placement == "colocated" else trainer.gpus + plan.rollout_gpus
    rows = []
    options = [("colocated", 0)] + [("split", k) for k in _splits(total, plan.rollout.tp, mp)]
    for placement, k in options:
        workers = (total if placement == "colocated" else total - k) // mp
        models = {role: replace(m, scenario=m.scenario.with_changes(workers=workers, shard_group=None))
                  for role, m in plan.models()}
        candidate = refit(replace(plan, placement=placement, rollout_gpus=k, **models))
        try:
            result = rl_phases(candidate)
        except FieldError as exc:
            rows.append({"placement": placement, "rollout_gpus": k, "training_gpus": total - k,
                         "refused": f"{exc.field}: {exc.allowed}"})
            continue
        engine = result.engine
        at_once = engine.concurrent(plan.prompt_length + plan.response_length) \
            if engine else 0
        rows.append({"placement": placement, "rollout_gpus": k, "training_gpus": total - k,
                     "engines": candidate.engine_replicas, "fits": result.fits,
                     "sequences_at_once": at_once * candidate.engine_replicas,
                     "worst": {g: {"phase": result.worst(g).name, "peak_bytes": result.worst(g).total}
                               for g in result.gpu_classes},
                     "idle": "none: every GPU generates, then trains" if placement == "colocated" else
                     "rollout GPUs wait during scoring and updates, training GPUs during the rollout (unless "
                     "the framework overlaps them: verl's one-step off-policy, OpenRLHF --train.async_enable)"})
    return rows


def solve_dict(plan: RLPlan) -> dict:
    low = min_gpu_memory_utilization(plan)
    return {"max_response_length": max_response_length(plan), "max_group_size": max_group_size(plan),
            "min_gpu_memory_utilization": low, "max_gpu_memory_utilization": max_gpu_memory_utilization(plan, low),
            "placements": placements(plan)}
