"""Run vLLM's own KV-cache accounting on the CPU, for the cases zerocalc's engine table is pinned against
(tests/test_rl_engines.py VLLM_CASES). Not needed by CI: the pinned numbers in the test are this script's output.

What runs is vLLM 0.33.0's code from its wheel, not a restatement of it:
- config/model.py ModelConfig.get_num_kv_heads (KV heads per tensor-parallel rank; MLA: 1), called on a stand-in
  holding only the attributes it reads;
- v1/kv_cache_interface.py FullAttentionSpec / MLAAttentionSpec .page_size_bytes (the spec each attention layer
  returns: attention.py and mla_attention.py get_kv_cache_spec, the fp8_ds_mla blob of 656 bytes included);
- v1/core/kv_cache_planning.py get_kv_cache_configs (the null block held back for the check, available memory //
  bytes per block, the "To serve at least one request" refusal) and v1/core/kv_cache_utils.py
  get_kv_cache_capacity (the "GPU KV cache size: N tokens" and "Maximum concurrency" lines);
- v1/worker/utils.py request_memory (ceil(total memory x gpu_memory_utilization));
- model_executor/layers/vocab_parallel_embedding.py pad_vocab_size.

Set up (about 2 minutes; nothing is installed into the project's environment):
    pip download --no-deps vllm==0.33.0 -d /tmp/v && cd /tmp/v && unzip -q vllm-0.33.0-*.whl -x '*.so' -d src
    pip install --no-deps --target /tmp/v/deps cbor2==6.3.0 pyzmq==27.3.0 aiohttp==3.14.5 multidict==7.2.1 \
        yarl==1.25.1 propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0 openai==3.57.0 \
        openai_harmony==0.0.8 sniffio==1.3.1 pybase64==1.5.1 cachetools==8.0.2 msgspec==0.23.0 \
        cloudpickle==3.1.3 uvloop==0.23.0 prometheus_client==0.26.0 fastapi==0.165.0
    PYTHONPATH=/tmp/v/src:/tmp/v/deps python tools/measure_vllm_kv.py
It prints one JSON object per case. Modules vLLM imports only for serving (structured output, tracing, GGUF) are
stood in for by empty modules: none of them is on the path of the functions above.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
from types import SimpleNamespace as NS
from unittest.mock import MagicMock

STOOD_IN = ("partial_json_parser", "opentelemetry", "xgrammar", "tvm_ffi", "llguidance", "outlines_core",
            "mistral_common", "gguf", "lm_format_enforcer")

# The cases: a Llama-3-8B-like GQA model, the same at tp 2 and 16 (KV heads replicated), fp8 KV, an MHA model,
# DeepSeek-V3's latent KV in bf16 and fp8_ds_mla, and one that cannot hold a single request.
CASES = [
    {"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 1, "kv_dtype": "bf16", "block_size": 16,
     "available": 53_290_000_000, "max_model_len": 8192, "total": 84_942_979_072, "utilization": 0.9},
    {"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 2, "kv_dtype": "bf16", "block_size": 16,
     "available": 20 * 2**30, "max_model_len": 4096, "total": 84_942_979_072, "utilization": 0.5},
    {"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 16, "kv_dtype": "bf16", "block_size": 16,
     "available": 10 * 2**30 + 12345, "max_model_len": 3000, "total": 150_107_897_856, "utilization": 0.6},
    {"layers": 28, "kv_heads": 4, "head_size": 128, "tp": 1, "kv_dtype": "fp8", "block_size": 16,
     "available": 31_000_000_001, "max_model_len": 2048 + 8192, "total": 84_942_979_072, "utilization": 0.85},
    {"layers": 12, "kv_heads": 12, "head_size": 64, "tp": 1, "kv_dtype": "fp16", "block_size": 32,
     "available": 1_234_567_890, "max_model_len": 1024, "total": 23_655_874_560, "utilization": 0.3},
    {"layers": 61, "kv_heads": 128, "head_size": 576, "tp": 8, "kv_dtype": "bf16", "block_size": 64, "mla": True,
     "available": 40 * 2**30, "max_model_len": 32768, "total": 150_107_897_856, "utilization": 0.9},
    {"layers": 61, "kv_heads": 128, "head_size": 576, "tp": 8, "kv_dtype": "fp8_ds_mla", "block_size": 64,
     "mla": True, "available": 40 * 2**30, "max_model_len": 32768, "total": 150_107_897_856, "utilization": 0.9},
    {"layers": 32, "kv_heads": 8, "head_size": 128, "tp": 1, "kv_dtype": "bf16", "block_size": 16,
     "available": 2**30, "max_model_len": 16384, "total": 84_942_979_072, "utilization": 0.5},
]
VOCABS = [128256, 151936, 32000, 50257, 129280]


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STOOD_IN:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = MagicMock()
        module.__path__, module.__name__, module.__spec__ = [], spec.name, spec
        return module

    def exec_module(self, module):
        pass


def run(case: dict) -> dict:
    import torch
    from vllm.config.cache import CacheConfig
    from vllm.config.model import ModelConfig
    from vllm.v1.core import kv_cache_planning, kv_cache_utils
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec
    from vllm.v1.worker.utils import request_memory

    mla = case.get("mla", False)
    heads = ModelConfig.get_num_kv_heads(NS(use_mla=mla, model_arch_config=NS(total_num_kv_heads=case["kv_heads"])),
                                         NS(tensor_parallel_size=case["tp"]))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn,
             "fp8_ds_mla": torch.uint8}[case["kv_dtype"]]
    if mla:
        spec = MLAAttentionSpec(block_size=case["block_size"], num_kv_heads=heads, head_size=case["head_size"],
                                dtype=dtype, cache_dtype_str=case["kv_dtype"],
                                state_content_bytes={"fp8_ds_mla": 656}.get(case["kv_dtype"]))
    else:
        spec = FullAttentionSpec(block_size=case["block_size"], num_kv_heads=heads, head_size=case["head_size"],
                                 dtype=dtype)
    cache = CacheConfig(block_size=case["block_size"], gpu_memory_utilization=case["utilization"])
    cache.kv_cache_layout = "LBHNC"
    config = NS(cache_config=cache, attention_config=NS(hisparse_config=None),
                model_config=NS(max_model_len=case["max_model_len"], original_max_model_len=case["max_model_len"]),
                parallel_config=NS(decode_context_parallel_size=1, tensor_parallel_size=case["tp"]),
                speculative_config=None, num_prefill_lookahead_tokens=0)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(case["layers"])}
    groups = kv_cache_planning._get_kv_cache_groups_uniform_spec(specs)
    out = {"kv_heads_per_rank": heads, "page_size_bytes": spec.page_size_bytes,
           "requested_memory": request_memory(NS(total_memory=case["total"], free_memory=case["total"],
                                                 device_="cuda:0"), cache)}
    try:
        kv = kv_cache_planning.get_kv_cache_configs(config, [specs], [case["available"]], groups)[0]
    except ValueError as exc:
        return {**out, "refused": str(exc).split(". ")[0]}
    tokens, concurrency = kv_cache_utils.get_kv_cache_capacity(config, kv)
    return {**out, "num_blocks": kv.num_blocks, "kv_cache_tokens": tokens, "max_concurrency": concurrency}


def main() -> None:
    sys.meta_path.insert(0, _StandIn())
    from vllm.model_executor.layers.vocab_parallel_embedding import pad_vocab_size
    results = [{"case": case, "vllm": run(case)} for case in CASES]
    print(json.dumps({"cases": results, "padded_vocab": {v: pad_vocab_size(v) for v in VOCABS}}, indent=1))


if __name__ == "__main__":
    main()
