"""Async tensor parallelism (torchtitan `parallelism.enable_async_tensor_parallel`): Inductor's micro-pipeline TP
pass (torch 2.13 torch/_inductor/fx_passes/micro_pipeline_tp.py, on with torch._inductor.config._micro_pipeline_tp)
rewrites a sequence-parallel all-gather feeding a matmul into symm_mem.fused_all_gather_matmul and a matmul feeding
a reduce-scatter into symm_mem.fused_matmul_reduce_scatter. Both run through one symmetric-memory workspace per
process group (torch/distributed/_symmetric_memory/__init__.py get_symm_mem_workspace): a uint8 buffer allocated by
the symmetric-memory allocator, outside PyTorch's caching allocator (in nvidia-smi's figure, not in
max_memory_reserved), kept for the run and grown to the largest request:
- the all-gather matmul asks for its input shard, (T/tp) x h x w bytes (_pipelined_multi_all_gather_and_consume);
- the matmul reduce-scatter for two of its output chunks, 2 x (T/tp) x h x w (_pipelined_produce_and_all2all):
  the largest, so the workspace.
It is counted with the CUDA context, the other memory outside the allocator. What the fused ops change in the
activations the partitioner saves could not be run here (their kernels are CUDA-only): those keep the compiled
block's terms, and torchtitan's table reads 4.3 GiB less with async TP than without on Llama 3.1 70B (TT-11 and
TT-12 in docs/validation.md), so zerocalc stays above such a run. torchtitan refuses it without the model compiled
(distributed/tensor_parallel.py maybe_enable_async_tp at 238fa99); it needs tensor parallelism, whose norms
torchtitan always shards over the sequence.
"""

from __future__ import annotations


def workspace_bytes(workload, act_bits: int) -> int:
    """The symmetric-memory workspace of a rank's TP group: two output chunks of the largest reduce-scatter."""
    if not workload.async_tp:
        return 0
    layout = workload.layout
    tokens = workload.micro_batch * (workload.seq_len // layout.cp)
    return 2 * -(-tokens // layout.tp) * workload.arch.hidden * act_bits // 8


def refusal(workload):
    """Why a workload cannot run async TP (the FieldError's allowed text), or None."""
    if not workload.async_tp:
        return None
    if workload.layout.tp < 2 or not workload.layout.sequence_parallel:
        return "false without tensor parallelism (tp > 1) and its sequence-parallel norms"
    if not workload.compile:
        return "false unless the blocks are compiled (torchtitan: 'Async TP requires ... --compile.enable')"
    if workload.implementation != "huggingface":
        return "false under Megatron (its overlap is --tp-comm-overlap, not modelled)"
    return None
