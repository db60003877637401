"""The peak working set per ZeRO stage: what is live in each phase of a step, the largest, and the fit.

Each phase's live set is a dict of named components (bytes per worker, on the GPU):
- forward (at the loss, the end of forward): model states on the GPU, every saved activation, the logits in the
  activation dtype plus their fp32 upcast for the loss (HF ForCausalLMLoss: logits.float()), ZeRO-3's gathered
  parameters;
- backward (its start, when every activation is still saved): model states, activations, the logits (the model
  output keeps them), the fp32 gradient of the loss input and its cast back, the gathered layer and its gradient
  (ZeRO-3), gradient reduce buckets (x2 with overlap_comm), and under full recompute one block rebuilt;
- optimizer step: model states, an fp32 copy of the gradient partition when gradients are kept narrower than the
  master weights (DeepSpeed's memory docs: "all of them are converted into fp32 before doing the weight
  updates"), the all-gather bucket for updated parameters (stages 1-2), ZeRO-3's persistent parameters.
Every phase adds the CUDA context and the allocator's fragmentation reserve (Workload assumptions).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

from .activations import ActivationReport, activations, split_checkpointed
from .layout import in_flight
from .placement import Blocks
from .training_activations import training_for
from .model_states import StageResult
from .tables import DTYPE_BITS

PHASES = ("forward", "backward", "optimizer_step")


class StagePeak(NamedTuple):
    stage: int
    phases: Dict[str, Dict[str, int]]     # phase -> component -> bytes
    capacity_bytes: int
    phase_totals: Dict[str, int]          # phase -> bytes (the sum of its components)

    @property
    def peak_phase(self) -> str:
        totals = self.phase_totals
        return max(PHASES, key=lambda p: totals[p])

    @property
    def peak_bytes(self) -> int:
        return max(self.phase_totals.values())

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes


def _b(elements: int, bits: int) -> int:
    return -(-elements * bits // 8)


def allocator_reserve(tensors: int, percent: int) -> int:
    """The caching allocator's reserve over a phase's live tensors: percent of them, rounded up."""
    return -(-tensors * percent // 100)


def with_overheads(tensors: int, context: int, percent: int) -> int:
    """A phase's total: its live tensors, the allocator's reserve over them and the CUDA context. Strictly
    increasing in the tensors, so the phase (and the rank) with the most tensors is the peak at every context and
    percent (zerocalc.ranges moves those two along their range without recomputing the step)."""
    return tensors + allocator_reserve(tensors, percent) + context


def tensor_bytes(peak: "StagePeak") -> int:
    """The live tensors at a stage's peak phase: the peak without the allocator's reserve and the CUDA context."""
    parts = peak.phases[peak.peak_phase]
    return peak.peak_bytes - parts["allocator reserve"] - parts["CUDA context"]


class ParamGroup(NamedTuple):
    """Parameters one rank holds that ZeRO shards over the same group, in the same dtype, trained alike."""
    name: str            # "" (dense, trainable), "experts", "fp32" (a router kept in fp32), "nf4, frozen", ...
    params: int          # elements before ZeRO
    grad_params: int     # elements of their gradients (more than params where DTensor keeps a gradient whole)
    shard: int           # the ZeRO / FSDP divisor: dp x cp for dense tensors, the expert-data-parallel size for experts
    holdings: tuple = () # the tensors (placement.Holding): a quantized group's storage is laid out per tensor


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


def activation_args(scenario, workload) -> tuple:
    """activations.activations()'s arguments for one rank of the workload (every rank runs the same block)."""
    layout, ft = workload.layout, workload.finetune
    bits = DTYPE_BITS[workload.activation_dtype or scenario.comm_dtype or scenario.param_dtype]
    if ft.quantized and ft.kbit_prepare and not workload.activation_dtype:
        bits = 32                 # prepare_model_for_kbit_training's fp32 norms and embedding: an fp32 stream
    training = training_for(ft, workload.arch, workload.recompute, scenario.param_dtype, DTYPE_BITS)
    return (workload.arch, workload.micro_batch, workload.seq_len, bits, workload.attention, workload.recompute,
            workload.implementation, layout.tp, layout.cp, layout.sequence_parallel, workload.vocab_columns,
            workload.routing, training, workload.recompute_every)


def rank_shape(scenario, workload, rank) -> StepShape:
    """The step shape of one rank class (placement.RankClass) of the workload's layout."""
    layout, a = workload.layout, workload.arch
    compute = scenario.comm_dtype or scenario.param_dtype
    args = activation_args(scenario, workload)
    bits, vocab_cols = args[3], workload.vocab_columns
    act = activations(*args)
    frozen = act.frozen_blocks
    counts = [_live_blocks(a, span, frozen) for span in rank.spans] if frozen else list(rank.chunks)
    if act.checkpointed:                       # one block in N checkpointed: which ones, chunk by chunk
        counts = _checkpointed_counts(a, rank.spans, frozen, workload.recompute_every)
    holds_first = any(frozen in span for span in rank.spans) and act.frozen_blocks < a.layers
    act = act._replace(layers=sum(c.dense for c in counts), moe_layers=sum(c.moe for c in counts),
                       sliding_layers=sum(c.sliding for c in counts), embed=act.embed if rank.first else {},
                       head=act.head if rank.last else {},
                       first_block_delta=act.first_block_delta if holds_first else 0)
    if act.checkpointed:
        ckpt = sum(c.checkpointed for c in counts)
        act = act._replace(checkpointed_layers=ckpt, recompute_working=act.recompute_working if ckpt else 0)
    embed, head = sum(act.embed.values()) + act.first_block_delta, sum(act.head.values())
    chunk = max(act.blocks(*c) for c in counts) + sum(act.stage.values())
    pp_m = (layout.micro_batches if layout.pp > 1 else 1)
    if layout.pp == 1:
        alive = (1, 1, 1)
    else:
        alive = in_flight(layout.schedule, layout.pp, layout.vpp, pp_m, rank.pp_ranks[0], embed, head, chunk)
    # Interleaved chunks hold equal layer counts; with dense and MoE blocks mixed, the largest chunk stands for all.
    activation = alive[0] * chunk + alive[1] * embed + alive[2] * head
    tokens = workload.micro_batch * (workload.seq_len // layout.cp)
    return StepShape(act, bits, DTYPE_BITS[compute], rank.largest_module()[1],
                     rank.persistent_params(workload.param_persistence_threshold), rank.params,
                     param_groups(scenario, workload, rank), activation, alive,
                     tokens * vocab_cols if rank.last else 0, dequantized_weight(workload, rank))


def param_groups(scenario, workload, rank) -> Tuple[ParamGroup, ...]:
    """The rank's parameters by ZeRO group. Dense tensors shard over dp x cp (the shard group x cp with hybrid
    sharding); experts over the expert-data-parallel group (Megatron-Core parallel folding: dp x tp x cp /
    (ep x etp)), cut in the same proportion under hybrid sharding."""
    layout = workload.layout
    dense = scenario.group * layout.cp
    expert = max(1, layout.expert_data_parallel(scenario.workers) * scenario.group // scenario.workers)
    extra = _replicated_embedding_grad(workload, rank)
    members = rank.group_holdings()
    return tuple(ParamGroup(name, n, n + (extra if name == "" else 0),
                            expert if name.startswith("experts") else dense, members[name])
                 for name, n in rank.group_params().items())


class CheckpointedBlocks(NamedTuple):
    """A chunk's blocks under one-in-N recompute: kept whole by kind, and checkpointed."""
    dense: int
    moe: int
    sliding: int
    checkpointed: int


def _checkpointed_counts(a, spans, frozen: int, every: int) -> list:
    """Per chunk: (kept dense, kept MoE, kept local-attention, checkpointed) blocks among those a gradient
    reaches, the rank's running count deciding which are checkpointed (torchtitan counts across its chunks)."""
    counts, seen = [], 0
    for span in spans:
        live = [i for i in span if i >= frozen]
        kept, checkpointed = split_checkpointed(a, live, every, seen)
        counts.append(CheckpointedBlocks(kept.dense, kept.moe, kept.sliding, checkpointed))
        seen += len(live)
    return counts


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


def _logits(workload, shape: StepShape) -> Dict[str, int]:
    """Forward: logits + their fp32 upcast. Backward: logits (still referenced) + the fp32 gradient + its cast back.
    With fp32 activations the casts are no-ops."""
    tokens_vocab = shape.logits_elements
    logits, fp32 = _b(tokens_vocab, shape.act_bits), _b(tokens_vocab, 32)
    cast = 0 if shape.act_bits == 32 else 1
    return {"forward": logits + cast * fp32, "backward": logits + fp32 + cast * logits}


def _fp32_grad_copy(scenario, stage: int, shape: StepShape) -> int:
    """An fp32 copy of the gradient partition at the optimizer step, when no gradient entry is already that wide."""
    if scenario.master_dtype is None or (scenario.offload_optimizer != "none" and stage >= 1):
        return 0
    master_bits = DTYPE_BITS[scenario.master_dtype]
    widest = max(DTYPE_BITS[scenario.grad_dtype], DTYPE_BITS[scenario.grad_accum_dtype or scenario.grad_dtype])
    if widest >= master_bits:
        return 0
    elements = sum(g.params if stage == 0 else -(-g.params // g.shard) for g in shape.groups
                   if not g.name.endswith("frozen") and _stored_bits(g.name) < master_bits)
    return _b(elements, master_bits)


def _stored_bits(group: str) -> int:
    """The width of a group's fixed storage dtype (0 without one): a group stored as wide as the master copy is
    its own master, with gradients as wide (ranks.group_ledger), so it needs no fp32 copy of them."""
    return next((DTYPE_BITS[p] for p in group.split(", ") if p in DTYPE_BITS), 0)


def dequantized_weight(workload, rank) -> int:
    """QLoRA: the largest 4-bit linear dequantized in the compute dtype while it runs, in forward and again in
    backward (bitsandbytes MatMul4Bit), with double quantization its fp32 absmax twice (measured on the CPU:
    tests/measure/quantized_storage.py dequant_transients). 8-bit bases run int8 kernels: no full copy."""
    ft = workload.finetune
    if ft.quantized not in ("nf4", "fp4"):
        return 0
    sizes = [h.local_elements for h in rank.holdings if h.tensor.storage == ft.quant_type]
    if not sizes:
        return 0
    n = max(sizes)
    blocks = -(-n // ft.quant_block_size)
    return 2 * n + (2 * 4 * blocks if ft.double_quant else 0)


def stage_peak(scenario, workload, stage: StageResult, shape: StepShape) -> StagePeak:
    return stage_peaks(scenario, workload, (stage,), shape)[0]


def stage_peaks(scenario, workload, stages, shape: StepShape) -> Tuple[StagePeak, ...]:
    """One rank's peak at each of its stage results (model_states.StageResult)."""
    context, percent, capacity = workload.cuda_context_bytes, workload.fragmentation_percent, workload.capacity_bytes
    peaks = []
    for s, items in _phase_items(scenario, workload, ((r.stage, r.gpu_bytes) for r in stages), shape):
        phases, totals = {}, {}
        for name, phase in zip(PHASES, items):
            parts = {k: v for k, v in phase if v}          # a part that is zero is not shown
            tensors = sum(parts.values())
            parts["allocator reserve"] = allocator_reserve(tensors, percent)
            parts["CUDA context"] = context
            phases[name], totals[name] = parts, with_overheads(tensors, context, percent)
        peaks.append(StagePeak(s, phases, capacity, totals))
    return tuple(peaks)


def stage_peak_bytes(scenario, workload, gpu_bytes: Tuple[int, ...], shape: StepShape) -> Tuple[int, ...]:
    """Per stage, stage_peaks' peak_bytes alone from the model states' GPU bytes at each stage, without the
    phases' named parts: for a search that only asks what fits."""
    context, percent = workload.cuda_context_bytes, workload.fragmentation_percent
    return tuple(max(with_overheads(sum(v for _, v in phase), context, percent) for phase in items)
                 for _, items in _phase_items(scenario, workload, enumerate(gpu_bytes), shape))


def _phase_items(scenario, workload, stages, shape: StepShape):
    """For each (stage, model-state bytes on the GPU): the stage and its (forward, backward, optimizer step)
    components as (name, bytes) lists. What does not depend on the stage is worked out once."""
    P, L = shape.params, shape.largest_layer_params
    trained = trainable_params(shape)
    grad_bits, param_bits = DTYPE_BITS[scenario.grad_dtype], DTYPE_BITS[scenario.param_dtype]
    logits = _logits(workload, shape)
    reduce_bucket = _b(min(workload.reduce_bucket_size, trained), grad_bits)
    allgather_bucket = _b(min(workload.allgather_bucket_size, trained), param_bits)
    # ZeRO-3's live parameters: the gathered layer (plus prefetch, up to max_live) and the persistent small ones.
    live = min(P, max(L, min(workload.max_live_parameters, L + workload.prefetch_bucket_size)))
    persistent = _b(min(shape.persistent_params, P), shape.compute_bits)
    gathered = _b(live, shape.compute_bits) + persistent
    for s, gpu_bytes in stages:
        common = (("model states", gpu_bytes), ("activations", shape.activation_bytes))
        forward = [*common, ("logits and loss", logits["forward"])]
        backward = [*common, ("logits and loss", logits["backward"])]
        optimizer = [common[0]]
        if s == 3:
            forward.append(("gathered parameters", gathered))
            backward.append(("gathered parameters", gathered + _b(L, grad_bits)))   # + the gathered layer's gradient
            optimizer.append(("persistent parameters", persistent))
        copies = 2 if workload.overlap(s) else 1
        backward.append(("gradient buckets", copies * reduce_bucket))
        backward.append(("recompute (one block)", shape.act.recompute_working))
        if s in (1, 2):
            optimizer.append(("all-gather bucket", allgather_bucket))
        forward.append(("dequantized 4-bit weight", shape.dequantized))
        backward.append(("dequantized 4-bit weight", shape.dequantized))
        optimizer.append(("fp32 gradient copy", _fp32_grad_copy(scenario, s, shape)))
        yield s, (forward, backward, optimizer)
