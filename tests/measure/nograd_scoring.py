"""Measure an RL scoring pass on the CPU: a Hugging Face Llama's forward under torch.no_grad, then the
log-probabilities of the given tokens as the RL frameworks take them (log_softmax of the fp32-upcast logits, the
tokens gathered: verl's logprobs_from_logits fallback, TRL's selective_log_softmax for fp32), test-only (needs
torch and transformers, requirements-validation.txt).

Live bytes come from tests/measure/loss_peaks.py LiveTracker (a TorchDispatchMode counting every new storage
until it is freed), so the parameters and the token ids, made before it, are not counted: what is returned is the
pass's transient peak above the model, in bytes, and what is live once the model has returned (the logits).

Run as a script: python -m tests.measure.nograd_scoring HIDDEN FFN VOCAB LAYERS BATCH SEQ prints the JSON.
"""

from __future__ import annotations

import json
import sys


def scoring_peak(hidden: int, ffn: int, vocab: int, layers: int, batch: int, seq: int, heads: int = 4,
                 kv_heads: int = 2) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.measure.loss_peaks import LiveTracker

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = LlamaConfig(hidden_size=hidden, intermediate_size=ffn, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, vocab_size=vocab, num_hidden_layers=layers,
                         max_position_embeddings=max(seq, 64), attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, vocab, (batch, seq))
    with torch.no_grad(), LiveTracker() as tracker:
        logits = model(input_ids=ids, use_cache=False).logits
        after_model = tracker.live
        model_peak = tracker.peak
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        del logprobs
    return {"peak": tracker.peak, "model_peak": model_peak, "after_model": after_model}


if __name__ == "__main__":
    print(json.dumps(scoring_peak(*(int(a) for a in sys.argv[1:7]))))
