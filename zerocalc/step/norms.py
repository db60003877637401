"""What one norm saves for backward, by kind and implementation (activations.py composes it into a block):
Hugging Face's RMSNorm upcasts its input to fp32 and saves it, the fp32 rsqrt and the normalised copy cast back;
Gemma's and gpt-oss's keep an fp32 normalised copy; a LayerNorm saves its input, mean and rstd; Megatron's fused
RMSNorm its input and rstd.
"""

from __future__ import annotations

from ..model.architecture import Architecture
from ..tables import STAT_BITS


def norm_bits(a: Architecture, T: int, w: int, impl: str, width: int = None, rows: int = None) -> int:
    """Bits one norm over `width` features of `rows` rows (default: the hidden size per token) saves."""
    width = a.hidden if width is None else width
    rows = T if rows is None else rows
    if a.norm == "layernorm":
        return w * T * width + 2 * STAT_BITS * rows                   # input + mean and rstd
    if impl == "megatron":
        return w * T * width + STAT_BITS * rows                       # fused RMSNorm: input + rstd
    if a.norm == "rmsnorm-fp32":
        # gpt-oss RMSNorm: fp32 input, rsqrt, the fp32 normalised copy the weight multiplies (GptOssRMSNorm)
        return 2 * STAT_BITS * T * width + STAT_BITS * rows
    if a.norm == "rmsnorm-gemma":
        # Gemma RMSNorm: fp32 input, rsqrt, its fp32 output times (1 + w), that fp32 (1 + w) vector
        return 2 * STAT_BITS * T * width + STAT_BITS * rows + STAT_BITS * width
    return (STAT_BITS + w) * T * width + STAT_BITS * rows             # fp32 input copy + normalised copy + rsqrt
