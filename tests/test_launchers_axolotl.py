"""axolotl training YAMLs (tests/fixtures/launchers/axolotl_*, axolotl-ai-cloud/axolotl examples/ at the commit in
each .source) import to the plan axolotl's defaults say (src/axolotl/utils/schemas/ and utils/config/__init__.py
at that commit: sequence_len 512, micro_batch_size 1, gradient_accumulation_steps 1, optimizer adamw_torch_fused,
bf16 auto, attn_implementation None (SDPA), gradient_checkpointing False, no adapter = a full fine-tune in the
loaded dtype; qlora = bnb nf4 with double quantization, loaders/model.py), every other key named as ignored with a
reason, the DeepSpeed file followed, FSDP read as TrainingArguments receives it, and hostile values refused by key."""

from pathlib import Path

import pytest
import yaml

from zerocalc.frameworks import FrameworkConfigError, guess_format, import_axolotl, import_config

FIX = Path(__file__).resolve().parent / "fixtures" / "launchers"
BASE = "base_model: NousResearch/Meta-Llama-3-8B\nmicro_batch_size: 2\ngradient_accumulation_steps: 4\n"


def text(name: str) -> str:
    return (FIX / f"axolotl_{name}").read_text()


def read_beside(path: str) -> bytes:
    """The examples name deepspeed_configs/...json from the repository root; the fixture keeps the name, prefixed."""
    return (FIX / f"axolotl_{Path(path).name}").read_bytes()


def test_the_8bit_lora_example_is_lora_on_an_int8_base_with_the_embeddings_saved():
    got = import_config("axolotl", text("llama3_lora_8b.yml"))
    assert got.model == "llama-3-8b"                             # NousResearch/Meta-Llama-3-8B
    assert got.finetune == {"mode": "qlora", "quant_type": "int8", "lora_rank": 32, "lora_dropout": 0.05,
                            "lora_targets": ("all-linear",), "modules_to_save": ("embed_tokens", "lm_head"),
                            "base_dtype": "bf16", "kbit_prepare": False}
    assert got.workload["micro_batch"] == 2 and got.layout["micro_batches"] == 4
    assert got.workload["seq_len"] == 4096 and got.workload["recompute"] == "full"
    assert got.workload["attention"] == "flash" and got.workload["activation_dtype"] == "bf16"
    assert got.scenario["optimizer"] == "adamw-8bit-bnb"        # optimizer: adamw_bnb_8bit
    # the adapters train in fp32 (peft autocast_adapter_dtype) under the Trainer's bf16 autocast
    assert got.scenario["param_dtype"] == "fp32" and got.scenario["optimizer_dtype"] == "fp32"
    assert got.selected_stage is None and got.follows == ()
    assert any(n.startswith("bf16 auto: bf16") for n in got.notes)


def test_the_qlora_example_is_nf4_with_double_quantization_and_paged_adam():
    got = import_axolotl(text("llama3_qlora.yml"))
    assert got.finetune["mode"] == "qlora" and got.finetune["quant_type"] == "nf4"
    assert got.finetune["double_quant"] is True and got.finetune["lora_rank"] == 32
    assert got.scenario["optimizer"] == "paged-adamw"           # paged_adamw_32bit
    # prepare_model_for_kbit_training's fp32 upcast is undone: loaders/model.py casts the norms and embeddings back
    # to the loaded dtype (should_convert), so nothing but the adapters is fp32
    assert got.finetune["kbit_prepare"] is False
    assert "should_convert" in got.sources["finetune.kbit_prepare"]


def test_a_full_fine_tune_trains_the_weights_in_the_loaded_bf16():
    got = import_axolotl(text("llama3_fft_8b.yaml"))
    assert got.model == "llama-3.1-8b" and got.finetune == {"mode": "full"}
    # resolve_dtype loads the model in bf16 and nothing upcasts it outside FSDP / DeepSpeed
    assert (got.scenario["param_dtype"], got.scenario["grad_dtype"], got.scenario["optimizer_dtype"]) == \
        ("bf16", "bf16", "bf16")
    assert got.scenario["master_dtype"] is None and got.scenario["optimizer"] == "paged-adamw-8bit"
    assert got.workload["seq_len"] == 8192 and got.layout["micro_batches"] == 8
    assert any(n.startswith("sample_packing:") for n in got.notes)


def test_a_full_fine_tune_under_sdpa_keeps_fp32_embeddings_and_norms():
    """loaders/model.py _configure_embedding_dtypes: outside FSDP the embeddings, head and norms go to fp32 after
    loading and come back only for kernels other than SDPA / eager (attn_needs_dtype_cast) or cut_cross_entropy;
    tests/test_fp32_stream.py checks what that costs."""
    flash = import_axolotl(text("llama3_fft_8b.yaml"))                   # attn_implementation: flash_attention_2
    assert "fp32_parts" not in flash.finetune
    body = yaml.safe_load(text("llama3_fft_8b.yaml"))
    for attention in (None, "sdpa", "eager"):
        edited = {k: v for k, v in body.items() if k != "attn_implementation"}
        if attention:
            edited["attn_implementation"] = attention
        assert import_axolotl(yaml.safe_dump(edited)).finetune["fp32_parts"] == "embed-head-norms", attention
        edited["plugins"] = ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"]
        assert "fp32_parts" not in import_axolotl(yaml.safe_dump(edited)).finetune, attention


def test_fp32_norms_keeps_the_norms_in_fp32_where_the_rest_is_cast_back():
    """utils/fp32_norms.py: fp32_norms keeps the norm classes in fp32 when loaders/model.py casts the rest back
    (flash attention, adapters): fp32_parts norms; under a quantized base it is named as not counted."""
    flash = import_axolotl(BASE + "flash_attention: true\nfp32_norms: true\n")
    assert flash.finetune["fp32_parts"] == "norms" and flash.sources["finetune.fp32_parts"].startswith("fp32_norms")
    sdpa = import_axolotl(BASE + "fp32_norms: true\n")               # the embeddings and head stay fp32 too
    assert sdpa.finetune["fp32_parts"] == "embed-head-norms" and not any(
        i["key"] == "fp32_norms" for i in sdpa.ignored_keys)
    qlora = import_axolotl(BASE + "adapter: qlora\nload_in_4bit: true\nlora_r: 8\nfp32_norms: true\n")
    assert "fp32_parts" not in qlora.finetune
    reason = next(i["reason"] for i in qlora.ignored_keys if i["key"] == "fp32_norms")
    assert "not counted" in reason and "no effect" not in reason


def test_fsdp1_with_offload_shards_everything_to_the_cpu():
    got = import_axolotl(text("llama3_qlora_fsdp_70b.yaml"))
    assert got.model == "llama-3-70b" and got.selected_stage == 3
    assert got.scenario["offload_params"] == "cpu" and got.scenario["offload_optimizer"] == "cpu"
    assert got.scenario["comm_dtype"] == "bf16" and got.workload["comm_buffers"] == "fsdp"
    assert got.sources["scenario.offload_params"] == "fsdp_config.fsdp_offload_params"
    assert got.workload["seq_len"] == 512 and any(n.startswith("no sample_packing") for n in got.notes)
    assert any("FSDP1, axolotl's default" in n for n in got.notes)
    ignored = {i["key"]: i["reason"] for i in got.ignored_keys}
    assert "pydantic drops it" in ignored["fsdp_config.fsdp_sharding_strategy"]
    assert "wrap unit" in ignored["fsdp_config.fsdp_auto_wrap_policy"]


def test_fsdp2_with_the_liger_and_cut_losses():
    fsdp2 = import_axolotl(text("alst_llama3_8b_fsdp2.yaml"))
    assert fsdp2.selected_stage == 3 and fsdp2.scenario["offload_params"] == "none"
    assert fsdp2.workload["loss"] == "cut" and fsdp2.workload["activation_offload"] is True
    assert fsdp2.workload["seq_len"] == 500_000
    assert any(n.startswith("context_parallel_size = 8") for n in fsdp2.notes)
    liger = import_axolotl(text("llama3_fft_8b_liger_fsdp.yaml"))
    assert liger.workload["loss"] == "liger" and liger.scenario["optimizer_impl"] == "fused"


def test_the_deepspeed_example_follows_its_zero3_offload_file():
    got = import_config("axolotl", text("alst_llama3_8b_deepspeed.yaml"), read=read_beside)
    assert got.selected_stage == 3
    assert got.scenario["offload_params"] == "cpu" and got.scenario["offload_optimizer"] == "cpu"
    assert got.scenario["param_dtype"] == "bf16" and got.scenario["master_dtype"] == "fp32"
    assert got.scenario["optimizer"] == "adamw-8bit-ao"          # adamw_torch_8bit
    assert any("followed" in n for n in got.notes)
    unread = import_config("axolotl", text("alst_llama3_8b_deepspeed.yaml"))
    assert any("zero3_bf16_cpuoffload_all.json: not followed" in n for n in unread.notes)


def test_dpo_counts_chosen_and_rejected_in_one_batch():
    got = import_axolotl(text("llama3_instruct_dpo_lora_8b.yml"))
    assert got.workload["micro_batch"] == 4                      # micro_batch_size 2, rl dpo


def test_every_key_of_the_file_is_used_or_named_ignored_with_a_reason():
    for path in FIX.glob("axolotl_*.y*ml"):
        data = yaml.safe_load(path.read_text())
        got = import_axolotl(path.read_text())
        ignored = {i["key"].split(".")[0]: i["reason"] for i in got.ignored_keys}
        used = {s.split(" ")[0].split(".")[0] for s in got.sources.values()} | {
            "base_model", "adapter", "load_in_8bit", "load_in_4bit", "bf16", "fp16", "sample_packing", "rl",
            "plugins", "liger_fused_linear_cross_entropy", "activation_offloading", "context_parallel_size",
            "optimizer", "deepspeed", "fsdp", "fsdp_config", "fsdp_version", "gradient_checkpointing"}
        for key in data:
            assert key in ignored or key in used, (path.name, key)
        assert all(i["reason"] for i in got.ignored_keys)
    lora_keys = {i["key"]: i["reason"] for i in import_axolotl(text("llama2_fft_optimized.yml")).ignored_keys}
    assert lora_keys["lora_r"] == "read only with adapter lora or qlora"
    assert "bookkeeping" in lora_keys["learning_rate"] and "dataset" in lora_keys["datasets"]


def test_defaults_when_the_keys_are_absent():
    got = import_axolotl(BASE)
    assert got.workload["seq_len"] == 512 and got.workload["recompute"] == "none"   # sequence_len, GC defaults
    assert got.workload["attention"] == "flash"                                       # SDPA
    assert got.scenario["optimizer"] == "adamw" and got.scenario["optimizer_impl"] == "fused"
    assert got.finetune == {"mode": "full", "fp32_parts": "embed-head-norms"}      # SDPA: the fp32 copies stay
    fp16 = import_axolotl(BASE + "fp16: true\n")
    assert fp16.scenario["param_dtype"] == "fp16"               # resolve_dtype: fp16 turns bf16 auto off
    fp32 = import_axolotl(BASE + "bf16: false\n")
    assert fp32.scenario["param_dtype"] == "fp32" and fp32.workload["activation_dtype"] == "fp32"


def test_batch_size_gives_the_accumulation_and_targets_map_by_name():
    got = import_axolotl("micro_batch_size: 2\nbatch_size: 16\nadapter: lora\nlora_r: 16\n"
                         "lora_target_modules: [q_proj, v_proj, lm_head]\npeft_use_dora: true\n"
                         "attn_implementation: eager\ngradient_checkpointing: offload\n")
    assert got.layout["micro_batches"] == 8                     # normalize_config: batch_size // micro_batch_size
    assert got.finetune["lora_targets"] == ("q", "v", "lm_head") and got.finetune["mode"] == "dora"
    assert got.workload["attention"] == "eager"
    assert got.workload["recompute"] == "full" and got.workload["activation_offload"] is True
    legacy = import_axolotl(BASE + "flash_attention: true\nadapter: lora\nlora_r: 8\n")
    assert legacy.workload["attention"] == "flash" and legacy.sources["workload.attention"] == "flash_attention"
    assert any("empty target list" in n for n in legacy.notes)


@pytest.mark.parametrize("body, field", [
    ("load_in_4bit: true\n", "load_in_4bit"), ("adapter: qlora\nlora_r: 8\n", "load_in_4bit"),
    ("adapter: qlora\nload_in_4bit: true\nload_in_8bit: true\nlora_r: 8\n", "load_in_8bit"),
    ("adapter: lora\n", "lora_r"), ("adapter: lora\nlora_r: -3\n", "lora_r"), ("batch_size: 8\n", "batch_size"),
    ("activation_offloading: true\n", "activation_offloading"), ("attn_implementation: flash\n", "attn_implementation"),
    ("attn_implementation: sdpa\nflash_attention: true\n", "flash_attention"), ("sequence_len: 0\n", "sequence_len"),
    ("rl: ppo\n", "rl"), ("bf16: maybe\n", "bf16"), ("lora_modules_to_save: [mlp]\nadapter: lora\nlora_r: 8\n",
                                                      "lora_modules_to_save"),
    ("deepspeed: ds.json\nfsdp_config: {offload_params: true}\n", "fsdp_config"),
    ("fsdp_version: 3\nfsdp_config: {offload_params: true}\n", "fsdp_version"),
    ("fsdp_config: {offload_params: 7}\n", "fsdp_config.offload_params"), ("- a list\n", "config"),
])
def test_hostile_values_are_refused_by_name(body, field):
    with pytest.raises(FrameworkConfigError) as exc:
        import_axolotl(body if body.startswith("- ") else BASE + body)
    assert exc.value.field == field


def test_too_few_batch_keys_are_refused_as_axolotl_refuses_them():
    with pytest.raises(FrameworkConfigError) as exc:
        import_axolotl("base_model: x\nmicro_batch_size: 2\n")
    assert exc.value.field == "micro_batch_size" and "at least two" in exc.value.allowed


def test_axolotl_files_are_recognised_by_their_keys():
    for path in FIX.glob("axolotl_*.y*ml"):
        assert guess_format(path.name, path.read_bytes()) == "axolotl", path.name


def test_the_trainer_keeps_a_bf16_loaded_model_and_its_adam_states_in_bf16(tmp_path):
    """The full fine-tune's ledger, measured: axolotl loads the model in cfg.torch_dtype (bf16) and hands it to the
    Trainer with bf16=True; one Trainer step on the CPU (transformers' own Trainer and torch AdamW, a tiny Llama)
    leaves the weights and both AdamW states in bf16, as the import says."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    rows = torch.randint(0, 128, (4, 16))
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=1,
                                          bf16=True, use_cpu=True, optim="adamw_torch", report_to=[],
                                          save_strategy="no", logging_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=[{"input_ids": r, "labels": r} for r in rows])
    trainer.train()
    weight = next(model.parameters())
    state = trainer.optimizer.state[weight]
    measured = {str(t.dtype) for t in (weight, state["exp_avg"], state["exp_avg_sq"])}
    got = import_axolotl(text("llama3_fft_8b.yaml"))
    assert measured == {"torch.bfloat16"}
    assert {got.scenario[k] for k in ("param_dtype", "optimizer_dtype")} == {"bf16"}
