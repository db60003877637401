"""An fp32 residual stream under autocast: what a 16-bit model whose embed_tokens, lm_head and norms are kept in
fp32 (FineTune.fp32_parts "embed-head-norms": axolotl's loader under SDPA or eager attention) saves beyond the
same model in 16 bits.

The embedding's output is fp32, so the stream the blocks add into stays fp32 (a 16-bit linear's output added to
an fp32 tensor promotes). Hugging Face's RMSNorm (LlamaRMSNorm: x.to(fp32), x * rsqrt(mean(x^2)), weight *
x.to(input dtype)) then saves its fp32 input as before, and, where its weight trains, its fp32 normalised input
(4 bytes a feature, not the 2 of the copy cast back). Its output is fp32 and is not saved: each linear that reads
it casts it to 16 bits under autocast and saves its own copy (q, k and v each one; gate and up each one), where
the 16-bit model shares one. Per norm read by n linears that is 2 bytes x n a feature more when its weight trains,
2 x (n - 1) when it is frozen; the rest of the block (q, k, v after autocast's cast for SDPA, the MLP) is 16-bit
in both. Gemma's and gpt-oss's norms already keep an fp32 normalised input, so only the casts differ; a LayerNorm
already runs in fp32 under autocast (its output is fp32 either way). A q / k norm (Qwen3) that trains keeps its
fp32 normalised input too (its output goes on, fp32, through the rotary embedding to SDPA's cast).

A mixture-of-experts block's routed tokens are copies of that fp32 output, and each expert's gate and up cast
them itself: 2 bytes per routed token and feature more (derived from the dense measurement, not measured).

The final norm feeds the head alone (its cast is the head's saved input): 2 bytes a feature more when it trains;
the head's weight, fp32, is cast to 16 bits once per forward and that copy is saved (V x h x 2 bytes, tied or not).
Checkpointed blocks keep their fp32 input (4 bytes a feature).

peft's prepare_model_for_kbit_training leaves the same fp32 embedding, head and norms beside a QLoRA base whose
4-bit linears return their input's dtype, so there every activation is fp32 already (zerocalc counts them at 32
bits) and only the head weight's 16-bit copy is added (measured: tests/test_fp32_stream.py, a bitsandbytes nf4
Llama under peft on the CPU).

The norms alone in fp32 (FineTune.fp32_parts "norms": LLaMA-Factory's upcast_layernorm, axolotl's fp32_norms)
leave the stream 16-bit: the norm casts its fp32 normalised input back to 16 bits as before, and the fp32 weight
times that is an fp32 output each linear casts itself: 2 x (n - 1) bytes a feature, trained or frozen (+6 a Llama
block, measured), nothing at the head.

Measured on the CPU (tests/measure/fp32_stream.py, tests/test_fp32_stream.py): transformers' Llama, bf16 linears,
fp32 embed_tokens / lm_head / norms as axolotl's loader leaves them, torch.autocast bf16 and SDPA: a block saves
10 bytes per token and hidden feature more with trained norms (66.09h against 56.09h), 6 more with frozen ones
(58.09h against 52.09h), and the output end 2 more plus the head weight's 16-bit copy.
"""

from __future__ import annotations

from typing import Dict

WIDE = 32                  # the stream's bits
NARROW_CAST = 16           # autocast's copy for each 16-bit linear
TERM = "fp32 stream: the norms' fp32 outputs, autocast's copy per linear"


def _consumers(a) -> Dict[str, int]:
    """How many linears read each block norm's output (each casts its own copy under autocast)."""
    attention = 1 if a.fused_qkv else 2 if a.mla else 3
    mlp = 1 if a.fused_gate_up or not a.gated_mlp else 2
    if a.experts:
        mlp += 1                               # the router reads the norm's output too
    if a.parallel_residual:                    # one norm (or two) feeding attention and MLP side by side
        return {"shared": attention + mlp} if a.shared_norm else {"attention": attention, "mlp": mlp}
    return {"attention": attention, "mlp": mlp}


def _extra_per_feature(a, n: int, trains: bool, norms_only: bool) -> int:
    """Bits per token and hidden feature one norm read by n linears saves beyond its 16-bit self."""
    if a.norm == "layernorm" or norms_only and a.norm != "rmsnorm":
        return 0                               # fp32 already, or (Gemma, gpt-oss) cast back to the stream's dtype
    casts = NARROW_CAST * (n - 1)              # n copies where one was shared
    if a.norm == "rmsnorm" and trains and not norms_only:
        casts += WIDE - NARROW_CAST            # the fp32 normalised input where the cast-back copy was
    return casts


def block_terms(a, t, training, norms_only: bool = False) -> Dict[str, int]:
    """The per-block term (bits), over the tokens outside the tensor-parallel region. `norms_only`: the norms
    alone in fp32, the stream 16-bit: a norm still saves its 16-bit normalised input, and its fp32 output (the
    fp32 weight times it) is cast by each linear."""
    trains = training is None or training.norms
    bits = sum(_extra_per_feature(a, n, trains, norms_only) for n in _consumers(a).values()) * t.outside * a.hidden
    if a.qk_norm != "none" and a.norm == "rmsnorm" and trains and not norms_only:   # q / k norms: fp32 input
        bits += (WIDE - NARROW_CAST) * t.inside * (a.q_size + a.kv_size)
    if a.experts and a.gated_mlp and not a.fused_gate_up and _extra_per_feature(a, 2, False, norms_only):
        # each expert's gate and up cast its routed tokens' fp32 copy themselves (derived, not measured)
        bits += NARROW_CAST * a.experts_per_token * t.outside * a.hidden
    return {TERM: bits} if bits else {}


def head_terms(a, t, training, vocab: int, wide_stream: bool = True) -> Dict[str, int]:
    """The output end: the head weight's 16-bit copy and, where the stream is wider than the 16-bit activations
    counted (`wide_stream`), the trained final norm's fp32 normalised input."""
    trains = training is None or training.final_norm
    out = {"output projection weight (autocast's 16-bit copy)": NARROW_CAST * vocab * a.hidden}
    if wide_stream and a.norm == "rmsnorm" and trains:
        out["final norm fp32 output (fp32 stream)"] = (WIDE - NARROW_CAST) * t.outside * a.hidden
    return out
