"""One rank's step, independent of the ZeRO stage: what one micro-batch saves on its layers and ends, how many
micro-batches are in flight at its peak (the pipeline schedule), the logits it computes, the largest module ZeRO-3
gathers, and its parameters by ZeRO group. Computed once per rank class, scenario and workload; every stage's peak
(step/peak.py) reads it.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from ..layout import in_flight_chunks
from ..model.placement import Blocks
from ..states.groups import ParamGroup, quant_of
from ..tables import DTYPE_BITS
from .activations import ActivationReport, activations
from .block_checkpoint import checkpointed_counts
from .buffers import FsdpUnits, fsdp_units, shards_quant_state
from .losses import loss_row
from .nccl import nccl_bytes
from .offload import offloaded_inputs
from .trainable import training_for
from ..model.vision import resolved
from .vision_activations import cross_attention_delta, one_block_bytes, tower_activations


class StepShape(NamedTuple):
    """One rank's step, independent of the ZeRO stage: computed once per rank class, scenario and workload."""
    act: ActivationReport        # saved for backward by one micro-batch on this rank (its layers, its ends)
    act_bits: int
    compute_bits: int
    largest_layer_params: int    # the largest module's local parameters (what ZeRO-3 gathers at once)
    persistent_params: int       # local parameters under the persistence threshold (ZeRO-3 keeps them whole)
    params: int                  # parameter elements this rank holds before ZeRO (its TP/PP/EP shard)
    groups: Tuple[ParamGroup, ...]   # those parameters by ZeRO group
    activation_bytes: int        # saved activations at the rank's peak: every in-flight micro-batch
    in_flight: Tuple[int, int, int]   # chunk-micro-batches alive at that peak, of which first / last chunk
    logits_elements: int         # tokens x vocabulary columns of the logits (0 off the last pipeline stage)
    dequantized: int = 0         # QLoRA: bytes of the largest 4-bit weight dequantized while it runs
    fsdp: Optional[FsdpUnits] = None   # the rank's FSDP units (buffers.fsdp_units): the fsdp buffer rule reads them
    offloaded: int = 0           # activation offloading: checkpoint inputs moved to host memory (not in activation_bytes)
    host_bytes: int = 0          # the pinned host memory they take (offload.py)
    nccl: int = 0                # NCCL's buffers of the plan's communicators, outside the allocator (nccl.py)


def activation_args(scenario, workload) -> tuple:
    """activations.activations()'s arguments for one rank of the workload (every rank runs the same block)."""
    layout, ft = workload.layout, workload.finetune
    bits = DTYPE_BITS[workload.activation_dtype or scenario.comm_dtype or scenario.param_dtype]
    narrow = bits < 32
    if ft.quantized and ft.kbit_prepare and not workload.activation_dtype:
        bits = 32                 # prepare_model_for_kbit_training's fp32 norms and embedding: an fp32 stream
    # fp32 embeddings, head and norms beside 16-bit compute (autocast): an fp32 residual stream (fp32_stream.py):
    # axolotl's fp32 copies, or k-bit preparation's upcast (its 4-bit linears return the fp32 input's dtype, so
    # every activation counts at 32 bits above and only the head's 16-bit weight copy is added)
    wide = ft.fp32_parts == "embed-head-norms" or ft.quantized and ft.kbit_prepare and bits == 32
    stream = 32 if narrow and wide else 0
    norms = narrow and ft.fp32_parts == "norms"     # fp32 norms alone: each linear casts their outputs
    training = training_for(ft, workload.arch, workload.recompute, scenario.param_dtype, DTYPE_BITS)
    row = loss_row(workload)
    saved = (bits if row.saved == "w" else row.saved, row.saved_name)
    return (workload.arch, workload.micro_batch, workload.seq_len, bits, workload.attention, workload.recompute,
            workload.implementation, layout.tp, layout.cp, layout.sequence_parallel, workload.vocab_columns,
            workload.routing, training, workload.recompute_every, saved, workload.compile, workload.op_policy,
            workload.recompute_modules, workload.recompute_method, workload.recompute_num_layers, stream, norms,
            workload.repeat_kv)


def rank_shape(scenario, workload, rank) -> StepShape:
    """The step shape of one rank class (placement.RankClass) of the workload's layout."""
    layout, a = workload.layout, workload.arch
    compute = scenario.comm_dtype or scenario.param_dtype
    args = activation_args(scenario, workload)
    bits, vocab_cols = args[3], workload.vocab_columns
    act = activations(*args)
    frozen = act.frozen_blocks
    counts = [_live_blocks(a, span, frozen) for span in rank.spans] if frozen else list(rank.chunks)
    if act.checkpointed:                       # some blocks checkpointed: which ones, chunk by chunk
        counts, rebuilt = checkpointed_counts(a, rank.spans, frozen, workload, act.full_blocks)
        if workload.recompute_method == "block" or workload.recompute_num_layers > 1:
            act = act._replace(recompute_working=rebuilt)     # Megatron's largest group on this rank
    holds_first = any(frozen in span for span in rank.spans) and act.frozen_blocks < a.layers
    act = act._replace(layers=sum(c.dense for c in counts), moe_layers=sum(c.moe for c in counts),
                       sliding_layers=sum(c.sliding for c in counts), embed=act.embed if rank.first else {},
                       head=act.head if rank.last else {},
                       first_block_delta=act.first_block_delta if holds_first else 0)
    if act.checkpointed:
        ckpt = sum(c.checkpointed for c in counts)
        act = act._replace(checkpointed_layers=ckpt, recompute_working=act.recompute_working if ckpt else 0)
    if a.vision is not None and rank.first:    # the vision tower runs before the first block (vision_activations)
        act = _with_tower(act, workload, bits)
    if act.mtp_rebuilt and rank.last:          # the checkpointed MTP module is rebuilt on the last stage
        act = act._replace(recompute_working=max(act.recompute_working, act.mtp_rebuilt))
    embed, head = sum(act.embed.values()) + act.first_block_delta, sum(act.head.values())
    # What one micro-batch saves on each local chunk: its own blocks (uneven stages, dense and MoE blocks mixed,
    # frozen or checkpointed ones differ chunk by chunk) and what a chunk with blocks saves once (a stage holding
    # only the embedding or the head saves no rotary tables: measured, tests/test_uneven_stages_validation.py).
    per_stage = sum(act.stage.values())
    weights = tuple(act.blocks(*c) + (per_stage if c.dense + c.moe + getattr(c, "checkpointed", 0) else 0)
                    for c in counts)
    if layout.pp == 1:
        per_chunk, first, last = (1,) * len(weights), 1, 1
    else:
        per_chunk, first, last = in_flight_chunks(layout.schedule, layout.pp, layout.vpp, layout.micro_batches,
                                                  rank.pp_ranks[0], embed, head,
                                                  weights[0] if len(set(weights)) == 1 else weights)
    alive = (sum(per_chunk), first, last)
    activation = sum(a * w for a, w in zip(per_chunk, weights)) + first * embed + last * head
    in_flight_blocks = sum(a * (c.dense + c.moe + getattr(c, "checkpointed", 0)) for a, c in zip(per_chunk, counts))
    offloaded, host = offloaded_inputs(workload, act, in_flight_blocks)
    activation -= offloaded
    tokens = workload.micro_batch * (workload.seq_len // layout.cp)
    groups = param_groups(scenario, workload, rank)
    return StepShape(act, bits, DTYPE_BITS[compute], rank.largest_module()[1],
                     rank.persistent_params(workload.param_persistence_threshold), rank.params,
                     groups, activation, alive,
                     tokens * vocab_cols if rank.last else 0, dequantized_weight(workload, rank),
                     fsdp_units(rank, groups, DTYPE_BITS[compute], workload.float8_all_gather, workload.fsdp_version,
                                workload.fsdp_use_orig_params,
                                DTYPE_BITS[workload.reduce_dtype] if workload.reduce_dtype else None), offloaded, host,
                     nccl_bytes(scenario, workload))


def _with_tower(act: ActivationReport, workload, bits: int) -> ActivationReport:
    """The tower's saved activations join the first stage's ends, per micro-batch; under full recompute its
    checkpointed blocks keep their inputs and backward rebuilds one block at a time (the larger of it and the
    decoder's block is the rebuilt working set)."""
    t, x, e = resolved(workload.arch.vision, workload.finetune), workload.images, bits // 8
    recompute = "full" if workload.recompute == "full" else "none"
    terms = tower_activations(t, x, workload.micro_batch, e, training=t.training, recompute=recompute)
    if t.cross_layers:       # Llama 3.2 Vision: its cross-attention layers, in place of self-attention blocks
        terms["cross-attention layers (beyond self-attention ones)"] = cross_attention_delta(
            workload, sum(act.per_layer.values()), e, recompute)
    act = act._replace(embed={**act.embed, **{f"vision: {k}": v for k, v in terms.items() if v}})
    if recompute == "full" and t.training not in ("frozen", "frozen-all"):
        act = act._replace(recompute_working=max(act.recompute_working,
                                                 one_block_bytes(t, x, workload.micro_batch, e)))
    return act


def param_groups(scenario, workload, rank) -> Tuple[ParamGroup, ...]:
    """The rank's parameters by ZeRO group. Dense tensors shard over dp x cp (the shard group x cp with hybrid
    sharding); experts over the expert-data-parallel group (Megatron-Core parallel folding: dp x tp x cp /
    (ep x etp)), cut in the same proportion under hybrid sharding."""
    layout = workload.layout
    dense = scenario.group * layout.cp
    expert = max(1, layout.expert_data_parallel(scenario.workers) * scenario.group // scenario.workers)
    extra = _replicated_embedding_grad(workload, rank)
    members = rank.group_holdings()
    kept = not shards_quant_state(scenario, workload)    # bitsandbytes' state: whole, and on the GPU, where kept
    out = []
    for name, n in rank.group_params().items():
        shard = expert if name.startswith("experts") else dense
        quantized = bool(quant_of(name))
        state = (1 if kept else shard) if quantized else 0
        out.append(ParamGroup(name, n, n + (extra if name == "" else 0), shard, members[name], state,
                              quantized and kept))
    return tuple(out)


def _live_blocks(a, span: range, frozen: int) -> Blocks:
    """The blocks of a chunk that a gradient reaches (index >= frozen)."""
    live = [i for i in span if i >= frozen]
    moe = sum(1 for i in live if a.is_moe_layer(i))
    return Blocks(len(live) - moe, moe, sum(1 for i in live if a.is_sliding_layer(i)))


def trainable_params(shape: StepShape) -> int:
    return sum(g.params for g in shape.groups if not g.name.endswith("frozen"))


def _replicated_embedding_grad(workload, rank) -> int:
    """DTensor has no row-sharded strategy for embedding_dense_backward: under a RowwiseParallel (vocab-parallel)
    embedding every tensor-parallel rank gets the whole V x h gradient (measured: tests/measure/tensor_parallel.py),
    while Megatron's VocabParallelEmbedding keeps the gradient of its own rows."""
    if workload.implementation != "huggingface" or workload.layout.tp == 1:
        return 0
    return sum(workload.vocab_rows * h.tensor.shape[1] - h.local_elements for h in rank.holdings
               if h.tensor.role == "embedding")


def dequantized_weight(workload, rank) -> int:
    """QLoRA: the largest 4-bit linear dequantized in the compute dtype while it runs, in forward and again in
    backward (bitsandbytes MatMul4Bit), with double quantization its fp32 absmax twice (measured on the CPU:
    tests/measure/quantized_storage.py dequant_transients). 8-bit bases run int8 kernels: no full copy."""
    ft = workload.finetune
    if ft.quantized not in ("nf4", "fp4"):
        return 0
    # per-expert linears (transformers < 5: model/finetune.py linear_experts) dequantize one expert at a time
    local_experts = lambda t: max(1, t.shape[0] // workload.layout.ep) if len(t.shape) == 3 else 1   # noqa: E731
    sizes = [h.local_elements // local_experts(h.tensor) for h in rank.holdings if h.tensor.storage == ft.quant_type]
    if not sizes:
        return 0
    n = max(sizes)
    blocks = -(-n // ft.quant_block_size)
    return 2 * n + (2 * 4 * blocks if ft.double_quant else 0)
