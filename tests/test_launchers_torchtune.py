"""torchtune recipe YAMLs (tests/fixtures/launchers/torchtune_*.yaml, pytorch/torchtune recipes/configs/ at the
commit in each .source) import to the plan the recipes say (recipes/*.py at that commit: the whole model, adapters
included, built in dtype with no fp32 copy; FSDP2 fully_shard in the distributed recipes, reshard after forward by
default; the LoRA builders' defaults in torchtune/models/*/_model_builders.py; qlora_X = lora_X with
quantize_base=True), the recipe read from the header comment, every other key named as ignored with a reason, and
hostile values refused by key."""

from pathlib import Path

import pytest
import yaml

from zerocalc.frameworks import FrameworkConfigError, guess_format, import_config, import_torchtune

FIX = Path(__file__).resolve().parent / "fixtures" / "launchers"
SINGLE = "# Config for single device LoRA finetuning in lora_finetune_single_device.py\n"
LORA = ("model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n  lora_attn_modules: [q_proj, v_proj]\n"
        "batch_size: 2\ngradient_accumulation_steps: 1\ndtype: bf16\n")


def text(name: str) -> str:
    return (FIX / f"torchtune_{name}.yaml").read_text()


def test_the_single_device_lora_recipe_is_bf16_lora_on_one_gpu():
    got = import_config("torchtune", text("llama3_1_8B_lora_single_device"))
    assert got.model == "llama-3.1-8b" and got.selected_stage is None
    assert got.finetune == {"mode": "lora", "lora_rank": 8, "lora_dropout": 0.0,
                            "lora_targets": ("q", "v", "o", "gate", "up", "down"),       # apply_lora_to_mlp
                            "adapter_dtype": "bf16", "base_dtype": "bf16"}
    assert got.scenario["workers"] == 1
    assert (got.scenario["param_dtype"], got.scenario["grad_dtype"], got.scenario["optimizer_dtype"]) == \
        ("bf16", "bf16", "bf16")
    assert got.scenario["master_dtype"] is None
    assert got.scenario["optimizer"] == "adamw" and got.scenario["optimizer_impl"] == "fused"
    assert got.workload["micro_batch"] == 2 and got.layout["micro_batches"] == 8
    assert got.workload["recompute"] == "full" and got.workload["attention"] == "flash"
    assert got.workload["loss"] == "chunked" and got.workload["loss_chunks"] == 8
    assert "seq_len" not in got.workload                     # tokenizer.max_seq_len: null
    assert any(n.startswith("recipe lora_finetune_single_device") for n in got.notes)


def test_qlora_is_nf4_without_peft_s_fp32_upcast():
    got = import_torchtune(text("llama3_1_8B_qlora_single_device"))
    assert got.finetune["mode"] == "qlora" and got.finetune["quant_type"] == "nf4"
    assert got.finetune["double_quant"] is True and got.finetune["kbit_prepare"] is False
    big = import_torchtune(text("llama3_3_70B_qlora"))
    assert big.model == "llama-3.1-70b" and big.selected_stage == 3     # llama3_3_70b = llama3_1_70b
    assert big.finetune["lora_rank"] == 16


def test_the_distributed_full_recipe_shards_bf16_weights_with_fsdp2():
    got = import_torchtune(text("llama3_1_8B_full"))
    assert got.finetune == {"mode": "full"} and got.selected_stage == 3
    assert got.scenario["param_dtype"] == "bf16" and got.scenario["comm_dtype"] is None
    assert "workers" not in got.scenario and got.workload["comm_buffers"] == "fsdp"
    ignored = {i["key"]: i["reason"] for i in got.ignored_keys}
    assert "own FSDP units" in ignored["custom_sharded_layers"]
    offload = import_torchtune(text("llama3_1_70B_full"))
    assert offload.scenario["offload_params"] == "cpu" and offload.scenario["offload_optimizer"] == "cpu"
    assert offload.scenario["optimizer_impl"] == "foreach"        # fused: False, foreach torch's default


def test_the_single_device_full_recipe_steps_the_optimizer_in_backward():
    got = import_torchtune(text("llama3_1_8B_full_single_device"))
    assert got.workload["optimizer_in_backward"] is True and got.scenario["optimizer"] == "paged-adamw-8bit"
    assert got.scenario["workers"] == 1


def test_dpo_concatenates_chosen_and_rejected_and_reads_max_seq_len():
    got = import_torchtune(text("llama3_1_8B_lora_dpo_single_device"))
    assert got.workload["micro_batch"] == 8 and got.workload["seq_len"] == 1024
    assert "loss" not in got.workload and any("DPOLoss" in n for n in got.notes)


def test_the_distributed_lora_recipe_and_qwen3():
    got = import_torchtune(text("llama3_1_8B_lora"))
    assert got.selected_stage == 3 and got.workload["recompute"] == "none"
    assert import_torchtune(text("qwen3_8B_lora_single_device")).model == "qwen3-8b"


def test_every_key_of_the_file_is_used_or_named_ignored_with_a_reason():
    for path in FIX.glob("torchtune_*.yaml"):
        data = yaml.safe_load(path.read_text())
        got = import_torchtune(path.read_text())
        ignored = {i["key"].split(".")[0] for i in got.ignored_keys}
        used = {s.split(" ")[0].split(".")[0].split(":")[0] for s in got.sources.values()} | {
            "model", "dtype", "tokenizer", "dataset", "loss", "optimizer", "compile", "optimizer_in_bwd",
            "enable_activation_offloading", "fsdp_cpu_offload", "tensor_parallel_dim"}
        for key in data:
            assert key in ignored or key in used, (path.name, key)
        assert all(i["reason"] for i in got.ignored_keys)


def test_without_a_recipe_name_the_fsdp_keys_decide_and_a_note_says_so():
    single = import_torchtune(LORA)
    assert single.scenario["workers"] == 1 and any("assumed a single-device" in n for n in single.notes)
    dist = import_torchtune(LORA + "fsdp_cpu_offload: false\nfsdp_reshard_after_forward: false\n")
    assert dist.selected_stage == 2 and any("assumed a distributed" in n for n in dist.notes)


def test_packing_compile_offloading_and_parallel_dims():
    got = import_torchtune("# tune run --nproc_per_node 8 full_finetune_distributed --config x\n"
                           "model:\n  _component_: torchtune.models.qwen3.qwen3_8b_base\ntokenizer:\n  max_seq_len: "
                           "4096\ndataset:\n  - packed: true\n  - packed: false\nbatch_size: 1\n"
                           "gradient_accumulation_steps: 1\ndtype: fp32\ncompile: true\nenable_activation_"
                           "checkpointing: true\nenable_activation_offloading: true\ntensor_parallel_dim: 2\n"
                           "context_parallel_dim: 2\nloss:\n  _component_: torch.nn.CrossEntropyLoss\n"
                           "optimizer:\n  _component_: torch.optim.SGD\n  momentum: 0.9\n")
    assert got.workload["seq_len"] == 4096 and any(n.startswith("dataset.packed") for n in got.notes)
    assert got.workload["compile"] is True and got.workload["loss"] == "compiled-fp32"
    assert got.workload["activation_offload"] is True and got.scenario["param_dtype"] == "fp32"
    assert got.layout["tp"] == 2 and got.layout["cp"] == 2 and got.scenario["optimizer"] == "sgd-momentum"
    assert got.model == "qwen3-8b" and got.finetune == {"mode": "full"}


@pytest.mark.parametrize("body, field", [
    ("dtype: fp16\n", "dtype"), ("dtype: int8\n", "dtype"), ("batch_size: 0\n", "batch_size"),
    ("optimizer_in_bwd: true\ngradient_accumulation_steps: 4\n", "optimizer_in_bwd"),
    ("enable_activation_offloading: true\n", "enable_activation_offloading"),
    ("tokenizer: {max_seq_len: -1}\n", "tokenizer.max_seq_len"),
    ("dataset: {packed: true}\n", "dataset.packed"),
    ("model: {_component_: torchtune.models.llama3_1.lora_llama3_1_8b}\n", "model.lora_attn_modules"),
    ("model: {_component_: torchtune.models.llama3_1.lora_llama3_1_8b, lora_attn_modules: [w1]}\n",
     "model.lora_attn_modules"),
    ("model: {_component_: torchtune.models.llama3_1.lora_llama3_1_8b, lora_attn_modules: [q_proj], lora_rank: "
     "-8}\n", "model.lora_rank"), ("model: [1]\n", "model"), ("fsdp_reshard_after_forward: maybe\n",
                                                            "fsdp_reshard_after_forward"),
    ("data_parallel_shard_dim: 0\ndata_parallel_replicate_dim: 2\n", "data_parallel_shard_dim"),
    ("loss: {_component_: torchtune.modules.loss.CEWithChunkedOutputLoss, num_output_chunks: 0}\n",
     "loss.num_output_chunks"), ("- a list\n", "config"),
])
def test_hostile_values_are_refused_by_name(body, field):
    with pytest.raises(FrameworkConfigError) as exc:
        import_torchtune(body if body.startswith("- ") else "gradient_accumulation_steps: 1\n" + body
                         if "gradient_accumulation_steps" not in body else body)
    assert exc.value.field == field


def test_torchtune_files_are_recognised_by_their_model_component():
    for path in FIX.glob("torchtune_*.yaml"):
        assert guess_format(path.name, path.read_bytes()) == "torchtune", path.name
