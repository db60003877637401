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
Not covered: CUDA graphs (mode="reduce-overhead") and max-autotune's workspaces.
"""

from __future__ import annotations

from typing import Dict, Optional

from ..model.architecture import Architecture
from ..tables import INDEX_BITS, STAT_BITS

TORCH_VERSION = "2.13.0"


def covered(a: Architecture) -> bool:
    return not (a.mla or a.attention_sinks or a.attn_softcap or a.sandwich_norm)


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
