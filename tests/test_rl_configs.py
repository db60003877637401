"""The RL frameworks' configs (zerocalc/rl/configs/) read as data: example configs from verl, OpenRLHF and
open-r1 (TRL GRPOConfig recipes), copied into tests/fixtures/rl/ with their sources, import to the plan they
describe: the same report as the plan given flag by flag; every key not read is listed with a reason."""

import json
from pathlib import Path

import pytest

from zerocalc.cli.main import main
from zerocalc.frameworks.common import FrameworkConfigError
from zerocalc.rl.configs import read_openrlhf, read_trl, read_verl

FIX = Path(__file__).resolve().parent / "fixtures" / "rl"


def report(capsys, *args):
    assert main(["rl", *args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _same_plan(a: dict, b: dict):
    for key in ("algorithm", "placement", "prompt_length", "response_length", "group_size", "prompts_per_step",
                "phases", "models", "verdict", "engine", "rollout"):
        assert a.get(key) == b.get(key), key


def test_verl_grpo_example_is_the_plan_it_describes(capsys):
    imp = read_verl((FIX / "verl_run_qwen2-7b.sh").read_bytes())
    assert imp.settings["algorithm"] == "grpo" and imp.settings["group_size"] == 5
    assert imp.settings["rollout"] == {"tp": 2, "gpu_memory_utilization": 0.6, "engine": "vllm"}
    assert (imp.settings["reference"], imp.settings["reference_offload"]) == ("same", True)
    # Qwen2-7B has Qwen2.5-7B's shapes (config.json: 28 layers, 3584 hidden, 28 / 4 heads, 18944 ffn, 152064 vocab)
    assert imp.policy == {"--gpus": "8", "--convention": "fsdp2", "--micro-batch": "40", "--recompute": "full",
                          "--model": "qwen2.5-7b"}
    # each pass's micro-batch and remove padding (verl 0.9.1 engine_workers.py: the rollout's and the ref's
    # log_prob_micro_batch_size_per_gpu are their passes' micro-batches)
    assert (imp.settings["packing"], imp.settings["logprob_micro_batch"], imp.settings["reference_micro_batch"]) == \
        (True, 40, 40)
    ignored = {i["key"]: i["reason"] for i in imp.ignored}
    assert {"data.train_files", "trainer.logger", "actor_rollout_ref.actor.optim.lr"} <= set(ignored)
    assert any("Qwen/Qwen2-7B-Instruct" in n and "qwen2.5-7b preset" in n for n in imp.notes)
    imported = report(capsys, "--verl-config", str(FIX / "verl_run_qwen2-7b.sh"))
    given = report(capsys, "--model", "qwen2.5-7b", "--gpus", "8", "--convention", "fsdp2", "--micro-batch", "40",
                   "--recompute", "full", "--prompt-length", "512", "--response-length", "1024", "--group-size", "5",
                   "--prompts-per-step", "1024", "--reference", "same", "--reference-offload", "--rollout-tp", "2",
                   "--gpu-memory-utilization", "0.6", "--engine", "vllm", "--packing", "--logprob-micro-batch", "40",
                   "--reference-micro-batch", "40")
    _same_plan(imported, given)
    assert imported["imported"]["format"] == "verl"


def test_verl_ppo_example_has_a_critic_and_lists_the_quantized_rollout():
    imp = read_verl((FIX / "verl_run_deepseek7b_llm.sh").read_bytes())
    assert imp.settings["algorithm"] == "ppo" and imp.settings["critic"] == "same"
    assert "reference" not in imp.settings                      # use_kl_loss False, use_kl_in_reward False
    assert imp.settings["rollout"]["tp"] == 4 and imp.settings["rollout"]["gpu_memory_utilization"] == 0.4
    ignored = {i["key"]: i["reason"] for i in imp.ignored}
    assert "quantized rollout is not modelled" in ignored["actor_rollout_ref.rollout.quantization"]
    assert ignored["critic.optim.lr"].startswith("a loss or optimizer coefficient")
    assert (imp.settings["critic_update_micro_batch"], imp.settings["logprob_micro_batch"]) == (32, 32)


def test_explicit_flags_win_over_the_config(capsys):
    out = report(capsys, "--verl-config", str(FIX / "verl_run_qwen2-7b.sh"), "--model", "qwen2.5-0.5b",
                 "--gpu-memory-utilization", "0.35", "--micro-batch", "2", "--group-size", "4")
    assert out["engine"]["fraction"] == 0.35 and out["group_size"] == 4
    assert next(m for m in out["models"] if m["role"] == "policy")["micro_batch"] == 2


def test_verl_yaml_with_interpolations():
    text = ("data:\n  max_prompt_length: 256\n  max_response_length: 2048\nactor_rollout_ref:\n  rollout:\n"
            "    prompt_length: ${oc.select:data.max_prompt_length,512}\n    name: sglang\n"
            "    free_cache_engine: false\n    odd: ${oc.env:HOME}\n  actor:\n    use_kl_loss: true\n")
    imp = read_verl(text)
    assert imp.settings["prompt_length"] == 256 and imp.settings["response_length"] == 2048
    assert imp.settings["rollout"] == {"engine": "sglang", "sleep_level": 0}
    reasons = {i["key"]: i["reason"] for i in imp.ignored}
    assert reasons["actor_rollout_ref.rollout.odd"].startswith("an interpolation we do not resolve")
    assert "actor_rollout_ref.rollout.prompt_length" in reasons


def test_openrlhf_ppo_example(capsys):
    imp = read_openrlhf((FIX / "openrlhf_train_ppo_llama_ray_hybrid_engine.sh").read_bytes())
    s = imp.settings
    assert (s["algorithm"], s["critic"], s["reward"], s["reference"]) == ("ppo", "llama-3-8b", "llama-3-8b", "same")
    assert s["placement"] == "colocated" and s["policy_stage"] == 3
    assert s["policy_param_offload"] and s["critic_optimizer_offload"]          # --deepspeed_enable_sleep
    assert s["rollout"] == {"tp": 2, "gpu_memory_utilization": 0.5, "sleep_level": 1, "cuda_graphs": False}
    assert (s["prompt_length"], s["response_length"], s["prompts_per_step"], s["group_size"]) == (1024, 1024, 1024, 1)
    assert imp.policy["--model"] == "llama-3-8b" and imp.policy["--micro-batch"] == "4"
    out = report(capsys, "--openrlhf-args", str(FIX / "openrlhf_train_ppo_llama_ray_hybrid_engine.sh"))
    assert [p["name"] for p in out["phases"]] == ["weight sync", "rollout", "policy log-probs", "reference log-probs",
                                                  "reward scores", "critic values", "critic update", "policy update"]
    assert out["engine"]["sleep_level"] == 1 and out["engine"]["cudagraph_bytes"] == 0


def test_openrlhf_grpo_example():
    imp = read_openrlhf((FIX / "openrlhf_train_grpo_ray_hybrid_engine.sh").read_bytes())
    s = imp.settings
    assert s["algorithm"] == "grpo" and "critic" not in s and s["group_size"] == 8 and s["prompts_per_step"] == 128
    assert {i["key"] for i in imp.ignored} >= {"save_path", "prompt_data", "kl_estimator"}


def test_trl_grpo_recipe(capsys):
    imp = read_trl((FIX / "openr1_qwen2.5-1.5b_grpo_config_demo.yaml").read_bytes(), processes=7)
    s = imp.settings
    assert (s["group_size"], s["prompt_length"], s["response_length"]) == (16, 512, 1024)
    assert s["prompts_per_step"] == 16 * 7 * 4 // 16
    assert (s["placement"], s["rollout_gpus"]) == ("split", 1)          # vllm_device: a GPU of its own
    assert s["rollout"]["max_num_seqs"] == 16 * 1 * 4 and s["rollout"]["gpu_memory_utilization"] == 0.7
    assert "reference" not in s                                            # beta defaults to 0.0
    assert imp.policy["--convention"] == "pure-bf16" and imp.policy["--micro-batch"] == "16"
    qwen = ["--layers", "28", "--hidden", "1536", "--heads", "12", "--kv-heads", "2", "--ffn", "8960", "--vocab",
            "151936", "--tied-embeddings"]
    out = report(capsys, "--trl-config", str(FIX / "openr1_qwen2.5-1.5b_grpo_config_demo.yaml"), *qwen,
                 "--gpus", "7", "--stage", "2")
    assert out["placement"] == "split" and out["rollout_gpus"] == 1 and out["training_gpus"] == 7
    assert out["verdict"]["gpu_classes"][0]["gpu"] == "rollout GPU"


@pytest.mark.parametrize("reader, text, field", [
    (read_verl, "actor_rollout_ref.rollout.name=hf\n", "actor_rollout_ref.rollout.name"),
    (read_verl, "actor_rollout_ref.rollout.gpu_memory_utilization=1.5\n",
     "actor_rollout_ref.rollout.gpu_memory_utilization"),
    (read_verl, "algorithm.adv_estimator=magic\n", "algorithm.adv_estimator"),
    # a refusal names the flag as the file wrote it (an earlier release's underscore name too)
    (read_openrlhf, "--colocate_all_models --vllm_num_engines 3 --vllm_tensor_parallel_size 2", "vllm_num_engines"),
    (read_openrlhf, "--train.colocate_all --vllm.num_engines 3 --vllm.tensor_parallel_size 2", "vllm.num_engines"),
    (read_openrlhf, "--zero_stage 5", "zero_stage"),
    (read_openrlhf, "--ds.zero_stage 2.0", "ds.zero_stage"),
    (read_trl, "num_generations: 0\n", "num_generations"),
    (read_trl, "vllm_mode: remote\n", "vllm_mode"),
    (read_verl, "a: [1, 2\n", "config"),
])
def test_bad_configs_name_their_key(reader, text, field):
    with pytest.raises(FrameworkConfigError) as err:
        reader(text)
    assert err.value.field == field


def test_cli_reports_unreadable_configs(capsys, tmp_path):
    assert main(["rl", "--verl-config", str(tmp_path / "missing.sh"), "--model", "qwen2.5-0.5b"]) == 2
    assert "--verl-config: cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.sh"
    bad.write_text("actor_rollout_ref.rollout.name=hf\n")
    assert main(["rl", "--verl-config", str(bad), "--model", "qwen2.5-0.5b"]) == 2
    assert "actor_rollout_ref.rollout.name: got 'hf'" in capsys.readouterr().err
