"""Import an axolotl training YAML (what `axolotl train FILE.yaml` reads), at the defaults of
axolotl-ai-cloud/axolotl commit 067b021c8b87a9e5e380b9173c704cf7340e30f5:

- utils/schemas/: base_model; adapter None (a full fine-tune) / lora / qlora; load_in_8bit, load_in_4bit False
  (refused without an adapter; qlora needs load_in_4bit, not load_in_8bit: peft.py validate_qlora); lora_r (no
  default: peft's LoraConfig needs it), lora_dropout 0, lora_target_linear (every linear layer but the output
  head: loaders/adapter.py find_all_linear_names) or lora_target_modules; lora_modules_to_save; peft_use_dora;
  sequence_len 512; sample_packing off; micro_batch_size 1, gradient_accumulation_steps 1 (or batch_size /
  micro_batch_size: utils/config normalize_config; at least two of the three, not both of the last two:
  validation.py); gradient_checkpointing False ("offload" / "offload_disk": activation offloading);
  activation_offloading False (needs gradient checkpointing); optimizer adamw_torch_fused (TrainingArguments'
  names); attn_implementation None (transformers' SDPA) or the legacy flash_attention / sdp_attention / ... flags;
  deepspeed (followed by the caller: hf_trainer/follow.py); fsdp / fsdp_config / fsdp_version (1 by default);
- utils/config resolve_dtype: bf16 "auto" is bf16 on a GPU that has it (assumed: Ampere or newer), fp16 only
  where asked; the model loads in that dtype (cfg.torch_dtype), and a full fine-tune's weights, gradients and
  AdamW states live in it outside FSDP / DeepSpeed, but for the embeddings, head and norms: loaders/model.py puts
  them in fp32 and casts them back only for attention kernels other than SDPA / eager (fp32_parts
  embed-head-norms: they train in fp32, and the residual stream is fp32 under autocast; fp32_norms keeps the norms
  alone in fp32 where they are cast back: fp32_parts norms). LoRA adapters are fp32 (peft's
  autocast_adapter_dtype); QLoRA is bitsandbytes nf4 with double quantization (loaders/model.py), and nothing
  else stays fp32: prepare_model_for_kbit_training's upcast is cast back (should_convert) or skipped (FSDP,
  ZeRO-3);
- FSDP: axolotl hands fsdp and fsdp_config to TrainingArguments (core/builders/base.py), which the Trainer's FSDP
  reader (hf_trainer/fsdp.py) then reads; accelerate upcasts the trainable weights to fp32 shards.
"""

from __future__ import annotations

from ...model.finetune import ALL_LINEAR, TARGETS
from ..accelerate.document import load_mapping
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, boolean, count, number,
                      one_of, text)
from ..hf_trainer import arguments as hf
from ..hf_trainer.fsdp import read_fsdp
from ..hf_trainer.model import read_model
from ..llamafactory.reader import LORA_MODULES

# attn_implementation (utils/schemas/enums.py CANONICAL_ATTN_IMPLS) -> zerocalc's attention: every kernel but eager
# keeps no score matrix; the legacy booleans map to a name in LEGACY_ATTN_FLAG_TO_IMPL's order
ATTENTION = {"eager": "eager", "sdpa": "flash", "flash_attention_2": "flash", "flash_attention_3": "flash",
             "flex_attention": "flash", "xformers": "flash", "sage": "flash", "fp8": "flash"}
LEGACY_ATTENTION = {"xformers_attention": "xformers", "sage_attention": "sage", "flex_attention": "flex_attention",
                    "flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "eager_attention": "eager"}
PAIRED_RL = ("dpo", "ipo", "orpo", "simpo")    # TRL concatenates chosen and rejected into one forward
RL_TYPES = PAIRED_RL + ("kto", "grpo", "gdpo", "ebft")
SAVEABLE = {"embed_tokens": "embed_tokens", "lm_head": "lm_head"}

DATA = "dataset selection and preprocessing: no effect on the bytes of a step"
LOG = "run bookkeeping (logging, saving, evaluation, schedule): no effect on the bytes zerocalc counts"
IGNORED = {
    "datasets": DATA, "dataset_prepared_path": DATA, "val_set_size": DATA, "test_datasets": DATA,
    "chat_template": DATA, "special_tokens": "tokens added to the vocabulary: the model's shapes come from its "
    "preset", "dataset_processes": DATA, "shuffle_merged_datasets": DATA, "output_dir": LOG, "num_epochs": LOG,
    "max_steps": LOG, "lr_scheduler": LOG, "learning_rate": LOG, "warmup_ratio": LOG, "warmup_steps": LOG,
    "evals_per_epoch": LOG, "eval_steps": LOG, "saves_per_epoch": LOG, "save_steps": LOG, "weight_decay": LOG,
    "logging_steps": LOG, "resume_from_checkpoint": LOG, "hub_model_id": LOG, "seed": LOG, "max_grad_norm": LOG,
    "wandb_project": LOG, "wandb_entity": LOG, "wandb_watch": LOG, "wandb_name": LOG, "wandb_log_model": LOG,
    "save_first_step": LOG, "save_strategy": LOG, "save_total_limit": LOG, "eval_table_size": LOG,
    "model_type": "the loader class: the architecture is base_model's", "tokenizer_type": DATA,
    "tokenizer_config": DATA, "trust_remote_code": "loading policy: no effect on bytes",
    "lora_alpha": "a scale: no effect on bytes", "lora_model_dir": "a starting adapter: its weights are the size "
    "of a fresh one", "lora_fan_in_fan_out": "a weight layout flag: the same bytes",
    "eval_sample_packing": "evaluation batches: zerocalc counts the training step",
    "eval_batch_size": "evaluation batches: zerocalc counts the training step",
    "gradient_checkpointing_kwargs": "use_reentrant changes no saved bytes zerocalc counts",
    "tf32": "a matmul precision mode: no effect on stored bytes", "pad_to_sequence_len": "read with sample_packing",
    "ddp_timeout": LOG, "strict": "config validation: no effect on bytes", "loss_watchdog_threshold": LOG,
    "loss_watchdog_patience": LOG, "early_stopping_patience": LOG, "group_by_length": DATA,
    "train_on_inputs": "which tokens the loss counts: the same tensors", "sequence_len_overflow_handling": DATA,
    "liger_rope": "Liger's fused kernel for one op: not modelled (the Hugging Face op's saved tensors counted)",
    "liger_rms_norm": "Liger's fused kernel for one op: not modelled (the Hugging Face op's saved tensors counted)",
    "liger_glu_activation": "Liger's fused kernel for one op: not modelled (the Hugging Face op's saved tensors "
    "counted)", "flash_attn_fuse_mlp": "a fused MLP kernel: not modelled (the unfused MLP's tensors counted)",
    "flash_attn_cross_entropy": "flash-attn's cross entropy: not modelled (give --loss)",
    "tiled_mlp": "ALST's tiled MLP: not modelled (the untiled MLP's activations are counted)",
    "fp32_norms": "the norms kept in fp32 (utils/fp32_norms.py): counted (fp32_parts norms) for a 16-bit model "
    "outside FSDP / DeepSpeed without a quantized base; here not counted: each norm's fp32 output is cast to 16 "
    "bits by every linear that reads it, 6 bytes per token and hidden feature a Llama block more than zerocalc "
    "counts (measured on the CPU: tests/test_fp32_stream.py)",
    "fp32_norm_classes": "read with fp32_norms (not counted)",
    "min_sample_len": DATA, "lora_r": "read only with adapter lora or qlora", "lora_dropout": "read only with "
    "adapter lora or qlora", "lora_target_linear": "read only with adapter lora or qlora", "lora_target_modules":
    "read only with adapter lora or qlora", "lora_modules_to_save": "read only with adapter lora or qlora",
}


# fsdp_config keys (without the fsdp_ prefix) that change no byte zerocalc counts
FSDP_IGNORED = {
    "limit_all_gathers": "a rate limit on prefetching: zerocalc counts one gathered unit at a time",
    "sync_module_states": "start-up broadcast: no effect on the step's bytes",
    "cpu_ram_efficient_loading": "start-up loading on rank 0: no effect on the step's bytes",
    "use_orig_params": "a parameter view flag: the same bytes",
    "auto_wrap_policy": "the wrap unit: zerocalc's is one decoder layer", "transformer_layer_cls_to_wrap":
    "the wrap unit: zerocalc's is one decoder layer", "state_dict_type": "checkpoint format: no effect on the step",
    "final_state_dict_type": "checkpoint format: no effect on the step",
    "backward_prefetch": "not a field of axolotl's FSDPConfig (pydantic drops it)",
    "sharding_strategy": "not a field of axolotl's FSDPConfig (pydantic drops it): accelerate's default strategy, "
    "FULL_SHARD", "mixed_precision_policy": "the ledger is accelerate's mixed precision from bf16 / fp16",
}


def import_axolotl(source, context=None) -> ImportedConfig:
    """An axolotl training YAML (text or bytes; JSON also works, as axolotl loads either with PyYAML)."""
    data = load_mapping(source, "YAML", "a YAML mapping of axolotl settings")
    ImportContext.of(context)
    return _Reader(Doc(data)).run()


class _Reader:
    def __init__(self, doc: Doc):
        self.doc, self.b = doc, Builder("axolotl")
        self.casts_back = False          # kernels(): whether the fp32 embeddings and norms are cast back

    def src(self, key: str, default_text: str) -> str:
        return key if self.doc.has(key) and self.doc.data[key] is not None else f"default: axolotl {key} {default_text}"

    def flag(self, key: str, default=False) -> bool:
        """A bool | None field (pydantic: true / false / yes / no / 1 / 0); null is the default."""
        value = self.doc.get(key, default=None)
        return default if value is None else boolean(key, value, rule="pydantic")

    def value(self, key: str, default):
        value = self.doc.get(key, default=None)
        return default if value is None else value

    def run(self) -> ImportedConfig:
        doc, b = self.doc, self.b
        read_model(doc, b, "base_model")
        dtype, amp = self.precision()
        mode = self.method(dtype)
        micro = self.batch()
        self.optimizer()
        self.lengths()
        self.kernels()
        self.rl(micro, mode)
        self.sharding(dtype, amp, mode)
        for key, reason in (("tensor_parallel_size", "tensor parallelism (DeepSpeed AutoTP)"),
                            ("context_parallel_size", "sequence parallelism (ring attention)"),
                            ("unfrozen_parameters", "freezing by parameter-name pattern")):
            if doc.data.get(key) not in (None, 1, []):
                doc.get(key)
                b.note(f"{key} = {doc.data[key]}: {reason} is not read from the file; give the layout or method "
                       "with the CLI flags or the page.")
        for key in doc.leftovers():
            top, _, rest = key.partition(".")
            bare = rest[5:] if rest.startswith("fsdp_") else rest
            b.ignore(key, (FSDP_IGNORED.get(bare) if top == "fsdp_config" else None) or IGNORED.get(top)
                     or hf.IGNORED.get(top) or "no effect on the bytes zerocalc counts")
        return b.build()

    # --- precision (utils/config/__init__.py resolve_dtype) ----------------------------------------------------
    def precision(self):
        """(the dtype the model loads in, the Trainer's AMP dtype or None)."""
        doc, b = self.doc, self.b
        raw = doc.get("bf16", default="auto")
        raw = "auto" if raw is None else raw
        bf16 = raw if raw in ("auto", "full") else boolean("bf16", raw, rule="pydantic")
        fp16 = self.flag("fp16", default=None)
        if bf16 == "auto":
            bf16 = not fp16
            if bf16:
                b.note("bf16 auto: bf16, as axolotl picks on a GPU that has it (Ampere or newer); set fp16: true for "
                       "an older card.")
        bf16 = bool(bf16)
        fp16 = bool(fp16) and not bf16             # resolve_dtype: bf16 turns fp16 off
        bfloat16, float16 = self.flag("bfloat16"), self.flag("float16")
        eight = self.flag("load_in_8bit")
        dtype = "bf16" if bf16 or bfloat16 else "fp16" if eight or fp16 or float16 else "fp32"
        return dtype, ("bf16" if bf16 else "fp16" if fp16 else None)

    # --- the method -------------------------------------------------------------------------------------------
    def method(self, dtype: str):
        doc, b = self.doc, self.b
        adapter = doc.get("adapter", default=None)
        four, eight = self.flag("load_in_4bit"), self.flag("load_in_8bit")
        if adapter in (None, ""):
            if four or eight:
                raise FrameworkConfigError("load_in_4bit" if four else "load_in_8bit", True, "false without an "
                                           "adapter (axolotl: 'load_in_8bit and load_in_4bit are not supported "
                                           "without setting an adapter for training')")
            b.set("finetune", "mode", "full", "default: axolotl adapter none (a full fine-tune)")
            return "full"
        adapter = text("adapter", adapter)
        if adapter not in ("lora", "qlora"):
            b.note(f"adapter {adapter}: not an adapter zerocalc models (lora, qlora); the view's method is kept.")
            return None
        if adapter == "qlora" and eight:
            raise FrameworkConfigError("load_in_8bit", True, "false with adapter qlora (axolotl: \"Can't load qlora "
                                                             "in 8bit\")")
        if adapter == "qlora" and not four:
            raise FrameworkConfigError("load_in_4bit", doc.data.get("load_in_4bit"), "true with adapter qlora "
                                       "(axolotl: 'Require cfg.load_in_4bit to be True for qlora')")
        if adapter == "lora" and four:
            b.note("load_in_4bit with adapter lora: axolotl builds a 4-bit config for adapter qlora only "
                   "(loaders/model.py); counted as LoRA on an unquantized base.")
        quant = "nf4" if adapter == "qlora" else "int8" if eight else None
        dora = self.flag("peft_use_dora")
        mode = "qlora" if quant else "dora" if dora else "lora"
        if quant and dora:
            b.note("peft_use_dora on a quantized base: counted as QLoRA (zerocalc has no quantized DoRA).")
        b.set("finetune", "mode", mode, "adapter" + (" / load_in_8bit" if quant == "int8" else "") +
              (" / peft_use_dora" if mode == "dora" else ""))
        if quant:
            b.set("finetune", "quant_type", quant, "adapter qlora: bnb nf4 (loaders/model.py)" if quant == "nf4"
                  else "load_in_8bit: LLM.int8")
            if quant == "nf4":
                b.set("finetune", "double_quant", True, "axolotl's BitsAndBytesConfig: bnb_4bit_use_double_quant")
            b.set("finetune", "kbit_prepare", False, "no fp32 stream: loaders/model.py casts the norms and "
                  "embeddings back to the model's dtype after prepare_model_for_kbit_training (should_convert), "
                  "and skips that preparation under FSDP or ZeRO-3")
        if doc.data.get("lora_r") is None:
            raise FrameworkConfigError("lora_r", doc.data.get("lora_r"), "a positive integer with adapter "
                                       f"{adapter} (axolotl passes it to peft's LoraConfig r; it has no default)")
        b.set("finetune", "lora_rank", count("lora_r", doc.get("lora_r"), 1, 1_000_000), "lora_r")
        b.set("finetune", "lora_dropout", number("lora_dropout", self.value("lora_dropout", 0.0), 0.0, 1.0),
              self.src("lora_dropout", "0"))
        targets = self.targets()
        if targets:
            b.set("finetune", "lora_targets", targets[0], targets[1])
        saved = self.names("lora_modules_to_save", SAVEABLE)
        if saved:
            b.set("finetune", "modules_to_save", saved, "lora_modules_to_save")
        b.set("finetune", "base_dtype", dtype, "the model loads in the resolved dtype (cfg.torch_dtype)")
        return mode

    def targets(self):
        """(zerocalc targets, source), or None where the view's are kept."""
        doc, b = self.doc, self.b
        raw = doc.get("lora_target_modules", default=None)
        names = [] if raw is None else [raw] if isinstance(raw, str) else raw
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise FrameworkConfigError("lora_target_modules", raw, "a module name or a list of them")
        head = ("lm_head",) if "lm_head" in names else ()
        if self.flag("lora_target_linear"):
            return (TARGETS + head if head else (ALL_LINEAR,)), "lora_target_linear (every linear layer but the head)"
        if names in (["all-linear"], ["all_linear"]):
            return (ALL_LINEAR,), "lora_target_modules"
        if not names:
            b.note("neither lora_target_modules nor lora_target_linear: axolotl hands peft an empty target list; "
                   "the view's targets are kept.")
            return None
        unknown = [n for n in names if n not in LORA_MODULES and n != "lm_head"]
        if unknown:
            b.note(f"lora_target_modules {unknown[0]}: not a module zerocalc counts ({', '.join(LORA_MODULES)}, "
                   "lm_head); the view's targets are kept.")
            return None
        return tuple(dict.fromkeys(LORA_MODULES.get(n, n) for n in names)), "lora_target_modules"

    def names(self, key: str, table: dict) -> tuple:
        raw = self.doc.get(key, default=None)
        if raw is None:
            return ()
        raw = [raw] if isinstance(raw, str) else raw
        if not isinstance(raw, list):
            raise FrameworkConfigError(key, raw, "a list of module names")
        for name in raw:
            if name not in table:
                raise FrameworkConfigError(key, name, "module names among " + ", ".join(table))
        return tuple(dict.fromkeys(table[n] for n in raw))

    # --- the step -----------------------------------------------------------------------------------------------
    def batch(self) -> int:
        doc, b = self.doc, self.b
        given = [k for k in ("micro_batch_size", "gradient_accumulation_steps", "batch_size") if doc.data.get(k)]
        if len(given) < 2:
            raise FrameworkConfigError("micro_batch_size", doc.data.get("micro_batch_size"), "at least two of "
                                       "micro_batch_size, gradient_accumulation_steps and batch_size set (axolotl "
                                       "validation.py check_batch_size_fields)")
        if doc.data.get("gradient_accumulation_steps") and doc.data.get("batch_size"):
            raise FrameworkConfigError("batch_size", doc.data["batch_size"], "absent with gradient_accumulation_"
                                       "steps (axolotl: 'please set only one of gradient_accumulation_steps or "
                                       "batch_size')")
        micro = count("micro_batch_size", self.value("micro_batch_size", 1), 1, 10**6)
        b.set("workload", "micro_batch", micro, self.src("micro_batch_size", "1"))
        if doc.data.get("batch_size"):
            total = count("batch_size", doc.get("batch_size"), 1, 10**9)
            gas = max(1, total // micro)
            b.set("layout", "micro_batches", gas, "batch_size / micro_batch_size (axolotl normalize_config)")
        else:
            gas = count("gradient_accumulation_steps", self.value("gradient_accumulation_steps", 1), 1, 100_000)
            b.set("layout", "micro_batches", gas, self.src("gradient_accumulation_steps", "1"))
        doc.get("micro_batch_size", default=None)
        return micro

    def optimizer(self) -> None:
        """optimizer (default adamw_torch_fused): TrainingArguments' names, read as the Trainer reads optim."""
        raw = self.doc.get("optimizer", default=None)
        hf.read_optim(Doc({} if raw is None else {"optim": raw}), self.b)
        for name, src in list(self.b.sources.items()):
            if src == "optim":
                self.b.sources[name] = "optimizer"

    def lengths(self) -> None:
        doc, b = self.doc, self.b
        seq = count("sequence_len", self.value("sequence_len", 512), 1, 10**8)
        b.set("workload", "seq_len", seq, self.src("sequence_len", "512"))
        b.batching(self.flag("sample_packing"), "sample_packing")
        if self.flag("sample_packing"):
            b.note(f"sample_packing: samples are packed into micro_batch_size x sequence_len tokens a step "
                   f"({seq} a row), so seq_len is exact.")
        elif self.flag("pad_to_sequence_len"):
            b.note(f"pad_to_sequence_len: every batch is padded to sequence_len ({seq}), so seq_len is exact.")
        else:
            b.note(f"no sample_packing: each batch is padded to its longest sample; seq_len {seq} (sequence_len) "
                   "is the longest a batch can be, the peak zerocalc counts.")

    def kernels(self) -> None:
        doc, b = self.doc, self.b
        impl = doc.get("attn_implementation", default=None)
        legacy = [k for k in LEGACY_ATTENTION if doc.data.get(k) is not None and self.flag(k)]
        if impl is not None and legacy:
            raise FrameworkConfigError(legacy[0], True, "absent with attn_implementation (axolotl: 'cannot be "
                                                        "combined with legacy attention flags')")
        key = "attn_implementation" if impl is not None else legacy[0] if legacy else None
        impl = LEGACY_ATTENTION[legacy[0]] if legacy else impl
        # loaders/model.py casts the embeddings, head and norms back from fp32 only for such kernels (or CCE)
        self.casts_back = impl is not None and impl not in ("eager", "sdpa")
        b.sdpa = impl in (None, "sdpa")
        if impl is None:
            b.set("workload", "attention", "flash", "default: axolotl attn_implementation none (transformers' SDPA)")
        else:
            impl = text("attn_implementation", impl)
            kind = "flash" if "/" in impl else one_of(key, impl, tuple(ATTENTION))
            b.set("workload", "attention", ATTENTION.get(kind, "flash"), key)
        for flag in LEGACY_ATTENTION:
            doc.get(flag, default=None)
        gc = doc.get("gradient_checkpointing", default=False)
        gc = False if gc is None else gc
        if gc not in ("offload", "offload_disk"):
            gc = boolean("gradient_checkpointing", gc, rule="pydantic")
        offload = self.value("activation_offloading", False)
        if gc in ("offload", "offload_disk"):            # validation.py: the deprecated spellings of offloading
            offload = True
        if offload not in ("legacy", "disk", "hidden_states", True):
            offload = boolean("activation_offloading", offload, rule="pydantic")
        if offload and not gc:
            raise FrameworkConfigError("activation_offloading", offload, "false without gradient_checkpointing "
                                       "(axolotl: 'activation_offloading requires gradient_checkpointing')")
        b.set("workload", "recompute", "full" if gc else "none", self.src("gradient_checkpointing", "false"))
        if offload == "hidden_states":
            b.note("activation_offloading hidden_states (TRL's offloader) is not modelled; counted on the GPU.")
        elif offload:
            b.set("workload", "activation_offload", True, "gradient_checkpointing offload" if gc in (
                "offload", "offload_disk") else "activation_offloading")
            if offload == "disk" or gc == "offload_disk":
                b.note("offloading to disk: counted as offloading to pinned host memory (the GPU holds the same).")
        compile_ = doc.get("torch_compile", default=None)
        if compile_ is not None and compile_ != "auto" and boolean("torch_compile", compile_, rule="pydantic"):
            b.set("workload", "compile", True, "torch_compile")
        plugins = doc.get("plugins", default=None) or []
        if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
            raise FrameworkConfigError("plugins", plugins, "a list of plugin class paths")
        if any(p.endswith("CutCrossEntropyPlugin") for p in plugins):
            b.set("workload", "loss", "cut", "plugins: CutCrossEntropyPlugin")
            self.casts_back = True
        elif any(p.endswith("LigerPlugin") for p in plugins) and self.flag("liger_fused_linear_cross_entropy"):
            b.set("workload", "loss", "liger", "liger_fused_linear_cross_entropy (LigerPlugin)")

    def rl(self, micro: int, mode) -> None:
        doc, b = self.doc, self.b
        kind = doc.get("rl", default=None)
        if kind is None:
            return
        kind = one_of("rl", kind, RL_TYPES)
        if kind in PAIRED_RL:
            b.set("workload", "micro_batch", 2 * micro, f"micro_batch_size x 2 (rl {kind}: chosen and rejected in "
                                                        "one concatenated forward)")
            if kind in ("dpo", "ipo") and mode == "full":
                b.note(f"rl {kind} with a full fine-tune keeps a frozen reference model beside the policy; "
                       "zerocalc counts the policy alone.")
        else:
            b.note(f"rl {kind}: its extra models and batches (reference, generations) are not counted; the "
                   "policy's own step is.")

    # --- sharding and the ledger ----------------------------------------------------------------------------
    def sharding(self, dtype: str, amp, mode) -> None:
        doc, b = self.doc, self.b
        ds = hf.read_path(doc, "deepspeed")
        fsdp = doc.data.get("fsdp") not in (None, False, "", []) or bool(doc.data.get("fsdp_config"))
        if ds is not None:
            if fsdp:
                raise FrameworkConfigError("fsdp_config", "set", "absent with deepspeed (one sharding engine)")
            b.follows.append(("deepspeed", ds, amp))
            b.set("workload", "activation_dtype", dtype, "the resolved dtype (bf16 / fp16)")
            return
        if fsdp and self.fsdp(amp):
            return
        if mode in (None, "full"):
            # the weights, their gradients and AdamW's states in the loaded dtype (but the fp32 ones below)
            src = f"{dtype}: axolotl loads the model in it and trains it as loaded (no fp32 master copy)"
            for field, value in (("convention", "pure-bf16" if dtype == "bf16" else "fsdp2"),
                                 ("param_dtype", dtype), ("grad_dtype", dtype),
                                 ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", dtype),
                                 ("comm_dtype", None), ("offload_params", "none"), ("offload_optimizer", "none")):
                b.set("scenario", field, value, src)
            b.set("workload", "activation_dtype", dtype, src)
            if not self.casts_back and dtype != "fp32":
                b.set("finetune", "fp32_parts", "embed-head-norms",
                      "loaders/model.py _configure_embedding_dtypes: embed_tokens, lm_head and the norms upcast to "
                      "fp32 after loading, cast back only for an attention kernel that needs it or "
                      "cut_cross_entropy (not under SDPA / eager, not with FSDP)")
        else:
            hf.amp_ledger(b, dtype, "the adapters in fp32 (peft autocast_adapter_dtype), the base in "
                                    f"{dtype}")
        # utils/fp32_norms.py: fp32_norms keeps the norm classes in fp32 where the rest is cast back (modelled for
        # 16-bit, unquantized plans outside FSDP / DeepSpeed; elsewhere the key is listed as not counted)
        if dtype != "fp32" and mode != "qlora" and doc.data.get("fp32_norms") is not None:
            if self.flag("fp32_norms") and b.get("finetune", "fp32_parts") is None:     # embed-head-norms holds them
                b.set("finetune", "fp32_parts", "norms", "fp32_norms (utils/fp32_norms.py, loaders/model.py "
                                                         "_convert_embedding_modules_dtype)")

    def fsdp(self, amp) -> bool:
        """axolotl's fsdp / fsdp_config, as TrainingArguments receives them (fsdp true when only fsdp_config is
        given; the FSDP version from fsdp_version, default 1; offload_params is accelerate's cpu_offload)."""
        doc = self.doc
        cfg = doc.section("fsdp_config")
        names = {}
        for key in cfg:
            bare = key[5:] if key.startswith("fsdp_") else key
            names["cpu_offload" if bare == "offload_params" else bare] = key
        version = doc.get("fsdp_version", default=None)
        version = version if version is not None else cfg.get(names.get("version", "version"), 1)
        items = doc.get("fsdp", default=None) or True
        view = Doc({"fsdp": items, "fsdp_config": {**{k: cfg[v] for k, v in names.items()}, "version": version}})
        try:
            on = read_fsdp(view, self.b, amp)
        except FrameworkConfigError as exc:
            bare = exc.field.split(".", 1)[-1]
            field = f"fsdp_config.{names[bare]}" if exc.field.startswith("fsdp_config.") and bare in names else (
                "fsdp_version" if exc.field == "fsdp_config.version" else exc.field)
            raise FrameworkConfigError(field, exc.value, exc.allowed) from None
        for name, src in list(self.b.sources.items()):       # the file's own spelling of each key
            for bare, key in names.items():
                src = src.replace(f"fsdp_config.{bare}", f"fsdp_config.{key}")
            self.b.sources[name] = src
        for path in view.seen:
            if len(path) == 2 and path[1] in names:
                doc.mark("fsdp_config", names[path[1]])
        if "version" in names:
            doc.mark("fsdp_config", names["version"])
        if on and "version" not in names and not doc.has("fsdp_version"):
            self.b.note("fsdp_version absent: FSDP1, axolotl's default (deprecated there in favour of "
                        "fsdp_version: 2).")
        return on
