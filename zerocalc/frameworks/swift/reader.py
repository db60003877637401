"""Import ms-swift's training arguments, at modelscope/ms-swift commit 3602360a562313afbf2ef6065fdf61f271a2c5b9: a
`swift sft --config FILE` YAML or JSON, or the shell script its examples run (`swift sft --model ... --tuner_type
lora ...`: script.py). The defaults are swift/arguments/ at that commit:

- base_args.py tuner_type "lora" (full / lora; the legacy name train_type), packing False; model_args.py
  torch_dtype None (the checkpoint's config.json dtype: assumed bf16, a note), attn_impl None (SDPA);
  _init_mixed_precision: bf16 / fp16 follow torch_dtype unless given;
- tuner_args.py freeze_vit True, freeze_aligner True (model/vision.py launcher_mode), lora_rank 8, lora_dropout 0.05, target_modules ["all-linear"], modules_to_save [], use_dora False,
  lora_dtype None (peft's fp32 adapters); quant_args.py quant_method None, quant_bits None (bnb 4 or 8),
  bnb_4bit_quant_type nf4, bnb_4bit_use_double_quant True; template_args.py max_length None (the model's own),
  padding_free False;
- trainers/arguments.py per_device_train_batch_size 1, gradient_checkpointing True, gradient_accumulation_steps None
  (ceil(16 / batch / world size)); rlhf_args.py rlhf_type (dpo / orpo / simpo / cpo / rm pair chosen and rejected);
- sft_args.py: deepspeed zero0-3 / zero2_offload / zero3_offload name ms-swift's shipped files (presets.py,
  followed inline), any other value is a path (followed as in section 9); fsdp "fsdp2" names swift/config/fsdp2.json
  (read as the Trainer's FSDP); the world size is NPROC_PER_NODE x NNODES in a script (absent: one process).
- pipelines/train/tuner.py: a full fine-tune trains the model as loaded (no fp32 copy outside DeepSpeed / FSDP).
"""

from __future__ import annotations

import math
import re

from ...model.finetune import ALL_LINEAR
from ...model.vision import TOWERS, launcher_mode
from ..accelerate.document import load_mapping
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, boolean, count,
                      decode_text, number, one_of, text)
from ..hf_trainer import arguments as hf
from ..hf_trainer.fsdp import read_fsdp
from ..hf_trainer.model import read_model
from ..llamafactory.reader import LORA_MODULES
from . import presets
from .script import script_arguments

DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
ATTENTION = {"sdpa": "flash", "flash_attn": "flash", "flash_attention_2": "flash", "flash_attention_3": "flash",
             "flex_attention": "flash", "eager": "eager"}
PAIRED = ("dpo", "orpo", "simpo", "cpo", "rm")
RLHF = PAIRED + ("kto", "ppo", "grpo", "gkd")
SCRIPT = re.compile(r"(^|\s)swift\s+(sft|rlhf|pt)(\s|$)", re.M)
DATA = "dataset selection and preprocessing: no effect on the bytes of a step"
IGNORED = {
    "dataset": DATA, "val_dataset": DATA, "system": DATA, "model_author": DATA, "model_name": DATA,
    "split_dataset_ratio": DATA, "load_from_cache_file": DATA, "dataset_num_proc": DATA, "streaming": DATA,
    "lora_alpha": "a scale: no effect on bytes", "rpo_alpha": "a loss coefficient: no effect on bytes",
    "beta": "a loss coefficient: no effect on bytes", "bnb_4bit_compute_dtype": "the compute dtype: torch_dtype's",
    "model_type": "the loader's family: the architecture is the model's", "template": DATA,
}


def import_swift(source, context=None) -> ImportedConfig:
    """ms-swift arguments: a --config YAML / JSON mapping, or a `swift sft|rlhf|pt ...` shell script."""
    ImportContext.of(context)
    env, command = {}, None
    if SCRIPT.search(decode_text(source, "ms-swift arguments")):
        command, data, env = script_arguments(source)
    else:
        data = load_mapping(source, "YAML or JSON", "a mapping of ms-swift arguments")
    return _Reader(Doc(data), command, env).run()


class _Reader:
    def __init__(self, doc: Doc, command, env: dict):
        self.doc, self.b, self.command, self.env = doc, Builder("swift"), command, env

    def get(self, key: str, default=None):
        value = self.doc.get(key, default=None)
        return default if value is None else value

    def src(self, key: str, default_text: str) -> str:
        return key if self.doc.data.get(key) is not None else f"default: ms-swift {key} {default_text}"

    def run(self) -> ImportedConfig:
        doc, b = self.doc, self.b
        read_model(doc, b, "model")
        world = self.world()
        dtype = self.dtype()
        amp = self.amp(dtype)
        micro = self.batch(world)
        hf.read_optim(doc, b)
        mode = self.method(dtype)
        self.tower(mode)
        self.lengths()
        self.kernels()
        self.rlhf(micro)
        self.sharding(dtype, amp, mode)
        for key in doc.leftovers():
            top = key.split(".", 1)[0]
            b.ignore(key, IGNORED.get(top) or hf.IGNORED.get(top) or "no effect on the bytes zerocalc counts")
        return b.build()

    def world(self) -> int:
        """NPROC_PER_NODE x NNODES of a script (ms-swift's launcher reads them); 0 when not said."""
        b, env = self.b, self.env
        if "NPROC_PER_NODE" not in env:
            visible = env.get("CUDA_VISIBLE_DEVICES", "")
            if "," in visible:
                b.note(f"CUDA_VISIBLE_DEVICES={visible} without NPROC_PER_NODE: ms-swift runs one process over "
                       "those GPUs (device_map, the layers spread across them), which zerocalc does not model.")
            if self.command:
                b.set("scenario", "workers", 1, "a script without NPROC_PER_NODE: one process")
                return 1
            return 0
        world = count("NPROC_PER_NODE", env["NPROC_PER_NODE"], 1, 100_000, lax=True) * \
            count("NNODES", env.get("NNODES", 1), 1, 100_000, lax=True)
        b.set("scenario", "workers", world, "NPROC_PER_NODE x NNODES")
        return world

    def dtype(self) -> str:
        raw = self.get("torch_dtype")
        if raw is None:
            self.b.note("torch_dtype absent: the checkpoint's config.json dtype, assumed bf16.")
            return "bf16"
        return DTYPES[one_of("torch_dtype", raw, tuple(DTYPES))]

    def amp(self, dtype: str):
        """The Trainer's bf16 / fp16 (model_args.py _init_mixed_precision: from torch_dtype unless given)."""
        bf16, fp16 = self.get("bf16"), self.get("fp16")
        if bf16 is None and fp16 is None:
            return None if dtype == "fp32" else dtype
        bf16, fp16 = bool(bf16 is not None and boolean("bf16", bf16)), bool(fp16 is not None and boolean("fp16", fp16))
        if bf16 and fp16:
            raise FrameworkConfigError("fp16", True, "false when bf16 is true (TrainingArguments: 'At most one of "
                                                     "fp16 and bf16 can be True')")
        return "bf16" if bf16 else "fp16" if fp16 else None

    def batch(self, world: int) -> int:
        b = self.b
        micro = count("per_device_train_batch_size", self.get("per_device_train_batch_size", 1), 1, 10**6)
        b.set("workload", "micro_batch", micro, self.src("per_device_train_batch_size", "1"))
        gas = self.get("gradient_accumulation_steps")
        if gas is None:
            gas = max(1, math.ceil(16 / micro / max(world, 1)))
            b.set("layout", "micro_batches", gas, "default: ms-swift ceil(16 / per_device_train_batch_size / world "
                                                  f"size{'' if world else ', assumed 1'})")
        else:
            b.set("layout", "micro_batches", count("gradient_accumulation_steps", gas, 1, 100_000),
                  "gradient_accumulation_steps")
        return micro

    def tower(self, mode) -> None:
        """A vision-language model's ViT and aligner: freeze_vit True and freeze_aligner True (tuner_args.py: in
        full training they are frozen, under all-linear LoRA they get no adapters). Said where they differ from
        zerocalc's "follow" (a key given, or a full run of a vision-language preset)."""
        keys = ("freeze_vit", "freeze_aligner")
        given = any(self.doc.data.get(k) is not None for k in keys)
        if mode is None or not (given or mode == "full" and self.b.model in TOWERS):
            return
        vit, aligner = (boolean(k, self.get(k, True)) for k in keys)
        self.b.set("finetune", "vision_training", launcher_mode(vit, aligner, mode),
                   " / ".join(self.src(k, "true") for k in keys))

    def method(self, dtype: str):
        doc, b = self.doc, self.b
        key = "tuner_type" if doc.data.get("tuner_type") is not None or "train_type" not in doc.data else "train_type"
        kind = text(key, self.get(key, "lora"))
        quant = self.quantization()
        if kind == "full":
            if quant:
                raise FrameworkConfigError("quant_bits", doc.data.get("quant_bits"), "absent with tuner_type full "
                                           "(a quantized base trains through an adapter)")
            b.set("finetune", "mode", "full", self.src(key, "lora"))
            return "full"
        if kind != "lora":
            b.note(f"{key} {kind}: not a tuner zerocalc models (lora, full); the view's method is kept.")
            return None
        dora = boolean("use_dora", self.get("use_dora", False))
        mode = "qlora" if quant else "dora" if dora else "lora"
        b.set("finetune", "mode", mode, self.src(key, "lora") + (" / quant_bits" if quant else ""))
        if quant:
            b.set("finetune", "quant_type", quant, "quant_method bnb / quant_bits / bnb_4bit_quant_type")
            b.set("finetune", "kbit_prepare", False, "ms-swift never calls prepare_model_for_kbit_training "
                  "(pipelines/train/tuner.py casts only fp16 trainable parameters to fp32)")
            if quant != "int8":
                b.set("finetune", "double_quant", boolean("bnb_4bit_use_double_quant",
                                                          self.get("bnb_4bit_use_double_quant", True)),
                      self.src("bnb_4bit_use_double_quant", "true"))
        b.set("finetune", "lora_rank", count("lora_rank", self.get("lora_rank", 8), 1, 1_000_000),
              self.src("lora_rank", "8"))
        b.set("finetune", "lora_dropout", number("lora_dropout", self.get("lora_dropout", 0.05), 0.0, 1.0),
              self.src("lora_dropout", "0.05"))
        targets = self.names("target_modules", ["all-linear"])
        if targets == ["all-linear"]:
            b.set("finetune", "lora_targets", (ALL_LINEAR,), self.src("target_modules", "all-linear"))
        elif all(t in LORA_MODULES for t in targets):
            b.set("finetune", "lora_targets", tuple(dict.fromkeys(LORA_MODULES[t] for t in targets)),
                  "target_modules")
        else:
            b.note(f"target_modules {targets}: not all modules zerocalc counts; the view's targets are kept.")
        saved = self.names("modules_to_save", [])
        if any(m not in ("embed_tokens", "lm_head") for m in saved):
            raise FrameworkConfigError("modules_to_save", saved, "module names among embed_tokens, lm_head")
        if saved:
            b.set("finetune", "modules_to_save", tuple(dict.fromkeys(saved)), "modules_to_save")
        lora_dtype = self.get("lora_dtype")
        if lora_dtype is not None:
            b.set("finetune", "adapter_dtype", DTYPES[one_of("lora_dtype", lora_dtype, tuple(DTYPES))], "lora_dtype")
        b.set("finetune", "base_dtype", dtype, "torch_dtype: the model loads in it")
        return mode

    def names(self, key: str, default: list) -> list:
        raw = self.get(key, default)
        raw = [raw] if isinstance(raw, str) else raw
        if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
            raise FrameworkConfigError(key, raw, "a module name or a list of them")
        return raw

    def quantization(self):
        method, bits = self.get("quant_method"), self.get("quant_bits")
        if method is None and bits is None:
            return None
        if method is None or bits is None:            # the refusal names the key the file holds
            given, missing = ("quant_bits", "quant_method") if method is None else ("quant_method", "quant_bits")
            raise FrameworkConfigError(given, bits if method is None else method, f"absent unless {missing} is set "
                                       "too (quant_args.py)")
        method = one_of("quant_method", method, ("bnb", "hqq", "eetq", "quanto", "fp8"))
        if method != "bnb" or bits not in (4, 8):
            self.b.note(f"quant_method {method}, quant_bits {bits}: only bitsandbytes 4 and 8 bits are modelled; "
                        "the base is counted unquantized.")
            return None
        return "int8" if bits == 8 else one_of("bnb_4bit_quant_type", self.get("bnb_4bit_quant_type", "nf4"),
                                               ("nf4", "fp4"))

    def lengths(self) -> None:
        b = self.b
        raw = self.get("max_length")
        if raw is None:
            b.note("max_length absent: the model's own maximum; the view's seq_len is kept.")
            return
        seq = count("max_length", raw, 1, 10**8)
        b.set("workload", "seq_len", seq, "max_length")
        exact = [k for k in ("packing", "padding_free") if boolean(k, self.get(k, False))]
        b.batching(bool(exact), exact[0] if exact else "packing (ms-swift's default False)")
        b.note(f"{exact[0]}: sequences are packed to max_length ({seq}), so seq_len is exact." if exact else
               f"no packing: each batch is padded to its longest sample; seq_len {seq} (max_length) is the longest "
               "a batch can be, the peak zerocalc counts.")

    def kernels(self) -> None:
        b = self.b
        gc = boolean("gradient_checkpointing", self.get("gradient_checkpointing", True))
        b.set("workload", "recompute", "full" if gc else "none", self.src("gradient_checkpointing", "true"))
        attn = self.get("attn_impl")
        kind = "flash" if attn is None else ATTENTION[one_of("attn_impl", attn, tuple(ATTENTION))]
        b.set("workload", "attention", kind, self.src("attn_impl", "none (SDPA)"))

    def rlhf(self, micro: int) -> None:
        kind = self.get("rlhf_type")
        if kind is None:
            if self.command == "rlhf":
                self.b.note("swift rlhf without rlhf_type: its default (dpo) is assumed.")
                kind = "dpo"
            else:
                return
        kind = one_of("rlhf_type", kind, RLHF)
        if kind in PAIRED:
            self.b.set("workload", "micro_batch", 2 * micro, f"per_device_train_batch_size x 2 (rlhf_type {kind}: "
                                                             "chosen and rejected in one concatenated forward)")
        else:
            self.b.note(f"rlhf_type {kind}: its extra models and generations are not counted; the policy's step is.")

    def sharding(self, dtype: str, amp, mode) -> None:
        doc, b = self.doc, self.b
        ds, fsdp = hf.read_path(doc, "deepspeed"), self.get("fsdp")
        if ds is not None and fsdp:
            raise FrameworkConfigError("fsdp", fsdp, "absent with deepspeed (ms-swift: 'FSDP2 is not compatible "
                                                     "with DeepSpeed.')")
        if ds is not None:
            if isinstance(ds, str) and ds in presets.DEEPSPEED:
                b.follows.append((f"deepspeed {ds}: ms-swift's swift/config/{ds}.json", presets.DEEPSPEED[ds], amp))
            else:
                b.follows.append(("deepspeed", ds, amp))
            b.set("workload", "activation_dtype", amp or dtype, "torch_dtype / bf16 / fp16")
            return
        if fsdp:
            preset = presets.FSDP.get(fsdp) if isinstance(fsdp, str) else None
            if preset is None:
                b.note(f"fsdp = {fsdp}: a JSON file, not followed; give the stage by flag or load its accelerate "
                       "config.")
            elif read_fsdp(Doc(preset), b, amp):
                b.sources["selected_stage"] = f"fsdp {fsdp}: ms-swift's swift/config/{fsdp}.json"
                return
        if mode in (None, "full"):
            src = f"{dtype}: ms-swift trains the model as loaded (no fp32 copy)"
            for field, value in (("convention", "pure-bf16" if dtype == "bf16" else "fsdp2"),
                                 ("param_dtype", dtype), ("grad_dtype", dtype), ("master_dtype", None),
                                 ("grad_accum_dtype", None), ("optimizer_dtype", dtype), ("comm_dtype", None),
                                 ("offload_params", "none"), ("offload_optimizer", "none")):
                b.set("scenario", field, value, src)
            b.set("workload", "activation_dtype", dtype, src)
        else:
            hf.amp_ledger(b, amp, f"the adapters in fp32 (peft autocast_adapter_dtype), the base in {dtype}")
