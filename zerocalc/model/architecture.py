"""A decoder-only transformer's shape: the Architecture record (layers, widths, attention, MLP, experts, latent
attention, local attention), each field's allowed range, and which blocks are dense, mixture-of-experts or local.
Its parameter tensors and their counts are the inventory's (model/inventory.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Dict, Optional, Tuple

from ..scenario import FieldError, require_choice, require_int, require_probability
from .vision import VisionTower

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
# How K and V reach the attention when there are fewer KV heads (Falcon, modeling_falcon.py _split_heads):
# none: as projected (repeat_kv in eager, grouped-query kernels); split: expanded to every query head as they are
# split from the fused projection (new_decoder_architecture); broadcast: one head, broadcast by matmul, which
# SDPA's fused kernels refuse (multi_query: the math fallback runs).
KV_EXPANDS = ("none", "split", "broadcast")
MOE_LIMITS = {"q_lora_rank": (0, 10**6), "kv_lora_rank": (0, 10**6), "qk_nope_dim": (0, 10**5),
              "qk_rope_dim": (0, 10**5), "v_head_dim": (0, 10**5), "experts": (0, 100_000),
              "experts_per_token": (0, 100_000), "expert_ffn": (0, 10**7), "shared_expert_ffn": (0, 10**8),
              "first_dense_layers": (0, 10_000), "moe_step": (1, 10_000),
              "sliding_window": (0, 10**8), "sliding_pattern": (1, 10_000), "mtp_layers": (0, 16),
              "mtp_declared": (0, 16), "score_head": (0, 10**6)}
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
    # multi-token prediction (DeepSeek-V3, model/mtp.py): the MTP modules the trained model builds (Megatron
    # --mtp-num-layers; 0 as Hugging Face's training forward and every framework by default), and how many the
    # config declares (num_nextn_predict_layers: the checkpoint's, counted in no number)
    mtp_layers: int = 0
    mtp_declared: int = 0
    # A score head in place of the language-model head: its outputs (1: a PPO critic's value head or a reward
    # model's, AutoModelForTokenClassification / AutoModelForSequenceClassification with num_labels=1, OpenRLHF's
    # value_head Linear(h, 1)); 0: the LM head over the vocabulary. Its logits are T x score_head.
    score_head: int = 0
    # Parallel blocks (GPT-NeoX use_parallel_residual, phi, Falcon parallel_attn, StableLM's option): attention and
    # MLP both read the block input and their outputs are added to it together; shared_norm: one norm feeds both
    # (phi, Falcon-7B, StableLM), else each has its own (GPT-NeoX, Falcon-40B's ln_attn / ln_mlp).
    parallel_residual: bool = False
    shared_norm: bool = False
    rotary_pct: float = 1.0           # share of each head's dimensions rotated (partial rotary: Pythia 0.25, phi 0.5)
    head_bias: bool = False           # a bias on the LM head (phi)
    kv_expand: str = "none"           # KV_EXPANDS (Falcon)
    # A vision-language model's tower, projector and cross-attention extras (model/vision.py; its training mode
    # inside): their tensors join the inventory. None: a language model alone.
    vision: Optional[VisionTower] = None

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
        require_choice("kv_expand", self.kv_expand, KV_EXPANDS)
        for f in ("attn_softcap", "final_softcap"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e6:
                raise FieldError(f, v, "a number from 0 (off) to 1,000,000")
        for f, (lo, hi) in MOE_LIMITS.items():
            require_int(f, getattr(self, f), lo, hi)
        v = self.rotary_pct
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise FieldError("rotary_pct", v, "a fraction above 0 and at most 1 (1: every dimension rotated)")
        if self.vision is not None and not isinstance(self.vision, VisionTower):
            raise FieldError("vision", type(self.vision).__name__, "a VisionTower or none")
        if self.vision is not None and self.vision.out != self.hidden:
            raise FieldError("vision", self.vision.out, f"a tower whose projector outputs the hidden size "
                             f"({self.hidden:,})")
        if self.shared_norm and not self.parallel_residual:
            raise FieldError("shared_norm", True, "false unless parallel_residual (one norm feeds both branches)")
        if self.score_head and self.tied_embeddings:
            raise FieldError("tied_embeddings", True, "false with a score head (the head is its own Linear(h, n))")
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

    @property
    def mtp_kind(self) -> str:
        """The block kind of each MTP module: the last decoder block's (Megatron builds it from that spec)."""
        return "moe" if self.is_moe_layer(self.layers - 1) else "dense"

    def is_sliding_layer(self, i: int) -> bool:
        return bool(self.sliding_window) and (self.sliding_pattern == 1 or (i + 1) % self.sliding_pattern != 0)


@lru_cache(maxsize=4096)
def layer_counts(a: "Architecture", first: int = 0, stop: int = None) -> Dict[str, int]:
    """Blocks of each kind among layers [first, stop): all of them, the dense-MLP ones, the MoE ones, and the
    local-attention (sliding-window) ones."""
    stop = a.layers if stop is None else stop
    moe = sum(1 for i in range(first, stop) if a.is_moe_layer(i))
    sliding = sum(1 for i in range(first, stop) if a.is_sliding_layer(i))
    return {"all": stop - first, "dense": stop - first - moe, "moe": moe, "sliding": sliding}


ARCH_FIELDS = tuple(f.name for f in fields(Architecture))
