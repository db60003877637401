"""The CUDA context (issue 32): device memory a training process holds outside PyTorch's caching allocator, NCCL's
buffers apart (nccl.py): the driver's context and the kernel modules the step loads. nvidia-smi counts it; the
caching allocator does not.

Two terms, each a row with its source:
- The bare context. The driver reserves local memory for every thread slot of the card, so a bare context grows
  with SMs x resident threads per SM. Published bare contexts, lazy loading (CUDA >= 11.8 with torch >= 1.13):
  H100 SXM 534 MiB, B200 612, RTX 6000 Ada 426, RTX 3090 256 (MEASURED); each is 2.04 KiB per thread slot within
  3 % (PER_THREAD, fitted here on those four and on llama.cpp's RTX PRO 6000 Blackwell 555 and RTX 4060 Ti 107 MiB,
  ggml-org/llama.cpp#23604: "the cost scales with SM count"). A card without a figure gets the rule.
- The kernel modules. torch sets CUDA_MODULE_LOADING=LAZY from 1.13 (pytorch/pytorch#85692, #86509): a module
  loads when one of its kernels first runs. The whole of torch's modules is the gap between eager and lazy
  loading, 450 MiB on an A100 80GB under torch 2.1.1+cu121 (0.92 GiB against 0.47 GiB used after torch.ones:
  stas00/ml-engineering@744d01e1 training/performance/README.md); a training step loads part of them and other
  libraries' (cuBLAS, flash-attn, Triton's compiled kernels), so that whole gap is the point, on the safe side.
  Before torch 1.13 every module loaded at start: 1.78 GiB on that A100 under torch 1.10.2 (the same file), 1.3 GiB
  on a V100 (huggingface/transformers@7d5e65fe docs/source/en/model_memory_anatomy.md), 1.65 GiB on an RTX 3090
  under cu111 (pytorch/pytorch#55277): less the card's bare context, at most 1,436 MiB of modules (EAGER).
The band: from the bare context + 128 MiB (vLLM's non-torch figures on one GPU, 0.13-0.20 GiB beyond its
baseline) to the bare context + 1 GiB (the driver grows a context's per-thread stack for a kernel that needs more
and never shrinks it back: CUDA's CU_LIMIT_STACK_SIZE). AMD cards and custom capacities keep the flat 1 GiB
(0.5-1.5 GiB): no published figure here. Workload.cuda_context_bytes replaces the estimate (a measurement).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple, Optional

from ..gpus import GPU_CATALOG
from ..versions import assumed, older

MIB, GIB = 2**20, 2**30
PER_THREAD = 2089                  # bytes per thread slot (2.04 KiB): bare context / (SMs x threads per SM)
LAZY_FROM = "1.13"                 # torch sets CUDA_MODULE_LOADING=LAZY when unset from this release
# The kernel modules beyond the bare context, (low, point, high), by loading:
# - lazy: 128 MiB (vLLM's non-torch figures, one GPU), 450 MiB (torch 2.1.1+cu121 on A100 80GB: EAGER 0.92 GiB -
#   LAZY 0.47 GiB used), 1 GiB (the stack the driver grows for a kernel and keeps);
# - eager: 1,017 MiB (V100, CUDA 11.2: 1,343 - 326), 1,436 MiB (RTX 3090, cu111: 1,687 - 251, the largest), +512 MiB.
MODULES = MappingProxyType({True: (128 * MIB, 450 * MIB, GIB), False: (1017 * MIB, 1436 * MIB, 1948 * MIB)})
FLAT, FLAT_BAND = GIB, (GIB // 2, 3 * GIB // 2)     # AMD and custom capacities
SOURCES = "zerocalc/step/context.py (stas00/ml-engineering@744d01e1, pytorch/pytorch#85692, #55277)"

# Resident threads per SM by compute capability (CUDA C++ Programming Guide, "Compute Capabilities" table).
THREADS_PER_SM = MappingProxyType({(7, 0): 2048, (7, 5): 1024, (8, 0): 2048, (8, 6): 1536, (8, 9): 1536,
                                   (9, 0): 2048, (10, 0): 2048, (10, 3): 2048, (12, 0): 1536})
# SMs per catalogued NVIDIA card (NVIDIA's datasheets and architecture whitepapers).
SMS = MappingProxyType({
    "A100-40GB": 108, "A100-80GB": 108, "H100-SXM-80GB": 132, "H100-PCIe-80GB": 114, "H100-NVL-94GB": 132,
    "H20-96GB": 78, "H200-141GB": 132, "GH200-96GB": 132, "B200-180GB": 148, "B300-288GB": 160, "L4-24GB": 58,
    "A10G-24GB": 80, "A10-24GB": 72, "T4-16GB": 40, "L40S-48GB": 142, "A40-48GB": 84, "RTX-A6000-48GB": 84,
    "RTX-A6000-48GB-ECC": 84, "RTX-6000-Ada-48GB": 142, "V100-16GB": 80, "V100-32GB": 80, "RTX-3090-24GB": 82,
    "RTX-4090-24GB": 128, "RTX-5090-32GB": 170})
# Published bare contexts (lazy loading), where one was measured on the card itself.
MEASURED = MappingProxyType({
    "H100-SXM-80GB": (534 * MIB, "meta-pytorch/torchcomms#777: 'On H100, each primary context costs ~534 MiB'"),
    "B200-180GB": (612 * MIB, "unslothai/unsloth#8677: 'mem_get_info and synchronize cost 612 MiB, permanently'"),
    "RTX-6000-Ada-48GB": (426 * MIB, "unslothai/unsloth-zoo#1053: torch 2.10.0+cu130, 426 MiB at 0 allocated"),
    "RTX-3090-24GB": (256 * MIB, "invoke-ai/InvokeAI#9413: torch 2.7.1+cu128, 'a flat 256 MiB'"),
})


class Context(NamedTuple):
    bytes: int          # the point: bare context + kernel modules
    low: int
    high: int
    bare: int           # the driver's context alone (0 where not modelled)
    modules: int
    how: str            # the rows it rests on, in words


def catalogued(gpu: str) -> bool:
    """Whether the card has an SM count and a thread table here (the NVIDIA cards of gpus.py)."""
    return gpu in SMS and GPU_CATALOG[gpu].compute_capability in THREADS_PER_SM


def bare_context(gpu: str) -> tuple:
    """(bytes, how) of a catalogued NVIDIA card's bare context: its published figure, else the per-thread rule."""
    if gpu in MEASURED:
        return MEASURED[gpu]
    threads = SMS[gpu] * THREADS_PER_SM[GPU_CATALOG[gpu].compute_capability]
    return threads * PER_THREAD, f"{SMS[gpu]} SMs x {threads // SMS[gpu]:,} threads x 2.04 KiB (the per-thread rule)"


def estimate(workload, gpu: Optional[str] = None) -> Context:
    """The context of the workload's card (or of catalogued card `gpu`) under its torch release."""
    key = workload.gpu if gpu is None else gpu
    custom = gpu is None and workload.gpu_memory is not None
    if custom or not catalogued(key):
        return Context(FLAT, *FLAT_BAND, 0, 0, "1 GiB flat (no published context for this card: 0.5-1.5 GiB)")
    bare, how = bare_context(key)
    torch = assumed(workload.finetune.versions)["torch"]
    lazy = not older(torch, LAZY_FROM)
    low, modules, high = MODULES[lazy]
    loading = (f"torch's kernel modules as the step loads them (lazy loading), {modules // MIB} MiB" if lazy else
               f"every kernel module loaded at start (torch {torch}, before lazy loading), {modules // MIB:,} MiB")
    return Context(bare + modules, bare + low, bare + high, bare, modules,
                   f"bare context {bare / MIB:,.0f} MiB ({how}) + {loading}")


def context_bytes(workload, gpu: Optional[str] = None) -> int:
    """The CUDA context a plan counts: Workload.cuda_context_bytes where given (a measurement), else estimate()."""
    given = getattr(workload, "cuda_context_bytes", None)
    return given if given is not None else estimate(workload, gpu).bytes


def context_band(workload) -> tuple:
    """(low, high) of the context assumption (answers/ranges.py): a given figure keeps the flat band around it."""
    if workload.cuda_context_bytes is not None:
        return FLAT_BAND
    e = estimate(workload)
    return e.low, e.high


def context_dict(workload) -> dict:
    """The report's "cuda_context": the bytes counted, the band and what they rest on."""
    e, given = estimate(workload), workload.cuda_context_bytes
    low, high = context_band(workload)
    return {"bytes": e.bytes if given is None else given, "given": given is not None, "estimate_bytes": e.bytes,
            "low_bytes": low, "high_bytes": high, "bare_bytes": e.bare, "modules_bytes": e.modules,
            "how": "given" if given is not None else e.how, "source": SOURCES}
