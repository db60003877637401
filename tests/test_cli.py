"""python -m zerocalc, run as a user would (a subprocess): flags, JSON shape, bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "zerocalc", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def cli_json(*args):
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_json_shape_is_the_public_interface():
    out = cli_json("--params", "1e9", "--workers", "4")
    assert (out["params"], out["workers"], out["shard_group"]) == (10**9, 4, 4)
    assert [s["stage"] for s in out["stages"]] == [0, 1, 2, 3]
    for s in out["stages"]:
        assert set(s["per_worker_bytes"]) == {"parameters", "gradients", "optimizer"}
        for key in ("per_worker_total_bytes", "cluster_total_bytes", "cluster_redundant_bytes",
                    "communication_bytes_per_step"):
            assert isinstance(s[key], int)
    # Seed 000: 16 / 7 / 5.5 / 4 GB per worker.
    assert [s["per_worker_total_bytes"] for s in out["stages"]] == [16 * 10**9, 7 * 10**9, 5_500_000_000, 4 * 10**9]
    assert "deepspeed_estimator" not in out


@pytest.mark.parametrize("spelling, value", [("1e9", 10**9), ("7B", 7 * 10**9), ("1.5T", 1_500_000_000_000),
                                             ("350M", 350_000_000), ("124439808", 124_439_808)])
def test_params_spellings(spelling, value):
    assert cli_json("--params", spelling)["params"] == value


def test_every_flag_reaches_the_report():
    out = cli_json("--params", "8B", "--workers", "16", "--shard-group", "8", "--param-dtype", "bf16",
                   "--grad-dtype", "fp32", "--master-dtype", "none", "--optimizer", "lion",
                   "--optimizer-dtype", "bf16", "--convention", "megatron", "--offload-optimizer", "nvme",
                   "--offload-params", "cpu", "--gpus-per-node", "4", "--units", "GiB")
    sc = out["scenario"]
    assert (sc["shard_group"], sc["param_dtype"], sc["grad_dtype"], sc["master_dtype"], sc["optimizer"],
            sc["optimizer_dtype"], sc["convention"]) == (8, "bf16", "fp32", None, "lion", "bf16", "megatron")
    assert out["bytes_per_param"] == 2 + 4 + 2
    stage3 = out["stages"][3]
    assert stage3["per_worker_total_bytes"] == 8 * 10**9 * 8 // 8
    assert stage3["gpu_bytes_per_worker"] == 0
    assert stage3["cpu_bytes_per_node"] == 4 * stage3["cpu_bytes_per_worker"] == 4 * 2 * 10**9
    assert stage3["nvme_bytes_per_worker"] == 6 * 10**9


def test_deepspeed_estimate_rows():
    out = cli_json("--params", "2851M", "--largest-layer-params", "32M", "--workers", "8", "--gpus-per-node",
                   "8", "--deepspeed-estimate")
    ds = out["deepspeed_estimator"]
    assert [r["offload_optimizer"] for r in ds["zero2"]] == ["cpu", "none"]
    assert ds["zero2"][0] == {"offload_optimizer": "cpu", "cpu_bytes": 136_848_000_000, "gpu_bytes": 5_702_000_000}
    assert [(r["offload_param"], r["offload_optimizer"], r["zero_init"]) for r in ds["zero3"]] == [
        ("cpu", "cpu", True), ("cpu", "cpu", False), ("none", "cpu", True), ("none", "cpu", False),
        ("none", "none", True), ("none", "none", False)]
    assert ds["zero3"][0]["cpu_bytes"] == int(2851e6 * 18 * 1.0 * 1.5)
    assert ds["differences"]


def test_readable_table_by_default_labels_units_correctly():
    done = cli("--params", "1B", "--workers", "4")
    assert done.returncode == 0
    assert "16.00 GB" in done.stdout and "500.00 MB" in done.stdout and "zero-paper" in done.stdout
    gib = cli("--params", "1B", "--workers", "4", "--units", "GiB").stdout
    assert "14.90" in gib and "(GiB)" in gib


@pytest.mark.parametrize("args, message", [
    (["--params", "0"], "--params: got 0; allowed: an integer from 1"),
    (["--params", "abc"], "not a count"),
    (["--params", "1e400"], "below 10^31"),
    (["--params", "7B", "--workers", "0"], "--workers: got 0"),
    (["--params", "7B", "--workers", "6", "--shard-group", "4"], "--shard-group: got 4; allowed: a divisor"),
    (["--params", "7B", "--param-dtype", "fp12"], "invalid choice: 'fp12'"),
    (["--params", "7B", "--master-dtype", "fp12"], "allowed: none, fp64"),
    (["--params", "7B", "--optimizer", "adamax"], "invalid choice: 'adamax'"),
    (["--params", "7B", "--offload-params", "disk"], "invalid choice: 'disk'"),
    (["--params", "7B", "--deepspeed-estimate"], "--largest-layer-params is required"),
    (["--params", "7B", "--deepspeed-estimate", "--largest-layer-params", "8B"], "allowed: an integer from 1"),
    (["--params", "7B", "--buffer-factor", "nan"], "allowed: a number above 0"),
    (["--workers", "4"], "required: --params"),
    (["--params", "7B", "--bogus"], "unrecognized arguments"),
])
def test_bad_arguments_exit_2_with_one_line_and_no_traceback(args, message):
    done = cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert message in lines[0]


# --- model, peak and solver flags (peak-memory issue) -------------------------------------------------------

def test_model_preset_adds_architecture_activations_peak_and_solve():
    out = cli_json("--model", "llama-2-7b", "--workers", "8", "--micro-batch", "2", "--seq-len", "4096",
                   "--attention", "eager", "--recompute", "selective", "--activation-dtype", "bf16",
                   "--gpu", "H100-SXM-80GB")
    assert out["params"] == 6_738_415_616
    assert out["architecture"]["params"] == 6_738_415_616
    assert out["architecture"]["largest_layer_params"] == 32000 * 4096
    assert isinstance(out["activation_bytes_per_layer"], int) and out["activation_bytes"] > 0
    assert [p["stage"] for p in out["peak"]] == [0, 1, 2, 3]
    for p in out["peak"]:
        assert set(p["phases"]) == {"forward", "backward", "optimizer_step"}
        assert p["peak_bytes"] == max(sum(c.values()) for c in p["phases"].values())
        assert p["capacity_bytes"] == 84_943_715_696 == out["gpu"]["capacity_bytes"]    # "79.11 GiB" PyTorch prints
        assert p["peak_phase"] in p["phases"] and isinstance(p["fits"], bool)
    assert out["gpu"]["nvidia_smi_bytes"] == 81_559 * 2**20
    assert "vllm-project/vllm#12756" in out["gpu"]["capacity_source"]
    assert set(out["solve"]) >= {"max_micro_batch", "min_workers", "lowest_stage", "min_gpus", "layouts"}
    assert set(out["solve"]["max_micro_batch"]) == {"0", "1", "2", "3"}


def test_custom_architecture_flags_and_gpu_memory():
    out = cli_json("--layers", "2", "--hidden", "64", "--heads", "8", "--kv-heads", "2", "--ffn", "256",
                   "--vocab", "100", "--tied-embeddings", "--gpu-memory", "44.4GiB")
    assert out["architecture"]["tied_embeddings"] is True and out["architecture"]["kv_heads"] == 2
    assert out["peak"][0]["capacity_bytes"] == 47_674_136_985 == int(44.4 * 2**30)      # rounded down to bytes
    assert out["gpu"]["nvidia_smi_bytes"] is None


@pytest.mark.parametrize("given, message", [
    ("48", "'48' has no unit and is below 1 GiB as bytes: give the unit, e.g. 48 GB or 48 GiB"),
    ("48G", "unknown unit 'G'"),
    ("0.5GiB", "a GPU's capacity is from 1 GiB to 1 PiB"),
])
def test_a_capacity_without_its_unit_is_refused_never_taken_as_bytes(given, message):
    """Issue 20: "48GB" once became 48 bytes; a bare number below 1 GiB is a missing unit, refused in one line."""
    done = cli("--model", "gpt2", "--gpu-memory", given)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_config_file_and_dropout(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, '
                   '"n_positions": 1024}')
    out = cli_json("--config", str(cfg), "--dropout", "0")
    assert out["params"] == 124_439_808 and out["architecture"]["attn_dropout"] == 0.0


def test_lists():
    models = cli_json("--list-models")
    assert {"name", "params"} <= set(models[0]) and any(m["name"] == "llama-3.1-405b" for m in models)
    gpus = cli_json("--list-gpus")
    assert {"name", "capacity_bytes"} <= set(gpus[0])
    listed = cli("--list-gpus")
    assert listed.returncode == 0 and "81559 MiB" in listed.stdout and "79.11 GiB" in listed.stdout
    assert {"nvidia_smi_bytes", "capacity_source", "estimated"} <= set(gpus[0])


def test_text_report_answers_in_words():
    done = cli("--model", "llama-2-7b", "--workers", "8", "--micro-batch", "4")
    assert done.returncode == 0
    assert "largest micro-batch that fits" in done.stdout and "lowest stage that fits" in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--params", "7B", "--micro-batch", "2"], "--micro-batch needs a model"),
    (["--model", "gpt2", "--params", "7B"], "the model has 124,439,808 parameters"),
    (["--model", "gpt2", "--config", "x.json"], "give one"),
    (["--layers", "2", "--hidden", "64"], "needs --heads, --ffn, --vocab"),
    (["--layers", "2", "--hidden", "64", "--heads", "7", "--ffn", "8", "--vocab", "9"], "--heads: got 7"),
    (["--config", "/no/such.json"], "--config: config"),
    (["--model", "nope"], "invalid choice: 'nope'"),
    (["--model", "gpt2", "--dropout", "1.5"], "a probability"),
    (["--model", "gpt2", "--micro-batch", "0"], "--micro-batch: got 0"),
    (["--model", "gpt2", "--gpu", "TPU"], "invalid choice: 'TPU'"),
    (["--model", "gpt2", "--fragmentation-percent", "500"], "--fragmentation-percent: got 500"),
])
def test_bad_model_arguments_exit_2_with_one_line(args, message):
    done = cli(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_recipe_flags_reach_the_workload_and_the_recipe_line():
    out = cli_json("--model", "llama-3-8b", "--workers", "8", "--recompute", "op", "--op-policy", "matmuls",
                   "--compile", "--loss", "chunked", "--loss-chunks", "4", "--float8", "tensorwise",
                   "--float8-all-gather")
    w = out["workload"]
    assert (w["recompute"], w["op_policy"], w["compile"], w["loss"], w["loss_chunks"], w["float8"],
            w["float8_all_gather"]) == ("op", "matmuls", True, "chunked", 4, "tensorwise", True)
    assert out["recipe"] == ("op-level selective checkpointing (matmuls policy), torch.compile'd blocks, float8 "
                             "linears (tensorwise, float8 all-gather), torchtune's chunked cross entropy (4 chunks)")
    done = cli("--model", "llama-3-8b", "--recompute", "op", "--activation-offload")
    assert done.returncode == 2 and "activation_offload" in done.stderr and "Traceback" not in done.stderr


def test_megatron_recompute_flags_reach_the_workload_and_the_recipe_line():
    out = cli_json("--model", "deepseek-v2-lite", "--workers", "8", "--recompute", "selective",
                   "--recompute-modules", "moe,layernorm")
    assert out["workload"]["recompute_modules"] == "layernorm,moe"          # Megatron's order
    assert out["recipe"] == "selective recompute of Megatron's modules layernorm, moe"
    out = cli_json("--model", "llama-3-8b", "--workers", "4", "--pp", "2", "--micro-batches", "4", "--recompute",
                   "full", "--recompute-method", "block", "--recompute-num-layers", "3")
    assert (out["workload"]["recompute_method"], out["workload"]["recompute_num_layers"]) == ("block", 3)
    assert out["recipe"] == "full recompute, Megatron's block method: the first 3 blocks of each chunk"
    done = cli("--model", "llama-3-8b", "--recompute", "full", "--recompute-num-layers", "5")
    assert done.returncode == 2 and "--recompute-num-layers" in done.stderr and "not of 32" in done.stderr
    done = cli("--model", "llama-3-8b", "--recompute", "selective", "--recompute-modules", "mla_up_proj")
    assert done.returncode == 2 and "latent attention" in done.stderr and "Traceback" not in done.stderr
