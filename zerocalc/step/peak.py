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

from ..states.zero import StageResult
from ..tables import DTYPE_BITS
from .shape import StepShape, trainable_params

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
    percent (zerocalc.answers.ranges moves those two along their range without recomputing the step)."""
    return tensors + allocator_reserve(tensors, percent) + context


def tensor_bytes(peak: "StagePeak") -> int:
    """The live tensors at a stage's peak phase: the peak without the allocator's reserve and the CUDA context."""
    parts = peak.phases[peak.peak_phase]
    return peak.peak_bytes - parts["allocator reserve"] - parts["CUDA context"]


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
