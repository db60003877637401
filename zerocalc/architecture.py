"""Transformer shape -> exact parameter count and the largest single module (what ZeRO-3 gathers at once).

Counting follows Megatron-LM's theoretical_memory_usage.py term by term (attention with grouped-query heads,
gated or plain MLP, norms, embeddings, tied or untied output), extended with the biases and learned positions of
GPT-2-style blocks. "Module" means one nn.Module's own parameters, as DeepSpeed's model_to_params counts them for
largest_layer_params (deepspeed/runtime/zero/stage3.py): a fused QKV projection is one module, separate q/k/v
projections are three.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Dict, NamedTuple, Optional, Tuple

from .scenario import FieldError, require_choice, require_int, require_probability

ARCH_LIMITS = {
    "layers": (1, 10_000),
    "hidden": (1, 10**6),
    "heads": (1, 10**5),
    "kv_heads": (1, 10**5),
    "head_dim": (1, 10**5),
    "ffn": (1, 10**7),
    "vocab": (1, 10**7),
    "seq_len": (1, 10**8),
}
# Gemma's RMSNorm scales by (1 + w), computed in fp32; gpt-oss's multiplies by w in fp32 before casting back
NORMS = ("layernorm", "rmsnorm", "rmsnorm-gemma", "rmsnorm-fp32")
POSITIONS = ("learned", "rotary")
QK_NORMS = ("none", "head", "full")
ROUTERS = ("softmax", "sigmoid", "topk-softmax")
MOE_LIMITS = {"q_lora_rank": (0, 10**6), "kv_lora_rank": (0, 10**6), "qk_nope_dim": (0, 10**5),
              "qk_rope_dim": (0, 10**5), "v_head_dim": (0, 10**5), "experts": (0, 100_000),
              "experts_per_token": (0, 100_000), "expert_ffn": (0, 10**7), "shared_expert_ffn": (0, 10**8),
              "first_dense_layers": (0, 10_000), "moe_step": (1, 10_000),
              "sliding_window": (0, 10**8), "sliding_pattern": (1, 10_000)}
# Activation functions as Hugging Face names them (config "activation_function" / "hidden_act") -> tensors of the FFN width its autograd formula saves (its output, when that is what it saves,
# is the fc2 input or the gate product's operand anyway and counted there).
# gelu_new (HF NewGELUActivation, 0.5x(1 + tanh(...))) saves x, tanh(.), 0.5x and 1 + tanh(.); gelu,
# gelu_pytorch_tanh and silu (one op each) save their input; relu saves only its output.
# gpt-oss's clamped SwiGLU (GptOssExperts._apply_gate: gate and up clamped, gate * sigmoid(alpha * gate), times
# up + 1) saves the clamped gate, the sigmoid, their product and up + 1: 4 (measured, tests/test_moe_validation.py).
ACTIVATION_SAVES = {"gelu_new": 4, "gelu": 1, "gelu_pytorch_tanh": 1, "silu": 1, "relu": 0, "clamped-swiglu": 4}
ACTIVATIONS = tuple(ACTIVATION_SAVES)


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer. None for kv_heads / head_dim means "= heads" / "= hidden / heads"."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq_len: int                      # context length (learned position table size)
    kv_heads: Optional[int] = None    # grouped-query (GQA) or multi-query (MQA = 1) attention
    head_dim: Optional[int] = None
    tied_embeddings: bool = False
    gated_mlp: bool = True            # SwiGLU: gate, up and down projections
    norm: str = "rmsnorm"
    bias: bool = False                # biases on every linear (GPT-2)
    qkv_bias: bool = False            # biases on q, k, v only (Qwen2)
    positions: str = "rotary"
    fused_qkv: bool = False           # one module for q, k, v (GPT-2 c_attn, Phi-3 qkv_proj)
    fused_gate_up: bool = False       # one module for gate and up (Phi-3 gate_up_proj)
    activation: str = "silu"
    softmax_fp32: bool = True         # eager attention softmax in fp32 (HF Llama family); GPT-2 keeps the dtype
    attn_dropout: float = 0.0         # attention-probability dropout
    resid_dropout: float = 0.0        # dropout after the attention output and MLP output projections
    embd_dropout: float = 0.0         # dropout after the embeddings
    # attention variants
    attn_bias: bool = False           # biases on q, k, v and o (Llama attention_bias, gpt-oss)
    mlp_bias: bool = False            # biases on the MLP projections (Llama mlp_bias)
    qk_norm: str = "none"             # none | head (per head: Qwen3, Gemma 3) | full (over all heads: OLMo 2, OLMoE)
    sandwich_norm: bool = False       # norms before and after the attention and the MLP (Gemma 2 / 3)
    attention_sinks: bool = False     # one learned sink logit per head (gpt-oss)
    attn_softcap: float = 0.0         # tanh soft-capping of attention logits (Gemma 2); 0: none
    final_softcap: float = 0.0        # tanh soft-capping of the output logits (Gemma 2 / 3); 0: none
    sliding_window: int = 0           # local attention window (0: every layer attends to the whole sequence)
    sliding_pattern: int = 1          # 1: every layer local; p >= 2: every p-th layer global (Gemma 3: 6, Gemma 2: 2)
    local_rope: bool = False          # local layers have rotary tables of their own (Gemma 3's rope_local_base_freq)
    # multi-head latent attention (DeepSeek-V2 / V3); kv_lora_rank 0: not MLA
    q_lora_rank: int = 0              # 0: one q_proj from the hidden size
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    # mixture of experts; experts 0: dense
    experts: int = 0                  # routed experts per MoE layer (E)
    experts_per_token: int = 0        # top-k
    expert_ffn: int = 0               # each routed expert's FFN width (0: ffn)
    shared_expert_ffn: int = 0        # total FFN width of the shared expert(s) (0: none)
    shared_expert_gate: bool = False  # a sigmoid gate on the shared expert (Qwen2-MoE)
    router: str = "softmax"           # softmax (then top-k) | sigmoid (DeepSeek-V3) | topk-softmax (gpt-oss)
    norm_topk: bool = True            # renormalise the top-k weights (Mixtral, Qwen3, DeepSeek-V3)
    router_bias: bool = False         # gpt-oss
    router_fp32: bool = False         # router weight kept and run in fp32 (DeepSeek _keep_in_fp32_modules)
    route_weights_fp32: bool = True   # the combine uses fp32 routing weights (Mixtral, DeepSeek; Qwen casts)
    expert_bias: bool = False         # biases inside the experts (gpt-oss)
    first_dense_layers: int = 0       # DeepSeek first_k_dense_replace
    moe_step: int = 1                 # Qwen decoder_sparse_step: layer i is MoE when (i + 1) % step == 0
    dense_layer_ids: Tuple[int, ...] = ()   # Qwen mlp_only_layers

    def __post_init__(self):
        for f, (lo, hi) in ARCH_LIMITS.items():
            if getattr(self, f) is not None or f not in ("kv_heads", "head_dim"):
                require_int(f, getattr(self, f), lo, hi)
        if self.head_dim is None and self.hidden % self.heads:
            raise FieldError("heads", self.heads, f"a divisor of hidden ({self.hidden:,}), or give head_dim")
        if self.heads % self.n_kv_heads:
            raise FieldError("kv_heads", self.kv_heads, f"a divisor of heads ({self.heads:,})")
        for f, options in (("norm", NORMS), ("positions", POSITIONS), ("activation", ACTIVATIONS)):
            require_choice(f, getattr(self, f), options)
        for f in ("attn_dropout", "resid_dropout", "embd_dropout"):
            require_probability(f, getattr(self, f))
        require_choice("qk_norm", self.qk_norm, QK_NORMS)
        require_choice("router", self.router, ROUTERS)
        for f in ("attn_softcap", "final_softcap"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e6:
                raise FieldError(f, v, "a number from 0 (off) to 1,000,000")
        for f, (lo, hi) in MOE_LIMITS.items():
            require_int(f, getattr(self, f), lo, hi)
        if self.kv_lora_rank and not (self.qk_nope_dim + self.qk_rope_dim and self.v_head_dim):
            raise FieldError("v_head_dim", self.v_head_dim, "set with qk_nope_dim / qk_rope_dim for latent attention")
        if self.experts:
            if not 1 <= self.experts_per_token <= self.experts:
                raise FieldError("experts_per_token", self.experts_per_token,
                                 f"an integer from 1 to the experts ({self.experts:,})")
            if not isinstance(self.dense_layer_ids, tuple) or any(
                    isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.layers
                    for i in self.dense_layer_ids):
                raise FieldError("dense_layer_ids", self.dense_layer_ids,
                                 f"layer indices from 0 to {self.layers - 1:,}")

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_head(self) -> int:
        return self.hidden // self.heads if self.head_dim is None else self.head_dim

    @property
    def q_size(self) -> int:
        return self.heads * self.d_head

    @property
    def kv_size(self) -> int:
        return self.n_kv_heads * self.d_head

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head (MLA: the no-position part plus the rotary part)."""
        return self.qk_nope_dim + self.qk_rope_dim if self.mla else self.d_head

    @property
    def moe_ffn(self) -> int:
        return self.expert_ffn or self.ffn

    def is_moe_layer(self, i: int) -> bool:
        return bool(self.experts) and i >= self.first_dense_layers and (i + 1) % self.moe_step == 0 \
            and i not in self.dense_layer_ids

    @property
    def moe_layers(self) -> int:
        return layer_counts(self)["moe"]

    def is_sliding_layer(self, i: int) -> bool:
        return bool(self.sliding_window) and (self.sliding_pattern == 1 or (i + 1) % self.sliding_pattern != 0)


class ParamTensor(NamedTuple):
    """One row of the parameter inventory (DESIGN.md section 7)."""
    name: str            # as in the module tree, one layer standing for all: "q_proj.weight"
    module: str          # the nn.Module owning it: ZeRO-3 gathers module by module
    shape: Tuple[int, ...]
    role: str            # embedding | position | attention | mlp | norm | router | expert | shared expert | head
    tp: str              # column (dim 0 split) | row (last dim split) | vocab (vocabulary rows) | replicated |
                         # expert-column / expert-row / expert (experts over ep, then column / row over etp)
    place: str           # layer (every block) | first (first pipeline stage) | last (last pipeline stage)
    tied: bool = False   # the output head of tied embeddings: stored once, a copy on the last stage under PP
    kind: str = "all"    # which blocks hold it: all | dense (dense-MLP blocks) | moe (mixture-of-experts blocks)
    storage: str = ""    # a fixed storage dtype ("fp32" for a router kept in fp32, "nf4" for a quantized base)
    trainable: bool = True
    first_layer: int = 0           # block tensors: the row applies to blocks first_layer <= i < stop_layer
    stop_layer: int = 1 << 30      # (fine-tuning the last k blocks splits a tensor's rows at L - k)

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def expert(self) -> bool:
        return self.tp.startswith("expert")


def _linear(module, out, inp, role, tp, biased, place="layer", kind="all", storage="") -> list:
    """A Linear's weight [out, in] and its bias. A column-parallel bias is split with the output; a row-parallel
    one is added after the reduction, so every rank keeps it whole (Megatron RowParallelLinear, DTensor
    RowwiseParallel)."""
    rows = [ParamTensor(f"{module}.weight", module, (out, inp), role, tp, place, kind=kind, storage=storage)]
    if biased:
        rows.append(ParamTensor(f"{module}.bias", module, (out,), role, "column" if tp == "column" else "replicated",
                                place, kind=kind, storage=storage))
    return rows


def _norm(module, width: int, a: "Architecture", place="layer") -> list:
    names = ("weight", "bias") if a.norm == "layernorm" else ("weight",)   # LayerNorm has a bias, RMSNorm not
    return [ParamTensor(f"{module}.{n}", module, (width,), "norm", "replicated", place) for n in names]


def _attention(a: "Architecture") -> list:
    h, q, kv = a.hidden, a.q_size, a.kv_size
    qkv_b = a.bias or a.qkv_bias or a.attn_bias
    if a.mla:
        # DeepSeek-V2/V3 (HF DeepseekV2Attention): down-projections and their norms replicated under TP, as
        # Megatron's MLA duplicates linear_q_down_proj / linear_kv_down_proj; up-projections column, o row.
        qk, heads = a.qk_head_dim, a.heads
        if a.q_lora_rank:
            rows = _linear("q_a_proj", a.q_lora_rank, h, "attention", "replicated", a.attn_bias)
            rows += _norm("q_a_layernorm", a.q_lora_rank, a)
            rows += _linear("q_b_proj", heads * qk, a.q_lora_rank, "attention", "column", False)
        else:
            rows = _linear("q_proj", heads * qk, h, "attention", "column", False)
        rows += _linear("kv_a_proj_with_mqa", a.kv_lora_rank + a.qk_rope_dim, h, "attention", "replicated",
                        a.attn_bias)
        rows += _norm("kv_a_layernorm", a.kv_lora_rank, a)
        rows += _linear("kv_b_proj", heads * (a.qk_nope_dim + a.v_head_dim), a.kv_lora_rank, "attention", "column",
                        False)
        return rows + _linear("o_proj", h, heads * a.v_head_dim, "attention", "row", a.bias or a.attn_bias)
    if a.fused_qkv:
        rows = _linear("qkv_proj", q + 2 * kv, h, "attention", "column", qkv_b)
    else:
        rows = []
        for name, out in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            rows += _linear(name, out, h, "attention", "column", qkv_b)
    if a.qk_norm == "head":
        rows += _norm("q_norm", a.d_head, a) + _norm("k_norm", a.d_head, a)
    elif a.qk_norm == "full":
        rows += _norm("q_norm", q, a) + _norm("k_norm", kv, a)
    if a.attention_sinks:
        rows.append(ParamTensor("sinks", "self_attn", (a.heads,), "attention", "column", "layer"))
    return rows + _linear("o_proj", h, q, "attention", "row", a.bias or a.attn_bias)


def _mlp(prefix: str, f: int, a: "Architecture", role: str, kind: str) -> list:
    h, b = a.hidden, a.bias or a.mlp_bias
    if a.gated_mlp and a.fused_gate_up:
        rows = _linear(f"{prefix}gate_up_proj", 2 * f, h, role, "column", b, kind=kind)
    elif a.gated_mlp:
        rows = _linear(f"{prefix}gate_proj", f, h, role, "column", b, kind=kind) + \
            _linear(f"{prefix}up_proj", f, h, role, "column", b, kind=kind)
    else:
        rows = _linear(f"{prefix}up_proj", f, h, role, "column", b, kind=kind)
    return rows + _linear(f"{prefix}down_proj", h, f, role, "row", b, kind=kind)


def _experts(a: "Architecture") -> list:
    """Routed experts as Hugging Face 5.x fuses them: one "experts" module per MoE block holding every expert's
    gate/up [E, 2f, h] and down [E, h, f] (what ZeRO-3 gathers at once), plus the router [E, h]."""
    E, f, h = a.experts, a.moe_ffn, a.hidden
    up = 2 * f if a.gated_mlp else f
    rows = [ParamTensor("router.weight", "router", (E, h), "router", "replicated", "layer", kind="moe",
                        storage="fp32" if a.router_fp32 else "")]
    if a.router_bias:
        rows.append(ParamTensor("router.bias", "router", (E,), "router", "replicated", "layer", kind="moe",
                                storage="fp32" if a.router_fp32 else ""))
    rows.append(ParamTensor("experts.gate_up_proj", "experts", (E, up, h), "expert", "expert-column", "layer",
                            kind="moe"))
    rows.append(ParamTensor("experts.down_proj", "experts", (E, h, f), "expert", "expert-row", "layer", kind="moe"))
    if a.expert_bias:
        rows.append(ParamTensor("experts.gate_up_proj_bias", "experts", (E, up), "expert", "expert-column", "layer",
                                kind="moe"))
        rows.append(ParamTensor("experts.down_proj_bias", "experts", (E, h), "expert", "expert", "layer",
                                kind="moe"))
    if a.shared_expert_ffn:
        rows += [r._replace(role="shared expert") for r in _mlp("shared_experts.", a.shared_expert_ffn, a, "mlp",
                                                               "moe")]
        if a.shared_expert_gate:
            rows += _linear("shared_expert_gate", 1, h, "shared expert", "replicated", False, kind="moe")
    return rows


@lru_cache(maxsize=512)
def tensors(a: "Architecture") -> Tuple[ParamTensor, ...]:
    """Every parameter tensor: one block's (place "layer"; kind says which blocks: all, dense or MoE) and the
    model's ends. Split styles follow Megatron-LM's and torchtitan's tensor-parallel plans: q/k/v and gate/up
    column-parallel, o and down row-parallel, embedding and head vocabulary-parallel, norms and routers
    replicated, experts split over expert parallelism."""
    h = a.hidden
    rows = _norm("input_norm", h, a) + _norm("post_attention_norm", h, a)
    if a.sandwich_norm:
        rows += _norm("pre_mlp_norm", h, a) + _norm("post_mlp_norm", h, a)
    rows += _attention(a)
    dense_kind = "dense" if a.experts else "all"
    rows += _mlp("", a.ffn, a, "mlp", dense_kind)
    if a.experts:
        rows += _experts(a)
    rows.append(ParamTensor("embed_tokens.weight", "embed_tokens", (a.vocab, h), "embedding", "vocab", "first"))
    if a.positions == "learned":
        rows.append(ParamTensor("embed_positions.weight", "embed_positions", (a.seq_len, h), "position",
                                "replicated", "first"))
    rows += _norm("final_norm", h, a, "last")
    rows.append(ParamTensor("lm_head.weight", "lm_head", (a.vocab, h), "head", "vocab", "last", a.tied_embeddings))
    return tuple(rows)


@lru_cache(maxsize=4096)
def layer_counts(a: "Architecture", first: int = 0, stop: int = None) -> Dict[str, int]:
    """Blocks of each kind among layers [first, stop): all of them, the dense-MLP ones, the MoE ones, and the
    local-attention (sliding-window) ones."""
    stop = a.layers if stop is None else stop
    moe = sum(1 for i in range(first, stop) if a.is_moe_layer(i))
    sliding = sum(1 for i in range(first, stop) if a.is_sliding_layer(i))
    return {"all": stop - first, "dense": stop - first - moe, "moe": moe, "sliding": sliding}


def _modules(a: "Architecture", place, kind=None) -> Dict[str, int]:
    mods: Dict[str, int] = {}
    for t in tensors(a):
        if t.place in place and not t.tied and (kind is None or t.kind in ("all", kind)):
            mods[t.module] = mods.get(t.module, 0) + t.elements
    return mods


def layer_modules(a: "Architecture", kind: str = None) -> Dict[str, int]:
    """Parameters of each module inside one transformer block (of a kind: dense or moe; default the first)."""
    if kind is None:
        kind = "moe" if a.moe_layers == a.layers else "dense"
    return _modules(a, ("layer",), kind)


def model_modules(a: "Architecture") -> Dict[str, int]:
    """Parameters of each module outside the blocks (embeddings, final norm, untied output head)."""
    return _modules(a, ("first", "last"))


def _instances(a: "Architecture", t: ParamTensor) -> int:
    return layer_counts(a)[t.kind] if t.place == "layer" else 1


# param_count, counts and largest_layer are architecture-only: the same for every layout and worker count, and
# asked again on every recompute of the app (cached; counts hands out a copy of its dict).

@lru_cache(maxsize=512)
def param_count(a: "Architecture") -> int:
    """Exact parameter count, shared (tied) weights counted once."""
    return sum(t.elements * _instances(a, t) for t in tensors(a) if not t.tied)


def layer_params(a: "Architecture") -> int:
    return sum(layer_modules(a).values())


def counts(a: "Architecture") -> Dict[str, int]:
    """Total, expert (routed), dense (the rest) and active parameters per token: dense + top-k / E of each MoE
    block's routed experts (shared experts and routers always run). Embedding and head included, as
    transformers counts a model's parameters."""
    return dict(_counts(a))


@lru_cache(maxsize=512)
def _counts(a: "Architecture") -> Dict[str, int]:
    total = param_count(a)
    expert = sum(t.elements * _instances(a, t) for t in tensors(a) if t.expert)
    active = total - expert
    if a.experts:
        active += expert * a.experts_per_token // a.experts
    return {"params": total, "expert_params": expert, "dense_params": total - expert, "active_params": active}


def small_params(a: "Architecture", threshold: int) -> int:
    """Elements of parameter tensors with at most `threshold` elements: what ZeRO-3 keeps whole on every worker
    (DeepSpeed stage3_param_persistence_threshold compares each parameter's ds_numel with it)."""
    return sum(t.elements * _instances(a, t) for t in tensors(a) if not t.tied and t.elements <= threshold)


@lru_cache(maxsize=512)
def largest_layer(a: "Architecture") -> tuple:
    """(module name, parameters) of the largest single module: DeepSpeed's largest_layer_params. For fused
    experts that is every expert of a block."""
    candidates = dict(model_modules(a))
    for kind in ("dense", "moe"):
        if layer_counts(a)[kind]:
            candidates.update({k: v for k, v in layer_modules(a, kind).items() if v > candidates.get(k, -1)})
    name = max(candidates, key=lambda k: candidates[k])
    return name, candidates[name]


ARCH_FIELDS = tuple(f.name for f in fields(Architecture))
