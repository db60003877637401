"""Measure the bytes a real Hugging Face model saves for backward (test-only; needs torch and transformers).

Every tensor autograd packs during forward + loss is recorded once per storage (views and re-saves of the same
storage count once), tagged with the region running when it was first saved: "embed" (before the first block),
"layer" (inside decoder blocks) or "head" (final norm, output projection and loss). Parameter storages are
excluded: they are persistent model state, counted by the ledger.

The model predicts what a CUDA run saves. Two CPU kernels save differently, and `gpu_semantics` accounts for
them explicitly here, not in the model:
- dropout: CPU's native_dropout keeps a mask in the input's dtype; CUDA's fused dropout keeps a bool (1 byte).
  We run dropout as x * bool_mask * 1/(1-p), whose autograd saves exactly that 1-byte mask.
- scaled_dot_product_attention: on CUDA the flash / memory-efficient kernels save query, key and value as passed,
  the output and an fp32 logsumexp of b x heads x s (PyTorch tools/autograd/derivatives.yaml,
  _scaled_dot_product_flash_attention / _efficient_attention). The CPU kernel copies strided inputs, and with
  dropout falls back to the math path that saves the s x s probabilities. We let the CPU kernel compute, ignore
  what it saves, and record what the CUDA kernel saves, with its output in the same memory order.
With gradient checkpointing (non-reentrant), autograd's own hooks replace ours inside each block, and what the
block keeps is its inputs (torch.utils.checkpoint: the function is re-run from its saved inputs): we record the
tensors each block is called with.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def build_from_config(config: dict, dtype):
    """A randomly initialised causal LM from a config dict (no download: HF_HUB_OFFLINE).

    Training runs without a KV cache (use_cache=False, as the HF Trainer sets with checkpointing): with the
    default use_cache=True, GPT-2's forward keeps contiguous copies of K and V in a cache it never reads.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**{"use_cache": False, **config})
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=config.get("attn_implementation", "eager"))
    return model.to(dtype).train()


class _Recorder:
    def __init__(self, model):
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.seen, self.by_region, self.alive = set(), Counter(), []
        self.region, self.paused = "embed", False
        self.checkpointing = False          # inside a checkpointed block only its inputs are kept

    def add(self, t: torch.Tensor, nbytes: int = None):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if self.paused or (self.checkpointing and self.region == "layer") or ptr in self.seen or ptr in self.params or not storage.nbytes():
            return
        self.seen.add(ptr)
        self.alive.append(t)  # a freed storage's address could be reused and wrongly deduplicated
        self.by_region[self.region] += storage.nbytes() if nbytes is None else nbytes

    def pack(self, t):
        self.add(t)
        return t


@contextlib.contextmanager
def gpu_semantics(rec: _Recorder):
    real_sdpa, real_dropout = F.scaled_dot_product_attention, F.dropout

    def dropout(x, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return x
        mask = torch.rand_like(x, dtype=torch.float32) >= p          # bool: 1 byte per element, as on CUDA
        return x * mask * (1.0 / (1.0 - p))

    def sdpa(query, key, value, *args, **kwargs):
        was_paused, rec.paused = rec.paused, True
        try:
            out = real_sdpa(query, key, value, *args, **kwargs)
        finally:
            rec.paused = was_paused
        if not out.transpose(1, 2).is_contiguous():
            # CUDA flash returns its output in (batch, seq, heads, dim) memory order, so the caller's
            # transpose(1, 2).contiguous() is free; the CPU math path (used with dropout) does not.
            out = out.transpose(1, 2).contiguous().transpose(1, 2)
        if not rec.paused and not rec.checkpointing:
            for t in (query, key, value, out):
                rec.add(t)
            b, heads, s = query.shape[0], query.shape[1], query.shape[2]
            rec.by_region[rec.region] += 4 * b * heads * s            # fp32 logsumexp
        return out

    F.scaled_dot_product_attention, F.dropout = sdpa, dropout
    try:
        yield
    finally:
        F.scaled_dot_product_attention, F.dropout = real_sdpa, real_dropout


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def measure(model, batch: int, seq: int, checkpointing: bool = False, every: int = 1) -> Counter:
    """Bytes saved for backward per region, one count per storage, as a CUDA run would save them. `every` N > 1
    with checkpointing: only the blocks at positions N, 2N, ... are checkpointed (torchtitan's layer SAC,
    _apply_layer_sac: 'count % ac_freq == 0'); the others run plainly and save everything."""
    rec = _Recorder(model)
    if checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None)   # transformers >= 5.x
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    base = model.base_model
    blocks = base.h if hasattr(base, "h") else base.layers
    checkpointed = {id(b) for position, b in enumerate(blocks, 1) if checkpointing and position % every == 0}
    for b in blocks:
        if checkpointing and id(b) not in checkpointed:
            b.gradient_checkpointing = False       # GradientCheckpointingLayer: this block runs plainly

    def enter_block(module, args, kwargs):
        rec.region = "layer"
        rec.checkpointing = False
        if id(module) in checkpointed:
            for t in _tensors((args, kwargs)):
                rec.add(t)
            rec.checkpointing = True

    final_norm = base.ln_f if hasattr(base, "ln_f") else base.norm
    handles = [b.register_forward_pre_hook(enter_block, with_kwargs=True) for b in blocks]
    handles.append(final_norm.register_forward_pre_hook(lambda *_: setattr(rec, "region", "head")))
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    try:
        with gpu_semantics(rec):
            with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                loss = model(input_ids=ids, labels=ids).loss
            rec.paused = True
            loss.backward()  # the graph is complete and usable (a recompute sees the same kernels)
    finally:
        for h in handles:
            h.remove()
    return rec.by_region
