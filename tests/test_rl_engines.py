"""The rollout engines' memory (zerocalc/rl/engines.py, rollout.py) against vLLM's own accounting.

VLLM_CASES are the output of tools/measure_vllm_kv.py: vLLM 0.33.0's own functions run on the CPU from its wheel
(ModelConfig.get_num_kv_heads, FullAttentionSpec / MLAAttentionSpec.page_size_bytes, get_kv_cache_configs,
get_kv_cache_capacity, request_memory, pad_vocab_size). Each is pinned here; the script can be rerun with the
wheel unpacked (VLLM_SOURCE=/path/to/unpacked:/path/to/deps, see the script) and must print the same.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.rl.engines import (bytes_per_block, engine_weight_bytes, kv_heads_per_rank, profile_activation_bytes,
                                 token_state_bytes)
from zerocalc.rl.rollout import CUDAGRAPH_BYTES, Rollout, engine_memory
from zerocalc.scenario import FieldError

ROOT = Path(__file__).resolve().parents[1]

# (case as tools/measure_vllm_kv.py CASES gives it, what vLLM 0.33.0 returned)
VLLM_CASES = [
    ({"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 1, "kv_dtype": "bf16", "block_size": 16,
      "available": 53_290_000_000, "max_model_len": 8192, "total": 84_942_979_072, "utilization": 0.9},
     {"kv_heads_per_rank": 8, "page_size_bytes": 65536, "requested_memory": 76448681165, "num_blocks": 25410,
      "kv_cache_tokens": 406560, "max_concurrency": 49.62890625}),
    ({"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 2, "kv_dtype": "bf16", "block_size": 16,
      "available": 21474836480, "max_model_len": 4096, "total": 84_942_979_072, "utilization": 0.5},
     {"kv_heads_per_rank": 4, "page_size_bytes": 32768, "requested_memory": 42471489536, "num_blocks": 20480,
      "kv_cache_tokens": 327680, "max_concurrency": 80.0}),
    ({"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 16, "kv_dtype": "bf16", "block_size": 16,
      "available": 10737430585, "max_model_len": 3000, "total": 150_107_897_856, "utilization": 0.6},
     {"kv_heads_per_rank": 1, "page_size_bytes": 8192, "requested_memory": 90064738714, "num_blocks": 40960,
      "kv_cache_tokens": 653617, "max_concurrency": 217.87234042553192}),
    ({"layers": 28, "kv_heads": 4, "head_size": 128, "tp": 1, "kv_dtype": "fp8", "block_size": 16,
      "available": 31000000001, "max_model_len": 10240, "total": 84_942_979_072, "utilization": 0.85},
     {"kv_heads_per_rank": 4, "page_size_bytes": 16384, "requested_memory": 72201532212, "num_blocks": 67574,
      "kv_cache_tokens": 1081184, "max_concurrency": 105.584375}),
    ({"layers": 12, "kv_heads": 12, "head_size": 64, "tp": 1, "kv_dtype": "fp16", "block_size": 32,
      "available": 1234567890, "max_model_len": 1024, "total": 23_655_874_560, "utilization": 0.3},
     {"kv_heads_per_rank": 12, "page_size_bytes": 98304, "requested_memory": 7096762368, "num_blocks": 1046,
      "kv_cache_tokens": 33472, "max_concurrency": 32.6875}),
    ({"layers": 61, "kv_heads": 128, "head_size": 576, "tp": 8, "kv_dtype": "bf16", "block_size": 64, "mla": True,
      "available": 42949672960, "max_model_len": 32768, "total": 150_107_897_856, "utilization": 0.9},
     {"kv_heads_per_rank": 1, "page_size_bytes": 73728, "requested_memory": 135097108071, "num_blocks": 9549,
      "kv_cache_tokens": 611136, "max_concurrency": 18.650390625}),
    ({"layers": 61, "kv_heads": 128, "head_size": 576, "tp": 8, "kv_dtype": "fp8_ds_mla", "block_size": 64,
      "mla": True, "available": 42949672960, "max_model_len": 32768, "total": 150_107_897_856, "utilization": 0.9},
     {"kv_heads_per_rank": 1, "page_size_bytes": 41984, "requested_memory": 135097108071, "num_blocks": 16770,
      "kv_cache_tokens": 1073280, "max_concurrency": 32.75390625}),
    ({"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 1, "kv_dtype": "bf16", "block_size": 16,
      "available": 1073741824, "max_model_len": 16384, "total": 84_942_979_072, "utilization": 0.5},
     {"kv_heads_per_rank": 8, "page_size_bytes": 65536, "requested_memory": 42471489536,
      "refused": "To serve at least one request with the model's max seq len (16384)"}),
]
VLLM_PADDED_VOCAB = {128256: 128256, 151936: 151936, 32000: 32000, 50257: 50304, 129280: 129280}


def _arch(case) -> Architecture:
    if case.get("mla"):       # DeepSeek-V3's attention: latent 512 + rotary 64 = the 576 "head" vLLM caches
        return Architecture(layers=case["layers"], hidden=7168, heads=128, ffn=18432, vocab=129280, seq_len=4096,
                            kv_lora_rank=512, qk_rope_dim=64, qk_nope_dim=128, v_head_dim=128, q_lora_rank=1536)
    heads = case["kv_heads"] * 4 if case["kv_heads"] < 12 else case["kv_heads"]
    return Architecture(layers=case["layers"], hidden=heads * case["head_size"], heads=heads,
                        kv_heads=case["kv_heads"], ffn=4 * heads * case["head_size"], vocab=32000, seq_len=4096)


@pytest.mark.parametrize("case, vllm", VLLM_CASES, ids=[f"case{i}" for i in range(len(VLLM_CASES))])
def test_kv_sizing_equals_vllms_own_functions(case, vllm):
    arch = _arch(case)
    dtype = "fp16" if case["kv_dtype"] == "fp16" else "bf16"
    rollout = Rollout(gpu_memory_utilization=case["utilization"], tp=case["tp"], kv_cache_dtype=case["kv_dtype"],
                      block_size=case["block_size"], kv_cache_memory_bytes=case["available"], dtype=dtype)
    m = engine_memory(rollout, arch, case["total"], case["max_model_len"])
    assert kv_heads_per_rank(arch, case["tp"]) == vllm["kv_heads_per_rank"]
    assert m.bytes_per_block == vllm["page_size_bytes"] * case["layers"]
    assert m.budget_bytes == vllm["requested_memory"]
    if "refused" in vllm:
        assert m.refused and m.refused.startswith(vllm["refused"])
        return
    assert m.refused is None
    assert (m.num_blocks, m.kv_tokens, m.max_concurrency) == (
        vllm["num_blocks"], vllm["kv_cache_tokens"], vllm["max_concurrency"])
    assert m.kv_bytes == m.num_blocks * m.bytes_per_block <= case["available"]


def test_vocabulary_padding_is_vllms():
    for vocab, padded in VLLM_PADDED_VOCAB.items():
        arch = Architecture(layers=1, hidden=64, heads=1, ffn=64, vocab=vocab, seq_len=64, tied_embeddings=True)
        norms = 2 * 64 + 64
        assert engine_weight_bytes(arch, 1, "fp32") == 4 * (padded * 64 + norms + 4 * 64 * 64 + 3 * 64 * 64)


@pytest.mark.skipif(not os.environ.get("VLLM_SOURCE"), reason="VLLM_SOURCE (an unpacked vllm 0.33.0 wheel and its "
                    "pure-Python dependencies, see tools/measure_vllm_kv.py) not set: the pinned numbers stand")
def test_the_pinned_numbers_are_what_vllm_prints_now():
    env = {**os.environ, "PYTHONPATH": os.environ["VLLM_SOURCE"]}
    done = subprocess.run([sys.executable, "tools/measure_vllm_kv.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    for (case, vllm), got in zip(VLLM_CASES, out["cases"]):
        assert got["case"] == case
        expect = dict(vllm)
        if "refused" in expect:
            assert got["vllm"].pop("refused").startswith(expect.pop("refused"))
        assert got["vllm"] == expect
    assert {int(k): v for k, v in out["padded_vocab"].items()} == VLLM_PADDED_VOCAB


def test_mla_caches_the_latent_not_the_heads():
    """DeepSeek-V3 (config.json: kv_lora_rank 512, qk_rope_head_dim 64, 61 layers): 576 x 2 bytes per token per
    layer in bf16 on every TP rank, against 128 heads x (192 + 128) x 2 had it cached K and V per head."""
    arch = MODEL_PRESETS["deepseek-v3"][0]
    assert token_state_bytes(arch, 8, "auto", "bf16") == 576 * 2
    assert token_state_bytes(arch, 1, "auto", "bf16") == 576 * 2
    assert token_state_bytes(arch, 8, "fp8_ds_mla", "bf16") == 656
    assert bytes_per_block(arch, 8, "auto", "bf16", 64) == 61 * 64 * 1152


def test_gqa_heads_split_then_replicate():
    arch = MODEL_PRESETS["llama-3-8b"][0]          # 8 KV heads of 128
    assert [token_state_bytes(arch, tp, "auto", "bf16") for tp in (1, 2, 8, 16)] == [4096, 2048, 512, 512]
    with pytest.raises(FieldError) as err:
        engine_memory(Rollout(kv_cache_dtype="fp8_ds_mla"), arch, 80 * 2**30, 4096)
    assert err.value.field == "kv_cache_dtype"


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), name=st.sampled_from(["llama-3-8b", "qwen2.5-7b", "mixtral-8x7b",
                                                               "deepseek-v2-lite", "gpt2"]))
def test_engine_weights_split_over_tp_cover_the_model(tp, name):
    """Each rank's share, times the ranks, holds every parameter at least once (replicated norms, routers and
    KV heads below one per rank count on every rank); one rank holds the whole padded model."""
    arch = MODEL_PRESETS[name][0]
    one = engine_weight_bytes(arch, 1, "bf16")
    assert one >= 2 * param_count(arch)
    assert one - 2 * param_count(arch) < 2 * 64 * arch.hidden * 2          # the padding rows only
    if arch.heads % tp == 0 and arch.ffn % tp == 0:
        assert tp * engine_weight_bytes(arch, tp, "bf16") >= one
        assert engine_weight_bytes(arch, tp, "bf16") <= one


def test_the_full_budget_arithmetic_and_what_sleep_releases():
    arch = MODEL_PRESETS["qwen2.5-7b"][0]
    capacity = 84_942_979_072                              # H100 80GB: what torch reports
    r = Rollout(gpu_memory_utilization=0.6, tp=2, max_model_len=None)
    m = engine_memory(r, arch, capacity, 1024 + 4096, gpu_name="H100-SXM-80GB")
    assert (m.max_num_seqs, m.max_num_batched_tokens) == (1024, 16384)       # vLLM's LLM-class row at >= 70 GiB
    requested = -(-capacity * 6 // 10)
    assert m.budget_bytes == requested
    assert m.available_kv_bytes == requested - m.weights_bytes - m.activation_bytes - m.non_torch_bytes - \
        CUDAGRAPH_BYTES
    assert m.kv_bytes <= m.available_kv_bytes < m.kv_bytes + m.bytes_per_block
    assert m.awake_bytes - m.context_bytes <= requested
    assert m.concurrent(5120) == min(1024, (m.num_blocks - 1) // (5120 // 16))
    assert m._replace(max_num_seqs=64).concurrent(5120) == 64
    a100 = engine_memory(r, arch, 85_000_000_000, 5120, gpu_name="A100-80GB")
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 8192)
    one = m.parts("asleep", 1)
    assert one == {"engine CUDA context": m.context_bytes, "engine non-torch memory": m.non_torch_bytes}
    assert m.parts("asleep", 2) == one
    assert m.host_bytes(1) == m.weights_bytes + m.cudagraph_bytes and m.host_bytes(2) == m.cudagraph_bytes
    assert sum(m.parts("awake").values()) == m.awake_bytes
    assert sum(m.parts("asleep", 0).values()) == m.awake_bytes - m.activation_bytes
    assert "engine KV cache" not in m.parts("weights", 1)


def test_startup_refusal_when_others_hold_the_card():
    """vLLM refuses to start when the free memory is below ceil(total x utilization) (v1/worker/utils.py
    request_memory): a colocated trainer's resident state counts against it."""
    arch = MODEL_PRESETS["qwen2.5-0.5b"][0]
    capacity = 84_942_979_072
    ok = engine_memory(Rollout(gpu_memory_utilization=0.5), arch, capacity, 2048, resident_before=30 * 10**9)
    assert ok.refused is None
    bad = engine_memory(Rollout(gpu_memory_utilization=0.5), arch, capacity, 2048, resident_before=45 * 10**9)
    assert bad.refused.startswith("Free memory on device")


def test_sglang_static_fraction_of_the_free_memory():
    """SGLang 0.5.23 kv_cache_configurator.py _profile_available_bytes: available = free after the weights -
    free before x (1 - mem_fraction_static); pool_configurator.py: tokens = available // cell size (page 1)."""
    arch = MODEL_PRESETS["llama-3-8b"][0]
    capacity, before = 84_942_979_072, 10 * 10**9
    r = Rollout(engine="sglang", gpu_memory_utilization=0.8, non_torch_bytes=0, context_bytes=0)
    m = engine_memory(r, arch, capacity, 8192, resident_before=before)
    free = capacity - before
    cell = 32 * 8 * 2 * 128 * 2
    assert m.budget_bytes == int(free * 0.8)
    assert m.kv_tokens == (int(free * 0.8) - m.weights_bytes) // cell
    assert m.kv_bytes == m.kv_tokens * cell


def test_profile_activation_estimate_against_vllms_log():
    """vllm-project/vllm#10511 (Llama-3-8B, one H100, max_num_batched_tokens 8192, max_num_seqs 256; vLLM 0.6's
    serve defaults): "PyTorch
    activation peak memory 1.26GiB". The estimate is within 10 %."""
    arch = MODEL_PRESETS["llama-3-8b"][0]
    est = profile_activation_bytes(arch, 1, "bf16", 8192, 256)
    assert abs(est - 1.26 * 2**30) / (1.26 * 2**30) < 0.10


@pytest.mark.parametrize("field, value", [("gpu_memory_utilization", 0), ("gpu_memory_utilization", 1.5),
                                          ("gpu_memory_utilization", True), ("tp", 0), ("engine", "trt"),
                                          ("sleep_level", 3), ("kv_cache_dtype", "int3"), ("cuda_graphs", "yes"),
                                          ("max_num_seqs", 0), ("block_size", 0)])
def test_bad_rollout_settings_name_their_field(field, value):
    with pytest.raises(FieldError) as err:
        Rollout(**{field: value})
    assert err.value.field == field
    with pytest.raises(FieldError):
        Rollout(engine="sglang", kv_cache_memory_bytes=2**30)
