"""What DeepSpeed's own model-state estimators return, reproduced term by term, and how they differ from ours.

Source: deepspeedai/DeepSpeed, deepspeed/runtime/zero/stage_1_and_2.py (estimate_zero2_model_states_mem_needs)
and deepspeed/runtime/zero/stage3.py (estimate_zero3_model_states_mem_needs). DeepSpeed evaluates these in
Python floats and truncates with int(); we evaluate the same expressions in the same order so the integers are
identical, float artefacts included. Its printed tables divide by 2**30 and label the result "GB": they are GiB.
Its docs page (docs/code-docs/source/memory.rst) still shows the older ZeRO-2 GPU formula 4 * params +
16 * params / gpus; the current code uses 2 * params + 18 * params / gpus.
"""

from __future__ import annotations

from typing import List, NamedTuple


class Zero2Row(NamedTuple):
    offload_optimizer: str      # "cpu" | "none"
    cpu_bytes: int
    gpu_bytes: int


class Zero3Row(NamedTuple):
    offload_param: str          # "cpu" | "none"
    offload_optimizer: str
    zero_init: bool
    cpu_bytes: int
    gpu_bytes: int


def zero2_estimate(total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
                   additional_buffer_factor=1.5):
    """(cpu_bytes, gpu_bytes), as estimate_zero2_model_states_mem_needs."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        # 2 = 16-bit params; 18 = 16-bit grads 2 + fp32 grads 4 + fp32 params 4 + Adam moments 8.
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def zero3_estimate(total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
                   cpu_offload_params=True, zero_init=True, additional_buffer_factor=1.5):
    """(cpu_bytes, gpu_bytes, largest_layer_bytes), as estimate_zero3_model_states_mem_needs."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params   # 16-bit params gathered + 16-bit grads computed
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


class DeepSpeedView(NamedTuple):
    params: int
    largest_layer_params: int
    gpus_per_node: int
    nodes: int
    buffer_factor: float
    zero2: List[Zero2Row]
    zero3: List[Zero3Row]
    differences: List[str]


def deepspeed_view(params: int, largest_layer_params: int, gpus_per_node: int, nodes: int,
                   buffer_factor: float = 1.5, report=None, model_parallel: int = 1) -> DeepSpeedView:
    """Every row of estimate_zero{2,3}_model_states_mem_needs_all_cold, in its print order."""
    zero2 = [Zero2Row("cpu" if off else "none",
                      *zero2_estimate(params, gpus_per_node, nodes, off, buffer_factor))
             for off in (True, False)]
    zero3 = []
    for off_opt in (True, False):
        for off_param in (True, False):
            if not off_opt and off_param:
                continue
            for zero_init in (True, False):
                cpu, gpu, _ = zero3_estimate(params, largest_layer_params, gpus_per_node, nodes, off_opt,
                                             off_param, zero_init, buffer_factor)
                zero3.append(Zero3Row("cpu" if off_param else "none", "cpu" if off_opt else "none",
                                      zero_init, cpu, gpu))
    return DeepSpeedView(params, largest_layer_params, gpus_per_node, nodes, buffer_factor, zero2, zero3,
                         differences(report, params, largest_layer_params, gpus_per_node * nodes, model_parallel))


def differences(report, params: int, largest_layer_params: int, total_gpus: int,
                model_parallel: int = 1) -> List[str]:
    """Plain sentences: what DeepSpeed's estimator assumes that the chosen ledger does not, with numbers."""
    notes = [
        "DeepSpeed assumes mixed-precision Adam with 16-bit params and grads, fp32 grads, master and moments: "
        "20 bytes per parameter at ZeRO-2 (2 replicated + 18 partitioned) and 18 at ZeRO-3.",
        "At ZeRO-3 it adds 4 x largest_layer_params bytes on every GPU for the gathered 16-bit layer and its "
        f"16-bit gradient ({4 * largest_layer_params:,} bytes here); our ledger counts persistent state only.",
        "Its CPU column includes initialising the model in fp32 on the host (4 bytes x params x GPUs per node) "
        "and multiplies by additional_buffer_factor; ours reports offloaded state without a safety factor.",
        "It prints bytes / 2**30 labelled 'GB': those are GiB.",
    ]
    if report is not None:
        from .ledger import bytes_per_param
        s = report.scenario
        ours = bytes_per_param(report.ledger)
        notes.insert(0, f"Chosen ledger ({s.convention}): {float(ours):g} bytes per parameter.")
        if s.workers != total_gpus:
            notes.append(f"DeepSpeed's view uses {total_gpus:,} GPUs (nodes x GPUs per node); "
                         f"the scenario has {s.workers:,} workers.")
        if s.shard_group is not None and s.shard_group != s.workers:
            notes.append("DeepSpeed's estimator knows no hybrid shard group: it always divides by all GPUs.")
    if model_parallel > 1:
        notes.append(f"DeepSpeed's estimator knows no tensor, pipeline or context parallelism: its rows are the "
                     f"whole model sharded over the data-parallel GPUs only, while each rank here holds about "
                     f"1/{model_parallel:,} of the model (tp x pp x cp) before ZeRO shards it over dp.")
    return notes
