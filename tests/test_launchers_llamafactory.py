"""LLaMA-Factory training YAMLs (tests/fixtures/launchers/llamafactory_*.yaml, hiyouga/LLaMA-Factory examples at the
commit in each .source) import to the plan LLaMA-Factory's defaults say (src/llamafactory/hparams/ at that commit:
finetuning_type lora, lora_rank 8, lora_target all, cutoff_len 2048, flash_attn auto, gradient checkpointing on,
packing on for stage pt), every other key named as ignored with a reason, and hostile values refused by key."""

from pathlib import Path

import pytest
import yaml

from zerocalc.frameworks import FrameworkConfigError, import_config, import_llamafactory

FIX = Path(__file__).resolve().parent / "fixtures" / "launchers"


def text(name: str) -> str:
    return (FIX / f"llamafactory_{name}").read_text()


def read_beside(path: str) -> bytes:
    """The examples name examples/deepspeed/ds_z3_config.json; the fixture keeps its file name with a prefix."""
    return (FIX / f"llamafactory_{Path(path).name}").read_bytes()


def test_the_lora_example_reads_lora_rank_8_on_all_linear_layers_at_2048_tokens():
    got = import_config("llamafactory", text("qwen3_lora_sft.yaml"))
    assert got.model == "qwen3-4b"                               # Qwen/Qwen3-4B-Instruct-2507
    assert got.finetune == {"mode": "lora", "lora_rank": 8, "lora_targets": ("all-linear",), "lora_dropout": 0.0,
                            "base_dtype": "bf16"}
    assert got.workload["seq_len"] == 2048 and got.workload["micro_batch"] == 1
    assert got.layout["micro_batches"] == 8                      # gradient_accumulation_steps
    assert got.workload["recompute"] == "full"                   # disable_gradient_checkpointing defaults to false
    assert got.workload["attention"] == "flash"                  # flash_attn auto: SDPA
    assert got.workload["activation_dtype"] == "bf16"
    # no deepspeed: the Trainer's AMP, fp32 trainable weights (model/adapter.py cast_trainable_params_to_fp32)
    assert got.scenario["param_dtype"] == "fp32" and got.scenario["master_dtype"] is None
    assert got.scenario["optimizer"] == "adamw" and got.scenario["optimizer_impl"] == "fused"
    assert got.selected_stage is None and got.follows == ()


def test_every_key_of_the_file_is_used_or_named_ignored_with_a_reason():
    for name in ("qwen3_lora_sft.yaml", "qwen3_full_sft.yaml", "qwen3_lora_dpo.yaml", "qwen3_lora_sft_otfq.yaml"):
        data = yaml.safe_load(text(name))
        got = import_llamafactory(text(name))
        ignored = {i["key"]: i["reason"] for i in got.ignored_keys}
        used = {s.split(" ")[0] for s in got.sources.values()} | {"model_name_or_path", "stage", "bf16", "deepspeed",
                                                                   "finetuning_type", "quantization_method"}
        for key in data:
            assert key in ignored or key in used, (name, key)
        assert all(reason for reason in ignored.values())
        assert "dataset selection" in ignored["dataset"] and "bookkeeping" in ignored["learning_rate"]


def test_the_full_example_follows_its_deepspeed_zero3_file():
    got = import_config("llamafactory", text("qwen3_full_sft.yaml"), read=read_beside)
    assert got.finetune == {"mode": "full"}
    assert got.selected_stage == 3                               # ds_z3_config.json zero_optimization.stage
    # bf16 "auto" in the DeepSpeed file is the YAML's bf16: true (HfTrainerDeepSpeedConfig.trainer_config_process)
    assert got.scenario["param_dtype"] == "bf16" and got.scenario["master_dtype"] == "fp32"
    assert got.layout["micro_batches"] == 2 and got.workload["micro_batch"] == 1
    assert any(k["key"].startswith("deepspeed (examples/deepspeed/ds_z3_config.json): ") for k in got.ignored_keys)
    assert any("followed" in n for n in got.notes)


def test_without_a_reader_the_deepspeed_file_is_named_not_followed():
    got = import_config("llamafactory", text("qwen3_lora_sft_ds3.yaml"))
    assert got.selected_stage is None
    assert any("examples/deepspeed/ds_z3_config.json: not followed" in n for n in got.notes)


def test_quantization_bit_4_is_qlora_nf4_with_double_quantization():
    got = import_llamafactory(text("qwen3_lora_sft_otfq.yaml"))
    assert got.finetune["mode"] == "qlora" and got.finetune["quant_type"] == "nf4"
    assert got.finetune["double_quant"] is True                 # model_args.py double_quantization default
    # no prepare_model_for_kbit_training (model_utils/checkpointing.py): the embeddings and norms stay bf16
    assert got.finetune["kbit_prepare"] is False


def test_quantization_bit_8_is_int8_and_fp4_is_read():
    base = yaml.safe_load(text("qwen3_lora_sft_otfq.yaml"))
    assert import_llamafactory(yaml.safe_dump({**base, "quantization_bit": 8})).finetune["quant_type"] == "int8"
    fp4 = {**base, "quantization_type": "fp4"}
    assert import_llamafactory(yaml.safe_dump(fp4)).finetune["quant_type"] == "fp4"


def test_dpo_and_reward_stages_count_chosen_and_rejected_in_one_batch():
    assert import_llamafactory(text("qwen3_lora_dpo.yaml")).workload["micro_batch"] == 2
    assert import_llamafactory(text("qwen3_lora_reward.yaml")).workload["micro_batch"] == 2


def test_pretraining_packs_by_default():
    got = import_llamafactory(text("qwen3_lora_pretrain.yaml"))
    assert any(n.startswith("packing:") for n in got.notes)
    assert any(n.startswith("no packing") for n in import_llamafactory(text("qwen3_lora_sft.yaml")).notes)


def test_a_gptq_checkpoint_is_named_as_not_modelled():
    got = import_llamafactory(text("llama3_lora_sft_gptq.yaml"))
    assert got.model == "llama-3-8b"          # TechxGenus/Meta-Llama-3-8B-Instruct-GPTQ: the shapes, unquantized
    assert any("GPTQ checkpoint" in n for n in got.notes)


def test_defaults_when_the_method_keys_are_absent():
    got = import_llamafactory("model_name_or_path: Qwen/Qwen3-8B\n")
    assert got.finetune["mode"] == "lora" and got.finetune["lora_rank"] == 8      # finetuning_args.py defaults
    assert got.workload["seq_len"] == 2048 and got.workload["micro_batch"] == 8  # cutoff_len; TrainingArguments
    assert got.workload["activation_dtype"] == "fp32" and "base_dtype" not in got.finetune


def test_freeze_pure_bf16_attention_and_checkpointing_switches():
    got = import_llamafactory("finetuning_type: freeze\nfreeze_trainable_layers: 4\nfreeze_extra_modules: "
                              "embed_tokens,norm\npure_bf16: true\nflash_attn: disabled\n"
                              "disable_gradient_checkpointing: true\nlora_target: q_proj,v_proj\n")
    assert got.finetune["mode"] == "freeze" and got.finetune["train_last_layers"] == 4
    assert got.finetune["train_modules"] == ("embed_tokens", "norms")
    assert got.scenario["param_dtype"] == "bf16" and got.scenario["optimizer_dtype"] == "bf16"
    assert got.workload["attention"] == "eager" and got.workload["recompute"] == "none"
    lora = import_llamafactory("lora_target: q_proj,v_proj\nuse_dora: true\n")
    assert lora.finetune["lora_targets"] == ("q", "v") and lora.finetune["mode"] == "dora"


@pytest.mark.parametrize("yaml_text, field", [
    ("lora_rank: '8'\n", "lora_rank"), ("lora_rank: 0\n", "lora_rank"), ("finetuning_type: bogus\n", "finetuning_type"),
    ("cutoff_len: -1\n", "cutoff_len"), ("bf16: true\nfp16: true\n", "fp16"), ("quantization_bit: 5\n",
                                                                               "quantization_bit"),
    ("quantization_bit: 4\nfinetuning_type: full\n", "quantization_bit"), ("stage: grpo\n", "stage"),
    ("pure_bf16: true\ndeepspeed: ds.json\n", "pure_bf16"), ("flash_attn: fa9\n", "flash_attn"),
    ("per_device_train_batch_size: 1.5\n", "per_device_train_batch_size"), ("lora_dropout: 2\n", "lora_dropout"),
    ("additional_target: mlp\n", "additional_target"), ("- a list\n", "config"), ("a: [\n", "config"),
    ("gradient_accumulation_steps: true\n", "gradient_accumulation_steps"), ("deepspeed: 3\n", "deepspeed"),
])
def test_hostile_values_are_refused_by_name(yaml_text, field):
    with pytest.raises(FrameworkConfigError) as exc:
        import_llamafactory(yaml_text)
    assert exc.value.field == field


def test_a_refusal_in_the_followed_file_names_the_file_and_its_key():
    bad = b'{"zero_optimization": {"stage": 7}}'
    with pytest.raises(FrameworkConfigError) as exc:
        import_config("llamafactory", "deepspeed: ds.json\n", read=lambda path: bad)
    assert exc.value.field.startswith("deepspeed (ds.json): zero_optimization.stage")
