"""The RL solvers (zerocalc/rl/solve.py) answer at the edge: the answer holds and one step beyond it does not,
each checked by building the whole plan again and asking rl_phases."""

from dataclasses import replace

from tests.rl_helpers import grpo, model
from zerocalc.rl.phases import rl_phases
from zerocalc.rl.solve import (max_group_size, max_response_length, min_gpu_memory_utilization, placements,
                               with_lengths)


def _plan():
    return grpo(policy=model("qwen2.5-7b"), reference=model("qwen2.5-7b", trains=False, param_offload=True),
                prompts_per_step=256, group_size=8)


def test_longest_response_is_the_edge():
    plan = _plan()
    r = max_response_length(plan)
    assert rl_phases(with_lengths(plan, r)).fits and not rl_phases(with_lengths(plan, r + 1)).fits
    edge = with_lengths(plan, r)
    assert all(m.workload.seq_len == plan.prompt_length + r for _, m in edge.models())


def test_lowest_utilization_holds_one_engines_share():
    plan = _plan()
    u = min_gpu_memory_utilization(plan)
    need = min(-(-256 * 8 // plan.engine_replicas), rl_phases(plan).engine.max_num_seqs)

    def at(fraction):
        e = rl_phases(replace(plan, rollout=replace(plan.rollout, gpu_memory_utilization=fraction))).engine
        return e.refused is None and e.concurrent(1536) >= need

    assert at(u) and not at(round(u - 0.01, 2))


def test_largest_group_runs_in_one_wave():
    plan = _plan()
    g = max_group_size(plan)
    e = rl_phases(plan).engine
    at_once = e.concurrent(1536)
    per_engine = lambda n: -(-plan.prompts_per_step * n // plan.engine_replicas)      # noqa: E731
    assert per_engine(g) <= at_once < per_engine(g + 1)


def test_placements_of_the_same_gpus():
    plan = _plan()
    rows = placements(plan)
    assert rows[0]["placement"] == "colocated" and rows[0]["fits"] == rl_phases(plan).fits
    assert [r["rollout_gpus"] for r in rows[1:]] == list(range(1, 8))
    for r in rows[1:]:
        assert r["rollout_gpus"] + r["training_gpus"] == 8 and r["engines"] == r["rollout_gpus"]
        assert set(r["worst"]) == {"rollout GPU", "training GPU"}
    # fewer training GPUs shard the policy over fewer workers: its update grows
    updates = [r["worst"]["training GPU"]["peak_bytes"] for r in rows[1:]]
    assert updates == sorted(updates)


def test_highest_utilization_is_the_edge_of_the_plans_that_fit():
    """Issue 33: the engine's range, the lowest for one wave up to the highest at which every phase fits and the
    engine starts (rl_phases' own fits, the start-up refusal included)."""
    from zerocalc.rl.solve import max_gpu_memory_utilization

    plan = _plan()
    low = min_gpu_memory_utilization(plan)
    top = max_gpu_memory_utilization(plan, low)

    def fits(fraction):
        return rl_phases(replace(plan, rollout=replace(plan.rollout, gpu_memory_utilization=fraction))).fits

    assert top is not None and low <= top
    assert fits(top) and (top == 1.0 or not fits(round(top + 0.01, 2)))
    assert all(fits(round(h / 100, 2)) for h in range(round(low * 100), round(top * 100) + 1, 7))
