"""The app's whole state as one flat dict of plain values, and its URL form.

Every input is a named field with a kind and an allowed range (FIELDS, data). A link holds only the fields that differ
from their defaults, as plain readable query parameters (?model=llama-3-8b&workers=64&stage=3); the defaults of dtype
fields come from the chosen convention and those of architecture fields from the chosen model, so a link stays short
and still reproduces the view exactly. Nothing from a URL is trusted: each value is parsed by its kind and range,
never evaluated; a bad or unknown one falls back to its default with a warning naming it.
"""

from __future__ import annotations

import functools
from typing import Dict, NamedTuple, Tuple

from zerocalc.step.deepep import DISPATCHERS
from zerocalc.step.activations import ATTENTION, IMPLEMENTATIONS, RECOMPUTE
from zerocalc.model.architecture import (ACTIVATIONS, KV_EXPANDS, MOE_LIMITS, NORMS, POSITIONS, QK_NORMS, ROUTERS,
                                        Architecture)
from zerocalc.model.finetune import (ALL_LINEAR, FP32_PARTS, HEAD_TARGET, MODES, QUANT_BLOCKS, QUANT_TYPES, SAVEABLE,
                                     TARGETS, TRAINABLE_MODULES)
from zerocalc.gpus import DEFAULT_GPU, GPU_CATALOG
from zerocalc.layout import LAYOUT_LIMITS, SCHEDULES
from .stages import stage_fields
from .step import step_fields
from .vision import vision_fields
from .optimizer import optimizer_fields
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.scenario import INT_LIMITS
from zerocalc.tables import CONVENTIONS, DEFAULT_CONVENTION, DTYPE_BITS, OFFLOAD_TARGETS, OPTIMIZER_NAMES
from zerocalc.step.workload import OVERLAP_CHOICES, WORKLOAD_LIMITS
from zerocalc.units import parse_count

PARAMS_ONLY = "params-only"
CUSTOM = "custom"
MODEL_CHOICES = tuple(MODEL_PRESETS) + (CUSTOM, PARAMS_ONLY)
DEFAULT_MODEL = "llama-2-7b"
DTYPES = tuple(DTYPE_BITS)
MAX_LISTED_KEYS = 20          # unknown link keys named one by one; the rest counted
# A custom architecture's dense-MLP layer list (Qwen mlp_only_layers) lives in the state under this key, outside
# FIELDS: a list has no short link form, so a link does not carry it (the page says so when it is set).
DENSE_IDS = "dense_layer_ids"


class Field(NamedTuple):
    name: str
    kind: str                 # "choice" | "int" | "count" | "bytes" | "bool" | "prob" | "factor" | "multi" (a tuple)
    default: object           # a value, or None when it comes from the convention / model (see default_for)
    choices: tuple = ()
    lo: float = 0
    hi: float = 0


def _c(name, choices, default):
    return Field(name, "choice", default, tuple(choices))


def _i(name, lo, hi, default, kind="int"):
    return Field(name, kind, default, (), lo, hi)


_W = WORKLOAD_LIMITS
BASIC_ARCH_FIELDS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "context",
                     "tied_embeddings", "gated_mlp", "norm", "bias", "qkv_bias", "positions", "fused_qkv",
                     "fused_gate_up", "activation", "softmax_fp32", "attn_dropout", "resid_dropout", "embd_dropout")
# Attention variants, latent attention and mixture of experts: in the link so that an uploaded or fetched config
# (a MoE model, MLA) is reproduced exactly; edited under "more architecture fields".
VARIANT_ARCH_FIELDS = ("attn_bias", "mlp_bias", "qk_norm", "sandwich_norm", "attention_sinks", "attn_softcap",
                       "final_softcap", "sliding_window", "sliding_pattern", "local_rope", "q_lora_rank",
                       "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim", "experts", "experts_per_token",
                       "expert_ffn", "shared_expert_ffn", "shared_expert_gate", "router", "norm_topk",
                       "router_bias", "router_fp32", "route_weights_fp32", "expert_bias", "first_dense_layers",
                       "moe_step", "parallel_residual", "shared_norm", "rotary_pct", "head_bias", "kv_expand")
ARCH_FIELDS = BASIC_ARCH_FIELDS + VARIANT_ARCH_FIELDS + ("mtp_layers",)    # MTP: drawn in the Recipe section
# Fine-tuning (zerocalc.model.finetune.FineTune): which fields each training mode reads; the others do not matter
# for it.
_LORA = ("lora_rank", "lora_targets", "lora_dropout", "adapter_dtype", "modules_to_save", "base_dtype")
FINETUNE_MODE_FIELDS = {"full": ("fp32_parts",),
                        "freeze": ("train_last_layers", "train_modules", "base_dtype", "fp32_parts"),
                        "lora": _LORA + ("fp32_parts",), "dora": _LORA + ("fp32_parts",),
                        "qlora": _LORA + ("quant_type", "quant_block_size", "double_quant", "kbit_prepare",
                                  "quantize_head")}
FINETUNE_FIELDS = ("finetune",) + tuple(dict.fromkeys(n for names in FINETUNE_MODE_FIELDS.values() for n in names))
DISPLAY_FIELDS = ("units", "breakdown")       # how the answer is shown, never what it is: no byte depends on them
PRECISION_FIELDS = ("param_dtype", "grad_dtype", "master_dtype", "grad_accum_dtype", "optimizer",
                    "optimizer_dtype", "comm_dtype")

FIELDS: Tuple[Field, ...] = (
    _c("model", MODEL_CHOICES, DEFAULT_MODEL),
    _i("params", *INT_LIMITS["params"], 7 * 10**9, kind="count"),
    # architecture (defaults: the chosen model's)
    _i("layers", 1, 10_000, None), _i("hidden", 1, 10**6, None), _i("heads", 1, 10**5, None),
    _i("kv_heads", 1, 10**5, None), _i("head_dim", 0, 10**5, None), _i("ffn", 1, 10**7, None),
    _i("vocab", 1, 10**7, None), _i("context", 1, 10**8, None),
    Field("tied_embeddings", "bool", None), Field("gated_mlp", "bool", None), _c("norm", NORMS, None),
    Field("bias", "bool", None), Field("qkv_bias", "bool", None), _c("positions", POSITIONS, None),
    Field("fused_qkv", "bool", None), Field("fused_gate_up", "bool", None), _c("activation", ACTIVATIONS, None),
    Field("softmax_fp32", "bool", None),
    Field("attn_dropout", "prob", None, (), 0, 0.5), Field("resid_dropout", "prob", None, (), 0, 0.5),
    Field("embd_dropout", "prob", None, (), 0, 0.5),
    *(Field(n, "bool", None) for n in ("attn_bias", "mlp_bias")), _c("qk_norm", QK_NORMS, None),
    *(Field(n, "bool", None) for n in ("sandwich_norm", "attention_sinks")),
    Field("attn_softcap", "factor", None, (), 0, 1e6), Field("final_softcap", "factor", None, (), 0, 1e6),
    *(_i(n, *MOE_LIMITS[n], None) for n in ("sliding_window", "sliding_pattern")), Field("local_rope", "bool", None),
    *(_i(n, *MOE_LIMITS[n], None) for n in ("q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim",
                                            "v_head_dim", "experts", "experts_per_token", "expert_ffn",
                                            "shared_expert_ffn")),
    Field("shared_expert_gate", "bool", None), _c("router", ROUTERS, None),
    *(Field(n, "bool", None) for n in ("norm_topk", "router_bias", "router_fp32", "route_weights_fp32",
                                       "expert_bias")),
    *(_i(n, *MOE_LIMITS[n], None) for n in ("first_dense_layers", "moe_step", "mtp_layers")),
    # parallel blocks (GPT-NeoX, phi, StableLM, Falcon), partial rotary, phi's head bias, Falcon's K/V layout
    *(Field(n, "bool", None) for n in ("parallel_residual", "shared_norm", "head_bias")),
    Field("rotary_pct", "factor", None, (), 0.01, 1), _c("kv_expand", KV_EXPANDS, None),
    # precision (defaults: the chosen convention's)
    _c("convention", CONVENTIONS, DEFAULT_CONVENTION),
    _c("param_dtype", DTYPES, None), _c("grad_dtype", DTYPES, None), _c("master_dtype", DTYPES + ("none",), None),
    _c("grad_accum_dtype", DTYPES + ("none",), None), _c("optimizer", OPTIMIZER_NAMES, None),
    _c("optimizer_dtype", DTYPES, None), _c("comm_dtype", DTYPES + ("none",), None), *optimizer_fields(Field),
    # parallelism and offload
    _i("workers", 1, 1_048_576, 8), _i("shard_group", 0, 1_048_576, 0), _i("gpus_per_node", 1, 1024, 8),
    _c("offload_optimizer", OFFLOAD_TARGETS, "none"), _c("offload_params", OFFLOAD_TARGETS, "none"),
    # model parallelism (world = workers x tp x pp x cp)
    _i("tp", *LAYOUT_LIMITS["tp"], 1), _i("pp", *LAYOUT_LIMITS["pp"], 1), _c("schedule", SCHEDULES, "1f1b"),
    _i("vpp", *LAYOUT_LIMITS["vpp"], 1), _i("cp", *LAYOUT_LIMITS["cp"], 1), Field("sequence_parallel", "bool", False),
    Field("loss_parallel", "bool", True), _i("vocab_divisor", 0, 1_000_000, 0),
    _i("ep", *LAYOUT_LIMITS["ep"], 1), _i("etp", *LAYOUT_LIMITS["etp"], 1), *stage_fields(Field),
    # the step
    _i("micro_batch", 1, 4096, 1), _i("micro_batches", *LAYOUT_LIMITS["micro_batches"], 1),
    _i("seq_len", 1, 1_048_576, 2048), _c("attention", ATTENTION, "flash"),
    _c("recompute", RECOMPUTE, "none"), _i("recompute_every", *_W["recompute_every"], 1),
    _c("activation_dtype", ("auto",) + DTYPES, "auto"),
    _c("implementation", IMPLEMENTATIONS, "huggingface"),
    # fine-tuning (FineTune's defaults; peft's adapter dtype and the base's dtype when "auto")
    _c("finetune", MODES, "full"), _i("lora_rank", 1, 4096, 8),
    Field("lora_targets", "multi", ("q", "v"), TARGETS + (HEAD_TARGET, ALL_LINEAR)),
    Field("lora_dropout", "prob", 0.0, (), 0, 0.9), _c("adapter_dtype", ("auto",) + DTYPES, "auto"),
    Field("modules_to_save", "multi", (), SAVEABLE), _i("train_last_layers", 0, 10_000, 0),
    Field("train_modules", "multi", (), TRAINABLE_MODULES), _c("base_dtype", ("auto",) + DTYPES, "auto"),
    _c("quant_type", QUANT_TYPES, "nf4"), _c("quant_block_size", tuple(str(b) for b in QUANT_BLOCKS), "64"),
    Field("double_quant", "bool", True), Field("kbit_prepare", "bool", True),
    Field("quantize_head", "bool", False), _c("fp32_parts", tuple(FP32_PARTS), "none"),
    # working-set assumptions (DeepSpeed defaults, elements)
    _i("reduce_bucket_size", *_W["reduce_bucket_size"], 500_000_000, kind="count"),
    _i("allgather_bucket_size", *_W["allgather_bucket_size"], 500_000_000, kind="count"),
    _i("prefetch_bucket_size", *_W["prefetch_bucket_size"], 50_000_000, kind="count"),
    _i("max_live_parameters", *_W["max_live_parameters"], 1_000_000_000, kind="count"),
    _i("param_persistence_threshold", *_W["param_persistence_threshold"], 100_000, kind="count"),
    _c("overlap_comm", OVERLAP_CHOICES, "auto"),
    _i("cuda_context_bytes", -1, _W["cuda_context_bytes"][1], -1, kind="count"),   # -1: by card (step/context.py)
    _i("nccl_buffsize", *_W["nccl_buffsize"], 4 * 2**20, kind="count"),
    Field("nccl_nvls", "bool", True),
    _i("nccl_percent", *_W["nccl_percent"], 100),
    *step_fields(Field),                                                    # the framework's buffers: state_step
    _i("fragmentation_percent", -1, _W["fragmentation_percent"][1], -1),   # -1: the allocator's model (issue 32)
    _i("moe_imbalance_percent", *_W["moe_imbalance_percent"], 100),
    _i("moe_capacity_percent", *_W["moe_capacity_percent"], 0),
    _c("moe_dispatcher", DISPATCHERS, "alltoall"),
    _c("gpu", tuple(GPU_CATALOG) + (CUSTOM,), DEFAULT_GPU),
    _i("gpu_memory", *_W["gpu_memory"], 80 * 10**9, kind="bytes"),
    Field("buffer_factor", "factor", 1.5, (), 0.1, 100),
    *vision_fields(Field),                                                  # vision-language: state_vision
    # view
    _c("units", ("GB", "GiB"), "GB"), _c("breakdown", ("category", "entry"), "category"),
    _i("stage", 0, 3, 3),
)
FIELD = {f.name: f for f in FIELDS}
_ARCH_ATTR = {"context": "seq_len"}   # state name -> Architecture attribute


def _arch_value(arch: Architecture, name: str):
    if name == "kv_heads":
        return arch.n_kv_heads
    if name == "head_dim":
        return arch.head_dim or 0
    return getattr(arch, _ARCH_ATTR.get(name, name))


def base_architecture(model: str) -> Architecture:
    """The architecture a model choice starts from (custom starts from the default preset's shape)."""
    return MODEL_PRESETS[model if model in MODEL_PRESETS else DEFAULT_MODEL][0]


def _default(name: str, model: str, convention: str):
    f = FIELD[name]
    if f.default is not None:
        return f.default
    if name in ARCH_FIELDS:
        return _arch_value(base_architecture(model), name)
    value = CONVENTIONS[convention][name]
    return "none" if value is None else value


@functools.lru_cache(maxsize=64)     # every rerun asks for each field's default (the link, the cache key)
def _defaults(model: str, convention: str) -> Dict[str, object]:
    """Every field's default for a model and convention (shared: callers never modify it)."""
    return {f.name: _default(f.name, model, convention) for f in FIELDS}


def default_for(name: str, state: dict):
    """A field's default, given the (already chosen) model and convention."""
    return _defaults(state.get("model", DEFAULT_MODEL), state.get("convention", DEFAULT_CONVENTION))[name]


def defaults() -> dict:
    return dict(_defaults(DEFAULT_MODEL, DEFAULT_CONVENTION))


# Links written before a field was renamed: (old name, new name, the old text as the new field's text)
RENAMED = {"host_memory_bytes": ("host_ram_gb", lambda text: repr(parse_count(text) / 10**9))}   # bytes -> GB
