"""Library workspaces: GEMM scratch memory that libraries take from PyTorch's caching allocator once per process
and keep for the whole run, so torch.cuda.max_memory_allocated counts it (the CUDA context does not hold it).

One row per library: its bytes per workspace by CUDA compute capability, how many workspaces one training step
creates, and which implementations hold it (Workload.implementation).

- PyTorch's cuBLAS workspace (pytorch/pytorch 26a39059 aten/src/ATen/cuda/CublasHandlePool.cpp):
  parseChosenWorkspaceSize's default is ":4096:2:16:8" = 4096 KiB x 2 + 16 KiB x 8 = 8,519,680 bytes, and 4096 KiB
  x 8 = 32 MiB on sm90 (`properties->major == 9 && properties->minor == 0`); CUBLAS_WORKSPACE_CONFIG overrides it
  (":SIZE:COUNT" pairs, KiB). getCurrentCUDABlasHandle -> setWorkspaceForHandle allocates one through
  CUDACachingAllocator per (handle, stream) key and keeps it in cublas_handle_stream_to_workspace. Handles come
  from a thread-local PoolWindow, one per thread: the forward runs on the Python thread and the backward on the
  autograd engine's device thread, both on the default stream, so a step holds two (NCCL's streams run no GEMM;
  recompute re-runs the forward inside the backward, on the backward's thread).
- Transformer Engine's cuBLAS workspace (NVIDIA/TransformerEngine d0067d0d transformer_engine/pytorch/
  cpp_extensions/gemm.py get_cublas_workspace_size_bytes, get_cublas_workspace): 32 MiB + 1,024 bytes from
  compute capability 9 ("32 MiB for NVFP4 GEMM, plus additional 1024 B for alignment and misc scales"), 4 MiB
  (4,194,304) below; one torch.empty per device (functools.lru_cache). Megatron's default --transformer-impl
  transformer_engine runs its linear layers through it; its output layer (tensor_parallel.ColumnParallelLinear)
  still runs PyTorch's matmul, so Megatron holds both rows.

Checked against Megatron-LM's CI (validation/cases.json, mem-allocated-bytes between steps, which zerocalc's
model states miss by this much): gpt3_mcore_te_tp1_pp1_dist_optimizer on H100 with CUBLAS_WORKSPACE_CONFIG
:4096:8 keeps 100,667,904 bytes beyond the model states = 2 x 32 MiB + (32 MiB + 1,024) + 3,584; the 7B tp4
runs keep 28 MiB less on A100 than on H100 (TE's 4 MiB against 32 MiB + 1,024).

Not counted: cuBLASLt's workspace (1 MiB per (handle, stream), separate at 26a39059 unless
TORCH_CUBLASLT_UNIFIED_WORKSPACE=1; used by addmm with a bias), TE's extra workspaces for userbuffers overlap
(x3) and grouped GEMM (one per cuBLAS stream), cuDNN's (per call, freed), and ROCm's hipBLAS / hipBLASLt
(32-128 MiB and 76 MiB): a card without a compute capability (AMD, or a custom capacity) gets each row's
largest CUDA size, the H100 figure. Workload.workspace_bytes replaces the whole sum (e.g. the same run under
CUBLAS_WORKSPACE_CONFIG=:4096:8 on an A100: 2 x 32 MiB + 4 MiB).
"""

from __future__ import annotations

from typing import NamedTuple

from ..gpus import GPU_CATALOG

MIB = 2**20
PYTORCH_CUBLAS = "pytorch/pytorch 26a39059ec580351411f180816c47e2ef5134ae1 aten/src/ATen/cuda/CublasHandlePool.cpp"
TE_GEMM = "NVIDIA/TransformerEngine d0067d0da6cb01811b8072a7d304f0e00344ce2b transformer_engine/pytorch/" \
          "cpp_extensions/gemm.py"


class WorkspaceRow(NamedTuple):
    """One library's workspaces: bytes by compute capability (the first range [low, high) that holds the card's
    (major, minor) wins; else `default`), how many a step creates, the implementations that hold them."""
    library: str
    sizes: tuple[tuple[tuple[int, int], tuple[int, int], int], ...]
    default: int
    count: int
    implementations: tuple[str, ...]
    source: str


WORKSPACES = (
    WorkspaceRow("cuBLAS (PyTorch)", (((9, 0), (9, 1), 4096 * 8 * 1024),), 4096 * 1024 * 2 + 16 * 1024 * 8, 2,
                 ("huggingface", "megatron"), PYTORCH_CUBLAS + " parseChosenWorkspaceSize, setWorkspaceForHandle"),
    WorkspaceRow("Transformer Engine", (((9, 0), (10**6, 0), 32 * MIB + 1024),), 4_194_304, 1, ("megatron",),
                 TE_GEMM + " get_cublas_workspace_size_bytes, get_cublas_workspace"),
)


def row_bytes(row: WorkspaceRow, capability: tuple[int, int] | None) -> int:
    """One workspace of a row on a card of that compute capability; None (AMD, custom): the row's largest."""
    if capability is None:
        return max([row.default] + [size for _, _, size in row.sizes])
    return next((size for low, high, size in row.sizes if low <= tuple(capability) < high), row.default)


def capability(workload, gpu: str | None = None) -> tuple[int, int] | None:
    """The CUDA compute capability of the workload's card (or of catalogued card `gpu`), or None for a custom
    capacity or a card without one."""
    if gpu is None and workload.gpu_memory is not None:
        return None
    key = workload.gpu if gpu is None else gpu
    return GPU_CATALOG[key].compute_capability if key in GPU_CATALOG else None


def workspace_parts(workload, gpu: str | None = None) -> tuple[tuple[str, int], ...]:
    """(library, bytes) of every row the workload's implementation holds, on its card (or on card `gpu`)."""
    cc = capability(workload, gpu)
    return tuple((row.library, row.count * row_bytes(row, cc)) for row in WORKSPACES
                 if workload.implementation in row.implementations)


def workspace_bytes(workload, gpu: str | None = None) -> int:
    """The library workspaces every phase of the step holds: Workload.workspace_bytes, or the table's sum on the
    workload's card (or on catalogued card `gpu`: the only part of a step that depends on the card)."""
    if getattr(workload, "workspace_bytes", None) is not None:
        return workload.workspace_bytes
    return sum(b for _, b in workspace_parts(workload, gpu))
