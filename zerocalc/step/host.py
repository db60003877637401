"""What one node's host RAM holds for a plan, at the two moments it peaks (issue 33: the page showed the step's
offloads alone, 56-64 GB a node, where DeepSpeed's own estimator on the same plan says 96-108 GB with zero.Init
and 385 GB without):

- start-up: the model as the node's processes load it, before the framework shards it (LOADING, one row each);
- the step: the offloaded states and the pinned activation blocks of the node's GPUs.
Under DeepSpeed both are multiplied by its additional_buffer_factor, 1.5 (its estimator's allowance for the pinned
and temporary buffers beside the tensors: deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs).

The node needs the larger of the two. Where a row is a guess it leans to the safe side: "auto" loads every
process's copy in fp32 (DeepSpeed's estimator's assumption; transformers 5 loads in the checkpoint's dtype, half
of it for bf16: say so with --model-loading every-rank-16bit).
"""

from __future__ import annotations

from typing import NamedTuple

from ..model.inventory import largest_layer
from .buffers import framework

DEEPSPEED_BUFFER_FACTOR = 1.5


class Loading(NamedTuple):
    bytes_per_param: int      # of the copies it holds
    copies: str               # "process": one per process of the node; "node": one; "layer": the largest layer each
    why: str


LOADING = {
    "every-rank": Loading(4, "process", "each process builds the whole model on the CPU in fp32 before it is "
                          "sharded (from_pretrained without zero.Init; DeepSpeed's estimator without zero_init: "
                          "total_params x 4 x GPUs per node)"),
    "every-rank-16bit": Loading(2, "process", "each process loads the whole model on the CPU in 16 bits (a bf16 "
                                "checkpoint with dtype auto, transformers 5) before it is sharded"),
    "zero-init": Loading(4, "layer", "deepspeed.zero.Init partitions each layer as it is built (the Hugging Face "
                         "integration turns it on under ZeRO-3): the largest layer whole per process, as DeepSpeed's "
                         "estimator with zero_init"),
    "rank0": Loading(4, "node", "one process per node loads the model and broadcasts it (FSDP sync_module_states, "
                     "accelerate's cpu_ram_efficient_loading); the others start on the meta device"),
    "meta": Loading(0, "node", "built on the meta device and filled from sharded checkpoints on the GPU (torchtitan, "
                    "Megatron): nothing whole on the host"),
}
LOADING_CHOICES = ("auto",) + tuple(LOADING)


def loading_mode(workload, framework: str, stage: int) -> str:
    """The row that applies: Workload.model_loading, or for "auto" the framework's way (DeepSpeed under ZeRO-3:
    zero.Init; Megatron: meta; otherwise every process's own copy, the safe side)."""
    chosen = getattr(workload, "model_loading", "auto")
    if chosen != "auto":
        return chosen
    if framework == "megatron":
        return "meta"
    if framework == "deepspeed" and stage == 3:
        return "zero-init"
    return "every-rank"


def loading_bytes(mode: str, params: int, arch, processes: int) -> int:
    """The start-up host bytes of one node of `processes` GPU processes."""
    row = LOADING[mode]
    if row.copies == "process":
        return row.bytes_per_param * params * processes
    if row.copies == "layer":
        return row.bytes_per_param * largest_layer(arch)[1] * processes
    return row.bytes_per_param * params


def with_buffers(nbytes: int, framework: str) -> int:
    """A node's host bytes with DeepSpeed's buffer factor under DeepSpeed (its estimator multiplies both its
    start-up and its offload figures by additional_buffer_factor)."""
    return int(nbytes * DEEPSPEED_BUFFER_FACTOR) if framework == "deepspeed" else nbytes


def host_rows(report) -> list:
    """Per ZeRO stage of a layout report (parallel.ranks), the host RAM a node needs: the larger of the start-up
    (the model as the node's processes load it) and the step (the offloaded states of the rank that offloads most
    and the activation offload's pinned blocks, for the node's GPUs: an upper bound where rank classes differ,
    with DeepSpeed's buffer factor under DeepSpeed), against the node's host RAM where it is given."""
    s, w = report.scenario, report.workload
    per_node = min(s.gpus_per_node, w.layout.world(s.workers))
    rows = []
    for stage in range(4):
        v = max(report.ranks, key=lambda v: v.stages[stage].cpu_bytes + v.shape.host_bytes)
        states, acts = v.stages[stage].cpu_bytes, v.shape.host_bytes
        fw = framework(s, w, v.shape)
        mode = loading_mode(w, fw, stage)
        start = with_buffers(loading_bytes(mode, s.params, w.arch, per_node), fw)
        step = with_buffers((states + acts) * per_node, fw)
        need, host = max(start, step), w.host_memory_bytes
        rows.append({"stage": stage, "rank": v.rank.name, "offload_bytes_per_worker": states,
                     "activation_offload_bytes_per_worker": acts, "per_worker_bytes": states + acts,
                     "gpus_per_node": per_node, "step_bytes_per_node": step, "loading": mode,
                     "loading_why": LOADING[mode].why, "loading_bytes_per_node": start, "per_node_bytes": need,
                     "decided_by": "start-up" if start > step else "step", "host_capacity_bytes": host or None,
                     "fits_host": need <= host if host else None})
    return rows
