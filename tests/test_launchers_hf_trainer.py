"""Hugging Face TrainingArguments / TRL SFTConfig and DPOConfig files (tests/fixtures/launchers: the
alignment-handbook recipes and TRL's CLI example, at the commits in each .source) import to the plan the
defaults say: transformers TrainingArguments (per_device_train_batch_size 8, gradient_accumulation_steps 1,
gradient_checkpointing false, optim adamw_torch_fused) and TRL's ModelConfig (use_peft false, lora_r 16,
use_bnb_nested_quant false)."""

import json
from pathlib import Path

import pytest
import yaml

from zerocalc.frameworks import FrameworkConfigError, import_config, import_hf_trainer
from zerocalc.frameworks.hf_trainer.arguments import OPTIM
from zerocalc.tables import OPTIMIZER_IMPLS, OPTIMIZER_NAMES

FIX = Path(__file__).resolve().parent / "fixtures" / "launchers"
DS_Z3 = FIX / "llamafactory_ds_z3_config.json"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_the_zephyr_qlora_recipe_is_qlora_rank_16_on_every_projection():
    got = import_hf_trainer(text("handbook_zephyr-7b-beta_sft_config_qlora.yaml"))
    assert got.model == "mistral-7b"                             # mistralai/Mistral-7B-v0.1
    assert got.finetune == {"mode": "qlora", "quant_type": "nf4", "double_quant": False, "lora_rank": 16,
                            "lora_dropout": 0.05, "lora_targets": ("q", "k", "v", "o", "gate", "up", "down"),
                            "base_dtype": "bf16", "kbit_prepare": False}    # TRL >= 0.26: no kbit preparation
    assert any("TRL before 0.26" in n for n in got.notes)
    assert got.workload["micro_batch"] == 4 and got.layout["micro_batches"] == 2
    assert got.workload["seq_len"] == 2048                       # max_seq_length (TRL's older name)
    assert got.workload["recompute"] == "full" and got.workload["attention"] == "flash"
    assert got.scenario["optimizer_impl"] == "fused"             # optim absent: adamw_torch_fused


def test_the_smollm2_recipe_is_a_full_fine_tune_at_8192_tokens():
    got = import_hf_trainer(text("handbook_smollm2_sft_config.yaml"))
    assert got.finetune == {"mode": "full"} and got.model == ""  # no SmolLM2 preset: a note says so
    assert got.workload["seq_len"] == 8192 and got.workload["micro_batch"] == 4
    assert got.scenario["param_dtype"] == "fp32" and got.workload["activation_dtype"] == "bf16"
    assert any("no preset matches" in n for n in got.notes)


def test_the_dpo_recipe_doubles_the_micro_batch_and_reads_adamw_torch_as_foreach():
    got = import_hf_trainer(text("handbook_zephyr-7b-beta_dpo_config_full.yaml"))
    assert got.workload["micro_batch"] == 16                     # 8 chosen + 8 rejected, concatenated
    assert got.workload["seq_len"] == 1024
    assert got.scenario["optimizer"] == "adamw" and got.scenario["optimizer_impl"] == "foreach"


def test_the_trl_cli_example_keeps_the_trainer_defaults():
    got = import_hf_trainer(text("trl_cli_example_config.yaml"))
    assert got.model == "qwen2.5-0.5b"
    assert got.workload["micro_batch"] == 8 and got.layout["micro_batches"] == 1
    assert got.workload["recompute"] == "none" and "seq_len" not in got.workload
    assert {i["key"] for i in got.ignored_keys} == {"dataset_name", "report_to", "learning_rate", "lr_scheduler_type"}


def test_every_key_of_the_recipes_is_used_or_named_ignored_with_a_reason():
    for name in ("handbook_zephyr-7b-beta_sft_config_qlora.yaml", "handbook_smollm2_sft_config.yaml",
                 "handbook_zephyr-7b-beta_dpo_config_full.yaml"):
        got = import_hf_trainer(text(name))
        ignored = {i["key"]: i["reason"] for i in got.ignored_keys}
        assert all(ignored.values())
        for key in yaml.safe_load(text(name)):
            assert key in ignored or any(key in s for s in got.sources.values()) or key in (
                "model_name_or_path", "bf16", "use_peft", "load_in_4bit", "beta"), (name, key)


def test_json_training_args_with_an_inline_deepspeed_config_are_followed():
    args = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "bf16": True,
            "deepspeed": json.loads(DS_Z3.read_text()), "optim": "adamw_bnb_8bit"}
    got = import_config("hf_trainer", json.dumps(args))
    assert got.selected_stage == 3 and got.scenario["param_dtype"] == "bf16"
    assert got.scenario["optimizer"] == "adamw-8bit-bnb"
    by_path = import_config("hf_trainer", json.dumps({**args, "deepspeed": "ds.json"}),
                            read=lambda path: DS_Z3.read_bytes())
    assert by_path.selected_stage == 3


def test_every_optim_maps_to_a_zerocalc_optimizer():
    for name, (optimizer, impl) in OPTIM.items():
        assert optimizer in OPTIMIZER_NAMES, name
        assert impl is None or impl in OPTIMIZER_IMPLS, name


@pytest.mark.parametrize("data, field", [
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size"), ({"bf16": "yes"}, "bf16"),
    ({"bf16": True, "fp16": True}, "fp16"), ({"max_length": -5}, "max_length"),
    ({"use_peft": True, "load_in_4bit": True, "load_in_8bit": True}, "load_in_8bit"),
    ({"use_peft": True, "lora_r": 0}, "lora_r"), ({"attn_implementation": "magic"}, "attn_implementation"),
    ({"use_peft": True, "lora_target_modules": 5}, "lora_target_modules"), ({"optim": 3}, "optim"),
    ({"gradient_checkpointing": "true"}, "gradient_checkpointing"),
])
def test_hostile_values_are_refused_by_name(data, field):
    for source in (json.dumps(data), yaml.safe_dump(data)):
        with pytest.raises(FrameworkConfigError) as exc:
            import_hf_trainer(source)
        assert exc.value.field == field


# --- FSDP and checkpointing, as transformers 5.24 training_args.py reads them (_process_fsdp_args,
# _apply_legacy_fsdp_to_config, __post_init__'s activation_checkpointing alias) -----------------------------------

@pytest.mark.parametrize("fsdp, config, stage, offload", [
    (True, {}, 3, "none"),                                            # version 2, reshard_after_forward true
    (True, {"reshard_after_forward": False}, 2, "none"),
    ("full_shard auto_wrap offload", {}, 3, "cpu"),                  # the legacy string
    (["shard_grad_op"], {"fsdp_version": 2}, 2, "none"),             # the fsdp_ prefix is stripped
    ("shard_grad_op", {"version": 1}, 2, "none"), ("hybrid_shard", {"version": 1}, 3, "none"),
    (True, {"version": 1, "reshard_after_forward": "no_shard", "cpu_offload": "true"}, 0, "cpu"),
])
def test_fsdp_selects_the_stage_and_offload(fsdp, config, stage, offload):
    got = import_hf_trainer(json.dumps({"fsdp": fsdp, "fsdp_config": config, "bf16": True}))
    assert got.selected_stage == stage
    assert got.scenario["offload_params"] == offload and got.scenario["offload_optimizer"] == offload
    assert got.scenario["param_dtype"] == "fp32" and got.scenario["comm_dtype"] == "bf16"
    assert got.workload["comm_buffers"] == "fsdp"
    assert not [i for i in got.ignored_keys if i["key"].startswith("fsdp_config.")]


def test_fsdp_activation_checkpointing_and_the_checkpointing_names():
    got = import_hf_trainer(json.dumps({"fsdp": True, "fsdp_config": {"activation_checkpointing": True}}))
    assert got.workload["recompute"] == "full"
    # activation_checkpointing is the new name; gradient_checkpointing is used only when it is unset
    new = import_hf_trainer(json.dumps({"activation_checkpointing": False, "gradient_checkpointing": True}))
    assert new.workload["recompute"] == "none"
    every = import_hf_trainer(json.dumps({"activation_checkpointing": True,
                                          "activation_checkpointing_kwargs": {"every_n_layers": 2}}))
    assert every.workload["recompute"] == "full" and every.workload["recompute_every"] == 2


@pytest.mark.parametrize("data, field", [
    ({"fsdp": "hybrid_shard"}, "fsdp"),                              # FSDP1 only: refused under version 2
    ({"fsdp": "full_shard bogus"}, "fsdp"), ({"fsdp": 3}, "fsdp"),
    ({"fsdp": True, "fsdp_config": {"version": 3}}, "fsdp_config.version"),
    ({"fsdp": True, "fsdp_config": {"reshard_after_forward": "maybe"}}, "fsdp_config.reshard_after_forward"),
    ({"fsdp": True, "deepspeed": "ds.json"}, "fsdp"),
])
def test_fsdp_refusals_name_the_key(data, field):
    with pytest.raises(FrameworkConfigError) as exc:
        import_hf_trainer(json.dumps(data))
    assert exc.value.field == field
