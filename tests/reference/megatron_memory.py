"""Megatron-LM's theoretical training-memory estimate, restated for tests.

This module restates, in independent code, the estimate that Megatron-LM
prints at start-up ("Theoretical memory footprints: weight and optimizer=...,
activation=...").  It is a *test reference*: zerocalc's own model is free to
differ from it, and tests use it to check where and by how much.

Source read (not copied):

    repository  NVIDIA/Megatron-LM
    commit      d98e8a64ddf34856e74b24714e3bedb2f5a39553  (2026-08-22, main)
    file        megatron/training/theoretical_memory_usage.py
    functions   compute_weight_and_optimizer_memory(args, verbose=False)
                compute_activation_memory(args, num_microbatches, verbose=False)
                compute_activation_memory_without_sp(args, num_microbatches, verbose=False)
                report_theoretical_memory(args, num_microbatches=None, verbose=False)

    vocabulary padding:
                megatron/training/vocab_utils.py::_calculate_padded_vocab_size_cached
                (same arithmetic as the older
                megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding,
                removed in commit 32570939300c, and the current
                megatron/core/tokenizers/utils/build_tokenizer.py::vocab_size_with_padding)

Every function takes explicit keyword arguments instead of Megatron's ``args``
namespace and returns bytes as a float, evaluated with the same floating-point
operations in the same order, so results agree with Megatron's bit for bit
(checked on a grid of argument combinations against the file itself).

What Megatron's estimate assumes, in short:

* bf16 weights (2 B), fp32 main grads (4 B), fp32 master weights + Adam
  moments (12 B): 18 B/param, or 6 + 12/dp B/param with the distributed
  optimizer, where dp is ``args.data_parallel_size`` = world/(tp*pp*cp*...),
  i.e. *without* the context-parallel factor.
* The "most loaded" pipeline stage is the first: 1/pp of the layers plus one
  embedding matrix (plus the output matrix too when untied and pp == 1).
  Since commit a7c9e8c44ae8 (2026-05-14) layer norms, routers and latent
  projections are counted as replicated across TP (not divided by tp); before
  it, everything on the shard was divided by tp.
* Activations: Table 2 of Korthikanti et al. 2022 (arXiv 2205.05198),
  selective recompute + sequence parallel, 34 -> 18 + 4f/h bytes per token per
  hidden unit per layer, counted on the first pipeline stage.
* The non-SP variant (10 + 24/tp per layer, 5 % overhead) is what
  ``report_theoretical_memory`` uses unless sequence_parallel is on *and*
  recompute granularity is 'selective'.

Not restated: multi-latent attention (MLA) parameter counts and hybrid
(Mamba) models, for which Megatron prints that no estimate is available.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

MEGATRON_REPO = "NVIDIA/Megatron-LM"
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_PATH = "megatron/training/theoretical_memory_usage.py"

MIB = 1024 * 1024  # Megatron's NUM_BYTES_IN_MEGABYTE


# ---------------------------------------------------------------------------
# Vocabulary padding
# ---------------------------------------------------------------------------

def padded_vocab_size(orig_vocab: int, make_vocab_size_divisible_by: int = 128,
                      tp: int = 1) -> int:
    """Round ``orig_vocab`` up to a multiple of ``make_vocab_size_divisible_by * tp``.

    Megatron pads the tokenizer's vocabulary so that every tensor-parallel
    rank holds an equal, GPU-friendly slice; the padded size is what both the
    word embedding and the output layer are built with.  The default of 128
    is ``--make-vocab-size-divisible-by``'s default in arguments.py.
    """
    step = make_vocab_size_divisible_by * tp
    # Megatron: int(math.ceil(vocab / multiple) * multiple) -- float division.
    return int(math.ceil(orig_vocab / step) * step)


# ---------------------------------------------------------------------------
# Weights + gradients + optimizer state
# ---------------------------------------------------------------------------

def _moe_layer_flags(num_layers: int, num_experts: Optional[int],
                     moe_layer_freq: Union[int, Sequence[int]]) -> list:
    """1 for a layer whose MLP is a mixture of experts, else 0."""
    if num_experts is None:
        return [0] * num_layers
    if isinstance(moe_layer_freq, int):
        # Every moe_layer_freq-th layer, starting with layer 0, is MoE.
        return [int(i % moe_layer_freq == 0) for i in range(num_layers)]
    flags = list(moe_layer_freq)
    if len(flags) != num_layers:
        raise ValueError(f"moe_layer_freq has {len(flags)} entries, need {num_layers}")
    return flags


def _bytes_per_param(use_distributed_optimizer: bool, shards: int) -> float:
    # 2 (bf16 weight) + 4 (fp32 grad) + 12 (fp32 master + 2 Adam moments);
    # the distributed optimizer splits the 12 over `shards` ranks.
    if use_distributed_optimizer:
        return 6 + (12 / shards)
    return 18


def compute_weight_and_optimizer_memory(
    *,
    hidden_size: int,
    num_layers: int,
    ffn_hidden_size: int,
    num_attention_heads: int,
    padded_vocab_size: int,
    num_query_groups: Optional[int] = None,
    kv_channels: Optional[int] = None,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    use_distributed_optimizer: bool = False,
    untie_embeddings: bool = False,
    swiglu: bool = False,
    normalization: str = "LayerNorm",
    # MoE / MTP (Megatron defaults: dense model, no MTP)
    num_experts: Optional[int] = None,
    moe_ffn_hidden_size: Optional[int] = None,
    moe_router_topk: int = 2,
    moe_layer_freq: Union[int, Sequence[int]] = 1,
    moe_shared_expert_intermediate_size: Optional[int] = None,
    moe_shared_expert_gate: bool = False,
    moe_latent_size: Optional[int] = None,
    add_bias_linear: bool = True,
    ep: int = 1,
    etp: Optional[int] = None,
    world_size: Optional[int] = None,
    cp: int = 1,
    mtp_num_layers: Optional[int] = None,
) -> float:
    """Bytes of weights, grads and optimizer state on the most loaded rank.

    Restates ``compute_weight_and_optimizer_memory``.  Argument mapping to
    Megatron's ``args``: num_query_groups=None means no GQA
    (``group_query_attention`` False, groups = heads); kv_channels=None means
    hidden_size // num_attention_heads (arguments.py default); etp=None means
    tp (arguments.py default); world_size=None means dp*tp*pp*cp.
    ``dp`` is Megatron's ``args.data_parallel_size`` (world/(tp*pp*cp)).
    The expert data-parallel size is world_size // (etp * ep * pp).
    ``moe_router_topk`` only affects Megatron's verbose "active parameters"
    print, not the returned bytes; it is accepted for completeness.
    """
    if kv_channels is None:
        kv_channels = hidden_size // num_attention_heads
    groups = num_attention_heads if num_query_groups is None else num_query_groups
    if etp is None:
        etp = tp
    if world_size is None:
        world_size = dp * tp * pp * cp

    h = hidden_size
    glu = 3 / 2 if swiglu else 1  # SwiGLU's up-projection is twice as wide
    norm = 1 if normalization == "RMSNorm" else 2  # RMSNorm has no bias
    n_routed = 1 if num_experts is None else num_experts
    shared_ffn = moe_shared_expert_intermediate_size or 0

    flags = _moe_layer_flags(num_layers, num_experts, moe_layer_freq)
    n_moe = sum(flags)
    n_dense = num_layers - n_moe
    expert_ffn = moe_ffn_hidden_size if num_experts is not None else 0
    if mtp_num_layers is not None:
        last_is_moe = flags[-1]
        mtp_moe = last_is_moe * mtp_num_layers
        mtp_dense = (1 - last_is_moe) * mtp_num_layers
    else:
        mtp_moe = mtp_dense = 0

    # -- per-layer parameter counts ----------------------------------------
    # Q and O are (heads*kv_channels) x h each; K and V shrink by groups/heads.
    q_over_h = kv_channels * num_attention_heads / h
    attn = 2 * h * h * ((1 + (groups / num_attention_heads)) * q_over_h)
    dense_mlp = 2 * h * ffn_hidden_size * glu
    shared_mlp = 2 * h * shared_ffn * glu
    expert_width = moe_latent_size if moe_latent_size is not None else h
    routed_mlp = 2 * expert_width * expert_ffn * n_routed * glu
    latent_proj = (2 * h * moe_latent_size
                   if num_experts is not None and moe_latent_size is not None else 0)
    norms = 2 * h * norm  # pre-attention and pre-MLP norm
    router = ((h * n_routed) + (n_routed if add_bias_linear else 0)
              if num_experts is not None else 0)
    shared_gate = h if shared_ffn > 0 and moe_shared_expert_gate else 0
    final_norm = norm * h
    embedding = h * padded_vocab_size

    # -- how each kind of parameter is laid out across ranks ---------------
    # Split by tp: attention and dense / shared-expert MLP matrices.
    tp_split_block = ((attn + dense_mlp) * n_dense
                      + (attn + shared_mlp) * n_moe)
    tp_split_mtp = ((attn + dense_mlp) * mtp_dense
                    + (attn + shared_mlp) * mtp_moe)
    # Same on every tp rank: norms, routers, latent projections.
    moe_extra = norms + latent_proj + router + shared_gate
    replicated_block = norms * n_dense + moe_extra * n_moe + final_norm
    replicated_mtp = norms * mtp_dense + moe_extra * mtp_moe
    # Split by etp*ep: routed experts.
    expert_block = routed_mlp * n_moe
    expert_mtp = routed_mlp * mtp_moe

    # -- the first pipeline stage: 1/pp of the block, the MTP block and
    #    one embedding matrix (Megatron's "most loaded shard") -------------
    on_rank_tp = ((tp_split_block / pp) + tp_split_mtp + embedding) / tp
    on_rank_replicated = (replicated_block / pp) + replicated_mtp
    on_rank_expert = ((expert_block / pp) + expert_mtp) / (etp * ep)
    if untie_embeddings and pp == 1:
        # the separate output matrix lives on the same (only) stage
        on_rank_tp += embedding / tp

    expert_dp = world_size // (etp * ep * pp)
    return ((on_rank_tp + on_rank_replicated)
            * _bytes_per_param(use_distributed_optimizer, dp)
            + on_rank_expert * _bytes_per_param(use_distributed_optimizer, expert_dp))


# ---------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------

def interleaved_penalty(pp: int, vpp: int) -> float:
    """Extra activation memory of the interleaved 1F1B schedule: 1 + (pp-1)/(pp*vpp)."""
    return 1 + ((pp - 1) / (pp * vpp))


def _pipeline_scale(total: float, *, pp: int, vpp: Optional[int],
                    num_microbatches: Optional[int]) -> float:
    """Apply Megatron's pipeline-schedule factor to the first-stage total."""
    if vpp is not None:
        return total * interleaved_penalty(pp, vpp)
    if pp > 1 and num_microbatches is not None:
        # fewer micro-batches than stages: fewer are ever in flight
        return total * min(1, num_microbatches / pp)
    return total


def _embedding_activations(s: int, b: int, h: int, pp: int) -> tuple:
    """Token ids (8 B each, int64) and the embedding-dropout output
    (1 B per element), for pp micro-batches in flight.  Added to the layer
    total *before* the pipeline factor, as Megatron does."""
    return 8 * s * b * pp, s * b * h * pp


def compute_activation_memory(
    *,
    seq_length: int,
    micro_batch_size: int,
    hidden_size: int,
    ffn_hidden_size: int,
    num_layers: int,
    padded_vocab_size: int,
    tp: int = 1,
    pp: int = 1,
    vpp: Optional[int] = None,
    num_microbatches: Optional[int] = None,
) -> float:
    """Activation bytes on the first pipeline stage, sequence parallel + selective recompute.

    Restates ``compute_activation_memory``: per layer s*b*h*(18 + 4f/h)
    (attention scores are recomputed, so no a*s^2 term), times *all*
    num_layers (not num_layers/pp: the first stage holds pp micro-batches of
    its num_layers/pp layers); plus the embedding terms; times the interleaved
    penalty, or min(1, m/pp) without interleaving; plus, only when pp == 1,
    the output layer and loss, 4*s*b*h*(1 + V/h); everything divided by tp.
    Note Megatron ignores context parallelism, GQA and kv_channels here.
    """
    s, b, h = seq_length, micro_batch_size, hidden_size
    per_layer = (s * b * h) * (18 + (4 * (ffn_hidden_size / h)))
    total = per_layer * num_layers
    ids, dropout = _embedding_activations(s, b, h, pp)
    total += ids
    total += dropout
    total = _pipeline_scale(total, pp=pp, vpp=vpp, num_microbatches=num_microbatches)
    if pp == 1:
        total += s * b * h * 4 * (1 + (padded_vocab_size / h))
    return total / tp


def compute_activation_memory_without_sp(
    *,
    seq_length: int,
    micro_batch_size: int,
    hidden_size: int,
    num_layers: int,
    padded_vocab_size: int,
    tp: int = 1,
    pp: int = 1,
    vpp: Optional[int] = None,
    num_microbatches: Optional[int] = None,
    ffn_hidden_size: Optional[int] = None,
) -> float:
    """Activation bytes without sequence parallelism (Megatron's fallback).

    Restates ``compute_activation_memory_without_sp``: per layer
    s*b*h*(10 + 24/tp) (ffn_hidden_size is ignored: accepted only so both
    activation functions can take the same keywords), times num_layers, plus
    the same embedding terms and pipeline factor as the SP formula, plus
    (pp == 1 only) 2*(s*b*V/tp + s*b*h) for logits and final-norm output,
    then times 1.05.  No final division by tp.
    """
    s, b, h = seq_length, micro_batch_size, hidden_size
    total = (s * b * h * (10 + (24 / tp))) * num_layers
    ids, dropout = _embedding_activations(s, b, h, pp)
    total += ids
    total += dropout
    total = _pipeline_scale(total, pp=pp, vpp=vpp, num_microbatches=num_microbatches)
    if pp == 1:
        logits = s * b * padded_vocab_size
        logits /= tp
        total += (logits + s * b * h) * 2
    return total * 1.05


def report_theoretical_memory(
    *,
    sequence_parallel: bool,
    recompute_granularity: Optional[str],
    num_microbatches: Optional[int] = None,
    **kwargs,
) -> tuple:
    """(weights+optimizer, activations, total) in bytes, choosing the
    activation formula as ``report_theoretical_memory`` does: the SP formula
    only when sequence_parallel and recompute_granularity == 'selective'.

    ``kwargs`` are the union of the keyword arguments of
    :func:`compute_weight_and_optimizer_memory` and the activation functions.
    (Megatron prints MB = bytes / 2**20; this returns bytes.)
    """
    act_keys = ("seq_length", "micro_batch_size", "hidden_size", "ffn_hidden_size",
                "num_layers", "padded_vocab_size", "tp", "pp", "vpp")
    act_kwargs = {k: kwargs[k] for k in act_keys if k in kwargs}
    weight_kwargs = {k: v for k, v in kwargs.items()
                     if k not in ("seq_length", "micro_batch_size", "vpp")}
    weights = compute_weight_and_optimizer_memory(**weight_kwargs)
    if sequence_parallel and recompute_granularity == "selective":
        acts = compute_activation_memory(num_microbatches=num_microbatches, **act_kwargs)
    else:
        acts = compute_activation_memory_without_sp(num_microbatches=num_microbatches, **act_kwargs)
    return weights, acts, weights + acts
