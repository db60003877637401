"""A lifetime trace of backward under full recompute (issue 31 item 4): does the loss's gradient moment coexist with
the last block's recompute? (test-only; needs torch, transformers, peft)

A tiny Hugging Face Llama (transformers' own forward and ForCausalLMLoss, eager attention, dropout 0), with
`gradient_checkpointing_enable(use_reentrant=False)` (torch.utils.checkpoint non-reentrant, as transformers wires
it), trained whole or through peft LoRA, and the step as the Trainer runs it: `loss = model(**batch).loss`, the
model output dropped before `loss.backward()` (Trainer.compute_loss returns only the loss).

Live bytes over time: tests/measure/loss_peaks.py's LiveTracker (a TorchDispatchMode counting each new storage
once and subtracting it when the storage is freed), entered after the model and the batch exist, so the numbers
are above the parameters and the inputs. Marks on the timeline:
- "backward start": live after forward (the saved activations and the loss's saved fp32 log-softmax);
- "recompute start": a forward pre-hook on the last decoder layer's input norm fires a second time, inside
  backward, when torch.utils.checkpoint re-runs it (with peft adapters on every linear it fires after the re-run's
  first ops: compare peaks, not this mark). The tracker's live T x V storages (the log-softmax, the logits' gradient,
  its casts) are listed at that moment;
- window peaks: the most live from backward's start to the recompute (the loss-gradient moment, which includes the
  output projection's and the final norm's backward) and from the recompute to the end of backward.
`trace(...)` returns those numbers (bytes) as a dict. `kv_heads` (llama()) and `targets` (peft's LoRA modules) vary
the block; `grads_first` makes every trainable .grad before the trace (tests/test_block_backward.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from tests.measure.loss_peaks import LiveTracker  # noqa: E402
from tests.measure.saved_tensors import build_from_config  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def llama(layers=2, hidden=64, heads=4, ffn=128, vocab=4096, seq=256, kv_heads=None):
    return dict(model_type="llama", num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                num_key_value_heads=kv_heads or heads, intermediate_size=ffn, vocab_size=vocab,
                max_position_embeddings=seq,
                attention_dropout=0.0, pad_token_id=0, tie_word_embeddings=False)


LORA_TARGETS = ("q", "k", "v", "o")


def build(config: dict, dtype: str, mode: str, targets=LORA_TARGETS):
    model = build_from_config(config, DTYPES[dtype])
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                                 target_modules=[f"{m}_proj" for m in targets]))
    return model


def _decoder_layers(model):
    return next(m for n, m in model.named_modules() if n.endswith("layers") and isinstance(m, torch.nn.ModuleList))


def trace(config: dict = None, dtype: str = "bf16", mode: str = "lora", batch: int = 1, seq: int = 256,
          grads_first: bool = False, targets=LORA_TARGETS) -> dict:
    """`grads_first`: every trainable parameter's .grad exists (zeros) before the trace, as in a framework's
    gradient buffers (zerocalc's model states): backward adds each weight's gradient into it, so only that
    gradient's own transient is traced, not the growing set of .grad tensors."""
    torch.set_num_threads(1)
    config = config or llama(seq=seq)
    model = build(config, dtype, mode, targets)
    if grads_first:
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    torch.manual_seed(0)
    ids = torch.randint(1, config["vocab_size"], (batch, seq))
    tv_fp32 = batch * seq * config["vocab_size"] * 4
    tracker = LiveTracker()
    marks, in_backward = {}, [False]

    def pre_hook(module, args):
        if in_backward[0] and "recompute start" not in marks:
            marks["loss-gradient moment peak"] = tracker.peak
            marks["recompute start"] = tracker.live
            # T x V storages still alive (fp32 log-softmax, the logits' gradient, a cast of it): their bytes
            marks["T x V storages live at recompute"] = sum(n for n in tracker._ptrs.values() if n >= tv_fp32 // 2)
            tracker.reset_peak()

    # transformers 5 checkpoints the layer's forward, not its __call__ (modeling_layers.py: module hooks stay
    # outside the checkpoint), so the re-run is seen on the block's first submodule
    handle = _decoder_layers(model)[-1].input_layernorm.register_forward_pre_hook(pre_hook)
    with tracker:
        loss = model(input_ids=ids, labels=ids).loss          # the output dropped, as Trainer.compute_loss does
        marks["forward peak"] = tracker.peak
        marks["backward start"] = tracker.live
        marks["T x V storages live at backward start"] = sum(n for n in tracker._ptrs.values() if n >= tv_fp32 // 2)
        tracker.reset_peak()
        in_backward[0] = True
        loss.backward()
        marks["recompute moment peak"] = tracker.peak
    handle.remove()
    marks["backward peak"] = max(marks["loss-gradient moment peak"], marks["recompute moment peak"])
    marks["T x V fp32 bytes"] = tv_fp32
    return marks


if __name__ == "__main__":
    import json
    import sys

    seq = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    for mode in ("lora", "full"):
        for dtype in ("bf16", "fp32"):
            print(mode, dtype, json.dumps(trace(dtype=dtype, mode=mode, seq=seq)))
