"""Transformer shape -> exact parameter count and the largest single module (what ZeRO-3 gathers at once).

Counting follows Megatron-LM's theoretical_memory_usage.py term by term (attention with grouped-query heads,
gated or plain MLP, norms, embeddings, tied or untied output), extended with the biases and learned positions of
GPT-2-style blocks. "Module" means one nn.Module's own parameters, as DeepSpeed's model_to_params counts them for
largest_layer_params (deepspeed/runtime/zero/stage3.py): a fused QKV projection is one module, separate q/k/v
projections are three.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Dict, Optional

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


def layer_modules(a: Architecture) -> Dict[str, int]:
    """Parameters of each module inside one transformer block."""
    h, q, kv, f = a.hidden, a.q_size, a.kv_size, a.ffn
    b = 1 if a.bias else 0
    qkv_b = 1 if (a.bias or a.qkv_bias) else 0
    norm = 2 * h if a.norm == "layernorm" else h       # LayerNorm has weight and bias, RMSNorm a weight only
    mods = {"input_norm": norm, "post_attention_norm": norm}
    if a.fused_qkv:
        mods["qkv_proj"] = h * (q + 2 * kv) + qkv_b * (q + 2 * kv)
    else:
        mods.update(q_proj=h * q + qkv_b * q, k_proj=h * kv + qkv_b * kv, v_proj=h * kv + qkv_b * kv)
    mods["o_proj"] = q * h + b * h
    if a.gated_mlp and a.fused_gate_up:
        mods["gate_up_proj"] = 2 * h * f + b * 2 * f
    elif a.gated_mlp:
        mods.update(gate_proj=h * f + b * f, up_proj=h * f + b * f)
    else:
        mods["up_proj"] = h * f + b * f
    mods["down_proj"] = f * h + b * h
    return mods


def model_modules(a: Architecture) -> Dict[str, int]:
    """Parameters of each module outside the blocks (embeddings, final norm, output head)."""
    mods = {"embed_tokens": a.vocab * a.hidden}
    if a.positions == "learned":
        mods["embed_positions"] = a.seq_len * a.hidden
    mods["final_norm"] = 2 * a.hidden if a.norm == "layernorm" else a.hidden
    if not a.tied_embeddings:
        mods["lm_head"] = a.vocab * a.hidden
    return mods


def layer_params(a: Architecture) -> int:
    return sum(layer_modules(a).values())


def param_count(a: Architecture) -> int:
    """Exact parameter count, shared (tied) weights counted once."""
    return a.layers * layer_params(a) + sum(model_modules(a).values())


def small_params(a: Architecture, threshold: int) -> int:
    """Elements of parameter tensors with at most `threshold` elements (1-D norms and biases in practice):
    what ZeRO-3 keeps whole on every worker (DeepSpeed stage3_param_persistence_threshold). Weight matrices
    are assumed larger than any sensible threshold."""
    h, q, kv, f = a.hidden, a.q_size, a.kv_size, a.ffn
    per_layer = [h, h] * (2 if a.norm == "layernorm" else 1)
    if a.bias or a.qkv_bias:
        per_layer += [q + 2 * kv] if a.fused_qkv else [q, kv, kv]
    if a.bias:
        per_layer += [h, h] + ([2 * f] if a.gated_mlp and a.fused_gate_up else [f] * (2 if a.gated_mlp else 1))
    model = [h] * (2 if a.norm == "layernorm" else 1)
    return sum(n for n in per_layer if n <= threshold) * a.layers + sum(n for n in model if n <= threshold)


def largest_layer(a: Architecture) -> tuple:
    """(module name, parameters) of the largest single module: DeepSpeed's largest_layer_params."""
    candidates = {**model_modules(a), **layer_modules(a)}
    name = max(candidates, key=lambda k: candidates[k])
    return name, candidates[name]


ARCH_FIELDS = tuple(f.name for f in fields(Architecture))
