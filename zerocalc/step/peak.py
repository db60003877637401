"""The peak working set per ZeRO stage: what is live in each phase of a step, the largest, and the fit.

Each phase's live set is a dict of named components (bytes per worker, on the GPU):
- forward (at the loss, the end of forward): model states on the GPU, every saved activation, what the loss holds
  beyond its saved fp32 probabilities (LOSSES: Hugging Face's logits and their fp32 upcast; Megatron's bf16 logits
  beside the one fp32 buffer its vocab-parallel cross entropy computes the softmax in), the gathered parameters;
- backward (its start, when every activation is still saved): model states, activations, the loss's gradient
  transients (LOSSES: Hugging Face's logits, fp32 gradient and its cast back; Megatron's cast of its in-place fp32
  gradient to the logits' dtype), the gathered parameters and the gradient buckets; under full recompute that
  and the last block's re-run, summed (the safe side of the published reserved figures: _phase_items), of which
  the smaller moment is held in the cache, not live (CACHED_MOMENT: max_memory_allocated reads the larger);
- optimizer step: model states, an fp32 copy of the gradient partition when gradients are kept narrower than the
  master weights (DeepSpeed's memory docs: "all of them are converted into fp32 before doing the weight
  updates"), DeepSpeed's all-gather bucket (stages 1-2) and ZeRO-3's persistent parameters, and a shaped
  optimizer's own working set or Adam / AdamW's temporaries (step/optimizer_step.py: Muon's gathered matrix and
  Newton-Schulz iteration, paged states paged in; foreach's copy of the second moments, the for-loop's denom).
Gathered parameters and gradient buckets follow the framework (Workload.comm_buffers, step/buffers.py): DeepSpeed's
fixed-size buckets and ZeRO-3 prefetch; nothing beyond the ledger for Megatron's DDP (it reduces in its grad
buffer); FSDP's per-unit all-gather, unsharded gradient and reduce-scatter input; nothing without data parallelism.
Every phase holds the library workspaces (GEMM scratch PyTorch's allocator hands out once: step/workspaces.py)
and adds the CUDA context and the caching allocator's reserve (Workload assumptions; its model and band:
step/allocator.py): fragmentation_percent of the phase's tensors plus allocator_units cycles of ZeRO-3's unit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, NamedTuple, Optional, Tuple

from ..states.zero import StageResult
from ..tables import DTYPE_BITS, STAGES, bytes_of
from .allocator import cycle_unit_bytes, replays, reserve_bytes, simulated_reserve
from .async_tp import workspace_bytes as async_tp_workspace
from .buffers import buffer_items, framework, zero3_live_params
from .fsdp_offload import offload_parts
from .fsdp_pipeline import REPLACES, kept_parts
from .activations import tp_local
from .float8 import cast_transients
from .losses import CACHED_MOMENT, GRAPH, HELD, PREVIOUS, held_output_bytes, loss_transients
from .deepep import deepep_bytes
from .nccl import nccl_bytes
from .router_loss import router_loss_bytes
from .grad_lifetime import first_block_bytes, lifetime
from .optimizer_in_backward import one_gradient_bytes, resident_gradient_bytes
from .optimizer_step import optimizer_step_items
from .shape import StepShape, trainable_params
from .replay_pieces import pieces_of
from .context import context_bytes
from .workspaces import workspace_bytes

PHASES = ("forward", "backward", "optimizer_step")


class StagePeak(NamedTuple):
    stage: int
    phases: Dict[str, Dict[str, int]]     # phase -> component -> bytes
    capacity_bytes: int
    phase_totals: Dict[str, int]          # phase -> bytes (the sum of its components)
    cycle_unit_bytes: int = 0             # what one ZeRO-3 gather-free cycle leaves cached (allocator.py)
    simulated_reserve: Optional[int] = None   # the allocator model's reserve (fragmentation_percent None), else None

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


def with_overheads(tensors: int, context: int, percent, units: int = 0, unit_bytes: int = 0,
                   simulated: Optional[int] = None) -> int:
    """A phase's total: its live tensors, the allocator's reserve over them and the CUDA context. Strictly
    increasing in the tensors, and the unit is the stage's (the same in each phase), so the phase with the most
    tensors is the peak at every context, percent and unit count (zerocalc.answers.ranges moves them along their
    range without recomputing the step). A simulated reserve (percent None) is the stage's, the same in each
    phase, so the same holds."""
    return tensors + reserve_bytes(tensors, percent, units, unit_bytes, simulated) + context


RESERVE = "allocator reserve"
OUTSIDE = ("CUDA context", "NCCL buffers", "DeepEP buffers")   # outside PyTorch's allocator: nvidia-smi shows
                                                              # them, max_memory_reserved does not
NOT_ALLOCATED = (RESERVE, CACHED_MOMENT)     # in max_memory_reserved, not in max_memory_allocated


def phase_figures(parts: Dict[str, int]) -> Dict[str, int]:
    """One phase's three numbers: what torch.cuda.max_memory_allocated reads (the live tensors), what
    max_memory_reserved reads (+ the allocator's reserve and the smaller backward moment it keeps cached) and
    what the device shows (nvidia-smi: + the memory outside the allocator, the CUDA context and NCCL's buffers)."""
    device = sum(parts.values())
    reserved = device - sum(parts.get(k, 0) for k in OUTSIDE)
    return {"allocated_bytes": reserved - sum(parts.get(k, 0) for k in NOT_ALLOCATED),
            "reserved_bytes": reserved, "device_bytes": device}


def tensor_bytes(peak: "StagePeak") -> int:
    """The tensors the allocator's reserve is counted on at a stage's peak phase: the peak without the reserve and
    what lies outside the allocator (the live tensors plus the smaller backward moment, CACHED_MOMENT)."""
    parts = peak.phases[peak.peak_phase]
    return phase_figures(parts)["allocated_bytes"] + parts.get(CACHED_MOMENT, 0)


def peak_on_gpu(peak: "StagePeak", scenario, workload, gpu: str) -> int:
    """A stage's peak on another catalogued card. Only the library workspaces (workspaces.py), the CUDA context
    (context.py) and NCCL's buffers (nccl.py: channels, NVLS and links by card) depend on the card, and every phase
    holds them the same, so the peak phase stays the largest and the rest of the step is unchanged."""
    parts, tensors = peak.phases[peak.peak_phase], tensor_bytes(peak)
    other = tensors - parts.get("library workspaces", 0) + workspace_bytes(workload, gpu)
    context = sum(parts.get(k, 0) for k in OUTSIDE)
    moved = context - context_bytes(workload) + context_bytes(workload, gpu)
    nccl = nccl_bytes(scenario, replace(workload, gpu=gpu, gpu_memory=None)) * workload.nccl_percent // 100
    percent, units, sim = workload.fragmentation_percent, workload.allocator_units, peak.simulated_reserve
    return peak.peak_bytes + with_overheads(other, moved - parts.get("NCCL buffers", 0) + nccl, percent, units,
                                            peak.cycle_unit_bytes, sim) \
        - with_overheads(tensors, context, percent, units, peak.cycle_unit_bytes, sim)


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
    return bytes_of(elements, master_bits)


def _stored_bits(group: str) -> int:
    """The width of a group's fixed storage dtype (0 without one): a group stored as wide as the master copy is
    its own master, with gradients as wide (ranks.group_ledger), so it needs no fp32 copy of them."""
    return next((DTYPE_BITS[p] for p in group.split(", ") if p in DTYPE_BITS), 0)


def outside_parts(workload, shape: StepShape, context: int = None, nccl_percent: int = None) -> Dict[str, int]:
    """Memory outside PyTorch's caching allocator: the "CUDA context" part (the context assumption and async TP's
    symmetric-memory workspace, async_tp.py), NCCL's buffers (nccl.py, at nccl_percent of the modelled bytes) and
    DeepEP's (deepep.py, with the DeepEP dispatcher).
    `context` / `nccl_percent` replace the workload's (answers/ranges.py moves them)."""
    context = context_bytes(workload) if context is None else context
    percent = workload.nccl_percent if nccl_percent is None else nccl_percent
    return {"CUDA context": context + async_tp_workspace(workload, shape.act_bits),
            "NCCL buffers": shape.nccl * percent // 100, "DeepEP buffers": deepep_bytes(workload)}


def outside_allocator_bytes(workload, shape: StepShape) -> int:
    return sum(outside_parts(workload, shape).values())


def stage_peak(scenario, workload, stage: StageResult, shape: StepShape) -> StagePeak:
    return stage_peaks(scenario, workload, (stage,), shape)[0]


def stage_peaks(scenario, workload, stages, shape: StepShape, replay: bool = True) -> Tuple[StagePeak, ...]:
    """One rank's peak at each of its stage results (model_states.StageResult). replay=False under the allocator's
    model takes its reserve as 0, no replay: a floor under the peak (the replayed reserve is never below 0) that
    a search uses to drop a candidate far above the card before it replays it."""
    percent, capacity, units = workload.fragmentation_percent, workload.capacity_bytes, workload.allocator_units
    outside = outside_parts(workload, shape)
    context = sum(outside.values())
    peaks = []
    for s, items in _phase_items(scenario, workload, ((r.stage, r.gpu_bytes) for r in stages), shape):
        unit = cycle_unit_bytes(scenario, workload, s, shape)
        items = (items[0], _split_moments(items[1], shape), items[2])    # named parts only: the sums stay
        bare = {name: {k: v for k, v in phase if v} for name, phase in zip(PHASES, items)}   # a zero part is not shown
        sim = None
        if replays(workload):         # the allocator's model replays the step (issue 32); its floor: no reserve
            sim = simulated_reserve(StagePeak(s, bare, capacity, {}, unit), shape, workload.allocator, False,
                                    pieces_of(scenario, workload, shape, s))[1] if replay else 0
        phases, totals = {}, {}
        for name, parts in bare.items():
            tensors = sum(parts.values())
            parts[RESERVE] = reserve_bytes(tensors, percent, units, unit, sim)
            parts["CUDA context"] = outside["CUDA context"]
            parts.update((k, v) for k, v in outside.items() if v and k != "CUDA context")   # NCCL, DeepEP
            phases[name], totals[name] = parts, with_overheads(tensors, context, percent, units, unit, sim)
        peaks.append(StagePeak(s, phases, capacity, totals, unit, sim))
    return tuple(peaks)


class _Stage(NamedTuple):
    stage: int
    gpu_bytes: int


def stage_peak_bytes(scenario, workload, gpu_bytes: Tuple[int, ...], shape: StepShape,
                     stages: Tuple[int, ...] = STAGES) -> Tuple[int, ...]:
    """Per stage of `stages`, stage_peaks' peak_bytes alone from the model states' GPU bytes at each stage, without
    the phases' named parts: for a search that only asks what fits. The allocator's model (fragmentation_percent
    None) needs the parts: then it is stage_peaks' own figure."""
    percent, units = workload.fragmentation_percent, workload.allocator_units
    if percent is None:
        return tuple(p.peak_bytes for p in stage_peaks(scenario, workload, [_Stage(s, gpu_bytes[s]) for s in stages],
                                                       shape))
    context = outside_allocator_bytes(workload, shape)
    peaks = []
    for s, items in _phase_items(scenario, workload, ((s, gpu_bytes[s]) for s in stages), shape):
        unit = cycle_unit_bytes(scenario, workload, s, shape)              # once per stage, not per phase
        peaks.append(max(with_overheads(sum(v for _, v in phase), context, percent, units, unit)
                         for phase in items))
    return tuple(peaks)


def _phase_items(scenario, workload, stages, shape: StepShape):
    """For each (stage, model-state bytes on the GPU): the stage and its (forward, backward, optimizer step)
    components as (name, bytes) lists, and the backward the allocator's model replays (the loss's transients
    and the rebuilt block both named: it runs them in turn). What does not depend on the stage is worked out once."""
    P, L = shape.params, shape.largest_layer_params
    trained = trainable_params(shape)
    grad_bits, param_bits = DTYPE_BITS[scenario.grad_dtype], DTYPE_BITS[scenario.param_dtype]
    logits = loss_transients(workload, shape, scenario.grad_dtype)
    held = held_output_bytes(workload, shape)          # a loop that keeps the model's output (losses.py)
    # what the autograd graph keeps beyond backward (bitsandbytes' inputs), alive while the loop keeps the loss:
    # through the step (holds_output, holds_graph) and into the next forward beside the last logits (holds_graph)
    graph = shape.act.graph_held if workload.holds_output or workload.holds_graph else 0
    previous = held + graph if workload.holds_graph else 0
    router = router_loss_bytes(workload, shape)              # router_loss.py: Hugging Face's, outside the layers
    # DeepSpeed's ipg bucket is torch.empty(reduce_bucket_size) whatever the trained count (measured: tests/measure/
    # deepspeed_buckets.py), so LoRA and small models carry the whole bucket
    reduce_bucket = bytes_of(workload.reduce_bucket_size, grad_bits)
    allgather_bucket = bytes_of(min(workload.allgather_bucket_size, trained), param_bits)
    live = zero3_live_params(P, L, workload.max_live_parameters, workload.prefetch_bucket_size)
    persistent = bytes_of(min(shape.persistent_params, P), shape.compute_bits)
    gathered = bytes_of(live, shape.compute_bits) + persistent
    # layer_grad: the gathered layer's gradient at stage 3
    ds = {"gathered": gathered, "layer_grad": bytes_of(L, grad_bits), "persistent": persistent,
          "reduce_bucket": reduce_bucket, "trained_grads": bytes_of(trained, grad_bits),
          "allgather_bucket": allgather_bucket}
    comm = framework(scenario, workload, shape)
    workspaces = workspace_bytes(workload)
    fused_step = workload.optimizer_in_backward          # optimizer_in_backward.py: no gradient set lives
    casts = cast_transients(workload, tp_local(workload.arch, workload.layout.tp),     # float8.py
                            workload.micro_batch * (workload.seq_len // workload.layout.cp))
    per_backward = not fused_step and lifetime(workload, comm) == "backward"     # grad_lifetime.py
    for s, gpu_bytes in stages:
        grads = resident_gradient_bytes(scenario, s, shape) if fused_step or per_backward else 0
        if fused_step:
            gpu_bytes -= grads
        common = (("model states", gpu_bytes), ("library workspaces", workspaces),   # step/workspaces.py
                  ("activations", shape.activation_bytes),
                  ("measured beyond the estimate", workload.measured_extra_bytes))     # Calibrate's Set
        forward = [*common, ("logits and loss", logits["forward"])]
        if per_backward:             # forward runs before any gradient exists
            forward[0] = ("model states", gpu_bytes - grads)
        backward = [*common, ("logits and loss", logits["backward"])]
        if router["forward"]:
            forward.append(("router load-balancing loss", router["forward"]))
            backward.append(("router load-balancing loss", router["backward"]))
        optimizer = [*common[:2], common[3]]           # no activations at the step; the measured extra stays
        if held:
            backward.append((HELD, held))
            optimizer.append((HELD, held))
        if graph:
            optimizer.append((GRAPH, graph))
        if previous:
            forward.append((PREVIOUS, previous))
        # gathered parameters and communication buckets of the framework (step/buffers.py: one row each)
        fwd, bwd, opt = buffer_items(comm, s, scenario, workload, shape, ds)
        forward += fwd
        backward += bwd
        optimizer += opt
        backward.append(("recompute (one block)", shape.act.recompute_working))
        forward.append(("dequantized 4-bit weight", shape.dequantized))
        forward.append(("float8 casts (one linear)", casts["forward"]))
        backward.append(("float8 casts (one linear)", casts["backward"]))
        backward.append(("dequantized 4-bit weight", shape.dequantized))
        optimizer.append(("fp32 gradient copy", 0 if fused_step else _fp32_grad_copy(scenario, s, shape)))
        if not fused_step:        # Muon, paged states, Adam's temporaries (optimizer_step.py)
            optimizer += optimizer_step_items(scenario, s, shape, comm)
        if fused_step:
            backward.append(("one gradient (optimizer in backward)", one_gradient_bytes(scenario, shape)))
        kept = kept_parts(workload, s, shape, comm)          # FSDP2 under PP: the stage unsharded (fsdp_pipeline.py)
        for phase, name in ((forward, "forward"), (backward, "backward")):
            gone = {REPLACES[part] for part, _ in kept.get(name, ()) if part in REPLACES}
            phase[:] = [item for item in phase if item[0] not in gone] + kept.get(name, [])
        offload = offload_parts(scenario, workload, s, shape, comm)                        # fsdp_offload.py
        backward += offload.get("backward", [])
        # Under full recompute the loss's transients and the rebuilt block stay summed in the reserved and device
        # figures, under every reserve, on purpose. torch.utils.checkpoint re-runs the last block only once the
        # loss's transients are freed (a CPU lifetime trace; block_backward.py walks the re-run exactly), so
        # allocated bytes peak at the larger moment (stage_peaks names it: _split_moments). But the published
        # reserved figures of such runs (Answer.AI's QLoRA, PEFT's) sit 7-21 % above the larger moment even with
        # the allocator's model, and the sum covers them on the safe side (docs/peak-memory.md). The allocator's
        # replay (timeline.py) runs the two moments in turn itself.
        if per_backward and grads or offload.get("backward end"):
            backward = _larger_end(backward, grads if per_backward else 0, first_block_bytes(shape),
                                   offload.get("backward end", ()))
        yield s, (forward, backward, optimizer)


def _split_moments(backward, shape: StepShape):
    """Backward under full recompute with the loss on this rank: torch.utils.checkpoint rebuilds the last block
    only after the loss's backward freed its transients and the head's saved tensors (the final norm's input, the
    fp32 log-probabilities or the compiled loss's logit chunks; the labels stay with the batch), so the live
    tensors peak at the larger of two moments: the loss's (everything but the rebuilt block) and the re-run's
    (everything but the loss and the head, with the rebuilt block and its backward's gradients,
    ActivationReport.recompute_backward, where walked). The phase keeps the sum (above); what the sum holds beyond
    the larger moment becomes CACHED_MOMENT, taken from the rebuilt block's part: in the reserved and device
    figures, out of the allocated one. Exact against CPU lifetime traces of transformers' Llama with peft
    (tests/test_block_backward.py, tests/measure/recompute_loss_overlap.py)."""
    parts = dict(backward)
    rebuilt, loss = parts.get("recompute (one block)", 0), parts.get("logits and loss", 0)
    if not rebuilt or not loss or "activations" not in parts:
        return backward
    head = sum(v for k, v in shape.act.head.items() if k != "labels")
    overlap = max(0, min(rebuilt, loss + head - (shape.act.recompute_backward or 0)))
    if not overlap:
        return backward
    return [("recompute (one block)", rebuilt - overlap) if name == "recompute (one block)" else (name, v)
            for name, v in backward] + [(CACHED_MOMENT, overlap)]


def _larger_end(backward, grads: int, first_block: int, at_end=()):
    """The backward phase when gradients live from backward on (grad_lifetime.py), or something else is held only
    at its end (`at_end`: FSDP1 offload's gradient shards): its start (every activation and the loss's transients,
    no gradient yet) or its end (every gradient, the first block's saves and the working sets that run with it),
    whichever holds more."""
    start = [(n, v - grads) if n == "model states" else (n, v) for n, v in backward]
    gone = ("activations", "logits and loss", "router load-balancing loss")
    end = [item for item in backward if item[0] not in gone] + \
        [("activations (first block)", first_block), *at_end]
    return max(start, end, key=lambda items: sum(v for _, v in items))
