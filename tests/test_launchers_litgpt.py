"""LitGPT fine-tuning YAMLs (tests/fixtures/launchers/litgpt_*.yaml, Lightning-AI/litgpt config_hub/finetune/ at the
commit in each .source) import to the plan LitGPT's scripts say (litgpt/finetune/lora.py and full.py setup() at that
commit: lora_r 8, lora_dropout 0.05, LoRA on query and value; -true precisions build everything in that dtype;
bitsandbytes quantization with PagedAdamW on one device; FSDP with every Block checkpointed on more than one;
accumulation = global_batch_size / devices / micro_batch_size), every other key named as ignored with a reason, and
hostile values refused by key."""

from pathlib import Path

import pytest
import yaml

from zerocalc.frameworks import FrameworkConfigError, guess_format, import_config, import_litgpt

FIX = Path(__file__).resolve().parent / "fixtures" / "launchers"
BASE = "checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B\ntrain: {micro_batch_size: 2, global_batch_size: 8}\n"


def text(name: str) -> str:
    return (FIX / f"litgpt_{name}.yaml").read_text()


def test_the_lora_config_is_bf16_lora_on_query_and_value_on_one_device():
    got = import_config("litgpt", text("llama-3-8b_lora"))
    assert got.model == "llama-3-8b"                             # checkpoints/meta-llama/Meta-Llama-3-8B
    assert got.finetune == {"mode": "lora", "lora_rank": 32, "lora_dropout": 0.05, "lora_targets": ("q", "v"),
                            "adapter_dtype": "bf16", "base_dtype": "bf16"}
    assert got.scenario["workers"] == 1 and got.selected_stage is None
    assert got.scenario["param_dtype"] == "bf16" and got.scenario["optimizer_dtype"] == "bf16"   # bf16-true
    assert got.workload["recompute"] == "none"                   # one device: nothing checkpointed
    assert got.workload["seq_len"] == 512 and got.workload["micro_batch"] == 1
    assert got.layout["micro_batches"] == 8                      # global 8 / 1 device / micro 1


def test_qlora_uses_bnb_nf4_and_paged_adamw():
    got = import_litgpt(text("llama-3-8b_qlora"))
    assert got.finetune["mode"] == "qlora" and got.finetune["quant_type"] == "nf4"
    assert got.finetune["double_quant"] is False and got.finetune["kbit_prepare"] is False      # bnb.nf4, no -dq
    assert got.finetune["quantize_head"] is True                 # Fabric's init_module builds lm_head in 4 bits
    assert got.scenario["optimizer"] == "paged-adamw"            # instantiate_bnb_optimizer
    gemma = import_litgpt(text("gemma-2b_qlora"))
    assert gemma.model == "gemma-2b"
    assert gemma.finetune["lora_targets"] == ("q", "k", "v", "o", "gate", "up", "down", "lm_head")


def test_full_on_four_devices_shards_with_fsdp_and_checkpoints_every_block():
    got = import_litgpt(text("llama-3-8b_full"))
    assert got.finetune == {"mode": "full"} and got.selected_stage == 3
    assert got.scenario["workers"] == 4 and got.workload["recompute"] == "full"
    assert got.layout["micro_batches"] == 4                      # 64 / 4 devices / micro 4
    ignored = {i["key"]: i["reason"] for i in got.ignored_keys}
    assert "bookkeeping" in ignored["resume"] and "dataset" in ignored["data"]
    assert import_litgpt(text("tiny-llama_full")).model == ""   # TinyLlama: no preset, a note


def test_every_key_of_the_file_is_used_or_named_ignored_with_a_reason():
    for path in FIX.glob("litgpt_*.yaml"):
        data = yaml.safe_load(path.read_text())
        got = import_litgpt(path.read_text())
        ignored = {i["key"].split(".")[0] for i in got.ignored_keys}
        used = {s.split(" ")[0].split(".")[0] for s in got.sources.values()} | {
            "checkpoint_dir", "precision", "quantize", "devices", "num_nodes", "train", "optimizer",
            "lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp", "lora_head"}
        for key in data:
            assert key in ignored or key in used, (path.name, key)
        assert all(i["reason"] for i in got.ignored_keys)


def test_defaults_when_the_keys_are_absent():
    got = import_litgpt(BASE)
    assert got.finetune == {"mode": "full"} and any("finetune_full" in n for n in got.notes)
    assert got.scenario["param_dtype"] == "fp32"                 # bf16-mixed: fp32 weights under autocast
    assert got.workload["activation_dtype"] == "bf16" and "seq_len" not in got.workload
    lora = import_litgpt(BASE + "lora_r: 4\nlora_mlp: true\nprecision: 32-true\n")
    assert lora.finetune["lora_targets"] == ("q", "v", "gate", "up", "down") and lora.finetune["lora_rank"] == 4
    assert lora.finetune["lora_dropout"] == 0.05 and lora.finetune["adapter_dtype"] == "fp32"
    every = import_litgpt(BASE + "lora_key: true\nlora_projection: true\nlora_mlp: true\n")
    assert every.finetune["lora_targets"] == ("all-linear",)


@pytest.mark.parametrize("body, field", [
    ("precision: 8-true\n", "precision"), ("quantize: bnb.nf4\n", "precision"),
    ("quantize: bnb.nf4\nprecision: bf16-true\ndevices: 2\n", "devices"),
    ("quantize: gptq\nprecision: bf16-true\n", "quantize"), ("devices: 0\n", "devices"),
    ("lora_query: false\nlora_value: false\n", "lora_query"), ("lora_r: 0\n", "lora_r"),
    ("train: {micro_batch_size: 4, global_batch_size: 2}\n", "train.global_batch_size"),
    ("train: {max_seq_length: -5}\n", "train.max_seq_length"),
    ("quantize: bnb.nf4\nprecision: bf16-true\noptimizer: SGD\n", "optimizer"), ("train: 5\n", "train"),
    ("- a list\n", "config"),
])
def test_hostile_values_are_refused_by_name(body, field):
    with pytest.raises(FrameworkConfigError) as exc:
        import_litgpt(body if body.startswith("- ") or body.startswith("train") else BASE + body)
    assert exc.value.field == field


def test_litgpt_files_are_recognised_by_their_keys():
    for path in FIX.glob("litgpt_*.yaml"):
        assert guess_format(path.name, path.read_bytes()) == "litgpt", path.name
