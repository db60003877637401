"""Bytes the parallel-block families (GPT-NeoX, phi, StableLM, Falcon) and Gemma 1 save for backward, per region
and per tensor (test-only; needs torch and transformers).

tests/measure/moe_activations.py's recorder (every tensor autograd packs, once per storage, parameters excluded,
tagged with the module running when it was first packed and the autograd nodes holding it; SDPA recorded as the
CUDA flash / memory-efficient kernels save it), with the decoder layers found wherever the family keeps them
(Falcon: transformer.h, GPT-NeoX: gpt_neox.layers). Tiny configs of the real classes: 2 layers, hidden 256.

One exception to the emulation: SDPA called with fewer K/V heads than query heads and no enable_gqa (Falcon's
multi_query broadcasts one K/V head) is refused by the CUDA flash and memory-efficient kernels
(sdp_utils check_batch_size_and_num_heads_dense), so CUDA runs PyTorch's composite math kernel, the one the CPU
runs: that call is recorded as it really runs here.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import torch
import torch.nn.functional as F

from tests.measure.moe_activations import Recorder, _walk_saved, cuda_sdpa_semantics

BATCH, SEQ = 2, 128
_BASE = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, vocab_size=1000, max_position_embeddings=256,
             use_cache=False)
TINY = {
    "gemma": dict(_BASE, model_type="gemma", intermediate_size=512, num_key_value_heads=2, head_dim=64,
                  hidden_act="gelu", tie_word_embeddings=True),
    # Pythia's block: fused QKV with biases, parallel residual with two LayerNorms, rotary_pct 0.25
    "gpt_neox": dict(_BASE, model_type="gpt_neox", intermediate_size=1024, rotary_pct=0.25,
                     use_parallel_residual=True, tie_word_embeddings=False),
    "gpt_neox_sequential": dict(_BASE, model_type="gpt_neox", intermediate_size=1024, rotary_pct=0.25,
                                use_parallel_residual=False, tie_word_embeddings=False),
    # phi-2's block: one LayerNorm, q/k/v/dense biases, gelu_new, partial_rotary_factor 0.4, a biased head
    "phi": dict(_BASE, model_type="phi", intermediate_size=1024, partial_rotary_factor=0.4, num_key_value_heads=8),
    # stablelm-2-1_6b's block (sequential) and the parallel option
    "stablelm": dict(_BASE, model_type="stablelm", intermediate_size=512, num_key_value_heads=8,
                     partial_rotary_factor=0.25, use_qkv_bias=True, use_parallel_residual=False),
    "stablelm_parallel": dict(_BASE, model_type="stablelm", intermediate_size=512, num_key_value_heads=8,
                              partial_rotary_factor=0.25, use_qkv_bias=True, use_parallel_residual=True),
    # Falcon-7B's block (multi-query, one norm, parallel) and Falcon-40B's (new architecture, 2 KV heads, 2 norms)
    "falcon": dict(_BASE, model_type="falcon", multi_query=True, parallel_attn=True, bias=False,
                   tie_word_embeddings=True),
    "falcon_new": dict(_BASE, model_type="falcon", new_decoder_architecture=True, num_kv_heads=2, parallel_attn=True,
                       bias=False, tie_word_embeddings=True),
    # Gemma 2: attention logit soft-capping (50) and final logit soft-capping (30); eager only (below)
    "gemma2": dict(_BASE, model_type="gemma2", intermediate_size=512, num_key_value_heads=2, head_dim=64,
                   query_pre_attn_scalar=64, sliding_window=64, attn_logit_softcapping=50.0,
                   final_logit_softcapping=30.0),
}
# Gemma2PreTrainedModel._supports_sdpa = False in transformers 5.24 ("sdpa does not support softcapping"): the
# model refuses SDPA, so eager (or a flash-attention kernel with its softcap argument) is what runs.
EAGER_ONLY = ("gemma2",)


def build(config: dict, dtype=torch.float32, attn="sdpa"):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = dict(config)
    cfg = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=dtype).train()


def _layers_prefix(model) -> str:
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.split(".")[-1] in ("layers", "h"):
            return name
    raise ValueError("no decoder layers found")


@contextlib.contextmanager
def _fused_kernels_only_when_heads_match(rec: Recorder):
    real = F.scaled_dot_product_attention
    with cuda_sdpa_semantics(rec):
        emulated = F.scaled_dot_product_attention

        def sdpa(query, key, value, *args, **kwargs):
            if query.shape[1] != key.shape[1] and not kwargs.get("enable_gqa", False):
                return real(query, key, value, *args, **kwargs)      # the math kernel, recorded as it runs
            return emulated(query, key, value, *args, **kwargs)

        F.scaled_dot_product_attention = sdpa
        try:
            yield
        finally:
            F.scaled_dot_product_attention = emulated


def measure(model, batch: int = BATCH, seq: int = SEQ, seed: int = 0) -> dict:
    """{"by_region": {"embed" | "layer.<i>.<part>" | "head": bytes}, "tensors": [...]} for one forward + loss."""
    rec = Recorder(model)
    rec.layer_prefix = _layers_prefix(model)
    handles = []

    def enter(name):
        def hook(module, args):
            rec.stack.append(name)
        return hook

    def leave(module, args, output):         # returns None: the output stays the module's
        rec.stack.pop()

    for n, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(enter(n)))
        handles.append(m.register_forward_hook(leave))
    torch.manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    try:
        with _fused_kernels_only_when_heads_match(rec):
            with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                loss = model(input_ids=ids, labels=ids).loss
        _walk_saved(loss, rec)
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    tensors = []
    for e in list(rec.entries.values()) + rec.synthetic:
        e = dict(e, live=bool(e["saved_by"]) or e["label"].startswith("sdpa"))
        tensors.append(e)
    by_region = Counter()
    for e in tensors:
        if e["live"]:
            by_region[e["region"]] += e["bytes"]
    return {"by_region": dict(by_region), "tensors": tensors}
