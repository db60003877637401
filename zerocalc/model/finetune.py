"""Fine-tuning: which parameters train, the adapters peft attaches, and how a quantized base is stored.

The modes change the parameter inventory (architecture.tensors), nothing else: frozen tensors keep only their
stored weight (no gradient, master copy or optimizer state), trainable ones the full ledger. Facts, measured with
peft 0.21.2 and bitsandbytes 0.50.2 (tests/measure/peft_lora.py, quantized_storage.py):
- LoRA on a linear [out, in]: lora_A [r, in] and lora_B [out, r], separate modules (peft LoraLayer.update_layer);
  DoRA adds a magnitude vector [out] (DoraLinearLayer). get_peft_model's autocast_adapter_dtype=True keeps
  adapters in fp32 on a bf16 / fp16 base (tuners_utils.cast_adapter_dtype): the default here too.
- "all-linear" targets every linear of the decoder blocks and not the output head (peft tuners_utils).
- modules_to_save keeps the original module frozen and trains a deep copy in the base dtype (peft utils/other.py).
- bitsandbytes 4-bit (Params4bit, functional.quantize_4bit): packed data ceil(n / 2) bytes, an absmax per block of
  `block` elements (fp32; with double quantization uint8, plus an fp32 scale per 256 blocks, an fp32 offset and a
  256-entry fp32 code table), a 16-entry fp32 code table per tensor; 8-bit (Int8Params): int8 data plus an fp32
  scale per output row (SCB). Only the blocks' linear weights are quantized (transformers' bnb quantizer keeps
  embeddings, the head, norms and biases as they are); peft's prepare_model_for_kbit_training then upcasts every
  non-quantized parameter to fp32.
Under tensor parallelism an adapter follows its base: on a column-parallel linear lora_A is replicated and lora_B
split with the output; on a row-parallel one lora_A is split with the input and lora_B replicated (NeMo's
ParallelLinearAdapter). Experts and routers are not targeted (they are not nn.Linear modules in transformers 5).
Older releases differ (zerocalc/versions.py, FineTune.versions): under transformers < 5 each routed expert is an
nn.Linear per expert, so QLoRA quantizes the experts and the router, and LoRA targets them (_linear_experts).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Optional, Tuple

from ..scenario import FieldError, require_choice, require_int, require_probability
from ..tables import DTYPE_BITS
from ..versions import applies, check as check_versions
from .tensor import VISION_ROLES
from .vision import TRAINING as VISION_TRAINING

MODES = ("full", "freeze", "lora", "dora", "qlora")
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
ALL_LINEAR = "all-linear"
# LoRA on the output head (peft target_modules "lm_head", beside the block targets; all-linear leaves the head
# out): lora_A [r, h], lora_B [V, r] on the last stage, the frozen head kept as it is (measured with peft 0.21.2,
# tests/test_families_lora_head.py).
HEAD_TARGET = "lm_head"
SAVEABLE = ("embed_tokens", "lm_head")
TRAINABLE_MODULES = ("embed_tokens", "lm_head", "norms")
QUANT_TYPES = ("nf4", "fp4", "int8")
QUANT_BLOCKS = (64, 128, 256, 512, 1024, 2048, 4096)
ADAPTED_ROLES = ("attention", "mlp", "shared expert")
# module name -> the targets that select it (a fused module is selected by any of its parts)
_MODULE_TARGETS = {
    "q_proj": ("q",), "k_proj": ("k",), "v_proj": ("v",), "o_proj": ("o",), "qkv_proj": ("q", "k", "v"),
    "gate_proj": ("gate",), "up_proj": ("up",), "down_proj": ("down",), "gate_up_proj": ("gate", "up"),
    # Linear modules no named target reaches: peft matches module names, so only all-linear (every nn.Linear but
    # the head) selects latent attention's projections and Qwen2-MoE's shared-expert gate (measured against
    # peft 0.21.2, tests/test_finetune_validation.py).
    "q_a_proj": (ALL_LINEAR,), "q_b_proj": (ALL_LINEAR,), "kv_a_proj_with_mqa": (ALL_LINEAR,),
    "kv_b_proj": (ALL_LINEAR,), "shared_expert_gate": (ALL_LINEAR,),
}


BOOL_FIELDS = ("double_quant", "kbit_prepare", "quantize_head")
# FineTune.fp32_parts: what a loader keeps in fp32 beside a 16-bit model -> the inventory roles it keeps so
# (step/fp32_stream.py counts what that saves): the norms alone (LLaMA-Factory's upcast_layernorm, axolotl's
# fp32_norms), or the embedding, head and norms (axolotl's loader without a kernel that casts them back)
FP32_PARTS = {"none": (), "norms": ("norm",), "embed-head-norms": ("embedding", "head", "norm")}


@dataclass(frozen=True)
class FineTune:
    mode: str = "full"
    lora_rank: int = 8
    lora_targets: Tuple[str, ...] = ("q", "v")      # or ("all-linear",)
    lora_dropout: float = 0.0
    adapter_dtype: Optional[str] = None    # None: peft's default, fp32 on a 16-bit base (autocast_adapter_dtype)
    modules_to_save: Tuple[str, ...] = ()  # trained in full beside the adapters (a copy; the original frozen)
    train_last_layers: int = 0             # freeze: the last k blocks train
    train_modules: Tuple[str, ...] = ()    # freeze: embed_tokens, lm_head and / or the norms train
    base_dtype: Optional[str] = None       # frozen base weights (None: the ledger's parameter dtype)
    quant_type: str = "nf4"                # qlora: nf4 or fp4 (4-bit) or int8 (LLM.int8: LoRA on an 8-bit base)
    quant_block_size: int = 64
    double_quant: bool = True
    kbit_prepare: bool = True              # qlora: peft's prepare_model_for_kbit_training (fp32 non-quantized)
    # qlora: the output head quantized as well (an untied one): Lightning Fabric's BitsandbytesPrecision, which
    # LitGPT uses, makes every nn.Linear built under it a 4-bit one; transformers' bnb quantizer leaves the head out
    quantize_head: bool = False
    # FP32_PARTS: tensors a loader keeps in fp32 beside a 16-bit model (with their gradients and optimizer states
    # when they train); embed-head-norms makes the residual stream fp32 under autocast (step/fp32_stream.py)
    fp32_parts: str = "none"
    # The library releases the run used, beyond the defaults (versions.py: sorted (library, version) pairs; only
    # those differing from versions.DEFAULTS, so equal plans compare equal): older releases keep other bytes
    versions: Tuple[Tuple[str, str], ...] = ()
    # A vision tower's mode as the launcher's file says (its freeze keys: model/vision.py launcher_mode), or
    # "follow"; the tower's own explicit mode wins over it (model/vision.py tower_mode)
    vision_training: str = "follow"

    def __post_init__(self):
        require_choice("finetune", self.mode, MODES)
        require_int("lora_rank", self.lora_rank, 1, 1_000_000)
        if not isinstance(self.lora_targets, tuple) or not (
                self.lora_targets == (ALL_LINEAR,) or all(t in TARGETS + (HEAD_TARGET,) for t in self.lora_targets)):
            raise FieldError("lora_targets", self.lora_targets,
                             f"some of {', '.join(TARGETS + (HEAD_TARGET,))}, or {ALL_LINEAR}")
        require_probability("lora_dropout", self.lora_dropout)
        if self.adapter_dtype is not None:
            require_choice("adapter_dtype", self.adapter_dtype, DTYPE_BITS)
        if self.base_dtype is not None:
            require_choice("base_dtype", self.base_dtype, DTYPE_BITS)
        for field, allowed in (("modules_to_save", SAVEABLE), ("train_modules", TRAINABLE_MODULES)):
            value = getattr(self, field)
            if not isinstance(value, tuple) or any(v not in allowed for v in value):
                raise FieldError(field, value, f"some of {', '.join(allowed)}")
        require_int("train_last_layers", self.train_last_layers, 0, 10_000)
        require_choice("quant_type", self.quant_type, QUANT_TYPES)
        require_choice("quant_block_size", self.quant_block_size, QUANT_BLOCKS)
        check_versions(self.versions)
        require_choice("vision_training", self.vision_training, VISION_TRAINING)
        for field in BOOL_FIELDS:
            if not isinstance(getattr(self, field), bool):
                raise FieldError(field, getattr(self, field), "true or false")
        require_choice("fp32_parts", self.fp32_parts, tuple(FP32_PARTS))
        if self.fp32_parts == "embed-head-norms" and self.mode != "full":     # measured on a full fine-tune
            raise FieldError("fp32_parts", self.fp32_parts, "none or norms unless finetune is full")
        if self.quantize_head and not self.quantized:
            raise FieldError("quantize_head", self.quantize_head, "false unless finetune is qlora")
        if self.fp32_parts != "none" and self.quantized:      # a 4-bit linear returns its input's dtype: unmeasured
            raise FieldError("fp32_parts", self.fp32_parts, "none with a quantized base (kbit_prepare says it)")

    @property
    def adapters(self) -> bool:
        return self.mode in ("lora", "dora", "qlora")

    @property
    def targets(self) -> Tuple[str, ...]:
        """The block modules targeted (the head apart: head_adapter)."""
        return TARGETS if self.lora_targets == (ALL_LINEAR,) else tuple(t for t in self.lora_targets
                                                                         if t != HEAD_TARGET)

    @property
    def head_adapter(self) -> bool:
        return self.adapters and HEAD_TARGET in self.lora_targets

    @property
    def quantized(self) -> Optional[str]:
        return self.quant_type if self.mode == "qlora" else None

    def adapter_storage(self, param_dtype: str) -> str:
        """The adapters' dtype: as given, else peft's default (fp32 for a 16-bit base, the base's otherwise)."""
        if self.adapter_dtype:
            return self.adapter_dtype
        base = self.base_dtype or param_dtype
        return "fp32" if DTYPE_BITS[base] == 16 else base


FULL = FineTune()


def is_targeted(module: str, ft: FineTune) -> bool:
    short = module.rsplit(".", 1)[-1]
    return any(t in ft.targets or (t == ALL_LINEAR and ft.lora_targets == (ALL_LINEAR,))
               for t in _MODULE_TARGETS.get(short, ()))


def _frozen(t, ft: FineTune, storage: str):
    return t._replace(trainable=False, storage=storage or t.storage)


def _adapters(t, ft: FineTune, storage: str) -> list:
    """lora_A, lora_B (and DoRA's magnitude) of one targeted linear weight [out, in]."""
    out, inp = t.shape
    r = ft.lora_rank
    column = t.tp == "column"
    a = t._replace(name=f"{t.module}.lora_A.weight", module=f"{t.module}.lora_A", shape=(r, inp), role="adapter",
                   tp="replicated" if column else "row", storage=storage, trainable=True)
    b = t._replace(name=f"{t.module}.lora_B.weight", module=f"{t.module}.lora_B", shape=(out, r), role="adapter",
                   tp="column" if column else "replicated", storage=storage, trainable=True)
    rows = [a, b]
    if ft.mode == "dora":
        rows.append(t._replace(name=f"{t.module}.lora_magnitude_vector", module=f"{t.module}.lora_magnitude_vector",
                               shape=(out,), role="adapter", tp="column" if column else "replicated",
                               storage=storage, trainable=True))
    return rows


def _head_adapters(t, ft: FineTune, storage: str) -> list:
    """LoRA on the LM head (tied or not: peft wraps the lm_head Linear): lora_A [r, h] replicated, lora_B [V, r]
    split with the vocabulary rows, both on the last stage; DoRA adds its magnitude vector [V]."""
    rows = _adapters(t._replace(tp="column", tied=False), ft, storage)
    return [r._replace(module=f"lm_head.{r.module.split('.', 1)[1]}") for r in rows]


def peft_converts_experts(arch) -> bool:
    """Does peft re-target this MoE model's v4 MLP names onto its fused v5 parameters? peft 0.21.2
    (utils/transformers_weight_conversion.py _convert_peft_config_moe) does it for the model types transformers
    maps to its "mixtral" or "qwen2_moe" conversion pattern: Mixtral, Qwen3-MoE, DeepSeek-V2 / V3, OLMoE among
    ours, but not Qwen2-MoE itself nor gpt-oss, the two of our MoE families with a shared-expert gate or expert
    biases (measured: tests/test_finetune_validation.py)."""
    return bool(arch.experts) and not arch.shared_expert_gate and not arch.expert_bias


def _moe_adapters(t, ft: FineTune, storage: str) -> list:
    """peft's adapters on a converted MoE block (peft_converts_experts): the router ("gate", targeted by
    all-linear) gets lora_A [r, h], lora_B [E, r]; the fused experts a ParamWrapper, rank r per expert on
    down_proj (lora_A [rE, f], lora_B [h, rE]) and, when gate_proj and up_proj are both targeted, rank 2r per
    expert on gate_up_proj (lora_A [2rE, h], lora_B [2f, 2rE]: the two fused ranks, peft's rank_pattern). Held per
    expert ([E, r', dim]) so expert parallelism splits them with their experts."""
    r = ft.lora_rank
    if t.role == "router" and len(t.shape) == 2:
        return _adapters(t, ft, storage) if ft.lora_targets == (ALL_LINEAR,) else []
    if t.role != "expert" or len(t.shape) != 3:
        return []
    fused = t.name.endswith("gate_up_proj")
    if not ({"gate", "up"} <= set(ft.targets) if fused else "down" in ft.targets):
        return []
    E, out, inp = t.shape
    rank = 2 * r if fused else r
    return [t._replace(name=f"{t.name}.lora_{side}.weight", module=f"{t.module}.lora_{side}", shape=(E, rank, dim),
                       role="adapter", tp="expert", storage=storage, trainable=True)
            for side, dim in (("A", inp), ("B", out))]


def linear_experts(arch, ft: FineTune) -> bool:
    """transformers < 5 (versions.py "experts as linears"): every routed expert is an nn.Linear per projection
    (4.45.2 MixtralBlockSparseTop2MLP w1 / w2 / w3, Qwen2MoeMLP gate_proj / up_proj / down_proj), the router an
    nn.Linear too. gpt-oss (expert biases) held its experts fused already."""
    return bool(arch.experts) and not arch.expert_bias and applies(ft.versions, "experts as linears")


def expert_rule(arch, ft: FineTune):
    """How fine-tuning reaches the routed experts (finetuned's `converts_experts`)."""
    if linear_experts(arch, ft):
        return "linears, named" if _named_experts(arch) else "linears"
    return peft_converts_experts(arch)


def _named_experts(arch) -> bool:
    """Do the named targets (gate / up / down) reach the per-expert linears under transformers < 5? Qwen2-MoE,
    Qwen3-MoE, OLMoE and DeepSeek name them gate_proj / up_proj / down_proj; Mixtral w1 / w3 / w2, which no named
    target matches (only all-linear). Mixtral is the MoE family without a shared expert, q/k norm or latent
    attention."""
    return bool(arch.shared_expert_ffn or arch.qk_norm != "none" or arch.mla)


def _linear_experts(t, ft: FineTune, storage: str, named: bool, gated: bool) -> list:
    """peft's adapters on per-expert linears (transformers < 5): rank r on each expert's gate, up and down as its
    targets select them (lora_A [r, in], lora_B [out, r] per expert, held as [E, ., .] so expert parallelism splits
    them with their experts), and on the router under all-linear."""
    every = ft.lora_targets == (ALL_LINEAR,)
    if t.role == "router" and len(t.shape) == 2:
        return _adapters(t, ft, storage) if every else []
    if t.role != "expert" or len(t.shape) != 3:
        return []
    E, out, inp = t.shape
    r = ft.lora_rank
    if t.name.endswith("gate_up_proj"):       # inventory._experts: [E, 2f, h] gated (gate and up), else [E, f, h]
        linears = (("gate", out // 2), ("up", out // 2)) if gated else (("up", out),)
    else:
        linears = (("down", out),)
    rows = []
    for name, width in linears:
        if every or (named and name in ft.targets):
            rows += [t._replace(name=f"experts.{name}.lora_{side}.weight", module=f"experts.{name}.lora_{side}",
                                shape=(E,) + shape, role="adapter", tp="expert", storage=storage, trainable=True)
                     for side, shape in (("A", (r, inp)), ("B", (width, r)))]
    return rows


@lru_cache(maxsize=512)
def finetuned(rows: tuple, ft: FineTune, layers: int, param_dtype: str, converts_experts=False) -> tuple:
    """The inventory `rows` with the fine-tuning mode applied: frozen flags and storage, adapters, trained copies,
    the last k blocks split off to train. `converts_experts` (expert_rule): True or "fused", peft re-targets the
    MLP names onto the fused experts (peft_converts_experts); "linears" / "linears, named": the experts are
    per-expert nn.Linear modules (transformers < 5), quantized under QLoRA and targeted by all-linear (and by
    the named targets with "named")."""
    kept = FP32_PARTS[ft.fp32_parts]      # the loader's fp32 copies, trained or frozen
    rows = tuple(t._replace(storage="fp32") if t.role in kept else t for t in rows) if kept else rows
    if ft.mode == "full":
        return rows
    linears = str(converts_experts).startswith("linears")
    converted = converts_experts in (True, "fused") and ft.mode != "dora"
    gated = any(t.name == "experts.gate_up_proj" and t.shape[1] == 2 * d.shape[2] for t in rows for d in rows
                if d.name == "experts.down_proj")
    base = ft.base_dtype or ""
    if ft.quantized and ft.kbit_prepare:
        base = "fp32"                                   # prepare_model_for_kbit_training upcasts the rest
    out = []
    boundary = layers - min(ft.train_last_layers, layers)
    for t in rows:
        if t.role in VISION_ROLES:      # the vision tower trains by its own mode (model/vision.py TRAINING)
            out.append(t)
            continue
        if ft.mode == "freeze":
            trained = (t.module in ft.train_modules or (t.role == "norm" and "norms" in ft.train_modules)
                       or (t.tied and "embed_tokens" in ft.train_modules))
            if t.place == "layer" and boundary < layers and not trained:
                out.append(_frozen(t, ft, "fp32" if t.role in kept else base)._replace(first_layer=0,
                                                                                      stop_layer=boundary))
                out.append(t._replace(first_layer=boundary))
            else:
                out.append(t if trained else _frozen(t, ft, "fp32" if t.role in kept else base))
            continue
        quantize = ft.quantized and len(t.shape) == 2 and (
            t.place == "layer" and t.role in ADAPTED_ROLES or ft.quantize_head and t.role == "head" and not t.tied)
        if linears and ft.quantized and t.place == "layer" and t.role in ("router", "expert"):
            quantize = len(t.shape) == 3 or t.role == "router" and len(t.shape) == 2    # weights, not biases
        out.append(_frozen(t, ft, ft.quant_type if quantize else "fp32" if t.role in kept else base))
        remapped = converted and t.role in ("mlp", "shared expert")     # peft moved gate/up/down to the experts
        if t.place == "layer" and len(t.shape) == 2 and t.role in ADAPTED_ROLES and is_targeted(t.module, ft) \
                and not remapped:
            out += _adapters(t, ft, ft.adapter_storage(param_dtype))
        elif converted and t.role in ("router", "expert"):
            out += _moe_adapters(t, ft, ft.adapter_storage(param_dtype))
        elif linears and t.role in ("router", "expert") and ft.mode != "freeze":
            out += _linear_experts(t, ft, ft.adapter_storage(param_dtype), converts_experts.endswith("named"), gated)
        elif ft.head_adapter and t.module == "lm_head" and len(t.shape) == 2:
            out += _head_adapters(t, ft, ft.adapter_storage(param_dtype))
        if t.module in ft.modules_to_save and not t.tied:
            out.append(t._replace(name=f"{t.module}.modules_to_save.weight", module=f"{t.module}.modules_to_save",
                                  tied=False, trainable=True, storage=base or t.storage))
        elif t.tied and "lm_head" in ft.modules_to_save:     # training a copy of a tied head unties it
            out.append(t._replace(name="lm_head.modules_to_save.weight", module="lm_head.modules_to_save",
                                  tied=False, trainable=True))
    return tuple(out)


def is_quant_state(part: str) -> bool:
    """Whether a part of quantized_storage is bitsandbytes' quantization state (a Params4bit's QuantState: absmax,
    its scales and code tables; an Int8Params' SCB), an attribute of the parameter, not its data."""
    return not part.endswith(("data (packed)", "int8 data"))


def quantized_storage(elements: int, out_features: int, ft: FineTune) -> Dict[str, Tuple[str, int]]:
    """One quantized weight's stored tensors: name -> (dtype, elements), exactly as bitsandbytes lays them out."""
    if ft.quant_type == "int8":
        return {"int8 data": ("int8", elements), "row scales (SCB)": ("fp32", out_features)}
    blocks = -(-elements // ft.quant_block_size)
    parts = {f"{ft.quant_type} data (packed)": ("uint8", -(-elements // 2)),
             "code table": ("fp32", 16)}
    if ft.double_quant:
        parts["absmax (8-bit)"] = ("uint8", blocks)
        parts["absmax scales (per 256 blocks)"] = ("fp32", -(-blocks // 256))
        parts["absmax code table and offset"] = ("fp32", 256 + 1)
    else:
        parts["absmax"] = ("fp32", blocks)
    return parts


MLP_TARGETS = ("gate", "up", "down", ALL_LINEAR)


def caveats(ft: FineTune, arch) -> tuple:
    """What this view leaves out, in sentences the report and the page show beside the fine-tuning line."""
    out = []
    if ft.adapters and linear_experts(arch, ft):
        out.append("transformers < 5: the per-expert adapters' saved activations are counted as peft's fused "
                   "experts' (not measured at that release).")
    mlp = ft.adapters and peft_converts_experts(arch) and bool(set(ft.lora_targets) & set(MLP_TARGETS))
    if mlp and ft.mode == "dora":
        out.append("DoRA on a mixture-of-experts model's fused experts is not modelled: only the attention's and "
                   "the dense modules' adapters are counted.")
    return tuple(out)


def describe(ft: FineTune, param_dtype: str) -> str:
    """One sentence naming what trains and how the frozen base is stored, for reports and the page."""
    base = ft.base_dtype or param_dtype
    if ft.mode == "full":
        return "full fine-tuning: every parameter trains" + FP32_TEXT[ft.fp32_parts]
    if ft.mode == "freeze":
        trained = ([f"the last {ft.train_last_layers} blocks"] if ft.train_last_layers else []) + list(ft.train_modules)
        return (f"frozen base ({base}); training " + (", ".join(trained) if trained else "nothing")
                + FP32_TEXT[ft.fp32_parts])
    targets = "all linear layers of the blocks" if ft.lora_targets == (ALL_LINEAR,) else (
        ", ".join(ft.lora_targets) if ft.lora_targets else "no modules")
    kind = {"lora": "LoRA", "dora": "DoRA", "qlora": "QLoRA"}[ft.mode]
    text = f"{kind} rank {ft.lora_rank} on {targets}, {ft.adapter_storage(param_dtype)} adapters"
    linears = "base linears and an untied output head" if ft.quantize_head else "base linears"
    if ft.quantized == "int8":
        text += f"; {linears} in int8 (LLM.int8)"
    elif ft.quantized:
        text += (f"; {linears} in {ft.quant_type} (block {ft.quant_block_size}"
                 f"{', double quantization' if ft.double_quant else ''})")
    if ft.quantized and ft.kbit_prepare:
        text += ", the rest upcast to fp32 (prepare_model_for_kbit_training)"
    else:
        text += f", frozen base in {base}"
    if ft.modules_to_save:
        text += f"; trained copies of {', '.join(ft.modules_to_save)}"
    return text + FP32_TEXT[ft.fp32_parts]


FP32_TEXT = {"none": "", "norms": "; the norms in fp32",
             "embed-head-norms": "; embed_tokens, lm_head and the norms in fp32 (an fp32 residual stream under "
                                 "autocast)"}
