"""Model families a Hugging Face config.json can name (data): for each `model_type`, the config keys that set
each Architecture field, the config class's defaults for absent keys (transformers 5.24,
models/<family>/configuration_<family>.py), and the fixed traits of its modelling code
(models/<family>/modeling_<family>.py). hf_config.py applies this table; nothing here executes a config.

Keys per field: "layers" <- num_hidden_layers, and so on (COMMON_KEYS); a family overrides keys and defaults.
attention_bias and mlp_bias are read only by the families whose modelling code passes them to its Linears
(ATTENTION_BIAS, MLP_BIAS): Mistral, Mixtral, Phi-3, Qwen2 and Ministral 3 hard-code their biases, so a stray
"attention_bias": true in their config.json adds no parameter there and must add none here.
"""

from __future__ import annotations

from types import MappingProxyType

# Architecture field -> config key, for every Llama-style family.
COMMON_KEYS = MappingProxyType({
    "layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "ffn": "intermediate_size", "vocab": "vocab_size",
    "seq_len": "max_position_embeddings", "tied_embeddings": "tie_word_embeddings", "activation": "hidden_act",
    "attn_dropout": "attention_dropout",
})
# The families that read them: modeling_<family>.py builds Linear(..., bias=config.attention_bias) for q, k, v, o
# (DeepSeek: q_a_proj, kv_a_proj_with_mqa, o_proj), and bias=config.mlp_bias for the MLP (Llama; DeepSeek-V2's
# dense and shared-expert MLPs, DeepseekV2MLP). Qwen2-MoE reads its own qkv_bias.
ATTENTION_BIAS = MappingProxyType({"attn_bias": "attention_bias"})
MLP_BIAS = MappingProxyType({"mlp_bias": "mlp_bias"})
SLIDING = MappingProxyType({"sliding_window": "sliding_window"})
MOE_KEYS = MappingProxyType({"experts": "num_experts", "experts_per_token": "num_experts_per_tok",
                             "expert_ffn": "moe_intermediate_size", "norm_topk": "norm_topk_prob",
                             "moe_step": "decoder_sparse_step", "dense_layer_ids": "mlp_only_layers"})
MLA_KEYS = MappingProxyType({"q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
                             "qk_nope_dim": "qk_nope_head_dim", "qk_rope_dim": "qk_rope_head_dim",
                             "v_head_dim": "v_head_dim", "experts": "n_routed_experts",
                             "experts_per_token": "num_experts_per_tok", "expert_ffn": "moe_intermediate_size",
                             "first_dense_layers": "first_k_dense_replace", "norm_topk": "norm_topk_prob"})


def _family(keys=None, defaults=None, traits=None):
    return MappingProxyType({"keys": MappingProxyType({**COMMON_KEYS, **(keys or {})}),
                             "defaults": MappingProxyType(defaults or {}),
                             "traits": MappingProxyType(traits or {})})


_LLAMA_TRAITS = dict(gated_mlp=True, norm="rmsnorm", positions="rotary", softmax_fp32=True)

# model_type -> keys, defaults of absent keys, fixed traits
FAMILIES = MappingProxyType({
    "llama": _family(keys={**ATTENTION_BIAS, **MLP_BIAS},
                     defaults=dict(vocab=32000, hidden=4096, ffn=11008, layers=32, heads=32, seq_len=2048),
                     traits=_LLAMA_TRAITS),
    # Mistral, Mixtral, Ministral 3: every layer attends within sliding_window when it is set (MistralAttention
    # passes config.sliding_window to the kernel; the model builds create_sliding_window_causal_mask). No parameter
    # changes; the explicit mask beyond the window costs activations (measured, tests/test_moe_validation.py).
    # MistralConfig's default window is 4096 (Mistral-7B-v0.1); Mixtral's and Ministral 3's are None.
    "mistral": _family(keys=SLIDING, defaults=dict(vocab=32000, hidden=4096, ffn=14336, layers=32, heads=32,
                                                   kv_heads=8, seq_len=4096 * 32, sliding_window=4096),
                       traits={**_LLAMA_TRAITS, "sliding_pattern": 1}),
    # Ministral 3 (the text model of Mistral 3 / Devstral 2 / Ministral 3 wrappers): Mistral's block, head_dim 128
    # by default; the yarn / llama-4 attention scaling in rope_parameters has no parameters.
    "ministral3": _family(keys=SLIDING, defaults=dict(vocab=131072, hidden=4096, ffn=14336, layers=34, heads=32,
                                                      kv_heads=8, head_dim=128, seq_len=262144),
                          traits={**_LLAMA_TRAITS, "sliding_pattern": 1}),
    # Qwen2Attention hard-codes bias=True on q, k and v.
    "qwen2": _family(defaults=dict(vocab=151936, hidden=4096, ffn=22016, layers=32, heads=32, kv_heads=32,
                                   seq_len=32768), traits={**_LLAMA_TRAITS, "qkv_bias": True}),
    "phi3": _family(defaults=dict(vocab=32064, hidden=3072, ffn=8192, layers=32, heads=32, seq_len=4096),
                    traits={**_LLAMA_TRAITS, "fused_qkv": True, "fused_gate_up": True}),
    # Qwen3Config: head_dim defaults to 128; q_norm / k_norm over each head.
    "qwen3": _family(keys=ATTENTION_BIAS,
                     defaults=dict(vocab=151936, hidden=4096, ffn=22016, layers=32, heads=32, kv_heads=32,
                                   head_dim=128, seq_len=32768), traits={**_LLAMA_TRAITS, "qk_norm": "head"}),
    # Qwen2-MoE: q/k/v biases from its own qkv_bias key; a shared expert with a sigmoid gate; top-k weights cast
    # to the activation dtype; dense layers (mlp_only_layers, decoder_sparse_step) use intermediate_size.
    "qwen2_moe": _family(
        keys={**MOE_KEYS, "qkv_bias": "qkv_bias", "shared_expert_ffn": "shared_expert_intermediate_size"},
        defaults=dict(vocab=151936, hidden=2048, ffn=5632, layers=24, heads=16, kv_heads=16, seq_len=32768,
                      experts=60, experts_per_token=4, expert_ffn=1408, shared_expert_ffn=5632, norm_topk=False,
                      moe_step=1, qkv_bias=True),
        traits={**_LLAMA_TRAITS, "shared_expert_gate": True, "route_weights_fp32": False}),
    "qwen3_moe": _family(
        keys={**MOE_KEYS, **ATTENTION_BIAS},
        defaults=dict(vocab=151936, hidden=2048, ffn=6144, layers=24, heads=32, kv_heads=4, seq_len=32768,
                      experts=128, experts_per_token=8, expert_ffn=768, norm_topk=False, moe_step=1),
        traits={**_LLAMA_TRAITS, "qk_norm": "head", "route_weights_fp32": False}),
    # Mixtral: every layer is MoE, intermediate_size is each expert's width, top-k weights renormalised (fp32).
    "mixtral": _family(
        keys={"experts": "num_local_experts", "experts_per_token": "num_experts_per_tok", "expert_ffn":
              "intermediate_size", **SLIDING},
        defaults=dict(vocab=32000, hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8, seq_len=4096 * 32,
                      experts=8, experts_per_token=2),
        traits={**_LLAMA_TRAITS, "norm_topk": True}),
    # OLMoE: q_norm over all heads (hidden wide), k_norm over the KV heads; every layer MoE.
    "olmoe": _family(
        keys={"experts": "num_experts", "experts_per_token": "num_experts_per_tok", "expert_ffn":
              "intermediate_size", "norm_topk": "norm_topk_prob", **ATTENTION_BIAS},
        defaults=dict(vocab=50304, hidden=2048, ffn=2048, layers=16, heads=16, seq_len=4096, experts=64,
                      experts_per_token=8, norm_topk=False),
        traits={**_LLAMA_TRAITS, "qk_norm": "full"}),
    # OLMo 2: norms after attention and after the MLP (two per block, as many as Llama's), q/k norms over all heads.
    "olmo2": _family(keys=ATTENTION_BIAS,
                     defaults=dict(vocab=50304, hidden=4096, ffn=11008, layers=32, heads=32, seq_len=2048),
                     traits={**_LLAMA_TRAITS, "qk_norm": "full"}),
    # OLMo 3: OLMo 2's block with sliding-window layers, every 4th global when layer_types is absent
    # (Olmo3Config.__post_init__), and rotary tables per layer type (Olmo3RotaryEmbedding).
    "olmo3": _family(keys={**ATTENTION_BIAS, "sliding_window": "sliding_window"},
                     defaults=dict(vocab=50304, hidden=4096, ffn=11008, layers=32, heads=32, seq_len=2048,
                                   sliding_window=4096),
                     traits={**_LLAMA_TRAITS, "qk_norm": "full", "sliding_pattern": 4, "local_rope": True}),
    # DeepSeek-V2: latent attention (q_lora_rank defaults to 1536 when the key is absent: an explicit null means
    # none), n_shared_experts x moe_intermediate_size of shared experts, dense first_k_dense_replace layers, an
    # fp32 router (_keep_in_fp32_modules_strict), softmax top-k not renormalised by default.
    "deepseek_v2": _family(
        keys={**MLA_KEYS, **ATTENTION_BIAS, **MLP_BIAS},
        defaults=dict(vocab=102400, hidden=4096, ffn=11008, layers=32, heads=32, seq_len=2048, q_lora_rank=1536,
                      kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_head_dim=128, experts=64,
                      expert_ffn=1407, first_dense_layers=0, norm_topk=False, n_shared_experts=2),
        traits={**_LLAMA_TRAITS, "router_fp32": True}),
    # DeepSeek-V3: as V2 with a sigmoid router whose top-k weights are renormalised. Its multi-token-prediction
    # modules (num_nextn_predict_layers; DeepseekV3Config's num_mtp_layers, default 1) are recorded as declared:
    # transformers' training forward does not build them, so they are counted only when a run trains them
    # (Architecture.mtp_layers, Megatron's --mtp-num-layers: model/inventory.py _mtp).
    "deepseek_v3": _family(
        keys={**MLA_KEYS, **ATTENTION_BIAS, "mtp_declared": "num_nextn_predict_layers"},
        defaults=dict(vocab=129280, hidden=7168, ffn=18432, layers=61, heads=128, kv_heads=128, seq_len=4096,
                      q_lora_rank=1536, kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_head_dim=128,
                      experts=256, experts_per_token=8, expert_ffn=2048, first_dense_layers=3, norm_topk=True,
                      n_shared_experts=1, mtp_declared=1),
        traits={**_LLAMA_TRAITS, "router_fp32": True, "router": "sigmoid"}),
    # gpt-oss: biases on q, k, v, o, one attention sink per head, a biased router whose top-k logits are
    # softmaxed, experts with biases, every layer MoE (intermediate_size is each expert's width).
    "gpt_oss": _family(
        # hidden_act is not read: GptOssExperts runs its own clamped SwiGLU; GptOssRMSNorm weights in fp32.
        keys={"experts": "num_local_experts", "experts_per_token": "num_experts_per_tok", "expert_ffn":
              "intermediate_size", "sliding_window": "sliding_window", "activation": None, **ATTENTION_BIAS},
        defaults=dict(vocab=201088, hidden=2880, ffn=2880, layers=36, heads=64, kv_heads=8, head_dim=64,
                      seq_len=131072, experts=128, experts_per_token=4, attn_bias=True, sliding_window=128),
        traits={**_LLAMA_TRAITS, "attention_sinks": True, "router": "topk-softmax", "router_bias": True,
                "expert_bias": True, "norm_topk": False, "route_weights_fp32": False, "sliding_pattern": 2,
                "norm": "rmsnorm-fp32", "activation": "clamped-swiglu"}),
    # Gemma (1): Llama's block with Gemma RMSNorm (1 + w, fp32), head_dim 256, tied embeddings, the embedding
    # scaled by sqrt(hidden) (a constant: no parameter); GemmaConfig maps the released configs' legacy
    # hidden_act "gelu" to "gelu_pytorch_tanh" (both save their input once).
    "gemma": _family(
        keys=ATTENTION_BIAS,
        defaults=dict(vocab=256000, hidden=3072, ffn=24576, layers=28, heads=16, kv_heads=16, head_dim=256,
                      seq_len=8192, tied_embeddings=True, activation="gelu_pytorch_tanh"),
        traits={**_LLAMA_TRAITS, "norm": "rmsnorm-gemma"}),
    # GPT-NeoX (Pythia): fused query_key_value and dense with biases (attention_bias), a biased plain MLP,
    # LayerNorms with biases, parallel residual with two norms (use_parallel_residual), partial rotary (rotary_pct,
    # hf_config.py), untied embed_out; hidden_dropout after the embedding, attention and MLP.
    "gpt_neox": _family(
        keys={"attn_bias": "attention_bias", "parallel_residual": "use_parallel_residual", "head_dim": None,
              "kv_heads": None, "resid_dropout": "hidden_dropout", "embd_dropout": "hidden_dropout"},
        defaults=dict(vocab=50432, hidden=6144, ffn=24576, layers=44, heads=64, seq_len=2048, tied_embeddings=False,
                      activation="gelu", attn_bias=True, parallel_residual=True, rotary_pct=0.25),
        traits=dict(gated_mlp=False, norm="layernorm", positions="rotary", fused_qkv=True, mlp_bias=True,
                    softmax_fp32=True)),
    # phi (Phi-1, 1.5, 2): one LayerNorm feeds attention and MLP in parallel, q/k/v and dense with biases, a
    # biased fc1/fc2 MLP (gelu_new), partial rotary (0.5), optional per-head q/k LayerNorms, a biased lm_head.
    "phi": _family(
        keys={"head_dim": None, "resid_dropout": "resid_pdrop", "embd_dropout": "embd_pdrop"},
        defaults=dict(vocab=51200, hidden=2048, ffn=8192, layers=24, heads=32, seq_len=2048, tied_embeddings=False,
                      activation="gelu_new", rotary_pct=0.5),
        traits=dict(gated_mlp=False, norm="layernorm", positions="rotary", attn_bias=True, mlp_bias=True,
                    parallel_residual=True, shared_norm=True, head_bias=True, softmax_fp32=True)),
    # StableLM: a gated SiLU MLP without biases, LayerNorms with biases, q/k/v biases (use_qkv_bias), partial
    # rotary (0.25); use_parallel_residual drops post_attention_layernorm (one norm feeds both branches).
    "stablelm": _family(
        keys={"qkv_bias": "use_qkv_bias", "parallel_residual": "use_parallel_residual", "head_dim": None},
        defaults=dict(vocab=50304, hidden=2560, ffn=6912, layers=32, heads=32, kv_heads=32, seq_len=4096,
                      tied_embeddings=False, activation="silu", rotary_pct=0.25),
        traits=dict(gated_mlp=True, norm="layernorm", positions="rotary", softmax_fp32=True)),
    # Falcon: fused query_key_value ((heads + 2 kv) x head_dim: multi_query -> 1 KV head, new_decoder_architecture
    # -> num_kv_heads), biases on every Linear when "bias", a plain MLP of ffn_hidden_size (4 h when null),
    # parallel attention + MLP (parallel_attn) with one norm, or two (ln_attn, ln_mlp) under the new architecture;
    # tied embeddings. The KV heads, the norms and ffn_hidden_size are derived in hf_config.py (_falcon).
    "falcon": _family(
        keys={"kv_heads": None, "head_dim": None, "ffn": None, "activation": "activation", "bias": "bias",
              "parallel_residual": "parallel_attn"},
        defaults=dict(vocab=65024, hidden=4544, layers=32, heads=71, seq_len=2048, tied_embeddings=True,
                      activation="gelu", bias=False, parallel_residual=True),
        traits=dict(gated_mlp=False, norm="layernorm", positions="rotary", fused_qkv=True, softmax_fp32=False)),
    # Gemma 2: four norms per block, Gemma RMSNorm (1 + w, fp32), tied embeddings by default, soft-capping.
    "gemma2": _family(
        keys={"activation": "hidden_activation", "attn_softcap": "attn_logit_softcapping",
              "final_softcap": "final_logit_softcapping", "sliding_window": "sliding_window", **ATTENTION_BIAS},
        defaults=dict(vocab=256000, hidden=2304, ffn=9216, layers=26, heads=8, kv_heads=4, head_dim=256,
                      seq_len=8192, tied_embeddings=True, activation="gelu_pytorch_tanh", attn_softcap=50.0,
                      final_softcap=30.0, sliding_window=4096),
        traits={**_LLAMA_TRAITS, "norm": "rmsnorm-gemma", "sandwich_norm": True, "sliding_pattern": 2}),
    # Gemma 3 (text): as Gemma 2 with q/k norms per head and no soft-capping by default.
    "gemma3_text": _family(
        keys={"activation": "hidden_activation", "attn_softcap": "attn_logit_softcapping",
              "final_softcap": "final_logit_softcapping", "sliding_window": "sliding_window",
              "sliding_pattern": "sliding_window_pattern", **ATTENTION_BIAS},
        defaults=dict(vocab=262208, hidden=2304, ffn=9216, layers=26, heads=8, kv_heads=4, head_dim=256,
                      seq_len=131072, tied_embeddings=True, activation="gelu_pytorch_tanh", sliding_window=4096,
                      sliding_pattern=6),
        traits={**_LLAMA_TRAITS, "norm": "rmsnorm-gemma", "sandwich_norm": True, "qk_norm": "head",
                "local_rope": True}),
})
# A multimodal wrapper whose language model is one of the families above, in its "text_config": the text model
# types it takes, the first being what an absent text_config "model_type" means (Gemma3Config's text_config is a
# Gemma3TextConfig; Mistral3Config resolves its text_config with AutoConfig, default model_type "mistral").
# Vision-language wrappers (docs/vision.md): their text models are the families above with their own config
# classes' defaults (configuration_qwen2_5_vl.py Qwen2_5_VLTextConfig, configuration_qwen3_vl.py
# Qwen3VLTextConfig, configuration_mllama.py MllamaTextConfig: num_hidden_layers counts the cross-attention layers,
# whose extras are the tower's rows); InternVL's text_config is a qwen2 / qwen3 / llama config itself.
FAMILIES = MappingProxyType({
    **FAMILIES,
    "qwen2_5_vl_text": _family(defaults=dict(vocab=152064, hidden=8192, ffn=29568, layers=80, heads=64, kv_heads=8,
                                             seq_len=32768), traits={**_LLAMA_TRAITS, "qkv_bias": True}),
    "qwen3_vl_text": _family(keys=ATTENTION_BIAS, defaults=dict(vocab=151936, hidden=4096, ffn=22016, layers=32,
                                                                heads=32, kv_heads=32, head_dim=128, seq_len=128000),
                             traits={**_LLAMA_TRAITS, "qk_norm": "head"}),
    "mllama_text_model": _family(defaults=dict(vocab=128256, hidden=4096, ffn=14336, layers=40, heads=32, kv_heads=8,
                                               seq_len=131072), traits=_LLAMA_TRAITS),
})
TEXT_CONFIG_WRAPPERS = MappingProxyType({"gemma3": ("gemma3_text",), "mistral3": ("mistral", "ministral3"),
                                         "qwen2_5_vl": ("qwen2_5_vl_text",), "qwen3_vl": ("qwen3_vl_text",),
                                         "internvl": ("qwen2", "qwen3", "llama"), "mllama": ("mllama_text_model",)})
# The vision-language wrappers whose top-level tie_word_embeddings decides the head (transformers 5.x ties by the
# wrapper's config), with each wrapper class's default (InternVLConfig: true).
WRAPPER_TIES = MappingProxyType({"qwen2_5_vl": False, "qwen3_vl": False, "internvl": True, "mllama": False})
