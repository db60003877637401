"""What torch.compile saves for backward for one LoRA-adapted decoder block, measured on the CPU as
compiled_saves.py measures a fully trained one (test-only; needs torch, transformers and peft)."""

from __future__ import annotations

import torch

from tests.measure.compiled_saves import _first_tensor, _layer_call, _measure_pair
from tests.measure.saved_tensors import _tensors, build_from_config


def compiled_lora_block_saves(config: dict, target: str, rank: int = 8, adapter_dtype=torch.bfloat16, batch=2,
                              seq=64, input_grad=True):
    """As compiled_block_saves, for one block of the model with peft LoRA adapters (rank `rank`, no dropout) on
    `target` ("q,v", "q,k,v,o,gate,up,down"), in `adapter_dtype` (bf16: torchtune's LoRALinear, which runs in the
    model's dtype; fp32: peft's autocast default), the base frozen. input_grad False: the first block's input,
    which no gradient reaches."""
    from tests.measure.peft_lora import wrap

    model = build_from_config({**config, "attn_implementation": "sdpa"}, torch.bfloat16)
    model = wrap(model, rank=rank, target=target, autocast_adapter_dtype=False)
    for module in model.modules():                           # peft keeps a new adapter in the base's dtype here
        if hasattr(module, "lora_A"):
            for part in (module.lora_A, module.lora_B):
                part.to(adapter_dtype)
    model = model.train().get_base_model()
    block, hidden, rest, kwargs = _layer_call(model, batch, seq)
    x = torch.randn(hidden.shape, dtype=torch.bfloat16).requires_grad_(input_grad)
    shared = list(_tensors((rest, kwargs)))

    def fn(x):
        return _first_tensor(block(x, *rest, **kwargs))

    return _measure_pair(fn, (x,), list(block.parameters()), [x], shared)
