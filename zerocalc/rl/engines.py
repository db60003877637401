"""The rollout engines' memory rules as data: what vLLM and SGLang size, from which fraction of the card, in which
pages, and what their sleep levels release. One small function applies each row (rl/rollout.py).

Every row names its source at a release (the wheel's file; read from the wheel, never copied) and how it was
checked. vLLM's KV sizing is checked against vLLM's own functions, imported on the CPU from the 0.33.0 wheel
(tools/measure_vllm_kv.py prints them; tests/test_rl_engines.py pins its output).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple, Optional

from ..model.inventory import tensors
from ..model.placement import block_counts, local_elements
from ..tables import DTYPE_BITS, bytes_of


class Engine(NamedTuple):
    name: str
    release: str
    fraction_field: str          # the engine's own name for its share of the card
    fraction_of: str             # "total" (the card's total memory) or "free" (free memory before the weights load)
    default_fraction: Optional[float]    # None: worked out per card by the engine (RL frameworks pass their own)
    block_size: int              # tokens per KV block (SGLang: page size); MLA: mla_block_size
    mla_block_size: int
    vocab_padding: int           # the vocabulary rows are padded to a multiple of this before the TP split
    source: str
    checked: str


ENGINES = MappingProxyType({
    "vllm": Engine(
        "vLLM", "0.33.0", "gpu_memory_utilization", "total", 0.92, 16, 64, 64,
        "vllm 0.33.0: config/cache.py (gpu_memory_utilization=0.92, DEFAULT_BLOCK_SIZE=16); v1/worker/utils.py "
        "request_memory (ceil(total x utilization)); v1/worker/gpu_worker.py determine_available_memory (requested "
        "- non-KV - CUDA-graph estimate); v1/core/kv_cache_planning.py get_kv_cache_config_from_groups "
        "(available // bytes per block); v1/attention/backends/mla/flashmla.py (block 64); "
        "model_executor/layers/vocab_parallel_embedding.py (DEFAULT_VOCAB_PADDING_SIZE=64)",
        "vLLM's own KV functions imported on the CPU (tools/measure_vllm_kv.py): exact"),
    "sglang": Engine(
        "SGLang", "0.5.23", "mem_fraction_static", "free", None, 1, 1, 64,
        "sglang 0.5.23: srt/mem_cache/kv_cache_configurator.py _profile_available_bytes (free after the weights "
        "- free before them x (1 - mem_fraction_static)); srt/model_executor/pool_configurator.py "
        "_compute_cell_size and calculate_pool_sizes (tokens = available // cell size, to whole pages); "
        "srt/arg_groups/memory_hook.py (the default fraction from the card's memory and the reserved activations)",
        "SGLang's code read at the release (its server pulls CUDA kernels: not importable here)"),
})
ENGINE_CHOICES = tuple(ENGINES)

# KV-cache dtypes: bytes per stored element, or for MLA's packed layouts bytes per token per layer.
KV_DTYPES = MappingProxyType({"auto": None, "bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "fp8_e4m3": 1,
                              "fp8_e5m2": 1, "fp8_ds_mla": None, "nvfp4_ds_mla": None})
# vLLM mla_attention.py get_kv_cache_spec: "ds_mla layouts pack NoPE + RoPE + scales into one opaque per-token blob"
MLA_PACKED_BYTES = MappingProxyType({"fp8_ds_mla": 656, "nvfp4_ds_mla": 352})
WEIGHT_DTYPES = ("bf16", "fp16", "fp32", "fp8_e4m3")


class SleepRule(NamedTuple):
    level: int
    weights: str                 # "gpu" (stays), "host" (offloaded to pinned host memory), "freed" (discarded)
    kv_cache: str
    graphs: str                  # CUDA-graph pools and runtime buffers
    about: str


# vLLM 0.33.0 device_allocator/sleep_mode_backend.py CuMemBackend.suspend: offload tags ("runtime", "cudagraph"),
# plus "weights" at level 1; every other pool (the KV cache) is discarded (cumem.py sleep). NCCL buffers and the
# CUDA context sit outside the pool and stay.
SLEEP = MappingProxyType({
    0: SleepRule(0, "gpu", "gpu", "gpu", "no sleep: the engine keeps its weights, KV cache and graphs between "
                                         "rollouts (verl free_cache_engine false, TRL vllm_enable_sleep_mode false)"),
    1: SleepRule(1, "host", "freed", "host", "level 1: weights and graph pools to pinned host memory, the KV cache "
                                             "discarded (vLLM sleep(level=1))"),
    2: SleepRule(2, "freed", "freed", "host", "level 2: weights and KV cache discarded, graph pools to host memory; "
                                              "the trainer's weight sync refills the weights (vLLM sleep(level=2); "
                                              "SGLang release_memory_occupation)"),
})
SLEEP_LEVELS = tuple(SLEEP)


GIB = 2**30


def batch_defaults(engine: str, capacity: int, gpu_name: str = "") -> tuple:
    """(max_num_seqs, max_num_batched_tokens) when not given. vLLM 0.33.0 engine/arg_utils.py
    _set_default_max_num_seqs_and_batched_tokens_args, the offline LLM class's row (RL frameworks build an LLM):
    16384 tokens and 1024 sequences on cards of 70 GiB and more except A100s, else 8192 and 256. SGLang sizes its
    running requests from the KV pool (no cap here) and prefills 8192-token chunks (chunked_prefill_size)."""
    if engine == "sglang":
        return 10**6, 8192
    if capacity >= 70 * GIB and "a100" not in gpu_name.lower():
        return 1024, 16384
    return 256, 8192


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes of one stored K or V element: the model's dtype for "auto" (vLLM cache_config cache_dtype)."""
    size = KV_DTYPES[kv_cache_dtype]
    return DTYPE_BITS[model_dtype] // 8 if size is None else size


def kv_heads_per_rank(arch, tp: int) -> int:
    """KV heads one tensor-parallel rank stores: max(1, heads // tp), replicated below one head per rank (vLLM
    config/model.py get_num_kv_heads; SGLang get_num_kv_heads); MLA stores one latent "head"."""
    return 1 if arch.mla else max(1, arch.n_kv_heads // tp)


def token_state_bytes(arch, tp: int, kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes one token occupies in one layer's cache on one rank: K and V of each local head (MHA, GQA, MQA:
    heads x (head size + V head size) x element), or MLA's latent and rotary key (kv_lora_rank + qk_rope_dim) x
    element (vLLM MLAAttentionSpec: head_size_v 0), or a packed MLA layout's per-token blob."""
    if arch.mla:
        if kv_cache_dtype in MLA_PACKED_BYTES:
            return MLA_PACKED_BYTES[kv_cache_dtype]
        return (arch.kv_lora_rank + arch.qk_rope_dim) * kv_element_bytes(kv_cache_dtype, model_dtype)
    return kv_heads_per_rank(arch, tp) * 2 * arch.d_head * kv_element_bytes(kv_cache_dtype, model_dtype)


def kv_dtype_error(arch, kv_cache_dtype: str) -> Optional[str]:
    """Why a KV dtype cannot be used with this model (None when it can)."""
    if kv_cache_dtype in MLA_PACKED_BYTES and not arch.mla:
        return f"{kv_cache_dtype} is a packed layout for latent attention (MLA) models only"
    return None


def block_size_for(engine: str, arch, given: Optional[int]) -> int:
    e = ENGINES[engine]
    return given if given is not None else (e.mla_block_size if arch.mla else e.block_size)


def bytes_per_block(arch, tp: int, kv_cache_dtype: str, model_dtype: str, block_size: int) -> int:
    """One block of every attention layer on one rank: vLLM's page (block_size x token state) summed over the layers
    (kv_cache_planning.py _get_kv_cache_bytes_per_block, uniform full attention); SGLang's cell size x page."""
    return arch.layers * block_size * token_state_bytes(arch, tp, kv_cache_dtype, model_dtype)


def engine_weight_bytes(arch, tp: int, dtype: str, vocab_padding: int = 64) -> int:
    """The engine's weights on one tensor-parallel rank: every tensor's local split in the engine dtype, the
    vocabulary padded to `vocab_padding` rows first (vLLM pad_vocab_size), KV projections never below one head per
    rank (vLLM QKVParallelLinear replicates them), experts split over the TP ranks (vLLM's fused MoE default), norms
    and routers whole. Tied embeddings once."""
    rows = -(-arch.vocab // vocab_padding) * vocab_padding
    every = tuple(range(arch.layers))
    total = 0
    for t in tensors(arch):
        if t.tied:
            continue
        n = local_elements(t, tp, rows, 1, tp)
        if t.module in ("k_proj", "v_proj") and tp > arch.n_kv_heads:
            n = t.elements // arch.n_kv_heads
        total += n * (block_counts(arch, every, t) if t.place == "layer" else 1)
    return bytes_of(total, DTYPE_BITS[dtype])


def profile_activation_bytes(arch, tp: int, dtype: str, tokens: int, seqs: int, vocab_padding: int = 64) -> int:
    """An estimate of vLLM's profile-run activation peak (gpu_worker.py memory_profiling: the torch peak of one
    dummy forward over max_num_batched_tokens, then its sampler over max_num_seqs rows): per token the MLP's
    gate-and-up output, its activation and four hidden-size tensors in the model dtype (the residual stream, the
    normed input, the attention output and the MLP output); per sequence the gathered fp32 logits and the
    sampler's fp32 probabilities. vLLM measures this on the GPU; checked against its log for Llama-3-8B on an
    H100 (vllm-project/vllm#10511: 1.26 GiB measured, 1.15 GiB here)."""
    width = (arch.experts_per_token * arch.moe_ffn if arch.experts else arch.ffn) // tp
    forward = tokens * (3 * width + 4 * arch.hidden) * (DTYPE_BITS[dtype] // 8)
    vocab = -(-arch.vocab // vocab_padding) * vocab_padding
    return forward + seqs * vocab * 4 * 2
