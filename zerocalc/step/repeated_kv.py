"""K and V repeated to every query head before a fused attention kernel, which saves the copies for backward.

A grouped-query model's SDPA / flash attention can take K and V grouped (n_kv_heads): Hugging Face's SDPA path
passes them so without a mask (transformers >= 4.54), and saves q, k, v at their own widths (activations._qkv).
These paths pass copies repeated to the n_heads query heads instead, 2 x (q_size - kv_size) more per token than
the grouped pair:
- Hugging Face's local-attention layers once the sequence outgrows the window: the explicit mask rules out
  grouped-query SDPA, so repeat_kv runs first (measured on Gemma 3, tests/test_moe_validation.py): sliding_layers;
- in every block (the plan's repeat_kv, every_block):
  - torchtune's MultiHeadAttention expands K and V to the query heads and flattens them (a copy) before SDPA or
    flex attention whenever num_kv_heads < num_heads (torchtune/modules/attention.py at b19719f9 and bd2a0fc7;
    torchtune 0.6.1);
  - LitGPT's CausalSelfAttention in training (repeat_interleave; an expand and reshape before 2024-12);
  - Hugging Face's SDPA under a padding mask (a padded batch of two or more), and before transformers 4.54 always
    (integrations/sdpa_attention.py use_gqa_in_sdpa; versions.py);
  - torchtitan's Llama until pytorch/torchtitan#2259 (2026-01-27: "GQA without kv repeats", enable_gqa).
  Measured on the CPU, eager and under torch.compile (Inductor saves the same copies), against torchtune 0.6.1,
  litgpt 0.5.13 and transformers 5.24 with a padding mask: tests/test_repeated_kv.py.
Eager attention repeats them in every implementation anyway (_qkv's `repeated`), so none adds to it.
"""

from __future__ import annotations

from typing import Dict

TERM = "repeated k, v (the attention's own copies)"
SLIDING_TERM = "repeated k, v (local attention mask)"
SAVES_QKV = "q, k, v"          # the block term a repeat joins: only blocks whose attention saves its inputs


def repeat_bits(a, t, w: int, attention: str) -> int:
    """Bits of the repeated pair beyond the grouped one, 0 where the kernel saves no grouped pair to widen."""
    if attention != "flash" or a.mla or a.n_kv_heads >= a.heads:
        return 0
    return 2 * w * t.inside * (a.q_size - a.kv_size)


def every_block(a, t, w: int, attention: str, repeat_kv: bool) -> Dict[str, int]:
    """The term torchtune's attention adds to each block that saves q, k, v (`repeat_kv`: the workload's)."""
    bits = repeat_bits(a, t, w, attention) if repeat_kv else 0
    return {TERM: bits} if bits else {}


def joined(terms: Dict[str, int], extra: Dict[str, int]) -> Dict[str, int]:
    """A block's terms with the repeat, where the block's attention saves its q, k and v."""
    return {**terms, **extra} if extra and SAVES_QKV in terms else terms


def sliding_layers(a, t, w: int, attention: str, hf: bool, seq_len: int) -> Dict[str, int]:
    """Hugging Face's local-attention layers beyond their window (the first path above)."""
    if not (hf and a.sliding_window and seq_len > a.sliding_window):
        return {}
    bits = repeat_bits(a, t, w, attention)
    return {SLIDING_TERM: bits} if bits else {}
