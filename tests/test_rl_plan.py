"""An RL plan's phases (zerocalc/rl/plan.py, models.py, phases.py, report.py): every model's training bytes are
today's report for the same settings (one engine: layout_report, the very call `python -m zerocalc` makes), and
each phase holds exactly the residents its rules name."""

import pytest

from tests.rl_helpers import grpo, model
from zerocalc.gpus import GPU_CATALOG
from zerocalc.model.finetune import FineTune
from zerocalc.output.report import report_dict
from zerocalc.parallel.ranks import layout_report
from zerocalc.rl.phases import rl_phases
from zerocalc.rl.plan import RLPlan
from zerocalc.rl.report import rl_report
from zerocalc.rl.rollout import Rollout
from zerocalc.step.losses import CACHED_MOMENT
from zerocalc.scenario import FieldError


def _prefixed(parts: dict, name: str) -> dict:
    return {k[len(name) + 1:]: v for k, v in parts.items() if k.startswith(name + " ")}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_policy_update_is_todays_report_byte_for_byte(stage):
    plan = grpo(policy=model(stage=stage))
    result = rl_phases(plan)
    today = layout_report(plan.policy.scenario, plan.policy.workload)
    peak = today.peaks[stage]
    update = next(p for p in result.phases if p.name == "policy update")
    assert _prefixed(update.parts, "policy") == {k: v for k, v in peak.phases[peak.peak_phase].items() if v}
    # what the CLI's JSON says for the same scenario and workload
    cli = report_dict(today, answers=False)["peak"][stage]
    assert sum(_prefixed(update.parts, "policy").values()) == cli["peak_bytes"] == peak.peak_bytes
    entry = next(m for m in rl_report(plan, result)["models"] if m["role"] == "policy")
    assert entry["training_peak"]["peak_bytes"] == cli["peak_bytes"]
    assert entry["training_peak"]["peak_phase"] == cli["peak_phase"]


def test_the_critic_update_is_todays_report_too():
    critic = model("qwen2.5-0.5b", stage=2, micro_batch=4)
    plan = grpo(algorithm="ppo", critic=critic)
    result = rl_phases(plan)
    assert [p.name for p in result.phases] == ["weight sync", "rollout", "policy log-probs", "reference log-probs",
                                               "critic values", "critic update", "policy update"]
    update = next(p for p in result.phases if p.name == "critic update")
    assert sum(_prefixed(update.parts, "critic").values()) == \
        layout_report(critic.scenario, critic.workload).peaks[2].peak_bytes


def test_each_phase_holds_the_residents_its_rules_name():
    plan = grpo()
    result = rl_phases(plan)
    phases = {p.name: p for p in result.phases}
    engine, policy = result.engine, result.views["policy"]
    idle_policy = policy.gpu_by_category["parameters"] + policy.gpu_by_category["optimizer"]
    context = policy.context_bytes
    assert phases["rollout"].total == engine.awake_bytes + idle_policy + context      # reference offloaded
    asleep = sum(engine.parts("asleep", 1).values())
    assert asleep == engine.context_bytes + engine.non_torch_bytes
    update = phases["policy update"]
    assert update.total == asleep + policy.peak.peak_bytes           # its own context is in today's peak
    sync = phases["weight sync"]
    assert "engine KV cache" not in sync.parts and sync.parts["engine weights"] == engine.weights_bytes
    assert sync.parts["weight-sync bucket"] == 2048 << 20            # verl update_weights_bucket_megabytes
    ref = phases["reference log-probs"]
    assert ref.parts["reference parameters"] == result.views["reference"].gpu_by_category["parameters"]
    assert "reference parameters" not in phases["rollout"].parts     # param_offload between phases
    assert all(p.capacity == GPU_CATALOG["H100-SXM-80GB"].usable_bytes for p in result.phases)


def test_offload_flags_and_sleep_level_move_residents():
    base = {p.name: p for p in rl_phases(grpo()).phases}
    off = {p.name: p for p in rl_phases(grpo(policy=model(param_offload=True, optimizer_offload=True))).phases}
    assert "policy parameters" not in off["rollout"].parts and "policy optimizer state" not in off["rollout"].parts
    # verl's FSDP2 sync stages one offloaded tensor at a time (transformer_impl.py _skip_staging); OpenRLHF loads
    # the states back before its broadcast
    assert "policy parameters" not in off["weight sync"].parts
    loads = {p.name: p for p in rl_phases(grpo(framework="openrlhf", policy=model(param_offload=True))).phases}
    assert loads["weight sync"].parts["policy parameters"] == base["weight sync"].parts["policy parameters"]
    awake = {p.name: p for p in rl_phases(grpo(rollout=Rollout(gpu_memory_utilization=0.5, sleep_level=0))).phases}
    assert awake["policy update"].parts["engine KV cache"] == rl_phases(grpo()).engine.kv_bytes
    assert awake["policy update"].total > base["policy update"].total


def test_split_placement_keeps_the_engine_off_the_training_gpus():
    plan = grpo(placement="split", rollout_gpus=4, rollout=Rollout(gpu_memory_utilization=0.9, tp=2))
    result = rl_phases(plan)
    assert result.gpu_classes == ("rollout GPU", "training GPU")
    for p in result.phases:
        engine_parts = [k for k in p.parts if k.startswith("engine")]
        assert bool(engine_parts) == (p.gpu == "rollout GPU"), p
    assert plan.engine_replicas == 2
    rollout = next(p for p in result.phases if p.gpu == "rollout GPU" and p.name == "rollout")
    assert rollout.total == result.engine.awake_bytes


def test_a_lora_reference_shares_the_policys_base():
    lora = FineTune(mode="lora", lora_rank=16, lora_targets=("all-linear",))
    plan = grpo(policy=model(finetune=lora, recompute="full"),
                reference=model(trains=False, shares_policy=True))
    phases = {p.name: p for p in rl_phases(plan).phases}
    assert not any(k.startswith("reference parameters") for p in phases.values() for k in p.parts)
    assert phases["reference log-probs"].parts["policy parameters"] > 0
    with pytest.raises(FieldError) as err:
        grpo(reference=model(trains=False, shares_policy=True))
    assert err.value.field == "reference.shares_policy"


def test_dpo_and_reward_model_training_have_no_engine():
    dpo = RLPlan("dpo", policy=model(micro_batch=4), reference=model(trains=False))
    result = rl_phases(dpo)
    assert result.engine is None and [p.name for p in result.phases] == ["reference log-probs", "policy update"]
    rm = RLPlan("reward-model", reward=model())
    assert [p.name for p in rl_phases(rm).phases] == ["reward model update"]
    assert "engine" not in rl_report(rm)


def test_trl_runs_everything_in_one_process():
    result = rl_phases(grpo(framework="trl"))
    assert result.engine.context_bytes == 0
    rollout = next(p for p in result.phases if p.name == "rollout")
    assert [k for k in rollout.parts if "CUDA context" in k] == ["CUDA context (policy+reference process)"]


def test_the_rollout_answer():
    plan = grpo(prompts_per_step=64, group_size=16, typical_response_length=400)
    report = rl_report(plan)
    answer, engine = report["rollout"], report["engine"]
    assert answer["sequences_per_step"] == 1024 and answer["engines"] == 8
    assert answer["sequences_per_engine"] == 128
    blocks_per_seq = -(-1536 // 16)
    at_once = min(engine["max_num_seqs"], (engine["num_blocks"] - 1) // blocks_per_seq)
    assert answer["concurrent_at_max_length"] == at_once
    assert answer["concurrent_at_typical_length"] >= answer["concurrent_at_max_length"]
    assert answer["waves_at_max_length"] == -(-128 // answer["concurrent_at_max_length"])
    assert report["verdict"]["fits"] is True


@pytest.mark.parametrize("changes, field", [
    ({"critic": model()}, "critic"), ({"algorithm": "ppo"}, "critic"), ({"algorithm": "sft"}, "algorithm"),
    ({"placement": "split"}, "rollout_gpus"), ({"typical_response_length": 5000}, "typical_response_length"),
    ({"rollout": Rollout(tp=3)}, "rollout.tp"), ({"framework": "nemo"}, "framework"), ({"group_size": 0}, "group_size"),
])
def test_bad_plans_name_their_field(changes, field):
    with pytest.raises(FieldError) as err:
        grpo(**changes)
    assert err.value.field == field


def test_the_trainers_allocated_figure_leaves_out_the_engine_contexts_and_reserve():
    report = rl_report(grpo(), answers=False)
    update = next(p for p in report["phases"] if p["name"] == "policy update")
    peak = next(m for m in report["models"] if m["role"] == "policy")["training_peak"]["parts"]
    outside = peak["CUDA context"] + peak.get("NCCL buffers", 0)          # outside the allocator (step/peak.py)
    cached = peak.get(CACHED_MOMENT, 0)              # reserved, not allocated (step/peak.py _split_moments)
    assert update["trainer_allocated_bytes"] == sum(peak.values()) - outside - peak["allocator reserve"] - cached
    rollout = next(p for p in report["phases"] if p["name"] == "rollout")
    assert rollout["trainer_allocated_bytes"] == sum(v for k, v in rollout["parts"].items()
                                                     if k.startswith("policy "))


def test_an_engine_inside_the_trainer_counts_in_its_allocated_figure():
    """TRL's colocate mode runs vLLM in the trainer's process (external_launcher): its torch tensors are in that
    process's max_memory_allocated; verl's and OpenRLHF's engines run in processes of their own."""
    trl = rl_report(grpo(framework="trl"), answers=False)
    rollout = next(p for p in trl["phases"] if p["name"] == "rollout")
    engine = sum(v for k, v in rollout["parts"].items() if k in ("engine weights", "engine KV cache",
                                                                 "engine activations", "engine CUDA graphs"))
    policy = sum(v for k, v in rollout["parts"].items() if k.startswith("policy "))
    assert engine and rollout["trainer_allocated_bytes"] == engine + policy
    verl = rl_report(grpo(), answers=False)
    rollout = next(p for p in verl["phases"] if p["name"] == "rollout")
    assert rollout["trainer_allocated_bytes"] == sum(v for k, v in rollout["parts"].items()
                                                     if k.startswith("policy "))


def test_verls_fsdp1_sync_loads_the_shards_and_exports_stored_tensors():
    """verl 0.9.1's default actor strategy is fsdp (FSDP1): get_per_tensor_param loads offloaded shards back
    (load_fsdp_model_to_gpu) and exports each parameter's full tensor in its stored dtype (fp32 here); FSDP2
    stages one tensor at a time, cast to the engine's dtype (engine/fsdp/transformer_impl.py _skip_staging)."""
    offloaded = model(param_offload=True, optimizer_offload=True)
    two = {p.name: p for p in rl_phases(grpo(policy=offloaded)).phases}["weight sync"].parts
    one = {p.name: p for p in rl_phases(grpo(policy=offloaded, fsdp_version=1)).phases}["weight sync"].parts
    assert "policy parameters" not in two and one["policy parameters"] > 0
    assert one["weight-sync tensor being staged"] == 2 * two["weight-sync tensor being staged"]
