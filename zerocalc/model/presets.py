"""Model presets (data): shapes from each model's Hugging Face config.json, with its published parameter count.

`published` is the test oracle: tests/test_architecture.py checks param_count(arch) == published, and
tests/test_model_families.py that transformers builds the same counts from the real config.json
(tests/fixtures/model_configs/, each with its source). Sources of the published counts:
GPT-2 sizes: the count of the Hugging Face checkpoints (openai-community/gpt2*, sum of unique tensors);
GPT-3: Brown et al. 2020, Table 2.1 ("175.0B", rounded: only 4 significant digits are published);
Llama, Mistral, Qwen, Phi, Mixtral, DeepSeek-V2-Lite: the Hugging Face Hub's safetensors total for the named
repository (metadata.total_size / 2 bytes for bf16 checkpoints); DeepSeek-V3 and gpt-oss publish rounded totals
only (ROUNDED); where a checkpoint holds more than the model transformers builds, PUBLISHED_DIFFERENCES says
what and how much. Vision-language models (Qwen2.5-VL, Qwen3-VL, InternVL3, Llama 3.2 Vision, Gemma 3): the whole
model's count as transformers 5.24 builds it from the config.json (tests/test_vision_towers.py), which the Hub's
rounded figures (8.29B, 8.77B, 7.94B, 10.7B, 4.3B, 27.4B) agree with.
"""

from __future__ import annotations

from types import MappingProxyType

from .architecture import Architecture

_GPT2 = dict(gated_mlp=False, norm="layernorm", bias=True, positions="learned", fused_qkv=True, tied_embeddings=True,
             activation="gelu_new", softmax_fp32=False, attn_dropout=0.1, resid_dropout=0.1, embd_dropout=0.1, vocab=50257)
_LLAMA = dict(gated_mlp=True, norm="rmsnorm", positions="rotary", activation="silu")
_QWEN3 = dict(head_dim=128, qk_norm="head", **_LLAMA)
_QWEN_MOE = dict(route_weights_fp32=False, norm_topk=True, **_QWEN3)
_MLA = dict(kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_head_dim=128, router_fp32=True, **_LLAMA)
_GPT_OSS = dict(_LLAMA, kv_heads=8, head_dim=64, attn_bias=True, attention_sinks=True, experts_per_token=4,
                router="topk-softmax", sliding_window=128, sliding_pattern=2,
                norm_topk=False, router_bias=True, route_weights_fp32=False, expert_bias=True, vocab=201088,
                seq_len=131072, hidden=2880, heads=64, ffn=2880, expert_ffn=2880, norm="rmsnorm-fp32",
                activation="clamped-swiglu")
_GEMMA3 = dict(norm="rmsnorm-gemma", activation="gelu_pytorch_tanh", qk_norm="head", sandwich_norm=True,
               tied_embeddings=True, gated_mlp=True, positions="rotary", vocab=262208, seq_len=131072,
               sliding_window=1024, sliding_pattern=6, local_rope=True)
_GEMMA = dict(norm="rmsnorm-gemma", activation="gelu_pytorch_tanh", tied_embeddings=True, gated_mlp=True,
              positions="rotary", vocab=256000, seq_len=8192, head_dim=256)
_GEMMA2 = dict(_GEMMA, sandwich_norm=True, attn_softcap=50.0, final_softcap=30.0, sliding_window=4096,
               sliding_pattern=2)
_PYTHIA = dict(gated_mlp=False, norm="layernorm", positions="rotary", fused_qkv=True, attn_bias=True, mlp_bias=True,
               activation="gelu", parallel_residual=True, rotary_pct=0.25, seq_len=2048)
_PHI = dict(gated_mlp=False, norm="layernorm", positions="rotary", attn_bias=True, mlp_bias=True, activation="gelu_new",
            parallel_residual=True, shared_norm=True, head_bias=True, vocab=51200, seq_len=2048)

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
                                seq_len=32768, sliding_window=4096, **_LLAMA),     # every layer local (v0.1)
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
    "phi-4": (Architecture(layers=40, hidden=5120, heads=40, kv_heads=10, ffn=17920, vocab=100352, seq_len=16384,
                           fused_qkv=True, fused_gate_up=True, **_LLAMA),
              14_659_507_200, "microsoft/phi-4"),
    "llama-3.1-8b": (Architecture(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                                  seq_len=131072, **_LLAMA),
                     8_030_261_248, "meta-llama/Llama-3.1-8B"),
    "llama-3.1-70b": (Architecture(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                                   seq_len=131072, **_LLAMA),
                      70_553_706_496, "meta-llama/Llama-3.1-70B"),
    "mistral-nemo-12b": (Architecture(layers=40, hidden=5120, heads=32, kv_heads=8, head_dim=128, ffn=14336,
                                      vocab=131072, seq_len=131072, **_LLAMA),
                         12_247_782_400, "mistralai/Mistral-Nemo-Instruct-2407"),
    "qwen3-0.6b": (Architecture(layers=28, hidden=1024, heads=16, kv_heads=8, ffn=3072, vocab=151936, seq_len=40960,
                                tied_embeddings=True, **_QWEN3),
                   751_632_384, "Qwen/Qwen3-0.6B"),
    "qwen3-4b": (Architecture(layers=36, hidden=2560, heads=32, kv_heads=8, ffn=9728, vocab=151936, seq_len=40960,
                              tied_embeddings=True, **_QWEN3),
                 4_022_468_096, "Qwen/Qwen3-4B"),
    "qwen3-8b": (Architecture(layers=36, hidden=4096, heads=32, kv_heads=8, ffn=12288, vocab=151936, seq_len=40960,
                              **_QWEN3),
                 8_190_735_360, "Qwen/Qwen3-8B"),
    "qwen3-14b": (Architecture(layers=40, hidden=5120, heads=40, kv_heads=8, ffn=17408, vocab=151936,
                               seq_len=40960, **_QWEN3),
                  14_768_307_200, "Qwen/Qwen3-14B"),
    "qwen3-32b": (Architecture(layers=64, hidden=5120, heads=64, kv_heads=8, ffn=25600, vocab=151936,
                               seq_len=40960, **_QWEN3),
                  32_762_123_264, "Qwen/Qwen3-32B"),
    "gemma-3-4b": (Architecture(layers=34, hidden=2560, heads=8, kv_heads=4, head_dim=256, ffn=10240, **_GEMMA3),
                   4_300_079_472, "google/gemma-3-4b-it"),
    "gemma-3-27b": (Architecture(layers=62, hidden=5376, heads=32, kv_heads=16, head_dim=128, ffn=21504, **_GEMMA3),
                    27_432_406_640, "google/gemma-3-27b-it"),
    "gemma-2b": (Architecture(layers=18, hidden=2048, heads=8, kv_heads=1, ffn=16384, **_GEMMA),
                 2_506_172_416, "google/gemma-2b"),
    "gemma-7b": (Architecture(layers=28, hidden=3072, heads=16, kv_heads=16, ffn=24576, **_GEMMA),
                 8_537_680_896, "google/gemma-7b"),
    "gemma-2-2b": (Architecture(layers=26, hidden=2304, heads=8, kv_heads=4, ffn=9216, **_GEMMA2),
                   2_614_341_888, "google/gemma-2-2b"),
    "gemma-2-9b": (Architecture(layers=42, hidden=3584, heads=16, kv_heads=8, ffn=14336, **_GEMMA2),
                   9_241_705_984, "google/gemma-2-9b"),
    "gemma-2-27b": (Architecture(layers=46, hidden=4608, heads=32, kv_heads=16, ffn=36864,
                                 **dict(_GEMMA2, head_dim=128)),
                    27_227_128_320, "google/gemma-2-27b"),
    # parallel attention + MLP blocks
    "pythia-1b": (Architecture(layers=16, hidden=2048, heads=8, ffn=8192, vocab=50304, **_PYTHIA),
                  1_011_781_632, "EleutherAI/pythia-1b (model card table)"),
    "pythia-6.9b": (Architecture(layers=32, hidden=4096, heads=32, ffn=16384, vocab=50432, **_PYTHIA),
                    6_857_302_016, "EleutherAI/pythia-6.9b (model card table)"),
    "pythia-12b": (Architecture(layers=36, hidden=5120, heads=40, ffn=20480, vocab=50688, **_PYTHIA),
                   11_846_072_320, "EleutherAI/pythia-12b (model card table)"),
    "phi-1_5": (Architecture(layers=24, hidden=2048, heads=32, ffn=8192, rotary_pct=0.5, **_PHI),
                1_418_270_720, "microsoft/phi-1_5"),
    "phi-2": (Architecture(layers=32, hidden=2560, heads=32, ffn=10240, rotary_pct=0.4, **_PHI),
              2_779_683_840, "microsoft/phi-2"),
    "stablelm-2-1_6b": (Architecture(layers=24, hidden=2048, heads=32, ffn=5632, vocab=100352, seq_len=4096,
                                     qkv_bias=True, rotary_pct=0.25, **dict(_LLAMA, norm="layernorm")),
                        1_644_515_328, "stabilityai/stablelm-2-1_6b"),
    "falcon-7b": (Architecture(layers=32, hidden=4544, heads=71, kv_heads=1, ffn=4 * 4544, vocab=65024, seq_len=2048,
                               gated_mlp=False, norm="layernorm", positions="rotary", fused_qkv=True, activation="gelu",
                               tied_embeddings=True, softmax_fp32=False, parallel_residual=True, shared_norm=True,
                               kv_expand="broadcast"),
                  6_921_720_704, "tiiuae/falcon-7b"),
    # mixture of experts
    "mixtral-8x7b": (Architecture(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                                  seq_len=32768, experts=8, experts_per_token=2, expert_ffn=14336, **_LLAMA),
                     46_702_792_704, "mistralai/Mixtral-8x7B-v0.1"),
    "mixtral-8x22b": (Architecture(layers=56, hidden=6144, heads=48, kv_heads=8, ffn=16384, vocab=32000,
                                   seq_len=65536, experts=8, experts_per_token=2, expert_ffn=16384, **_LLAMA),
                      140_620_634_112, "mistralai/Mixtral-8x22B-v0.1"),
    "qwen2-57b-a14b": (Architecture(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=151936,
                                    seq_len=131072, qkv_bias=True, experts=64, experts_per_token=8,
                                    expert_ffn=2560, shared_expert_ffn=20480, shared_expert_gate=True,
                                    norm_topk=False, route_weights_fp32=False, **_LLAMA),
                       57_408_658_944, "Qwen/Qwen2-57B-A14B"),
    "qwen3-30b-a3b": (Architecture(layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144, vocab=151936,
                                   seq_len=40960, experts=128, experts_per_token=8, expert_ffn=768, **_QWEN_MOE),
                      30_532_122_624, "Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": (Architecture(layers=94, hidden=4096, heads=64, kv_heads=4, ffn=12288, vocab=151936,
                                     seq_len=40960, experts=128, experts_per_token=8, expert_ffn=1536, **_QWEN_MOE),
                        235_093_634_560, "Qwen/Qwen3-235B-A22B"),
    "deepseek-v2-lite": (Architecture(layers=27, hidden=2048, heads=16, kv_heads=16, ffn=10944, vocab=102400,
                                      seq_len=163840, experts=64, experts_per_token=6, expert_ffn=1408,
                                      shared_expert_ffn=2816, norm_topk=False, first_dense_layers=1, **_MLA),
                         15_706_484_224, "deepseek-ai/DeepSeek-V2-Lite"),
    "deepseek-v3": (Architecture(layers=61, hidden=7168, heads=128, kv_heads=128, ffn=18432, vocab=129280,
                                 seq_len=163840, q_lora_rank=1536, experts=256, experts_per_token=8,
                                 expert_ffn=2048, shared_expert_ffn=2048, router="sigmoid", first_dense_layers=3,
                                 mtp_declared=1, **_MLA),
                    671_000_000_000, "deepseek-ai/DeepSeek-V3 README_WEIGHTS.md: 671B main model (rounded)"),
    "gpt-oss-20b": (Architecture(layers=24, experts=32, **_GPT_OSS),
                    20_910_000_000, "gpt-oss model card (arXiv 2508.10925) Table 1: 20.91B (rounded)"),
    "gpt-oss-120b": (Architecture(layers=36, experts=128, **_GPT_OSS),
                     116_830_000_000, "gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B (rounded)"),
    # Vision-language models: the language model's row; the tower, projector and cross-attention extras are
    # model/vision.py TOWERS[name], and the published total includes them (PUBLISHED_DIFFERENCES).
    "qwen2.5-vl-7b": (Architecture(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064,
                                   seq_len=128000, qkv_bias=True, **_LLAMA),
                      8_292_166_656, "Qwen/Qwen2.5-VL-7B-Instruct"),
    "qwen3-vl-8b": (Architecture(layers=36, hidden=4096, heads=32, kv_heads=8, ffn=12288, vocab=151936,
                                 seq_len=262144, **_QWEN3),
                    8_767_123_696, "Qwen/Qwen3-VL-8B-Instruct"),
    "internvl3-8b": (Architecture(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=151674,
                                  seq_len=32768, qkv_bias=True, **_LLAMA),
                     7_944_373_760, "OpenGVLab/InternVL3-8B-hf"),
    "llama-3.2-11b-vision": (Architecture(layers=40, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                                          seq_len=131072, **_LLAMA),
                             10_670_220_835, "meta-llama/Llama-3.2-11B-Vision"),
})

# Published totals given to fewer digits than the count: name -> significant digits published.
ROUNDED = MappingProxyType({"gpt3-175b": 3, "deepseek-v3": 3, "gpt-oss-20b": 4, "gpt-oss-120b": 5})

# Checkpoints that store more than the model transformers builds: name -> (published - ours, why).
PUBLISHED_DIFFERENCES = MappingProxyType({
    "qwen3-0.6b": (151936 * 1024, "the checkpoint stores lm_head although it is tied to the embedding"),
    "gemma-3-4b": (419_816_304, "the published total includes the SigLIP vision tower and projector"),
    "gemma-3-27b": (423_060_336, "the published total includes the SigLIP vision tower and projector"),
    "qwen2.5-vl-7b": (676_550_144, "the published total includes the vision tower and its merger"),
    "qwen3-vl-8b": (576_388_336, "the published total includes the vision tower, its merger and deepstack mergers"),
    "internvl3-8b": (331_552_768, "the published total includes the InternViT tower and projector"),
    "llama-3.2-11b-vision": (895_063_587, "the published total includes the vision tower, its projector, the "
                                          "cross-attention layers' norms and gates and 8 more embedding rows"),
})
