"""Import a LitGPT fine-tuning YAML (`litgpt finetune_lora CHECKPOINT --config FILE.yaml`, or finetune_full), at
Lightning-AI/litgpt commit 26857050fe3ff627cd714fe92f5838f51a3d5efa (litgpt/finetune/lora.py and full.py setup(),
litgpt/args.py TrainArgs, litgpt/utils.py):

- the script is not in the file: any lora_* key or quantize means finetune_lora, else finetune_full (a note says
  which); checkpoint_dir names the preset (its last folder: checkpoints/meta-llama/Meta-Llama-3-8B);
- lora.py: lora_r 8, lora_dropout 0.05, lora_query True, lora_key False, lora_value True, lora_projection False,
  lora_mlp False, lora_head False; quantize None or bnb.nf4 / nf4-dq / fp4 / fp4-dq / int8-training
  (BitsandbytesPrecision; refused with a -mixed precision and on more than one device, as lora.py refuses them;
  the optimizer becomes bnb's PagedAdamW: instantiate_bnb_optimizer);
- precision None is get_default_supported_precision(training=True): bf16-mixed on a GPU with bf16 (assumed);
  -true builds the whole model, adapters included, in that dtype (the optimizer's states follow), -mixed keeps
  fp32 weights under autocast;
- devices 1 x num_nodes 1; on more than one, FSDP over every device with every Block checkpointed (full.py
  FSDPStrategy, activation_checkpointing_policy={Block}; lora.py ModelParallelStrategy, parallelize_fn's
  fully_shard and checkpoint_wrapper); on one, no checkpointing;
- train: micro_batch_size and global_batch_size (accumulation = global // devices // micro: TrainArgs
  gradient_accumulation_iters; the scripts' defaults 1 and 16), max_seq_length None (the model's block size);
- optimizer "AdamW" (torch.optim's), or {class_path, init_args};
- fit() assigns `logits = model(...)` and `loss = chunked_cross_entropy(...)` each iteration and deletes neither
  (lora.py:355-358, full.py:282-284): holds_graph, the last step's logits and loss alive into the next forward.
"""

from __future__ import annotations

from ...model.finetune import TARGETS
from ..accelerate.document import load_mapping
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, boolean, count, number,
                      one_of, text)
from ..hf_trainer.model import read_model
from ..torchtune.tables import OPTIMIZERS

PRECISIONS = {"bf16-true": "bf16", "bf16-mixed": "bf16", "16-true": "fp16", "16-mixed": "fp16", "32-true": "fp32",
              "bf16": "bf16", "16": "fp16", "32": "fp32"}
QUANTIZE = {"bnb.nf4": ("nf4", False), "bnb.nf4-dq": ("nf4", True), "bnb.fp4": ("fp4", False),
            "bnb.fp4-dq": ("fp4", True), "bnb.int8-training": ("int8", False)}
# lora.py setup(): which projections get an adapter (LitGPT's fused qkv counts as q, k, v; LLaMAMLP's fc_1, fc_2,
# proj are gate, up, down), and their defaults
LORA_FLAGS = (("lora_query", True, ("q",)), ("lora_key", False, ("k",)), ("lora_value", True, ("v",)),
              ("lora_projection", False, ("o",)), ("lora_mlp", False, ("gate", "up", "down")),
              ("lora_head", False, ("lm_head",)))
LOG = "run bookkeeping (logging, saving, evaluation, schedule): no effect on the bytes zerocalc counts"
IGNORED = {
    "out_dir": LOG, "data": "dataset selection and preprocessing: no effect on the bytes of a step", "eval": LOG,
    "logger_name": LOG, "seed": LOG, "resume": LOG, "access_token": LOG, "log": LOG, "lora_alpha": "a scale: no "
    "effect on bytes", "train.save_interval": LOG, "train.log_interval": LOG, "train.lr_warmup_steps": LOG,
    "train.lr_warmup_fraction": LOG, "train.epochs": LOG, "train.max_tokens": LOG, "train.max_steps": LOG,
    "train.max_time": LOG, "train.min_lr": LOG, "train.max_norm": "clipping reads the gradients in place: no bytes "
    "zerocalc counts", "train.tie_embeddings": "the checkpoint's own tying decides the shapes (the preset's)",
    "optimizer": "a hyperparameter: no effect on bytes",
}


def import_litgpt(source, context=None) -> ImportedConfig:
    """A LitGPT fine-tuning config (text or bytes)."""
    data = load_mapping(source, "YAML", "a YAML mapping of LitGPT finetune arguments")
    ImportContext.of(context)
    return _Reader(Doc(data)).run()


class _Reader:
    def __init__(self, doc: Doc):
        self.doc, self.b = doc, Builder("litgpt")

    def get(self, *path, default=None):
        value = self.doc.get(*path, default=None)
        return default if value is None else value

    def src(self, key: str, default_text: str) -> str:
        path = tuple(key.split("."))
        return key if self.get(*path) is not None else f"default: LitGPT {key} {default_text}"

    def run(self) -> ImportedConfig:
        doc, b = self.doc, self.b
        read_model(doc, b, "checkpoint_dir")
        lora = any(k.startswith("lora_") for k in doc.data) or doc.data.get("quantize") is not None
        b.note(f"the script: finetune_{'lora' if lora else 'full'} (assumed: the file "
               f"{'holds lora_* or quantize keys' if lora else 'holds no lora_* key'}).")
        precision = one_of("precision", self.get("precision", default="bf16-mixed"), tuple(PRECISIONS))
        if not doc.has("precision") or doc.data["precision"] is None:
            b.note("precision absent: bf16-mixed, LitGPT's default on a GPU with bf16 (assumed).")
        dtype, mixed = PRECISIONS[precision], precision.endswith("-mixed")
        gpus = self.devices()
        quant = self.quantize(mixed, gpus) if lora else None
        self.batch(gpus)
        self.method(lora, quant, dtype, mixed)
        self.optimizer(quant)
        self.ledger(dtype, mixed, gpus, lora)
        b.set("workload", "holds_graph", True, "LitGPT's fit loop assigns logits = model(...) and loss = ... each "
              "iteration and deletes neither (finetune/lora.py and full.py fit): the last step's stay into the next")
        for key in doc.leftovers():
            b.ignore(key, IGNORED.get(key) or IGNORED.get(key.split(".", 1)[0]) or "no effect on the bytes "
                                                                                     "zerocalc counts")
        return b.build()

    def devices(self) -> int:
        raw = self.get("devices", default=1)
        if raw in ("auto", -1):
            self.b.note("devices auto: every visible GPU; give --gpus (one node's count is not in the file).")
            return 0
        devices = count("devices", raw, 1, 100_000)
        return devices * count("num_nodes", self.get("num_nodes", default=1), 1, 100_000)

    def quantize(self, mixed: bool, gpus: int):
        raw = self.get("quantize")
        if raw is None:
            return None
        mode = one_of("quantize", raw, tuple(QUANTIZE))
        if mixed:
            raise FrameworkConfigError("precision", self.get("precision", default="bf16-mixed"), "a -true "
                                       "precision with quantize (LitGPT: 'Quantization and mixed precision is not "
                                       "supported.')")
        if gpus != 1:
            raise FrameworkConfigError("devices", self.get("devices", default=1), "1 on one node with quantize "
                                       "(LitGPT: 'Quantization is currently not supported for multi-GPU training')")
        return QUANTIZE[mode]

    def batch(self, gpus: int) -> None:
        doc, b = self.doc, self.b
        doc.section("train")
        micro = count("train.micro_batch_size", self.get("train", "micro_batch_size", default=1), 1, 10**6)
        total = count("train.global_batch_size", self.get("train", "global_batch_size", default=16), 1, 10**9)
        b.set("workload", "micro_batch", micro, self.src("train.micro_batch_size", "1 (the scripts' TrainArgs)"))
        per_rank = total // max(gpus, 1)
        if per_rank // micro < 1:
            raise FrameworkConfigError("train.global_batch_size", total, f"at least micro_batch_size x devices x "
                                       f"num_nodes ({micro * max(gpus, 1):,}): LitGPT asserts one micro-batch a step")
        b.set("layout", "micro_batches", per_rank // micro, "train.global_batch_size / (devices x num_nodes) / "
                                                            "micro_batch_size (TrainArgs.gradient_accumulation_iters)")
        seq = self.get("train", "max_seq_length")
        if seq is None:
            b.note("train.max_seq_length null: samples are cut at the model's block size; the view's seq_len is "
                   "kept (set it to the longest sample you train on).")
        else:
            seq = count("train.max_seq_length", seq, 1, 10**8)
            b.set("workload", "seq_len", seq, "train.max_seq_length")
            b.note(f"no packing: each batch is padded to its longest sample; seq_len {seq} (train.max_seq_length) "
                   "is the longest a batch can be, the peak zerocalc counts.")

    def method(self, lora: bool, quant, dtype: str, mixed: bool) -> None:
        b = self.b
        if not lora:
            b.set("finetune", "mode", "full", "finetune_full (no lora_* key)")
            return
        b.set("finetune", "mode", "qlora" if quant else "lora", "quantize" if quant else "lora_* keys")
        if quant:
            b.set("finetune", "quant_type", quant[0], "quantize")
            b.set("finetune", "double_quant", quant[1], "quantize (-dq: double quantization)")
            b.set("finetune", "kbit_prepare", False, "BitsandbytesPrecision: no fp32 upcast of the other weights")
            b.set("finetune", "quantize_head", True, "BitsandbytesPrecision builds every nn.Linear under "
                  "fabric.init_module as a 4-bit one, lm_head included (lightning fabric/plugins/precision/"
                  "bitsandbytes.py module_init_context)")
        b.set("finetune", "lora_rank", count("lora_r", self.get("lora_r", default=8), 1, 1_000_000),
              self.src("lora_r", "8"))
        b.set("finetune", "lora_dropout", number("lora_dropout", self.get("lora_dropout", default=0.05), 0.0, 1.0),
              self.src("lora_dropout", "0.05"))
        targets = []
        for key, default, names in LORA_FLAGS:
            if boolean(key, self.get(key, default=default)):
                targets += names
        if not targets:
            raise FrameworkConfigError("lora_query", False, "true, or another lora_* target true (no adapter would "
                                                            "train)")
        targets = tuple(targets)
        b.set("finetune", "lora_targets", ("all-linear",) if targets == TARGETS else targets,
              "lora_query / key / value / projection / mlp / head (defaults: query and value)")
        weights = "fp32" if mixed else dtype
        b.set("finetune", "adapter_dtype", weights, "precision: the adapters are built in the model's dtype")
        b.set("finetune", "base_dtype", weights, "precision")

    def optimizer(self, quant) -> None:
        doc, b = self.doc, self.b
        raw = doc.get("optimizer", default=None)
        name = raw.get("class_path") if isinstance(raw, dict) else raw
        if isinstance(raw, dict):
            doc.mark("optimizer", "class_path")
        name = text("optimizer", name if name is not None else "AdamW", what="an optimizer class path")
        name = name if "." in name else f"torch.optim.{name}"
        if quant:
            if "AdamW" not in name:
                raise FrameworkConfigError("optimizer", name, "an AdamW with quantize (LitGPT: 'The chosen "
                                           "quantization format only supports the AdamW optimizer.')")
            b.set("scenario", "optimizer", "paged-adamw", "quantize: bitsandbytes PagedAdamW "
                                                          "(instantiate_bnb_optimizer)")
            return
        if name not in OPTIMIZERS:
            b.note(f"optimizer {name}: not one zerocalc maps; the view's optimizer is kept.")
            return
        b.set("scenario", "optimizer", OPTIMIZERS[name], self.src("optimizer", "AdamW"))
        if name.startswith("torch.optim.Adam"):
            b.set("scenario", "optimizer_impl", "foreach", "torch's default on CUDA (LitGPT passes no fused)")

    def ledger(self, dtype: str, mixed: bool, gpus: int, lora: bool) -> None:
        b = self.b
        weights = "fp32" if mixed else dtype
        src = (f"precision {dtype}-mixed: fp32 weights under autocast" if mixed else
               f"precision {dtype}-true: the model, its gradients and the optimizer's states in {dtype}")
        for field, value in (("convention", "pure-bf16" if weights == "bf16" else "fsdp2"),
                             ("param_dtype", weights), ("grad_dtype", weights), ("master_dtype", None),
                             ("grad_accum_dtype", None), ("optimizer_dtype", weights),
                             ("comm_dtype", dtype if mixed and gpus != 1 else None), ("offload_params", "none"),
                             ("offload_optimizer", "none")):
            b.set("scenario", field, value, src)
        b.set("workload", "activation_dtype", dtype, "precision")
        b.set("workload", "attention", "flash", "LitGPT's attention: scaled_dot_product_attention")
        b.set("workload", "repeat_kv", True, "LitGPT's CausalSelfAttention repeats K and V to the query heads in "
                                             "training when n_query_groups < n_head (litgpt/model.py)")
        if gpus == 1:
            b.set("scenario", "workers", 1, "devices 1, num_nodes 1")
            b.set("workload", "recompute", "none", "one device: LitGPT checkpoints nothing")
        else:
            if gpus > 1:
                b.set("scenario", "workers", gpus, "devices x num_nodes")
            b.stage = 3
            b.sources["selected_stage"] = "devices > 1: FSDP, full shard (" + (
                "lora.py parallelize_fn fully_shard)" if lora else "full.py FSDPStrategy)")
            b.set("workload", "comm_buffers", "fsdp", "FSDP: one Block gathered at a time")
            b.set("workload", "recompute", "full", "devices > 1: every Block checkpointed")
        b.note("LitGPT's loss (chunked_cross_entropy, 128-token chunks; finetune_lora also runs the head in "
               "chunks) takes no fp32 upcast under a -true precision; counted as Hugging Face's upcast loss, an "
               "upper bound.")
