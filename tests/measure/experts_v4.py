"""Which linears QLoRA quantizes and LoRA's all-linear targets in a mixture-of-experts model under transformers 4.x
(test-only; run with an interpreter holding transformers 4.45.2, bitsandbytes and peft 0.13.2: tests/test_versions.py).

A tiny Mixtral and Qwen2-MoE from configs, random weights, on the CPU:
- quantized: the modules transformers' own bitsandbytes integration replaces with bnb.nn.Linear4bit
  (integrations/bitsandbytes.py replace_with_bnb_linear, skipping get_keys_to_not_convert(model), as
  from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True)) does; 4.45 loads 4-bit only on CUDA,
  so the replacement runs directly), as {module name pattern: elements}, layer and expert indices folded;
- adapters: peft's get_peft_model(LoraConfig(target_modules=..., r)) on the plain model: trainable elements per
  module pattern.

    python -m tests.measure.experts_v4   # prints JSON
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

CONFIGS = {
    "mixtral": dict(model_type="mixtral", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    num_key_value_heads=4, intermediate_size=128, vocab_size=256, num_local_experts=4,
                    num_experts_per_tok=2, max_position_embeddings=128, tie_word_embeddings=False),
    "qwen2_moe": dict(model_type="qwen2_moe", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=96,
                      shared_expert_intermediate_size=128, vocab_size=256, num_experts=4, num_experts_per_tok=2,
                      max_position_embeddings=128, tie_word_embeddings=False),
}


def _pattern(name: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", re.sub(r"\.\d+\.", ".N.", name))


def _model(config):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(**config)).to(torch.bfloat16)


def quantized(config) -> dict:
    import bitsandbytes as bnb
    from transformers import BitsAndBytesConfig
    from transformers.integrations.bitsandbytes import get_keys_to_not_convert, replace_with_bnb_linear

    model = _model(config)
    skip = get_keys_to_not_convert(model)
    model = replace_with_bnb_linear(model, modules_to_not_convert=skip,
                                    quantization_config=BitsAndBytesConfig(load_in_4bit=True))
    out = Counter()
    for name, module in model.named_modules():
        if isinstance(module, bnb.nn.Linear4bit):
            out[_pattern(name)] += module.in_features * module.out_features
    return dict(out)


def adapters(config, targets, r=8) -> dict:
    from peft import LoraConfig, get_peft_model

    try:
        model = get_peft_model(_model(config), LoraConfig(r=r, target_modules=targets))
    except ValueError:           # "Target modules {...} not found in the base model": nothing to adapt
        return {}
    out = Counter()
    for name, p in model.named_parameters():
        if p.requires_grad:
            out[_pattern(name.removeprefix("base_model.model."))] += p.numel()
    return dict(out)


def measure() -> dict:
    import peft
    import transformers

    return {"transformers": transformers.__version__, "peft": peft.__version__,
            **{family: {"quantized": quantized(c), "all-linear": adapters(c, "all-linear"),
                        "down": adapters(c, ["down_proj"])} for family, c in CONFIGS.items()}}


if __name__ == "__main__":
    print(json.dumps(measure()))
