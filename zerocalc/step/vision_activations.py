"""What a vision tower saves for backward (issue 37), at its own sequence length: the patches of each image before
the merge, through every block, then the merger or projector at the merged length.

Derived from the modules of transformers 5.24 and checked against them on the CPU (tests/test_vision_activations.py
with tests/measure/vision_activations.py: saved-tensor hooks, SDPA saving q, k, v, its output and an fp32
logsumexp as the CUDA kernels do; no s x s term). Per token of width w, MLP width f, a heads of width d, e bytes
per activation, s bytes per norm statistic (fp32 on CUDA):
- Qwen2.5-VL blocks (Qwen2RMSNorm, fused qkv, 2-D rotary, SDPA per image / window then torch.cat, SwiGLU):
  each RMSNorm saves its fp32 input (4w), fp32 rsqrt (4), the normalised copy and its output (2 e w); attention
  saves q and k after the rotary (e w each), the whole qkv output (3 e w, v is a view of it), SDPA's output and the
  concatenated output (e w each), the logsumexp (4a); the gated MLP 4 e f. The rotary's fp32 cos and sin (8d) are
  saved once for all blocks. The merger: its RMSNorm (4w + 4 + e w), its input, fc1's output and GELU's (3 e w).
- Qwen3-VL blocks (LayerNorm, same attention, GELU MLP): each LayerNorm saves its input (e w), mean and rstd (2s),
  and its output (e w); the MLP 2 e f. Once: cos / sin (8d) and the bilinear position interpolation's four int64
  indices and fp32 weights (48 bytes per patch). The merger: LayerNorm input and statistics, 3 e w; each deepstack
  merger 3 e w + 2s / 4 (its norm runs on merged tokens).
- SigLIP (Gemma 3) and InternViT blocks: two LayerNorms, q, k, v, the output (4 e w) and the logsumexp, 2 e f;
  InternViT's layer scales save both branch outputs (2 e w). Gemma 3's ends: the post-LayerNorm, the pooling's
  input copy (e w), and per pooled token the Gemma RMSNorm in fp32 ((8 + e) w + 4). InternVL's ends per merged token
  (pixel shuffle 0.5): a LayerNorm over 4w (8 e w + 2s) and the projector's GELU (2 e out).
- Llama 3.2 Vision: SigLIP-style blocks over each tile's patches padded to a multiple of 8; the global blocks' tanh
  gates save both branch outputs (2 e w) and two scalars; the ends: the embeddings and pre-norm over the unpadded
  patches, the post-norm over the padded ones, the tile embeddings, the projector's input (every tile's patches
  with the intermediate layers' features concatenated, (1 + k) e w), and the tiles' additive attention mask, one
  (tiles x padded)^2 per image shared by every block, which SDPA's memory-efficient kernel keeps (82.7 MB per
  image at 4 tiles of 1608).
Under full recompute every block keeps its input (e w per token); the small integer tensors some towers pass to
their blocks (Qwen's cu_seqlens, a few bytes) are not counted.
A frozen tower saves nothing in its blocks (no parameter there needs a gradient and the pixels need none): only
the merger / projector, which trains, saves its terms; with the projector frozen too (frozen-all, the launchers'
default under LoRA) nothing before the language model needs a gradient and the tower saves nothing at all. A LoRA-targeted tower saves what a trained one does (the
adapters' rank-wide intermediates are not counted: r / w of a linear's input).
"""

from __future__ import annotations

from typing import Dict

from ..model.vision import TRAINING, VisionTower
from ..model.vision_tokens import ImageInputs, vision_tokens
from ..scenario import require_choice

FP32 = 4
INDEX = 8


def _norm(kind: str, w: int, e: int, s: int) -> int:
    """One norm's saved bytes per token: RMSNorm in fp32 (Qwen2RMSNorm) or LayerNorm (input, statistics, output)."""
    return (FP32 + 2 * e) * w + FP32 if kind == "rmsnorm" else 2 * e * w + 2 * s


def _block(t: VisionTower, e: int, s: int) -> int:
    """One block's saved bytes per token."""
    w, f, a = t.width, t.mlp, t.heads
    attention = (7 if t.fused_qkv else 4) * e * w + FP32 * a      # Qwen: q, k, qkv, output, cat; else q, k, v, output
    mlp = (4 if t.gated_mlp else 2) * e * f
    scales = 2 * e * w if t.layer_scale else 0
    return 2 * _norm(t.norm, w, e, s) + attention + mlp + scales


def _tower_ends(t: VisionTower, x: ImageInputs, passes: int, tokens: int, e: int, s: int) -> Dict[str, int]:
    """Saved outside the blocks, before the merger / projector (rotary tables, positions, outer norms)."""
    w, d = t.width, t.width // t.heads
    if t.projector in ("qwen2.5-vl", "qwen3-vl"):
        out = {"rotary cos / sin (fp32)": 2 * FP32 * d * tokens}
        if t.positions:
            out["position interpolation"] = (4 * INDEX + 4 * FP32) * tokens
        return out
    if t.projector == "gemma3":
        per_pass = tokens // passes if passes else 0
        return {"position ids": INDEX * per_pass if passes else 0, "post-norm": (e * w + 2 * s) * tokens,
                "pooling input": e * w * tokens}
    if t.projector == "internvl":
        return {}
    images, n, p = x.images, t.tiles, t.positions                  # mllama
    padded = p + (-p) % 8
    return {"embeddings and pre-norm": images * n * p * (2 * e * w + 2 * s),
            "post-norm": images * n * padded * (e * w + 2 * s),
            "tile embeddings": images * 2 * n * w * e, "gates": 5 * e if images else 0,
            "attention mask": images * (n * padded) ** 2 * e}


def _projector(t: VisionTower, tokens: int, passes: int, e: int, s: int) -> Dict[str, int]:
    w = t.width
    if t.projector == "qwen2.5-vl":
        return {"merger": ((FP32 + 4 * e) * w + FP32) * tokens + 2 * INDEX * (tokens // 4)}
    if t.projector == "qwen3-vl":
        return {"merger": (4 * e * w + 2 * s) * tokens,
                "deepstack mergers": t.deepstack * (3 * e * w * tokens + 2 * s * (tokens // 4))}
    if t.projector == "gemma3":
        pooled = tokens // t.merge ** 2
        return {"projector": ((8 + e) * w + FP32) * pooled + (FP32 * w if passes else 0)}
    if t.projector == "internvl":
        merged = passes * (t.positions - 1) // 4
        return {"projector": (8 * e * w + 2 * s + 2 * e * t.out) * merged}
    return {"projector input": tokens * (1 + t.feature_layers) * e * w}


def lm_seq_len(t: VisionTower, text_len: int, x: ImageInputs) -> int:
    """The language model's sequence: the text grown by the images' tokens (placeholders and their markers)."""
    return text_len + (vision_tokens(t, x).text_tokens if t is not None else 0)


def tower_activations(t: VisionTower, x: ImageInputs, micro_batch: int = 1, act_bytes: int = 2,
                      stat_bytes: int = FP32, training: str = "trained", recompute: str = "none") -> Dict[str, int]:
    """Bytes the tower and its projector save for backward over one micro-batch, term by term. Under full
    recompute (gradient_checkpointing_enable checkpoints the tower's blocks too: each is a
    GradientCheckpointingLayer) a block keeps only its input, e w per token; one_block_bytes is what backward
    rebuilds at once."""
    require_choice("vision_training", training, TRAINING)
    if training == "follow":
        raise ValueError("resolve the tower's mode first (model/vision.py tower_mode)")
    v = vision_tokens(t, x)
    e, s = act_bytes, stat_bytes
    if t.projector == "mllama":
        per_image = t.tiles * (t.positions + (-t.positions) % 8)
        local_tokens = global_tokens = x.images * per_image
        unpadded = x.images * t.tiles * t.positions
    else:
        local_tokens = global_tokens = v.tower_tokens
        unpadded = v.tower_tokens
    if recompute == "full":                   # checkpointed blocks keep their input hidden states
        terms = {"tower block inputs (checkpointed)": (t.depth + t.global_depth) * e * t.width * local_tokens}
    else:
        terms = {"tower blocks": t.depth * _block(t, e, s) * local_tokens}
        if t.global_depth:
            terms["global blocks"] = t.global_depth * ((_block(t, e, s) + 2 * e * t.width) * global_tokens + 2 * e)
    terms.update(_tower_ends(t, x, v.passes, v.tower_tokens, e, s))
    if training in ("frozen", "frozen-all"):
        terms = {k: 0 for k in terms}
    projector = _projector(t, unpadded, v.passes, e, s)
    terms.update({k: 0 for k in projector} if training == "frozen-all" else projector)
    return {k: micro_batch * n for k, n in terms.items()}


def cross_attention_bytes(a, text: int, cross: int, e: int = 2) -> tuple:
    """Llama 3.2 Vision's cross-attention decoder layer (transformers 5.24 MllamaCrossAttentionDecoderLayer, SDPA
    with its mask: the memory-efficient kernel; K and V repeated to every query head), per sample of `text` tokens
    attending to `cross` vision tokens: (one layer's saved bytes, what all of them share once). Per text token: two
    RMSNorms in fp32 ((4 + 2e) h + 4 each), q's per-head RMSNorm ((4 + e) a d + 4a), SDPA's q and output (e a d
    each) and logsumexp (4a), the tanh-gated attention and MLP outputs (e h each), the SwiGLU (4 e f); per vision
    token: k's per-head RMSNorm ((4 + e) g d + 4g) and the repeated K and V (2 e a d); two gate scalars. Shared:
    the projected vision states (e h per vision token), the cross-attention mask (e per text x vision token) and
    the text-row mask (e per text token)."""
    h, heads, g, d, f = a.hidden, a.heads, a.n_kv_heads, a.d_head, a.ffn
    per_text = 2 * ((FP32 + 2 * e) * h + FP32) + (FP32 + e) * heads * d + FP32 * heads + 2 * e * heads * d + \
        FP32 * heads + 2 * e * h + 4 * e * f
    per_vision = (FP32 + e) * g * d + FP32 * g + 2 * e * heads * d
    return text * per_text + cross * per_vision + 2 * e, cross * e * h + text * cross * e + text * e


def cross_attention_delta(workload, self_layer: int, e: int, recompute: str) -> int:
    """What the cross-attention layers save beyond the self-attention blocks the decoder's formula counts in their
    place (`self_layer`: one block's bytes per micro-batch): with no image they are skipped (MllamaTextModel);
    under full recompute each keeps its input like the others, and only what they share stays."""
    a, t = workload.arch, workload.arch.vision
    cross = workload.vision_tokens.cross_tokens
    if not cross:
        return -t.cross_layers * self_layer if recompute != "full" else 0
    layer, shared = cross_attention_bytes(a, workload.seq_len, cross, e)
    if recompute == "full":
        return workload.micro_batch * shared
    return t.cross_layers * (workload.micro_batch * layer - self_layer) + workload.micro_batch * shared


def one_block_bytes(t: VisionTower, x: ImageInputs, micro_batch: int = 1, act_bytes: int = 2,
                    stat_bytes: int = FP32) -> int:
    """One tower block's saved bytes over a micro-batch: what full recompute rebuilds at once in the tower's
    backward (a global block of Llama 3.2 Vision, the larger, where it has them)."""
    tokens = x.images * t.tiles * (t.positions + (-t.positions) % 8) if t.projector == "mllama" else \
        vision_tokens(t, x).tower_tokens
    extra = 2 * act_bytes * t.width if t.global_depth else 0
    return micro_batch * (_block(t, act_bytes, stat_bytes) + extra) * tokens
