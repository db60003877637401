"""The loss end's transients of a vision-language model's own forward, under whichever transformers release is
installed (test-only; torch and transformers). Run by tests/test_vlm_loss_versions.py in this venv and, as a script,
from an interpreter that puts an older release first on its path (ZEROCALC_VLM_TRANSFORMERS_PATHS).

Why: Qwen2-VL / Qwen2.5-VL before transformers 4.52 and Gemma 3's ForConditionalGeneration before 5.17 computed
their loss in the model, not through loss_utils.ForCausalLMLoss: logits.float() in place of the logits, then the
shifted slice copied (.contiguous(); Gemma 3: boolean-indexed by the attention mask, a copy at any batch size).

A small model of the family (tests/measure/vision_activations.py build: a one-layer text model) runs
`model(input_ids, attention_mask, labels).loss` on text alone (no image: the loss path does not depend on it), the
output dropped as Trainer.compute_loss does, under loss_peaks.LiveTracker, as tests/measure/loss_versions.py does
for Llama. Numbers (bytes): forward_transients (forward's peak less what is live at backward's start) and
backward_transients (backward's peak less that start).

    python -m tests.measure.vlm_loss_versions FAMILY [batch seq]     # prints JSON with the transformers version
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

VOCAB = 4096


def measure(family: str, batch: int = 2, seq: int = 128) -> dict:
    import torch
    import transformers

    from tests.measure.loss_peaks import LiveTracker
    from tests.measure.vision_activations import TEXT, build

    torch.set_num_threads(1)
    vision = {"qwen2.5-vl": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                             "out_hidden_size": TEXT["hidden_size"], "patch_size": 14, "spatial_merge_size": 2,
                             "fullatt_block_indexes": [0], "window_size": 112},
              "gemma3": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "image_size": 56, "patch_size": 14, "tokens": 4}}[family]
    import tests.measure.vision_activations as va
    if family == "qwen2.5-vl" and transformers.__version__ < "4.52":
        # before 4.52 Qwen2_5_VLConfig took the text model's keys at its top level (no text_config)
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
        torch.manual_seed(0)
        cfg = Qwen2_5_VLConfig(**{**TEXT, "vocab_size": VOCAB}, vision_config=vision, image_token_id=VOCAB - 1,
                               video_token_id=VOCAB - 2, vision_start_token_id=VOCAB - 3,
                               rope_scaling={"type": "mrope", "mrope_section": [2, 2, 2]})
        model = Qwen2_5_VLForConditionalGeneration._from_config(cfg, attn_implementation="sdpa")
        model = model.to(torch.bfloat16).train()
    else:
        va.TEXT = {**TEXT, "vocab_size": VOCAB}
        try:
            model = build(family, dict(vision))
        finally:
            va.TEXT = TEXT
    torch.manual_seed(0)
    ids = torch.randint(1, VOCAB - 8, (batch, seq))
    mask = torch.ones_like(ids)
    with LiveTracker() as tracker:
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss     # the output dropped
        forward_peak, start = tracker.peak, tracker.live
        tracker.reset_peak()
        loss.backward()
        backward_peak = tracker.peak
    return {"transformers": transformers.__version__, "family": family, "batch": batch, "seq": seq, "vocab": VOCAB,
            "forward_transients": forward_peak - start, "backward_transients": backward_peak - start}


if __name__ == "__main__":
    family = sys.argv[1]
    args = [int(a) for a in sys.argv[2:4]]
    print(json.dumps(measure(family, *args)))
