"""Import a LLaMA-Factory training YAML (what `llamafactory-cli train FILE.yaml` reads), at the defaults of
hiyouga/LLaMA-Factory commit ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30 (src/llamafactory/hparams/):

- model_args.py: model_name_or_path; quantization_bit None (8: bnb int8, 4: bnb nf4 / fp4 by quantization_type,
  double_quantization True); flash_attn "auto" (transformers picks SDPA: no score matrix kept, zerocalc's flash);
  disable_gradient_checkpointing False: every decoder layer is checkpointed (model_utils/checkpointing.py);
- finetuning_args.py: stage "sft", finetuning_type "lora" (lora / oft / freeze / full), lora_rank 8, lora_target
  "all" (every linear layer: all-linear), lora_dropout 0, use_dora False, additional_target None,
  freeze_trainable_layers 2 (the last two), freeze_extra_modules None, pure_bf16 False;
- finetuning_args.py: freeze_vision_tower True, freeze_multi_modal_projector True (a vision-language model's tower
  and projector stay frozen in every finetuning_type: model/vision.py launcher_mode);
- data_args.py: cutoff_len 2048; packing None, on for stage pt (parser.py: packing = packing if set else stage ==
  "pt"), neat_packing implies packing;
- parser.py: bf16 (or pure_bf16) makes bf16 the compute dtype, fp16 fp16; model/adapter.py casts the trainable
  parameters to fp32 unless pure_bf16 (or ZeRO-3 without quantization, where DeepSpeed keeps them): an AMP ledger;
- every TrainingArguments key passes straight through (hf_trainer/arguments.py): per_device_train_batch_size,
  gradient_accumulation_steps, bf16 / fp16, optim, deepspeed (followed by the caller: hf_trainer/follow.py).
"""

from __future__ import annotations

from ...model.finetune import ALL_LINEAR
from ...model.vision import TOWERS, launcher_mode
from ..accelerate.document import load_mapping
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, boolean, count, number,
                      one_of, text)
from ..hf_trainer import arguments as hf
from ..hf_trainer.model import read_model

FINETUNING_TYPES = ("lora", "oft", "freeze", "full")
STAGES = ("pt", "sft", "rm", "ppo", "dpo", "kto")
ATTENTION = {"auto": "flash", "sdpa": "flash", "fa2": "flash", "fa3": "flash", "disabled": "eager"}
QUANT_BITS = (8, 4, 3, 2)
# LLaMA-Factory module names -> zerocalc's LoRA targets (model.finetune.TARGETS) and extra trained modules
LORA_MODULES = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
                "down_proj": "down"}
EXTRA_MODULES = {"embed_tokens": "embed_tokens", "lm_head": "lm_head", "norm": "norms"}
PREQUANTIZED = ("gptq", "awq", "aqlm")    # examples/train_qlora: checkpoints quantized before training
PAIRED_STAGES = ("rm", "dpo")     # chosen and rejected run as one concatenated batch: twice the micro-batch

DATA = "dataset selection and preprocessing: no effect on the bytes of a step"
IGNORED = {
    "trust_remote_code": "loading policy: no effect on bytes", "template": DATA, "dataset": DATA,
    "dataset_dir": DATA, "max_samples": DATA, "preprocessing_num_workers": DATA, "overwrite_cache": DATA,
    "val_size": DATA, "eval_dataset": DATA, "tokenized_path": DATA, "streaming": DATA, "mix_strategy": DATA,
    "plot_loss": hf.NO_BYTES, "pref_beta": "a loss coefficient: no effect on bytes",
    "pref_loss": "the preference loss's formula: the same tensors either way",
    "quantization_method": "read with quantization_bit (only bnb is modelled)",
    "use_reentrant_gc": "the checkpoint implementation: the same saved inputs either way",
    "lora_alpha": "a scale: no effect on bytes", "enable_thinking": DATA, "train_on_prompt": DATA,
    "mask_history": DATA, "image_max_pixels": "multimodal inputs are not modelled",
    "video_max_pixels": "multimodal inputs are not modelled",
    "adapter_name_or_path": "a starting adapter: its weights are the same size as a fresh one",
    "upcast_layernorm": "the norms' weights in fp32 (model_utils/checkpointing.py prepare_model_for_training): "
    "counted (fp32_parts norms) without a quantized base; here not counted: each norm's fp32 output is cast to 16 "
    "bits by every linear that reads it, 6 bytes per token and hidden feature a Llama block more than zerocalc "
    "counts (measured on the CPU, trained or frozen norms)",
    "upcast_lmhead_output": "a hook casting the head's output to fp32: the logits are held in fp32 and the loss's "
    "upcast then copies nothing; the step's peak (the loss's backward) holds the same tensors",
}


def import_llamafactory(source, context=None) -> ImportedConfig:
    """A LLaMA-Factory training YAML (text or bytes; JSON also works, as llamafactory-cli reads .json too)."""
    data = load_mapping(source, "YAML", "a YAML mapping of LLaMA-Factory arguments")
    ImportContext.of(context)
    return _Reader(Doc(data)).run()


class _Reader:
    def __init__(self, doc: Doc):
        self.doc, self.b = doc, Builder("llamafactory")

    def src(self, key: str, default_text: str) -> str:
        return key if self.doc.has(key) else f"default: LLaMA-Factory {key} {default_text}"

    def run(self) -> ImportedConfig:
        doc, b = self.doc, self.b
        read_model(doc, b, "model_name_or_path")
        name = str(doc.data.get("model_name_or_path", "")).lower()
        packed = next((m for m in PREQUANTIZED if m in name), None)
        if packed:
            b.note(f"model_name_or_path names a {packed.upper()} checkpoint: pre-quantized bases are not modelled "
                   "(zerocalc quantizes with bitsandbytes only); the base is counted at the compute dtype.")
        stage = one_of("stage", doc.get("stage", default="sft"), STAGES)
        pure = boolean("pure_bf16", doc.get("pure_bf16", default=False))
        compute = hf.read_precision(doc, b) or ("bf16" if pure else None)
        micro, _ = hf.read_batch(doc, b)
        hf.read_optim(doc, b)
        quant = self.quantization()
        mode = self.method(quant, compute)
        self.upcast_norms(quant, compute, mode)
        self.tower(mode)
        self.stage(stage, micro, mode)
        self.lengths(stage)
        self.kernels()
        if pure and doc.has("deepspeed") and doc.data["deepspeed"] is not None:
            raise FrameworkConfigError("pure_bf16", True, "false with deepspeed (LLaMA-Factory parser.py: "
                                                           "'`pure_bf16` is incompatible with DeepSpeed ZeRO-3')")
        if pure:
            for field, value in (("convention", "pure-bf16"), ("param_dtype", "bf16"), ("grad_dtype", "bf16"),
                                 ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", "bf16"),
                                 ("comm_dtype", None)):
                b.set("scenario", field, value, "pure_bf16: the model, gradients and optimizer state in bf16")
            b.set("workload", "activation_dtype", "bf16", "pure_bf16")
        else:
            hf.read_sharding(doc, b, compute, "Trainer AMP: fp32 trainable weights, model/adapter.py")
        hf.ignore_rest(doc, b, IGNORED)
        return b.build()

    # --- the method ---------------------------------------------------------------------------------------------
    def upcast_norms(self, quant, compute, mode) -> None:
        """upcast_layernorm (model_utils/checkpointing.py prepare_model_for_training): every 1-D "norm" / "ln"
        weight in fp32 beside a 16-bit model, counted as fp32_parts norms where nothing casts it back (no quantized
        base, no DeepSpeed or FSDP, which cast or flatten the module to one dtype); elsewhere ignored as not
        counted."""
        doc = self.doc
        if doc.data.get("upcast_layernorm") is None or quant or compute not in ("bf16", "fp16") or mode is None or \
                doc.data.get("deepspeed") is not None or doc.data.get("fsdp") not in (None, "", False, []):
            return
        if boolean("upcast_layernorm", doc.get("upcast_layernorm")):
            self.b.set("finetune", "fp32_parts", "norms", "upcast_layernorm")

    def tower(self, mode) -> None:
        """A vision-language model's tower and projector: freeze_vision_tower and freeze_multi_modal_projector,
        both True by default for every finetuning_type (finetuning_args.py; model_utils/visual.py
        get_forbidden_modules, misc.py find_all_linear_modules). Said where they differ from zerocalc's "follow"
        (a key given, or a full or freeze run of a vision-language preset)."""
        keys = ("freeze_vision_tower", "freeze_multi_modal_projector")
        given = any(self.doc.has(k) for k in keys)
        if mode is None or not (given or mode in ("full", "freeze") and self.b.model in TOWERS):
            return
        tower, projector = (boolean(k, self.doc.get(k, default=True)) for k in keys)
        self.b.set("finetune", "vision_training", launcher_mode(tower, projector, mode),
                   " / ".join(self.src(k, "true") for k in keys))

    def quantization(self):
        bits = self.doc.get("quantization_bit", default=None)
        if bits is None:
            return None
        bits = count("quantization_bit", bits, 2, 8)
        if bits not in QUANT_BITS:
            raise FrameworkConfigError("quantization_bit", bits, "8, 4, 3 or 2 (LLaMA-Factory QuantizationMethod)")
        method = one_of("quantization_method", self.doc.get("quantization_method", default="bnb"),
                        ("bnb", "gptq", "awq", "aqlm", "hqq", "eetq", "quanto", "bitsandbytes"))
        if bits in (3, 2) or method not in ("bnb", "bitsandbytes"):
            self.b.note(f"quantization_bit {bits} with {method}: only bitsandbytes 4-bit and 8-bit are modelled; "
                        "the base is counted unquantized.")
            return None
        if bits == 8:
            return "int8"
        return one_of("quantization_type", self.doc.get("quantization_type", default="nf4"), ("nf4", "fp4"))

    def method(self, quant, compute):
        doc, b = self.doc, self.b
        kind = one_of("finetuning_type", doc.get("finetuning_type", default="lora"), FINETUNING_TYPES)
        src = self.src("finetuning_type", "lora")
        if kind == "oft":
            b.note("finetuning_type oft (orthogonal fine-tuning) is not modelled; the view's method is kept.")
            return None
        if quant and kind != "lora":
            raise FrameworkConfigError("quantization_bit", doc.get("quantization_bit"),
                                       "absent unless finetuning_type is lora (LLaMA-Factory: 'Quantization is only "
                                       "compatible with the LoRA method')")
        if kind == "full":
            b.set("finetune", "mode", "full", src)
            return "full"
        if compute:
            b.set("finetune", "base_dtype", compute, "bf16 / fp16: the frozen base is loaded in the compute dtype")
        if kind == "freeze":
            b.set("finetune", "mode", "freeze", src)
            layers = count("freeze_trainable_layers", doc.get("freeze_trainable_layers", default=2), -10_000, 10_000)
            if layers < 0:
                b.note(f"freeze_trainable_layers {layers}: the first {-layers} layers train; counted as the last "
                       f"{-layers} (the same bytes for identical blocks).")
            b.set("finetune", "train_last_layers", abs(layers), self.src("freeze_trainable_layers", "2"))
            extra = self.names("freeze_extra_modules", EXTRA_MODULES)
            if extra:
                b.set("finetune", "train_modules", extra, "freeze_extra_modules")
            return "freeze"
        dora = boolean("use_dora", doc.get("use_dora", default=False))
        mode = "qlora" if quant else "dora" if dora else "lora"
        if quant and dora:
            b.note("use_dora with quantization_bit: counted as QLoRA (zerocalc has no quantized DoRA).")
        b.set("finetune", "mode", mode, "quantization_bit" if quant else "use_dora" if dora else src)
        if quant:
            b.set("finetune", "quant_type", quant, "quantization_bit / quantization_type")
            b.set("finetune", "double_quant", boolean("double_quantization",
                                                      doc.get("double_quantization", default=True)),
                  self.src("double_quantization", "true"))
            b.set("finetune", "kbit_prepare", False, "LLaMA-Factory never calls prepare_model_for_kbit_training: "
                  "model_utils/checkpointing.py prepare_model_for_training upcasts only with upcast_layernorm")
        b.set("finetune", "lora_rank", count("lora_rank", doc.get("lora_rank", default=8), 1, 1_000_000),
              self.src("lora_rank", "8"))
        b.set("finetune", "lora_dropout", number("lora_dropout", doc.get("lora_dropout", default=0.0), 0.0, 1.0),
              self.src("lora_dropout", "0"))
        b.set("finetune", "lora_targets", self.targets(), self.src("lora_target", "all"))
        saved = self.names("additional_target", {k: k for k in ("embed_tokens", "lm_head")})
        if saved:
            b.set("finetune", "modules_to_save", saved, "additional_target")
        return mode

    def targets(self) -> tuple:
        raw = text("lora_target", self.doc.get("lora_target", default="all"))
        names = [n.strip() for n in raw.split(",") if n.strip()]
        if names == ["all"]:
            return (ALL_LINEAR,)
        unknown = [n for n in names if n not in LORA_MODULES]
        if unknown:
            self.b.note(f"lora_target {unknown[0]}: not a module zerocalc counts ({', '.join(LORA_MODULES)}); "
                        "counted as all linear layers.")
            return (ALL_LINEAR,)
        return tuple(dict.fromkeys(LORA_MODULES[n] for n in names))

    def names(self, key: str, table: dict) -> tuple:
        raw = self.doc.get(key, default=None)
        if raw is None:
            return ()
        out = []
        for name in (n.strip() for n in text(key, raw).split(",") if n.strip()):
            if name not in table:
                raise FrameworkConfigError(key, name, "module names among " + ", ".join(table))
            out.append(table[name])
        return tuple(dict.fromkeys(out))

    # --- the step -------------------------------------------------------------------------------------------------
    def stage(self, stage: str, micro: int, mode) -> None:
        b = self.b
        if stage in PAIRED_STAGES:
            b.set("workload", "micro_batch", 2 * micro, f"per_device_train_batch_size x 2 (stage {stage}: chosen "
                                                       "and rejected in one concatenated forward)")
            if stage == "dpo" and mode in ("full", "freeze"):
                b.note("stage dpo with a full or freeze method keeps a frozen reference model beside the policy "
                       "(LLaMA-Factory create_ref_model); zerocalc counts the policy alone.")
        elif stage in ("ppo", "kto"):
            b.note(f"stage {stage}: its extra models and batches (reward / value / reference, KL batches) are not "
                   "counted; the policy's own step is.")

    def lengths(self, stage: str) -> None:
        doc, b = self.doc, self.b
        cutoff = count("cutoff_len", doc.get("cutoff_len", default=2048), 1, 10**8)
        neat = boolean("neat_packing", doc.get("neat_packing", default=False))
        packing = doc.get("packing", default=None)
        packing = (stage == "pt") if packing is None else boolean("packing", packing)
        packing = packing or neat
        b.set("workload", "seq_len", cutoff, self.src("cutoff_len", "2048"))
        b.batching(packing, "neat_packing" if neat else "packing" if doc.has("packing") else
                   f"packing (LLaMA-Factory: on for stage pt only; stage {stage})")
        if packing:
            b.note(f"packing: every sequence is filled to cutoff_len ({cutoff}), so seq_len is exact.")
        else:
            b.note(f"no packing: each batch is padded to its longest sample; seq_len {cutoff} (cutoff_len) is the "
                   "longest a batch can be, the peak zerocalc counts.")

    def kernels(self) -> None:
        doc, b = self.doc, self.b
        flash = one_of("flash_attn", doc.get("flash_attn", default="auto"), tuple(ATTENTION))
        b.set("workload", "attention", ATTENTION[flash], self.src("flash_attn", "auto (SDPA)"))
        b.sdpa = flash in ("auto", "sdpa")
        off = boolean("disable_gradient_checkpointing", doc.get("disable_gradient_checkpointing", default=False))
        on = hf.read_checkpointing(doc)[1]
        if on or not off:
            hf.read_every(doc, b)
        b.set("workload", "recompute", "none" if off and not on else "full",
              "disable_gradient_checkpointing" if doc.has("disable_gradient_checkpointing")
              else "default: LLaMA-Factory checkpoints every decoder layer (disable_gradient_checkpointing false)")
        if boolean("use_unsloth_gc", doc.get("use_unsloth_gc", default=False)):
            b.note("use_unsloth_gc: unsloth's checkpointing offloads the saved inputs to the CPU; counted on the GPU.")
        if boolean("enable_liger_kernel", doc.get("enable_liger_kernel", default=False)):
            b.note("enable_liger_kernel: Liger's fused kernels (and its chunked loss) are not modelled; the "
                   "Hugging Face loss is counted.")
