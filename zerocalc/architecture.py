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
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rotary")
# Activation functions as Hugging Face names them (config "activation_function" / "hidden_act") -> tensors of the FFN width its autograd formula saves (its output, when that is what it saves,
# is the fc2 input or the gate product's operand anyway and counted there).
# gelu_new (HF NewGELUActivation, 0.5x(1 + tanh(...))) saves x, tanh(.), 0.5x and 1 + tanh(.); gelu,
# gelu_pytorch_tanh and silu (one op each) save their input; relu saves only its output.
ACTIVATION_SAVES = {"gelu_new": 4, "gelu": 1, "gelu_pytorch_tanh": 1, "silu": 1, "relu": 0}
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


class ParamTensor(NamedTuple):
    """One row of the parameter inventory (DESIGN.md section 7)."""
    name: str            # as in the module tree, one layer standing for all: "q_proj.weight"
    module: str          # the nn.Module owning it: ZeRO-3 gathers module by module
    shape: Tuple[int, ...]
    role: str            # embedding | position | attention | mlp | norm | head
    tp: str              # column (dim 0 split) | row (last dim split) | vocab (vocabulary rows) | replicated
    place: str           # layer (every block) | first (first pipeline stage) | last (last pipeline stage)
    tied: bool = False   # the output head of tied embeddings: stored once, a copy on the last stage under PP

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _linear(module, out, inp, role, tp, biased, place="layer") -> list:
    """A Linear's weight [out, in] and its bias. A column-parallel bias is split with the output; a row-parallel
    one is added after the reduction, so every rank keeps it whole (Megatron RowParallelLinear, DTensor
    RowwiseParallel)."""
    rows = [ParamTensor(f"{module}.weight", module, (out, inp), role, tp, place)]
    if biased:
        rows.append(ParamTensor(f"{module}.bias", module, (out,), role, "column" if tp == "column" else "replicated",
                                place))
    return rows


def _norm(module, a: "Architecture", place="layer") -> list:
    names = ("weight", "bias") if a.norm == "layernorm" else ("weight",)   # LayerNorm has a bias, RMSNorm not
    return [ParamTensor(f"{module}.{n}", module, (a.hidden,), "norm", "replicated", place) for n in names]


@lru_cache(maxsize=512)
def tensors(a: "Architecture") -> Tuple[ParamTensor, ...]:
    """Every parameter tensor: one block's (place "layer", repeated a.layers times) and the model's ends.
    Split styles follow Megatron-LM's and torchtitan's tensor-parallel plans: q/k/v and gate/up column-parallel,
    o and down row-parallel, embedding and head vocabulary-parallel, norms replicated."""
    h, q, kv, f = a.hidden, a.q_size, a.kv_size, a.ffn
    qkv_b, b = a.bias or a.qkv_bias, a.bias
    rows = _norm("input_norm", a) + _norm("post_attention_norm", a)
    if a.fused_qkv:
        rows += _linear("qkv_proj", q + 2 * kv, h, "attention", "column", qkv_b)
    else:
        for name, out in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            rows += _linear(name, out, h, "attention", "column", qkv_b)
    rows += _linear("o_proj", h, q, "attention", "row", b)
    if a.gated_mlp and a.fused_gate_up:
        rows += _linear("gate_up_proj", 2 * f, h, "mlp", "column", b)
    elif a.gated_mlp:
        rows += _linear("gate_proj", f, h, "mlp", "column", b) + _linear("up_proj", f, h, "mlp", "column", b)
    else:
        rows += _linear("up_proj", f, h, "mlp", "column", b)
    rows += _linear("down_proj", h, f, "mlp", "row", b)
    rows.append(ParamTensor("embed_tokens.weight", "embed_tokens", (a.vocab, h), "embedding", "vocab", "first"))
    if a.positions == "learned":
        rows.append(ParamTensor("embed_positions.weight", "embed_positions", (a.seq_len, h), "position",
                                "replicated", "first"))
    rows += _norm("final_norm", a, "last")
    rows.append(ParamTensor("lm_head.weight", "lm_head", (a.vocab, h), "head", "vocab", "last", a.tied_embeddings))
    return tuple(rows)


def _modules(a: "Architecture", place) -> Dict[str, int]:
    mods: Dict[str, int] = {}
    for t in tensors(a):
        if t.place in place and not t.tied:
            mods[t.module] = mods.get(t.module, 0) + t.elements
    return mods


def layer_modules(a: "Architecture") -> Dict[str, int]:
    """Parameters of each module inside one transformer block."""
    return _modules(a, ("layer",))


def model_modules(a: "Architecture") -> Dict[str, int]:
    """Parameters of each module outside the blocks (embeddings, final norm, untied output head)."""
    return _modules(a, ("first", "last"))


def layer_params(a: "Architecture") -> int:
    return sum(layer_modules(a).values())


def param_count(a: "Architecture") -> int:
    """Exact parameter count, shared (tied) weights counted once."""
    return a.layers * layer_params(a) + sum(model_modules(a).values())


def small_params(a: "Architecture", threshold: int) -> int:
    """Elements of parameter tensors with at most `threshold` elements: what ZeRO-3 keeps whole on every worker
    (DeepSpeed stage3_param_persistence_threshold compares each parameter's ds_numel with it)."""
    return sum(t.elements * (a.layers if t.place == "layer" else 1)
               for t in tensors(a) if not t.tied and t.elements <= threshold)


def largest_layer(a: "Architecture") -> tuple:
    """(module name, parameters) of the largest single module: DeepSpeed's largest_layer_params."""
    candidates = {**model_modules(a), **layer_modules(a)}
    name = max(candidates, key=lambda k: candidates[k])
    return name, candidates[name]


ARCH_FIELDS = tuple(f.name for f in fields(Architecture))
