"""Saved activations particular to the parallel-block families (GPT-NeoX, phi, StableLM, Falcon), as
activations.py composes them into a block. Measured to the byte on the CPU with tiny configs of the real
transformers 5.24 classes (tests/test_families_activations.py, tests/measure/family_activations.py).
"""

from __future__ import annotations

from typing import Dict

from ..model.architecture import Architecture
from ..tables import INDEX_BITS, STAT_BITS


def kv_index(a: Architecture, hf: bool) -> int:
    """Falcon's _split_heads takes K and V by index lists (qkv[..., [-2], :], [..., [-1], :]): two one-element
    int64 index tensors saved per block."""
    return 2 * INDEX_BITS if hf and a.kv_expand != "none" else 0


def sdpa_math_fallback(a: Architecture, hf: bool, attention: str) -> bool:
    """Does SDPA run its composite math kernel? One K/V head broadcast to every query head with no enable_gqa
    (Falcon's multi_query): CUDA's flash and memory-efficient kernels refuse unequal head counts."""
    return hf and attention == "flash" and a.kv_expand == "broadcast"


def math_fallback(a: Architecture, t, recompute: str) -> Dict[str, int]:
    """What PyTorch's composite math SDPA saves (aten _scaled_dot_product_attention_math, in fp32 for 16-bit
    inputs, the same composite on the CPU where it is measured): the scaled fp32 query, K and V expanded to every
    head (fp32 copies, matmul's broadcast) and the fp32 s x s probabilities. Q, K and V as the block computed
    them are not saved. `t`: activations.Tokens."""
    terms = {"q, k, v (math SDPA, fp32, every head)": 3 * STAT_BITS * t.inside * a.q_size + kv_index(a, True)}
    if recompute != "selective":
        terms["attention softmax (math SDPA, fp32)"] = STAT_BITS * a.heads * t.s * t.s * t.b
    return terms


def mlp_norm(a: Architecture, norm: int, w: int, rows: int) -> Dict[str, int]:
    """The MLP's norm in a parallel block, given what a norm over `rows` tokens saves (`norm` bits). With one
    shared norm (phi, Falcon-7B, StableLM) its output is the attention's input, already saved: nothing more.
    With a norm of its own (GPT-NeoX's post_attention_layernorm, Falcon-40B's ln_mlp) a LayerNorm's saved input
    is the block input the first norm saved (one storage): only its mean and rstd are new."""
    if a.shared_norm:
        return {}
    if a.norm == "layernorm":
        return {"MLP norm (parallel: statistics)": norm - w * rows * a.hidden}
    return {"MLP norm": norm}
