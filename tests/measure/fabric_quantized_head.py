"""Which linears Lightning Fabric's BitsandbytesPrecision quantizes, measured on the CPU (test-only; needs lightning
and bitsandbytes): LitGPT builds its GPT under `fabric.init_module()`, and the plugin's module_init_context makes
every torch.nn.Linear constructed there a bitsandbytes 4-bit one, the output head included
(lightning fabric/plugins/precision/bitsandbytes.py `module_init_context`, `_ClassReplacementContextManager`).

Fabric itself refuses bitsandbytes without CUDA ("Bitsandbytes is only supported on CUDA GPUs."), so the plugin's
context is entered directly, around a model shaped as LitGPT's (an embedding, a block's linear, an untied head), and
the layers are moved to the CPU, which quantizes them (Params4bit on its device move). `quantized_model()` lists
each module's class and its weight's stored bytes.
"""

from __future__ import annotations

import torch

VOCAB, HIDDEN, QKV = 512, 64, 192


class TinyGPT(torch.nn.Module):
    """LitGPT's GPT in miniature: transformer.wte (Embedding), one block's fused qkv linear, an untied lm_head."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, QKV, bias=False)
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)


def quantized_model(mode: str = "nf4") -> dict:
    """{module name: {"class", "quantized" (a bitsandbytes 4-bit linear), "bytes" (its weight's storage),
    "absmax" (its quant state's absmax elements, or 0)}} under BitsandbytesPrecision(mode, bf16)."""
    from lightning.fabric.plugins import BitsandbytesPrecision
    import bitsandbytes as bnb
    plugin = BitsandbytesPrecision(mode, torch.bfloat16)
    with plugin.module_init_context():
        model = TinyGPT()
    model = model.to("cpu")
    out = {}
    for name, module in model.named_children():
        w = module.weight
        state = getattr(w, "quant_state", None)
        out[name] = {"class": type(module).__name__, "quantized": isinstance(module, bnb.nn.Linear4bit),
                     "bytes": w.numel() * w.element_size(), "absmax": state.absmax.numel() if state else 0}
    return out
