"""The loss end's transients of whichever transformers release is installed (test-only; needs torch, transformers).
Run by tests/test_versions.py in this venv (5.24) and, as a script, with a separate interpreter holding an older
release (transformers 4.45.2 beside torch 2.13: `python -m venv /tmp/tf445 && /tmp/tf445/bin/pip install
torch==2.13.0 transformers==4.45.2`; ZEROCALC_OLD_TRANSFORMERS_PYTHON names it).

A tiny Llama (eager attention, bf16, no checkpointing) runs `loss = model(input_ids, labels=input_ids).loss` with
the output dropped, as Trainer.compute_loss does, under tests/measure/loss_peaks.py's LiveTracker (every new
storage counted until freed; the model and the batch exist before it starts). Numbers (bytes):
- forward_transients: the forward peak less what is live at backward's start (the saved activations, the loss's
  saved fp32 log-softmax among them): what the loss end holds only while it runs, at its peak;
- backward_transients: backward's peak less what is live at its start (here the loss's moment: the head's T x V
  gradients beside the saved log-softmax, before any block's backward, the blocks being small).

    python -m tests.measure.loss_versions [batch seq vocab]   # prints JSON, with the transformers version
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def measure(batch: int = 2, seq: int = 128, vocab: int = 4096) -> dict:
    import torch
    import transformers

    from tests.measure.loss_peaks import LiveTracker
    from tests.measure.saved_tensors import build_from_config

    torch.set_num_threads(1)
    config = dict(model_type="llama", num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=128, vocab_size=vocab, max_position_embeddings=seq,
                  pad_token_id=0, tie_word_embeddings=False)
    model = build_from_config(config, torch.bfloat16)
    torch.manual_seed(0)
    ids = torch.randint(1, vocab, (batch, seq))
    with LiveTracker() as tracker:
        loss = model(input_ids=ids, labels=ids).loss          # the output dropped (Trainer.compute_loss)
        forward_peak, start = tracker.peak, tracker.live
        tracker.reset_peak()
        loss.backward()
        backward_peak = tracker.peak
    return {"transformers": transformers.__version__, "batch": batch, "seq": seq, "vocab": vocab,
            "forward_transients": forward_peak - start, "backward_transients": backward_peak - start}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    print(json.dumps(measure(*args)))
