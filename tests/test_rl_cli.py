"""python -m zerocalc rl, run as a user would: the policy's training peak is what `python -m zerocalc` prints for
the same flags; JSON keys; bad input exits 2 with one line naming the flag."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zerocalc.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
POLICY = ["--model", "qwen2.5-0.5b", "--gpus", "8", "--convention", "fsdp2", "--micro-batch", "2",
          "--recompute", "full"]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "zerocalc", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def run_json(capsys, *args):
    assert main(["rl", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_policy_peak_is_todays_cli_for_the_same_flags(capsys):
    # transformers' loss on padded micro-batches, verl's fp32 gradient reduction and its gradient accumulation
    # across micro-batches turned off (the policy's own flags win): today's CLI with --seq-len prompt + response
    rl = run_json(capsys, *POLICY, "--prompt-length", "256", "--response-length", "768", "--stage", "2",
                  "--packing", "no", "--logprobs", "huggingface", "--reduce-dtype", "bf16", "--grad-lifetime",
                  "backward")
    # an RL plan keeps the reserve at 5 % of the tensors (rl/build.py; its update flags say so)
    assert main([*POLICY, "--seq-len", "1024", "--fragmentation-percent", "5", "--json"]) == 0
    today = json.loads(capsys.readouterr().out)
    policy = next(m for m in rl["models"] if m["role"] == "policy")
    assert policy["training_peak"]["peak_bytes"] == today["peak"][2]["peak_bytes"]
    assert policy["training_peak"]["parts"] == today["peak"][2]["phases"][today["peak"][2]["peak_phase"]]
    assert policy["seq_len"] == 1024


@pytest.mark.parametrize("framework", ["verl", "trl", "openrlhf"])
def test_each_frameworks_update_is_todays_cli_with_the_flags_it_reports(capsys, framework):
    """verl packs each micro-batch's real tokens (use_remove_padding) and takes log-probs with flash-attn's cross
    entropy; TRL's fused head; OpenRLHF's fp32 logits: the update is today's report for the flags the plan prints."""
    rl = run_json(capsys, *POLICY, "--prompt-length", "256", "--response-length", "768", "--stage", "2",
                  "--framework", framework)
    policy = next(m for m in rl["models"] if m["role"] == "policy")
    flags = policy["update_pass"]["zerocalc_flags"]
    assert flags[flags.index("--loss") + 1] == {"verl": "flash-ce", "trl": "trl-fused",
                                                "openrlhf": "flash-ce-fp32"}[framework]
    if framework == "verl":
        assert flags[:4] == ["--micro-batch", "1", "--seq-len", "2048"]      # 2 sequences of 1,024, packed
    assert main([*POLICY, *flags, "--json"]) == 0
    today = json.loads(capsys.readouterr().out)
    assert policy["training_peak"]["peak_bytes"] == today["peak"][2]["peak_bytes"]
    assert policy["training_peak"]["parts"] == today["peak"][2]["phases"][today["peak"][2]["peak_phase"]]
    assert policy["micro_batch"] == 2 and policy["seq_len"] == 1024


def test_json_keys_and_framework_defaults(capsys):
    out = run_json(capsys, *POLICY, "--reference", "same", "--reference-offload")
    assert {"verdict", "phases", "models", "engine", "rollout", "host_memory"} <= set(out)
    assert out["engine"]["settings"]["gpu_memory_utilization"] == 0.5       # verl rollout.yaml
    assert out["engine"]["settings"]["tp"] == 2 and out["engine"]["sleep_level"] == 2
    assert [p["name"] for p in out["phases"]] == ["weight sync", "rollout", "policy log-probs",
                                                  "reference log-probs", "policy update"]
    trl = run_json(capsys, *POLICY, "--framework", "trl")
    assert trl["engine"]["settings"]["gpu_memory_utilization"] == 0.3 and trl["engine"]["sleep_level"] == 0
    mine = run_json(capsys, *POLICY, "--framework", "trl", "--gpu-memory-utilization", "0.45", "--sleep-level", "2")
    assert mine["engine"]["fraction"] == 0.45 and mine["engine"]["sleep_level"] == 2


def test_dpo_keeps_its_reference_unless_told_otherwise(capsys):
    # TRL's DPOTrainer builds a frozen copy of the policy when no ref_model is given, unless the policy is a PEFT
    # model (the base with its adapters off) or precompute_ref_log_probs is set (trl/trainer/dpo_trainer.py,
    # "Reference model", trl f2cd577); OpenRLHF's train_dpo loads its own reference, a copy under LoRA too. GRPO
    # keeps none unless its config's KL term asks for one (rl/configs).
    def models(*args):
        return {m["role"]: m for m in run_json(capsys, *POLICY, *args)["models"]}
    full = models("--algorithm", "dpo", "--framework", "trl")
    assert set(full) == {"policy", "reference"} and full["reference"]["trains"] is False
    assert full["reference"]["params"] == full["policy"]["params"] and full["reference"]["shares_policy"] is False
    lora = models("--algorithm", "dpo", "--framework", "trl", "--finetune", "lora")
    assert lora["reference"]["shares_policy"] is True                                   # no copy
    openrlhf = models("--algorithm", "dpo", "--framework", "openrlhf", "--finetune", "lora")
    assert openrlhf["reference"]["shares_policy"] is False
    assert set(models("--algorithm", "dpo", "--reference", "none")) == {"policy"}       # precomputed log-probs
    assert set(models("--algorithm", "grpo")) == {"policy"}
    assert set(models("--algorithm", "grpo", "--reference", "same")) == {"policy", "reference"}


def test_text_names_the_worst_phase():
    done = cli("rl", *POLICY, "--algorithm", "ppo", "--critic", "same", "--placement", "split", "--rollout-gpus", "4")
    assert done.returncode == 0, done.stderr
    assert "Worst phase on rollout GPU: rollout" in done.stdout
    assert "Worst phase on training GPU:" in done.stdout and "critic update" in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--gpus", "8"], "the policy needs a model"),
    (POLICY + ["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    (POLICY + ["--seq-len", "100"], "--seq-len"),
    (POLICY + ["--critic", "nope", "--algorithm", "ppo"], "--critic: got 'nope'"),
    (POLICY + ["--algorithm", "ppo"], "--critic"),
    (POLICY + ["--rollout-tp", "3"], "--rollout.tp"),
    (POLICY + ["--kv-cache-dtype", "fp8_ds_mla"], "--kv-cache-dtype"),
])
def test_bad_input_is_one_line(capsys, args, message):
    assert main(["rl", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zerocalc rl: error:") and message in err and "\n" not in err
