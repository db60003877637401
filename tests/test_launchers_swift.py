"""ms-swift's arguments (tests/fixtures/launchers/swift_*, modelscope/ms-swift examples/ at the commit in each
.source: --config YAML / JSON files and the `swift sft|rlhf` shell scripts) import to the plan its defaults say
(swift/arguments/ at that commit: tuner_type lora, lora_rank 8, lora_dropout 0.05, target_modules all-linear,
per_device_train_batch_size 1, gradient_checkpointing true, bnb double quantization on; the deepspeed presets are
its swift/config/zero*.json), every other key named as ignored with a reason, and hostile values refused by key."""

from pathlib import Path

import pytest
import yaml

from zerocalc.frameworks import FrameworkConfigError, guess_format, import_config, import_swift
from zerocalc.frameworks.swift import presets
from zerocalc.frameworks.swift.script import script_arguments

FIX = Path(__file__).resolve().parent / "fixtures" / "launchers"
MODEL = "model: Qwen/Qwen2.5-7B-Instruct\n"


def text(name: str) -> str:
    return (FIX / f"swift_{name}").read_text()


def test_the_lora_script_is_lora_on_all_linear_layers_on_one_process():
    got = import_config("swift", text("lora_sft.sh"))
    assert got.model == "qwen2.5-7b"                             # Qwen/Qwen2.5-7B-Instruct
    assert got.finetune == {"mode": "lora", "lora_rank": 8, "lora_dropout": 0.05, "lora_targets": ("all-linear",),
                            "base_dtype": "bf16"}
    assert got.scenario["workers"] == 1                         # CUDA_VISIBLE_DEVICES=0, no NPROC_PER_NODE
    assert got.workload["micro_batch"] == 1 and got.layout["micro_batches"] == 16
    assert got.workload["seq_len"] == 2048 and got.workload["recompute"] == "full"   # gradient_checkpointing True
    assert got.scenario["param_dtype"] == "fp32" and got.workload["activation_dtype"] == "bf16"  # fp32 adapters


def test_the_qlora_and_full_scripts():
    qlora = import_swift(text("qlora_bnb_train.sh"))
    assert qlora.finetune["mode"] == "qlora" and qlora.finetune["quant_type"] == "nf4"
    assert qlora.finetune["double_quant"] is True
    assert qlora.finetune["kbit_prepare"] is False       # no prepare_model_for_kbit_training: no fp32 stream
    full = import_swift(text("full_train.sh"))
    assert full.finetune == {"mode": "full"} and full.scenario["param_dtype"] == "bf16"   # trained as loaded
    assert full.scenario["optimizer_dtype"] == "bf16" and full.scenario["convention"] == "pure-bf16"


def test_the_zero3_script_resolves_its_shell_arithmetic_and_follows_the_shipped_preset():
    command, flags, env = script_arguments(text("multi_gpu_deepspeed_train_zero3.sh"))
    assert command == "sft" and env["NPROC_PER_NODE"] == "2"
    assert flags["gradient_accumulation_steps"] == 8             # $(expr 16 / $nproc_per_node)
    got = import_config("swift", text("multi_gpu_deepspeed_train_zero3.sh"))
    assert got.scenario["workers"] == 2 and got.selected_stage == 3
    assert got.scenario["master_dtype"] == "fp32" and got.scenario["param_dtype"] == "bf16"
    assert any("swift/config/zero3.json" in n and "followed" in n for n in got.notes)
    assert presets.DEEPSPEED["zero3"]["zero_optimization"]["stage"] == 3


def test_the_config_yaml_and_json_read_alike_with_zero2():
    yaml_got = import_config("swift", text("yaml_deepspeed_sft.yaml"))
    json_got = import_config("swift", text("yaml_deepspeed_sft.json"))
    for got in (yaml_got, json_got):
        assert got.selected_stage == 2 and got.layout["micro_batches"] == 8 and "workers" not in got.scenario
    assert yaml_got.finetune == json_got.finetune and yaml_got.workload == json_got.workload


def test_dpo_concatenates_chosen_and_rejected():
    got = import_swift(text("rlhf_dpo_lora.sh"))
    assert got.workload["micro_batch"] == 2
    ignored = {i["key"]: i["reason"] for i in got.ignored_keys}
    assert "loss coefficient" in ignored["rpo_alpha"] and "dataset" in ignored["dataset"]


def test_every_key_is_used_or_named_ignored_with_a_reason():
    for path in FIX.glob("swift_*"):
        if path.suffix == ".source":
            continue
        got = import_swift(path.read_text())
        keys = script_arguments(path.read_text())[1] if path.suffix == ".sh" else yaml.safe_load(path.read_text())
        ignored = {i["key"] for i in got.ignored_keys}
        used = {s.split(" ")[0] for s in got.sources.values()} | {"model", "torch_dtype", "tuner_type",
                                                                   "quant_method", "quant_bits", "deepspeed",
                                                                   "bnb_4bit_quant_type", "rlhf_type"}
        for key in keys:
            assert key in ignored or key in used, (path.name, key)
        assert all(i["reason"] for i in got.ignored_keys)


def test_defaults_fsdp2_preset_and_the_world_size():
    got = import_swift("model: Qwen/Qwen3-8B\n")
    assert got.finetune["mode"] == "lora" and got.finetune["lora_targets"] == ("all-linear",)
    assert got.workload["micro_batch"] == 1 and got.layout["micro_batches"] == 16   # ceil(16 / 1 / 1)
    assert any("torch_dtype absent" in n for n in got.notes) and "workers" not in got.scenario
    fsdp = import_swift(MODEL + "torch_dtype: bfloat16\nfsdp: fsdp2\ntuner_type: full\n")
    assert fsdp.selected_stage == 3 and fsdp.workload["recompute"] == "full"   # fsdp2.json activation_checkpointing
    script = import_swift("NPROC_PER_NODE=4 NNODES=2 swift sft --model Qwen/Qwen3-8B --per_device_train_batch_size 2 "
                          "--attn_impl eager --target_modules q_proj v_proj --lora_dtype bfloat16\n")
    assert script.scenario["workers"] == 8 and script.layout["micro_batches"] == 1   # ceil(16 / 2 / 8)
    assert script.workload["attention"] == "eager" and script.finetune["lora_targets"] == ("q", "v")
    assert script.finetune["adapter_dtype"] == "bf16"


@pytest.mark.parametrize("body, field", [
    ("torch_dtype: int4\n", "torch_dtype"), ("lora_rank: 0\n", "lora_rank"), ("quant_bits: 4\n", "quant_bits"),
    ("quant_method: bnb\n", "quant_method"), ("quant_method: bnb\nquant_bits: 4\ntuner_type: full\n", "quant_bits"),
    ("bf16: true\nfp16: true\n", "fp16"), ("attn_impl: flash\n", "attn_impl"), ("rlhf_type: magic\n", "rlhf_type"),
    ("deepspeed: zero3\nfsdp: fsdp2\n", "fsdp"), ("modules_to_save: [mlp]\n", "modules_to_save"),
    ("per_device_train_batch_size: -1\n", "per_device_train_batch_size"), ("max_length: 0\n", "max_length"),
    ("deepspeed: zero9\n", "deepspeed"),
])
def test_hostile_values_are_refused_by_name(body, field):
    with pytest.raises(FrameworkConfigError) as exc:
        import_config("swift", MODEL + body, read=lambda path: b'{"zero_optimization": {"stage": 9}}')
    assert exc.value.field.split(" ")[0].split(":")[0] == field


def test_a_script_that_runs_no_swift_command_or_leaves_a_quote_open_is_refused():
    for body in ("swift sft --model 'Qwen\n", "python train.py --model x\n"):
        with pytest.raises(FrameworkConfigError) as exc:
            import_swift(body if "swift" in body else body.replace("python", "swift sftx"))
        assert exc.value.field == "config"


def test_swift_files_are_recognised():
    for path in FIX.glob("swift_*"):
        if path.suffix != ".source":
            assert guess_format(path.name, path.read_bytes()) == "swift", path.name
