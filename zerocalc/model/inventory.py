"""The parameter inventory (DESIGN.md section 7): every parameter tensor of an architecture, one block standing for
all of its kind, with its role, tensor-parallel split, pipeline place and storage; and what is counted from it:
the exact parameter count, total / expert / active parameters, the modules of a block and the largest one (what
ZeRO-3 gathers at once).

Counting follows Megatron-LM's theoretical_memory_usage.py term by term (attention with grouped-query heads,
gated or plain MLP, norms, embeddings, tied or untied output), extended with the biases and learned positions of
GPT-2-style blocks. "Module" means one nn.Module's own parameters, as DeepSpeed's model_to_params counts them for
largest_layer_params (deepspeed/runtime/zero/stage3.py): a fused QKV projection is one module, separate q/k/v
projections are three.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, Tuple

from .architecture import Architecture, layer_counts
from .tensor import ParamTensor
from .vision import tower_tensors


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
        rows = [r._replace(heads=a.heads) if r.name in ("q_proj.weight", "k_proj.weight") else r for r in rows]
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
    rows = _norm("input_norm", h, a) + ([] if a.shared_norm else _norm("post_attention_norm", h, a))
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
    if a.score_head:             # a critic's or reward model's score head: Linear(h, n), replicated
        rows.append(ParamTensor("score.weight", "score", (a.score_head, h), "head", "replicated", "last"))
    else:
        rows.append(ParamTensor("lm_head.weight", "lm_head", (a.vocab, h), "head", "vocab", "last",
                                a.tied_embeddings))
        if a.head_bias:          # phi: Linear(h, vocab, bias=True); the bias is never tied
            rows.append(ParamTensor("lm_head.bias", "lm_head", (a.vocab,), "head", "vocab", "last"))
    rows += tower_tensors(a.vision) if a.vision else ()     # a vision tower and its projector (model/vision.py)
    return tuple(rows) + (_mtp(a, rows) if a.mtp_layers else ())


def _mtp(a: "Architecture", rows: list) -> tuple:
    """One multi-token-prediction module (place "mtp", a.mtp_layers of them on the last pipeline stage), as
    megatron-core 0.16.1 builds it (transformer/multi_token_prediction.py MultiTokenPredictionLayer): enorm and
    hnorm, eh_proj [h, 2h] (column-parallel), one transformer block of the last decoder block's kind, and its final
    norm (DeepSeek-V3's shared_head.norm). The embedding and the head are the model's own (GPTModel: the output layer
    is shared; the MTP stage builds the word embedding too, a copy tied to the first stage's, which a tied head
    already is): the copy counts only on a last stage without the embedding, as a tied head does."""
    h, kind = a.hidden, a.mtp_kind

    def place(t):
        return t._replace(name=f"mtp.{t.name}", module=f"mtp.{t.module}", place="mtp", kind="all")
    out = [place(t) for t in _norm("enorm", h, a) + _norm("hnorm", h, a)
           + _linear("eh_proj", h, 2 * h, "mtp", "column", False)]
    out += [place(t) for t in rows if t.place == "layer" and t.kind in ("all", kind)]
    out += [place(t) for t in _norm("final_layernorm", h, a)]
    if not a.tied_embeddings:
        out.append(ParamTensor("mtp.embed_tokens.weight", "mtp.embed_tokens", (a.vocab, h), "embedding", "vocab",
                               "last", True))
    return tuple(out)


def _modules(a: "Architecture", place, kind=None) -> Dict[str, int]:
    mods: Dict[str, int] = {}
    # A tied head is gathered with the embedding, unless a bias of its own (phi) makes lm_head a module to gather
    own = {t.module for t in tensors(a) if not t.tied}
    for t in tensors(a):
        if t.place in place and (not t.tied or t.module in own) and (kind is None or t.kind in ("all", kind)):
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
    if t.place == "mtp":
        return a.mtp_layers
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
    candidates = {**model_modules(a), **_modules(a, ("mtp",))}
    for kind in ("dense", "moe"):
        if layer_counts(a)[kind]:
            candidates.update({k: v for k, v in layer_modules(a, kind).items() if v > candidates.get(k, -1)})
    name = max(candidates, key=lambda k: candidates[k])
    return name, candidates[name]
