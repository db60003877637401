"""The rollout engine's settings and its memory on one GPU: what it takes of the card, how many KV tokens fit, how
many sequences of a length run at once, and what stays on the GPU (and goes to host memory) while it sleeps.

vLLM (v1, 0.33.0): requested = ceil(total x gpu_memory_utilization) (v1/worker/utils.py request_memory); the KV
cache gets requested - weights - activation peak - non-torch memory - CUDA-graph estimate (gpu_worker.py
determine_available_memory), or kv_cache_memory_bytes when given; blocks = available // bytes per block
(kv_cache_planning.py), one of them the null block; tokens = int(blocks / ceil(max_model_len / block) x
max_model_len) (kv_cache_utils.py get_kv_cache_capacity). From the weights on, every step is vLLM's own integer
arithmetic (checked against its functions: tests/test_rl_engines.py); the weights, the activation peak, the
non-torch memory and the graph pool are what vLLM measures on the GPU, so here they are estimates and assumptions,
each replaceable by the figure vLLM's log prints.

SGLang (0.5.23): the KV pool gets what is free after the weights less (1 - mem_fraction_static) x what was free
before them, so static = mem_fraction_static x free memory before loading; tokens = available // cell size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

from ..scenario import FieldError, require_choice, require_int
from ..step.context import bare_context, catalogued
from .engines import (ENGINE_CHOICES, ENGINES, KV_DTYPES, SLEEP, SLEEP_LEVELS, WEIGHT_DTYPES, batch_defaults,
                      block_size_for, bytes_per_block, engine_weight_bytes, kv_dtype_error,
                      profile_activation_bytes)

GIB = 2**30
ROLLOUT_LIMITS = {"tp": (1, 1024), "max_num_seqs": (1, 10**6), "max_num_batched_tokens": (1, 10**8),
                  "max_model_len": (1, 10**8), "block_size": (1, 4096), "kv_cache_memory_bytes": (1, 2**50),
                  "activation_bytes": (0, 2**50), "non_torch_bytes": (0, 2**50), "cudagraph_bytes": (0, 2**50),
                  "context_bytes": (0, 2**40), "replicas": (1, 10**6)}
# Assumptions where the engine measures on the GPU (each replaceable by the log line it prints):
NON_TORCH_BYTES = GIB // 4       # vLLM's "non_torch_memory": 0.20 GiB (vllm-project/vllm#14447, tp 4), 0.33 (#14452)
CUDAGRAPH_BYTES = GIB // 2       # "Estimated CUDA graph memory: 0.36 GiB total" (gpustack/runner#251, vLLM 0.27)
CONTEXT_BYTES = GIB // 2         # the engine process's own CUDA context, outside its fraction (created before
                                 # vLLM's init snapshot); 0 when the engine runs inside the trainer (TRL colocate).
                                 # On a catalogued NVIDIA card: the card's bare context (step/context.py): the
                                 # kernels the engine loads after the snapshot are its non-torch memory


def engine_context_bytes(gpu_name: str) -> int:
    """The engine process's own CUDA context: the card's bare context where it is catalogued, else CONTEXT_BYTES."""
    return bare_context(gpu_name)[0] if catalogued(gpu_name) else CONTEXT_BYTES


@dataclass(frozen=True)
class Rollout:
    engine: str = "vllm"
    gpu_memory_utilization: float = 0.5       # SGLang: mem_fraction_static
    tp: int = 1
    max_num_seqs: Optional[int] = None        # None: the engine's default for the card (engines.batch_defaults)
    max_num_batched_tokens: Optional[int] = None
    max_model_len: Optional[int] = None       # None: prompt + max response (what verl and TRL pass)
    dtype: str = "bf16"
    kv_cache_dtype: str = "auto"
    block_size: Optional[int] = None          # None: the engine's (vLLM 16; 64 with MLA)
    cuda_graphs: bool = True                  # False: enforce_eager
    sleep_level: int = 1                      # between rollouts: 0 awake, 1 or 2 (engines.SLEEP)
    kv_cache_memory_bytes: Optional[int] = None   # vLLM's explicit KV size (skips the fraction's arithmetic)
    activation_bytes: Optional[int] = None    # None: engines.profile_activation_bytes
    non_torch_bytes: Optional[int] = None     # None: NON_TORCH_BYTES
    cudagraph_bytes: Optional[int] = None     # None: CUDAGRAPH_BYTES with CUDA graphs, 0 without
    context_bytes: Optional[int] = None       # None: CONTEXT_BYTES
    replicas: int = 1                         # engines (data-parallel copies) over the rollout GPUs

    def __post_init__(self):
        require_choice("engine", self.engine, ENGINE_CHOICES)
        u = self.gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u <= 1:
            raise FieldError("gpu_memory_utilization", u, "a fraction above 0 and at most 1")
        for field, (lo, hi) in ROLLOUT_LIMITS.items():
            value = getattr(self, field)
            if value is not None or field in ("tp", "replicas"):
                require_int(field, value, lo, hi)
        require_choice("dtype", self.dtype, WEIGHT_DTYPES)
        require_choice("kv_cache_dtype", self.kv_cache_dtype, KV_DTYPES)
        require_choice("sleep_level", self.sleep_level, SLEEP_LEVELS)
        if not isinstance(self.cuda_graphs, bool):
            raise FieldError("cuda_graphs", self.cuda_graphs, "true or false")
        if self.kv_cache_memory_bytes is not None and self.engine != "vllm":
            raise FieldError("kv_cache_memory_bytes", self.kv_cache_memory_bytes, "unset unless the engine is vLLM")


class EngineMemory(NamedTuple):
    """One engine rank's memory on its GPU (bytes), with the formula of each term."""
    engine: str
    capacity_bytes: int          # the card's total as the engine reads it (torch's total_memory)
    budget_bytes: int            # vLLM: requested; SGLang: mem_fraction_static x free before the weights
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    context_bytes: int
    available_kv_bytes: int
    block_size: int
    bytes_per_block: int
    num_blocks: int              # SGLang: pages
    kv_bytes: int                # allocated: blocks x bytes per block
    kv_tokens: int               # vLLM's "GPU KV cache size"; SGLang's max_total_num_tokens
    max_model_len: int
    max_concurrency: float       # vLLM's "Maximum concurrency for max_model_len tokens per request"
    refused: Optional[str]       # why the engine would refuse to start, or None
    formulas: dict
    max_num_seqs: int = 256      # as given, or the engine's default for the card
    max_num_batched_tokens: int = 8192

    @property
    def awake_bytes(self) -> int:
        """On the GPU while it generates: its context, weights, activation peak, non-torch memory, graphs, KV."""
        return (self.context_bytes + self.weights_bytes + self.activation_bytes + self.non_torch_bytes
                + self.cudagraph_bytes + self.kv_bytes)

    def parts(self, state: str = "awake", sleep_level: int = 1) -> dict:
        """Named parts on the GPU: awake, weights only (woken for the weight sync, KV still freed), or asleep."""
        rule = SLEEP[sleep_level]
        keep = {"awake": {"weights", "kv", "graphs"}, "weights": {"weights", "graphs"},
                "asleep": {k for k, where in (("weights", rule.weights), ("kv", rule.kv_cache),
                                              ("graphs", rule.graphs)) if where == "gpu"}}[state]
        out = {"engine CUDA context": self.context_bytes, "engine non-torch memory": self.non_torch_bytes}
        if "weights" in keep:
            out["engine weights"] = self.weights_bytes
        if "graphs" in keep:
            out["engine CUDA graphs"] = self.cudagraph_bytes
        if state == "awake" or "kv" in keep:
            out["engine KV cache"] = self.kv_bytes
        if state == "awake":
            out["engine activations"] = self.activation_bytes
        return {k: v for k, v in out.items() if v}

    def host_bytes(self, sleep_level: int) -> int:
        """Pinned host memory the sleeping engine holds (what its sleep level offloads)."""
        rule = SLEEP[sleep_level]
        return (self.weights_bytes if rule.weights == "host" else 0) + \
            (self.cudagraph_bytes if rule.graphs == "host" else 0)

    def concurrent(self, length: int) -> int:
        """Sequences of `length` tokens the cache holds at once, at most max_num_seqs: vLLM allocates whole blocks
        as tokens arrive and holds the null block back (block_pool.py); SGLang whole pages."""
        per_seq = -(-length // self.block_size)
        usable = self.num_blocks - (1 if self.engine == "vllm" else 0)
        return max(0, min(self.max_num_seqs, usable // per_seq))


def engine_memory(rollout: Rollout, arch, capacity: int, max_model_len: int, resident_before: int = 0,
                  gpu_name: str = "") -> EngineMemory:
    """One engine rank on a card of `capacity` bytes (what torch reports as its total), with `resident_before`
    bytes already held by others on the card when it starts (SGLang's fraction is of the free memory)."""
    r, e = rollout, ENGINES[rollout.engine]
    problem = kv_dtype_error(arch, r.kv_cache_dtype)
    if problem:
        raise FieldError("kv_cache_dtype", r.kv_cache_dtype, f"a dtype this model can use: {problem}")
    model_dtype = "bf16" if r.dtype == "fp8_e4m3" else r.dtype
    seqs, tokens = batch_defaults(r.engine, capacity, gpu_name)
    seqs = r.max_num_seqs or seqs
    tokens = r.max_num_batched_tokens or tokens
    weights = engine_weight_bytes(arch, r.tp, r.dtype, e.vocab_padding)
    act = r.activation_bytes if r.activation_bytes is not None else profile_activation_bytes(
        arch, r.tp, model_dtype, tokens, seqs, e.vocab_padding)
    non_torch = NON_TORCH_BYTES if r.non_torch_bytes is None else r.non_torch_bytes
    graphs = (CUDAGRAPH_BYTES if r.cuda_graphs else 0) if r.cudagraph_bytes is None else r.cudagraph_bytes
    context = engine_context_bytes(gpu_name) if r.context_bytes is None else r.context_bytes
    block = block_size_for(r.engine, arch, r.block_size)
    per_block = bytes_per_block(arch, r.tp, r.kv_cache_dtype, model_dtype, block)
    f = {"weights": f"{weights:,} = the model's tensors on one of {r.tp} TP rank(s) in {r.dtype}, vocabulary "
                    f"padded to {e.vocab_padding}",
         "bytes per block": f"{per_block:,} = layers x block x token state = {arch.layers} x {block} x "
                            f"{per_block // (arch.layers * block):,}"}
    if r.engine == "vllm":
        budget = math.ceil(capacity * r.gpu_memory_utilization)
        f["requested"] = f"{budget:,} = ceil(total x gpu_memory_utilization) = ceil({capacity:,} x " \
                         f"{r.gpu_memory_utilization})"
        if r.kv_cache_memory_bytes is not None:
            available = r.kv_cache_memory_bytes
            f["available KV"] = f"{available:,} = kv_cache_memory_bytes (the fraction is not used)"
        else:
            available = budget - weights - act - non_torch - graphs
            f["available KV"] = (f"{available:,} = requested - weights - activation peak - non-torch - CUDA graphs "
                                 f"= {budget:,} - {weights:,} - {act:,} - {non_torch:,} - {graphs:,}")
        blocks = max(0, available) // per_block
        per_req = -(-max_model_len // block)
        concurrency = blocks / per_req
        kv_tokens = int(concurrency * max_model_len)
        needed = per_req * per_block
        refused = None
        if available <= 0:
            refused = "No available memory for the cache blocks (raise gpu_memory_utilization)"
        elif needed > available - per_block:
            refused = (f"To serve at least one request with the model's max seq len ({max_model_len}), "
                       f"{needed:,} bytes of KV cache are needed, more than the {available - per_block:,} available")
        if refused is None and budget > capacity - resident_before - context:
            refused = (f"Free memory on device ({capacity - resident_before - context:,} bytes) on startup is less "
                       f"than desired GPU memory utilization ({r.gpu_memory_utilization}, {budget:,} bytes)")
        f["blocks"] = f"{blocks:,} = available // bytes per block = {max(0, available):,} // {per_block:,}"
        f["KV tokens"] = (f"{kv_tokens:,} = int(blocks / ceil(max_model_len / block) x max_model_len) = "
                          f"int({blocks:,} / {per_req:,} x {max_model_len:,})")
    else:
        free = capacity - resident_before - context
        budget = int(free * r.gpu_memory_utilization)
        available = budget - weights - non_torch
        cells = max(0, available) // (per_block // block)
        kv_tokens = cells // block * block
        blocks = kv_tokens // block
        concurrency = kv_tokens / max_model_len
        refused = None if available > 0 else "Loaded weights leave no GPU memory for the KV cache (raise " \
                                             "mem_fraction_static)"
        f["static"] = f"{budget:,} = mem_fraction_static x free before the weights = {r.gpu_memory_utilization} x " \
                      f"{free:,}"
        f["available KV"] = f"{available:,} = static - weights - non-torch = {budget:,} - {weights:,} - {non_torch:,}"
        f["KV tokens"] = f"{kv_tokens:,} = available // cell size = {max(0, available):,} // {per_block // block:,}"
    return EngineMemory(r.engine, capacity, budget, weights, act, non_torch, graphs, context, available, block,
                        per_block, blocks, blocks * per_block, kv_tokens, max_model_len, concurrency, refused, f,
                        seqs, tokens)
