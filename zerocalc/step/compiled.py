"""What a torch.compile'd block saves for backward: Inductor's default (min-cut) partitioner, torch 2.13.

Measured on the CPU with saved-tensor hooks on the compiled autograd function (tests/measure/compiled_saves.py:
AOTAutograd's ctx.save_for_backward goes through them; the saved values were matched one by one against the
partitioner's own list), for Llama-type (RMSNorm, gated SiLU, rotary, GQA), Qwen3 (per-head q/k norms), GPT-2
(LayerNorm, fused biased c_attn, gelu_new) and Qwen3-MoE blocks, at two sizes each. Per block the partitioner keeps:
- the block's input and, per norm, its statistics (RMSNorm's fp32 rstd; LayerNorm's mean and rstd, fp32 on CUDA)
  and its output times the weight (the next matmul's input); no fp32 copy of the input, unlike eager;
- with q/k norms, the projections' outputs before the norm and the per-head fp32 rstd;
- q and k after the rotation and v (or GPT-2's fused q, k, v storage), the attention output and its logsumexp;
- the out-projection's output, to rebuild the residual for the next norm;
- gate, up and their product (silu(gate) is recomputed); a plain MLP its fc1 output and the activation's output
  (gelu_new's four tensors fuse away);
- in MoE blocks: the router's probabilities (fp32; the partitioner kept bf16 logits at one size), the top-k weights
  and int64 indices, three int64 permutation indices per routed pair, the gathered tokens, the experts' gate/up,
  product and down outputs.
Under op-level checkpointing the policy's saves stand, but the block's last matmul output (the down projection),
which backward never reads, is dropped by the partitioner. Latent attention, attention sinks, soft-capping and
sandwich norms were not measured: those blocks keep their eager terms (compiled_terms returns None).
LoRA blocks (peft 0.21.2 adapters on a frozen base; torchtune's LoRALinear at bd2a0fc7 runs the same operations,
read from modules/peft/lora.py, not measured), measured the
same way on Llama-type blocks with adapters on every subset of q, k, v, o, gate, up and down, in bf16 and fp32, at
two sizes: the frozen weights' gradients are never needed, so the partitioner keeps the full-training saves less
the inputs only a frozen weight read (the input norm's output unless q, k or v carries an adapter, the
post-attention norm's output unless gate or up does, the product the down projection reads unless down does),
those inputs in the adapters' dtype where an adapter reads them, an fp32 adapter on o its cast of the attention
output, and each adapter's rank-r intermediate (lora_A's output). In the first block, whose input needs no
gradient, backward stops at the first adapter: neither the block's input nor its input norm's statistics are
kept, nor what only the positions before that adapter need (adapters on o and down alone: no q, k, v or
log-sum-exp).
Not covered: CUDA graphs (mode="reduce-overhead") and max-autotune's workspaces; compiled DoRA, adapter dropout,
quantized bases and fine-tuned MoE blocks keep their eager terms.
"""

from __future__ import annotations

from typing import Dict, Optional

from ..model.architecture import Architecture
from ..tables import INDEX_BITS, STAT_BITS

TORCH_VERSION = "2.13.0"


def covered(a: Architecture) -> bool:
    return not (a.mla or a.attention_sinks or a.attn_softcap or a.sandwich_norm or a.parallel_residual
                or a.kv_expand != "none" or a.rotary_pct < 1)     # parallel blocks, Falcon, partial rotary: eager


def _norm(a: Architecture, rows: int, w: int, name: str) -> Dict[str, int]:
    stats = (2 if a.norm == "layernorm" else 1) * STAT_BITS * rows
    return {f"{name} statistics": stats, f"{name} output": w * rows * a.hidden}


def compiled_terms(a: Architecture, t, w: int, attention: str, kind: str, moe_pairs: int = 0,
                   scores: Optional[Dict[str, int]] = None) -> Optional[Dict[str, int]]:
    """Bits one compiled block saves (`a`: the rank's tensor-parallel split; `t`: activations.Tokens), or None
    for the block kinds not measured. `scores`: eager attention's s x s terms, kept as eager saves them."""
    if not covered(a):
        return None
    T = t.inside
    terms = {"block input": w * t.outside * a.hidden}
    terms.update(_norm(a, t.outside, w, "input norm"))
    if a.qk_norm != "none":
        heads = (a.heads, a.n_kv_heads) if a.qk_norm == "head" else (1, 1)
        terms["q, k projections (norm inputs)"] = w * T * (a.q_size + a.kv_size)
        terms["q, k norm rstd"] = STAT_BITS * T * sum(heads)
    if a.fused_qkv and a.positions != "rotary":
        terms["q, k, v"] = w * T * (a.q_size + 2 * a.kv_size)
    elif a.fused_qkv:
        terms["q, k, v (projection) and rotated q, k"] = w * T * (2 * a.q_size + 3 * a.kv_size)
    else:
        terms["q, k, v"] = w * T * (a.q_size + 2 * a.kv_size)
    if attention == "flash":
        terms["attention logsumexp"] = STAT_BITS * t.b * a.heads * t.s
    else:
        terms.update(scores or {})
    terms["attention output"] = w * T * a.q_size
    terms["attention out-projection output"] = w * t.outside * a.hidden
    terms.update(_norm(a, t.outside, w, "post-attention norm"))
    if kind == "dense":
        terms.update(_mlp(a, T, w, a.ffn, "mlp"))
    else:
        terms.update(_moe(a, t, w, moe_pairs))
    return terms


def _mlp(a: Architecture, T: int, w: int, f: int, prefix: str) -> Dict[str, int]:
    if a.gated_mlp:
        return {f"{prefix} gate, up and product": 3 * w * T * f}
    return {f"{prefix} fc1 and activation outputs": 2 * w * T * f}


def _moe(a: Architecture, t, w: int, pairs: int) -> Dict[str, int]:
    T, k, f = t.outside, a.experts_per_token, a.moe_ffn
    terms = {"router probabilities (fp32)": STAT_BITS * T * a.experts,
             "router top-k weights and indices": (STAT_BITS + INDEX_BITS) * T * k,
             "experts: permutation indices": 3 * INDEX_BITS * pairs,
             "experts: gathered tokens and down output": 2 * w * pairs * a.hidden,
             "experts: gate/up and product": (3 if a.gated_mlp else 2) * w * pairs * f}
    if a.shared_expert_ffn:
        terms.update(_mlp(a, t.inside, w, a.shared_expert_ffn, "shared expert"))
    return terms


def compiled_op_terms(op_terms: Dict[str, int]) -> Dict[str, int]:
    """The op-level policy's saves under compile: the block's last matmul output, unread by backward, dropped."""
    last = [name for name in op_terms if name.endswith("down projection output")]
    return {k: v for k, v in op_terms.items() if k not in last[-1:]}


def covered_adapters(a: Architecture, tr) -> bool:
    """LoRA blocks measured under compile: Llama-type dense blocks (RMSNorm, rotary, separate q/k/v, gated MLP), a
    frozen base, plain adapters (no DoRA, no dropout, no 8-bit base, no MoE adapters), every block reached."""
    return (tr is not None and bool(tr.adapted) and not tr.trained and not tr.norms and not tr.dora
            and not tr.dropout and not tr.saves_base_inputs and not tr.moe_adapted and not tr.frozen_blocks
            and covered(a) and not a.experts and not a.fused_qkv and a.gated_mlp and a.positions == "rotary"
            and a.qk_norm == "none" and a.norm == "rmsnorm")


# Where each compiled term sits in a block's forward order (trainable.MODULE_POSITION): a term is kept in the first
# block only when backward reaches it there, that is when a module at or before its position carries an adapter.
_ADAPTER_TERM_POSITION = {"block input": 0, "input norm statistics": 0, "q, k, v": 1, "attention logsumexp": 1,
                          "attention out-projection output": 2, "post-attention norm statistics": 2,
                          "mlp gate and up": 3}


def compiled_adapter_terms(a: Architecture, t, w: int, attention: str, tr,
                           scores: Optional[Dict[str, int]] = None, first: bool = False) -> Dict[str, int]:
    """Bits one compiled LoRA block saves (covered_adapters; module docstring), from the full-training terms;
    `first`: the first block, which backward enters only as far as its first adapter."""
    terms = compiled_terms(a, t, w, attention, "dense", 0, scores)
    T, f, bits, adapted = t.inside, a.ffn, tr.adapter_bits, tr.adapted
    for norm, readers in (("input norm output", {"q", "k", "v"}), ("post-attention norm output", {"gate", "up"})):
        if adapted & readers:
            terms[norm] = bits * t.outside * a.hidden         # what the adapters' lora_A read, in their dtype
        else:
            del terms[norm]                                   # only the frozen weights' gradients read it
    del terms["mlp gate, up and product"]
    terms["mlp gate and up"] = 2 * w * T * f
    if "down" in adapted:
        terms["mlp product (down adapter input)"] = bits * T * f
    if "o" in adapted and bits != w:
        terms["attention output (o adapter's cast)"] = bits * T * a.q_size
    terms["adapters' rank-r intermediates"] = bits * T * tr.rank * len(adapted)
    if first:
        reached = {name for name, position in _ADAPTER_TERM_POSITION.items() if tr.needs_gradient(position, True)}
        attention_core = "q, k, v" in reached
        terms = {k: v for k, v in terms.items() if k in reached or k not in _ADAPTER_TERM_POSITION
                 and (attention_core or k not in (scores or {}))}
        if not (attention_core or "o" in adapted):
            terms.pop("attention output", None)               # read by attention's backward or o's adapter only
    return terms
