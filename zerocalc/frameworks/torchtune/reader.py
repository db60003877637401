"""Import a torchtune recipe YAML (what `tune run RECIPE --config FILE.yaml` reads), at pytorch/torchtune commit
bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1 (recipes/*.py, torchtune/models, torchtune/training):

- the recipe is named in the file's header comment (every config in recipes/configs/ says "# Config for ... in
  RECIPE.py" and "tune run RECIPE --config ..."); without one, a file holding a key only the distributed recipes
  read (fsdp_cpu_offload, custom_sharded_layers, ...) is taken as distributed, any other as single-device, and a
  note says so;
- model._component_: the builder names the preset (tables.PRESETS); lora_X takes lora_attn_modules (required),
  apply_lora_to_mlp False, apply_lora_to_output False, lora_rank 8, lora_dropout 0, use_dora False; qlora_X is
  lora_X with quantize_base=True (torchao NF4: 64-value blocks, the scales quantized again in blocks of 256);
- dtype (training.get_dtype: None is fp32; fp16 refused by the recipes): the whole model, adapters included, is
  built in it (training.set_default_dtype; lora_finetune_single_device.py checks the adapters' dtype with
  validate_expected_param_dtype), and AdamW's states follow the weights: no fp32 copy anywhere, and no fp32 upcast
  of a QLoRA base's other weights;
- the distributed recipes shard with FSDP2 fully_shard (training/_distributed.py shard_model: reshard_after_forward
  from fsdp_reshard_after_forward, True: ZeRO-3, False: ZeRO-2), without a mixed-precision policy (no mp_policy),
  fsdp_cpu_offload False (CPUOffloadPolicy: the weights, gradients and the optimizer step on the CPU),
  tensor_parallel_dim 1, context_parallel_dim 1;
- batch_size, gradient_accumulation_steps, tokenizer.max_seq_len (null: no truncation), dataset.packed False,
  enable_activation_checkpointing False, enable_activation_offloading False (needs checkpointing), compile False,
  optimizer_in_bwd False (refused with gradient accumulation), optimizer._component_, loss._component_.
"""

from __future__ import annotations

import re

from ..accelerate.document import load_mapping
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, boolean, count,
                      decode_text, number, one_of, text)
from . import tables as T

DTYPES = ("bf16", "fp32", "fp16", "fp64")
RECIPE = re.compile(r"\b(" + "|".join(sorted(T.RECIPES, key=len, reverse=True)) + r")\b")


def import_torchtune(source, context=None) -> ImportedConfig:
    """A torchtune recipe config (text or bytes). The recipe comes from the file's header comment."""
    data = load_mapping(source, "YAML", "a YAML mapping of torchtune recipe settings")
    ImportContext.of(context)
    header = "\n".join(line for line in decode_text(source, "YAML").splitlines()[:40] if line.lstrip().startswith("#"))
    return _Reader(Doc(data), header).run()


class _Reader:
    def __init__(self, doc: Doc, header: str):
        self.doc, self.b, self.header = doc, Builder("torchtune"), header

    def get(self, *path, default=None):
        """A value (null is the default, as cfg.get returns it)."""
        value = self.doc.get(*path, default=None)
        return default if value is None else value

    def flag(self, key: str, default=False) -> bool:
        return boolean(key, self.get(key, default=default))

    def src(self, key: str, default_text: str) -> str:
        path = tuple(key.split("."))
        return key if self.doc.has(*path) and self.doc.get(*path) is not None else \
            f"default: torchtune {key} {default_text}"

    def run(self) -> ImportedConfig:
        doc, b = self.doc, self.b
        recipe, distributed, extra = self.recipe()
        dtype = self.dtype()
        micro, gas = self.batch(extra)
        mode = self.model(dtype, recipe)
        self.lengths()
        b.set("workload", "attention", "flash", "torchtune's attention: SDPA (flex attention with packing), no score "
                                                "matrix kept")
        b.set("workload", "repeat_kv", True, "torchtune's MultiHeadAttention: K and V expanded to every query head "
                                             "(a copy the kernel saves) when num_kv_heads < num_heads")
        self.kernels(gas)
        self.optimizer()
        self.ledger(dtype, distributed, recipe)
        for key in doc.leftovers():
            top = key.split(".", 1)[0]
            b.ignore(key, T.IGNORED.get(key) or T.IGNORED.get(top) or "no effect on the bytes zerocalc counts")
        if mode is None:
            b.note("model._component_ names no builder zerocalc reads; the view's method and model are kept.")
        return b.build()

    # --- the recipe and its precision ---------------------------------------------------------------------------
    def recipe(self):
        b = self.b
        found = RECIPE.search(self.header)
        if found:
            name = found.group(1)
            b.note(f"recipe {name} (named in the file's header comment).")
        else:
            name = ""
            distributed = any(self.doc.has(k) for k in T.DISTRIBUTED_KEYS)
            b.note("no recipe named in the file's header: assumed " + ("a distributed recipe (the file holds "
                   "FSDP keys)" if distributed else "a single-device recipe") + ".")
            return name, distributed, ""
        distributed, extra = T.RECIPES[name]
        if extra in T.EXTRAS:
            b.note(T.EXTRAS[extra])
        return name, distributed, extra

    def dtype(self) -> str:
        raw = self.doc.get("dtype", default=None)
        if raw is None:
            self.b.note("dtype absent: fp32 (training.get_dtype's default).")
            return "fp32"
        dtype = one_of("dtype", raw, DTYPES)
        if dtype in ("fp16", "fp64"):
            raise FrameworkConfigError("dtype", dtype, "bf16 or fp32 (torchtune's recipes: 'full fp16 training is "
                                                       "not supported with this recipe')")
        return dtype

    def batch(self, extra: str):
        doc, b = self.doc, self.b
        micro = count("batch_size", self.get("batch_size", default=1), 1, 10**6)
        gas = count("gradient_accumulation_steps", self.get("gradient_accumulation_steps", default=1), 1, 100_000)
        for key in ("batch_size", "gradient_accumulation_steps"):
            if not doc.has(key):
                b.note(f"{key}: absent (every recipe reads it; the recipe would stop); 1 is assumed.")
        if extra in ("dpo", "dpo-reference"):
            b.set("workload", "micro_batch", 2 * micro, "batch_size x 2 (DPO: chosen and rejected concatenated "
                                                        "in one forward, rlhf concatenated_forward)")
        else:
            b.set("workload", "micro_batch", micro, self.src("batch_size", "1"))
        b.set("layout", "micro_batches", gas, self.src("gradient_accumulation_steps", "1"))
        return micro, gas

    # --- the model and the method ------------------------------------------------------------------------------
    def model(self, dtype: str, recipe: str):
        doc, b = self.doc, self.b
        doc.section("model")
        component = text("model._component_", self.get("model", "_component_", default=""), what="a model builder")
        builder = component.rsplit(".", 1)[-1]
        kind = "qlora" if builder.startswith("qlora_") else "lora" if builder.startswith("lora_") else "full"
        base = builder.split("_", 1)[1] if kind != "full" else builder
        preset = T.PRESETS.get(base, "")
        if preset:
            b.model = preset
            b.note(f"model._component_ {component}: the {preset} preset.")
        elif component:
            b.note(f"model._component_ {component}: no zerocalc preset; give the architecture with --model, "
                   "--config or --hub.")
        if not component:
            return None
        if kind == "full":
            b.set("finetune", "mode", "full", "model._component_ (a full model builder)")
            if recipe.startswith("lora_"):
                b.note(f"recipe {recipe} with a full model builder: torchtune finds no adapter to train.")
            return "full"
        dora = boolean("model.use_dora", self.get("model", "use_dora", default=False))
        quant = kind == "qlora" or boolean("model.quantize_base", self.get("model", "quantize_base", default=False))
        mode = "qlora" if quant else "dora" if dora else "lora"
        if quant and dora:
            b.note("use_dora on a quantized base: counted as QLoRA (zerocalc has no quantized DoRA).")
        b.set("finetune", "mode", mode, "model._component_ " + builder.split("_", 1)[0] +
              (" / model.use_dora" if mode == "dora" else ""))
        if quant:
            for field, value in (("quant_type", "nf4"), ("double_quant", True), ("kbit_prepare", False)):
                b.set("finetune", field, value, "quantize_base: torchao NF4 (64-value blocks, scales requantized in "
                                                "256s); the other weights stay in dtype")
        b.set("finetune", "lora_rank", count("model.lora_rank", self.get("model", "lora_rank", default=8), 1,
                                             1_000_000), self.src("model.lora_rank", "8"))
        b.set("finetune", "lora_dropout", number("model.lora_dropout", self.get("model", "lora_dropout",
                                                                                default=0.0), 0.0, 1.0),
              self.src("model.lora_dropout", "0"))
        b.set("finetune", "lora_targets", self.targets(), "model.lora_attn_modules / apply_lora_to_mlp / "
                                                          "apply_lora_to_output")
        b.set("finetune", "adapter_dtype", dtype, "dtype: the adapters are built in it (training.set_default_dtype)")
        b.set("finetune", "base_dtype", dtype, "dtype")
        return mode

    def targets(self) -> tuple:
        raw = self.doc.get("model", "lora_attn_modules", default=None)
        if not isinstance(raw, list) or not raw:
            raise FrameworkConfigError("model.lora_attn_modules", raw, "a list of " + ", ".join(T.ATTN_TARGETS) +
                                       " (the LoRA builders take it without a default)")
        for name in raw:
            one_of("model.lora_attn_modules", name, tuple(T.ATTN_TARGETS))
        out = [T.ATTN_TARGETS[n] for n in raw]
        if boolean("model.apply_lora_to_mlp", self.get("model", "apply_lora_to_mlp", default=False)):
            out += T.MLP_TARGETS
        if boolean("model.apply_lora_to_output", self.get("model", "apply_lora_to_output", default=False)):
            out.append("lm_head")
        return tuple(dict.fromkeys(out))

    # --- lengths, kernels, optimizer ----------------------------------------------------------------------------
    def lengths(self) -> None:
        doc, b = self.doc, self.b
        doc.section("tokenizer")
        raw = doc.get("tokenizer", "max_seq_len", default=None)
        datasets = doc.data.get("dataset")
        datasets = datasets if isinstance(datasets, list) else [datasets] if isinstance(datasets, dict) else []
        packed = False
        for i, ds in enumerate(datasets):
            if isinstance(ds, dict) and "packed" in ds:
                path = ("dataset", i, "packed") if isinstance(doc.data["dataset"], list) else ("dataset", "packed")
                packed |= boolean(".".join(map(str, path)), ds["packed"])
                doc.mark(*path)
        if raw is None:
            if packed:
                raise FrameworkConfigError("dataset.packed", True, "false without tokenizer.max_seq_len (torchtune: "
                                           "'PackedDataset requires a max_seq_len to be set on the tokenizer.')")
            b.note("tokenizer.max_seq_len null: no truncation, each batch as long as its longest sample; the view's "
                   "seq_len is kept (set it to the longest sample you train on).")
            return
        seq = count("tokenizer.max_seq_len", raw, 1, 10**8)
        b.set("workload", "seq_len", seq, "tokenizer.max_seq_len")
        b.batching(packed, "dataset.packed")
        b.note(f"dataset.packed: every row is filled to max_seq_len ({seq}), so seq_len is exact." if packed else
               f"not packed: each batch is padded to its longest sample; seq_len {seq} (tokenizer.max_seq_len) is the "
               "longest a batch can be, the peak zerocalc counts.")

    def kernels(self, gas: int) -> None:
        b = self.b
        ac = self.flag("enable_activation_checkpointing")
        b.set("workload", "recompute", "full" if ac else "none", self.src("enable_activation_checkpointing",
                                                                          "false"))
        if self.flag("enable_activation_offloading"):
            if not ac:
                raise FrameworkConfigError("enable_activation_offloading", True, "false without enable_activation_"
                                           "checkpointing (torchtune: 'enable_activation_offloading should only be "
                                           "True when enable_activation_checkpointing is True')")
            b.set("workload", "activation_offload", True, "enable_activation_offloading")
        compiled = self.flag("compile")
        if compiled:
            b.set("workload", "compile", True, "compile (the model and the loss)")
        if self.flag("optimizer_in_bwd"):
            if gas > 1:
                raise FrameworkConfigError("optimizer_in_bwd", True, "false with gradient_accumulation_steps over 1 "
                                           "(torchtune: 'Gradient accumulation is not supported with optimizer in "
                                           "bwd.')")
            b.set("workload", "optimizer_in_backward", True, "optimizer_in_bwd")
        self.doc.section("loss")
        loss = self.get("loss", "_component_", default=None)
        if loss is None:
            return
        name = text("loss._component_", loss)
        if name not in T.LOSSES:
            b.note(f"loss._component_ {name}: not a loss zerocalc maps; Hugging Face's upcast loss is counted.")
            return
        kind = "compiled-fp32" if T.LOSSES[name] == "auto" and compiled else T.LOSSES[name]
        if kind != "auto":
            b.set("workload", "loss", kind, "loss._component_")
        if kind == "chunked":
            chunks = count("loss.num_output_chunks", self.get("loss", "num_output_chunks", default=8), 1, 10_000)
            b.set("workload", "loss_chunks", chunks, self.src("loss.num_output_chunks", "8"))
        if name.endswith("LinearCrossEntropyLoss"):
            b.note("LinearCrossEntropyLoss projects one chunk of tokens at a time inside the loss; counted as the "
                   "chunked output's loss (CEWithChunkedOutputLoss): the same saved fp32 log-softmax and backward "
                   "peak, a forward peak about 1.8 bytes per token x vocabulary higher at 8 chunks (measured on the "
                   "CPU: tests/measure/linear_ce.py).")

    def optimizer(self) -> None:
        doc, b = self.doc, self.b
        doc.section("optimizer")
        raw = self.get("optimizer", "_component_", default=None)
        if raw is None:
            return
        name = text("optimizer._component_", raw)
        if name not in T.OPTIMIZERS:
            b.note(f"optimizer._component_ {name}: not one zerocalc maps; the view's optimizer is kept.")
            return
        optimizer = T.OPTIMIZERS[name]
        if optimizer == "sgd" and number("optimizer.momentum", self.get("optimizer", "momentum", default=0.0),
                                         0.0, 1.0):
            optimizer = "sgd-momentum"
        b.set("scenario", "optimizer", optimizer, "optimizer._component_")
        if name.startswith("torch.optim.Adam"):
            fused = boolean("optimizer.fused", self.get("optimizer", "fused", default=False))
            foreach = self.get("optimizer", "foreach", default=None)
            foreach = True if foreach is None else boolean("optimizer.foreach", foreach)
            impl = "fused" if fused else "foreach" if foreach else "for-loop"
            b.set("scenario", "optimizer_impl", impl, "optimizer.fused / foreach (torch's default on CUDA: foreach)")

    # --- sharding and the ledger ----------------------------------------------------------------------------
    def ledger(self, dtype: str, distributed: bool, recipe: str) -> None:
        b = self.b
        src = f"dtype {dtype}: the model, its gradients and the optimizer's states in it (no fp32 copy)"
        for field, value in (("convention", "pure-bf16" if dtype == "bf16" else "fsdp2"),
                             ("param_dtype", dtype), ("grad_dtype", dtype),
                             ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", dtype),
                             ("comm_dtype", None), ("offload_params", "none"), ("offload_optimizer", "none")):
            b.set("scenario", field, value, src)
        b.set("workload", "activation_dtype", dtype, "dtype")
        if not distributed:
            b.set("scenario", "workers", 1, f"recipe {recipe or '(assumed single-device)'}: one device")
            return
        reshard = boolean("fsdp_reshard_after_forward", self.get("fsdp_reshard_after_forward", default=True))
        b.stage = 3 if reshard else 2
        b.sources["selected_stage"] = self.src("fsdp_reshard_after_forward", "true (FSDP2 fully_shard)")
        b.set("workload", "comm_buffers", "fsdp", "FSDP2: one layer gathered at a time")
        if self.flag("fsdp_cpu_offload"):
            for field in ("offload_params", "offload_optimizer"):
                b.set("scenario", field, "cpu", "fsdp_cpu_offload (CPUOffloadPolicy)")
        for key, field in (("tensor_parallel_dim", "tp"), ("context_parallel_dim", "cp")):
            degree = count(key, self.get(key, default=1), 1, 100_000)
            if degree > 1:
                b.set("layout", field, degree, key)
        replicate = count("data_parallel_replicate_dim", self.get("data_parallel_replicate_dim", default=1), 1,
                          100_000)
        shard = count("data_parallel_shard_dim", self.get("data_parallel_shard_dim", default=-1), -1, 100_000)
        if shard == 0:
            raise FrameworkConfigError("data_parallel_shard_dim", 0, "-1 (inferred) or a positive integer")
        if replicate > 1 and shard > 0:
            b.set("scenario", "shard_group", shard, "data_parallel_shard_dim (HSDP: replicated "
                                                    f"{replicate} times)")
        b.note("the data-parallel size is tune run's --nproc_per_node (and nodes), not in this file: give --gpus.")
