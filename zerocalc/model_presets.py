"""Model presets (data): shapes from each model's Hugging Face config.json, with its published parameter count.

`published` is the test oracle: tests/test_architecture.py checks param_count(arch) == published. Sources:
GPT-2 sizes: the count of the Hugging Face checkpoints (openai-community/gpt2*, sum of unique tensors);
GPT-3: Brown et al. 2020, Table 2.1 ("175.0B", rounded: only 4 significant digits are published);
Llama, Mistral, Qwen, Phi: the Hugging Face Hub's safetensors parameter total for the named repository.
"""

from __future__ import annotations

from types import MappingProxyType

from .architecture import Architecture

_GPT2 = dict(gated_mlp=False, norm="layernorm", bias=True, positions="learned", fused_qkv=True, tied_embeddings=True,
             activation="gelu_new", softmax_fp32=False, attn_dropout=0.1, resid_dropout=0.1, embd_dropout=0.1, vocab=50257)
_LLAMA = dict(gated_mlp=True, norm="rmsnorm", positions="rotary", activation="silu")

# name -> (architecture, published parameter count, source repository or paper)
MODEL_PRESETS = MappingProxyType({
    "gpt2": (Architecture(layers=12, hidden=768, heads=12, ffn=3072, seq_len=1024, **_GPT2),
             124_439_808, "openai-community/gpt2"),
    "gpt2-medium": (Architecture(layers=24, hidden=1024, heads=16, ffn=4096, seq_len=1024, **_GPT2),
                    354_823_168, "openai-community/gpt2-medium"),
    "gpt2-large": (Architecture(layers=36, hidden=1280, heads=20, ffn=5120, seq_len=1024, **_GPT2),
                   774_030_080, "openai-community/gpt2-large"),
    "gpt2-xl": (Architecture(layers=48, hidden=1600, heads=25, ffn=6400, seq_len=1024, **_GPT2),
                1_557_611_200, "openai-community/gpt2-xl"),
    "gpt3-175b": (Architecture(layers=96, hidden=12288, heads=96, ffn=49152, seq_len=2048, **_GPT2),
                  175_000_000_000, "Brown et al. 2020, Table 2.1 (175.0B, rounded)"),
    "llama-2-7b": (Architecture(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000, seq_len=4096, **_LLAMA),
                   6_738_415_616, "meta-llama/Llama-2-7b-hf"),
    "llama-2-13b": (Architecture(layers=40, hidden=5120, heads=40, ffn=13824, vocab=32000, seq_len=4096, **_LLAMA),
                    13_015_864_320, "meta-llama/Llama-2-13b-hf"),
    "llama-2-70b": (Architecture(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000,
                                 seq_len=4096, **_LLAMA),
                    68_976_648_192, "meta-llama/Llama-2-70b-hf"),
    "llama-3-8b": (Architecture(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                                seq_len=8192, **_LLAMA),
                   8_030_261_248, "meta-llama/Meta-Llama-3-8B"),
    "llama-3-70b": (Architecture(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                                 seq_len=8192, **_LLAMA),
                    70_553_706_496, "meta-llama/Meta-Llama-3-70B"),
    "llama-3.1-405b": (Architecture(layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256,
                                    seq_len=131072, **_LLAMA),
                       405_853_388_800, "meta-llama/Llama-3.1-405B"),
    "llama-3.2-1b": (Architecture(layers=16, hidden=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256,
                                  seq_len=131072, tied_embeddings=True, **_LLAMA),
                     1_235_814_400, "meta-llama/Llama-3.2-1B"),
    "mistral-7b": (Architecture(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                                seq_len=32768, **_LLAMA),
                   7_241_732_096, "mistralai/Mistral-7B-v0.1"),
    "qwen2.5-0.5b": (Architecture(layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936,
                                  seq_len=32768, tied_embeddings=True, qkv_bias=True, **_LLAMA),
                     494_032_768, "Qwen/Qwen2.5-0.5B"),
    "qwen2.5-7b": (Architecture(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064,
                                seq_len=32768, qkv_bias=True, **_LLAMA),
                   7_615_616_512, "Qwen/Qwen2.5-7B"),
    "phi-3-mini": (Architecture(layers=32, hidden=3072, heads=32, ffn=8192, vocab=32064, seq_len=4096,
                                fused_qkv=True, fused_gate_up=True, **_LLAMA),
                   3_821_079_552, "microsoft/Phi-3-mini-4k-instruct"),
})
