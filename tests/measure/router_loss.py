"""Measure Hugging Face's MoE load-balancing loss on the CPU (test-only; needs torch and transformers): the live
bytes its forward adds above its inputs, what it saves for backward, and what a model's output_router_logits
keeps alive until the loss.

What runs
- transformers' own load_balancing_loss_func (models/qwen3_moe/modeling_qwen3_moe.py; Mixtral, Qwen2-MoE and
  the other MoE families carry a copy), as installed (5.24.0: one layer at a time since huggingface/transformers
  PR #48131, released in 5.16.0), and the function before that PR, read from a transformers 5.15.1 wheel
  (TRANSFORMERS_OLD_WHEEL, downloaded with `pip download transformers==5.15.1 --no-deps`): its source is taken
  from the wheel's modeling_qwen3_moe.py by name (ast) and run unchanged with torch in its namespace. 5.15.1
  concatenates every layer's router logits, a softmax, top-k, then one_hot [L T, k, E] int64 and its .float().
- Inputs: a tuple of L router-logit tensors [T, E] in bf16 with requires_grad (a router's output), as the model
  passes outputs.router_logits; no attention mask (packed or unpadded batches; the Trainer's padded batches pass
  one, which adds masks of the same shapes: not measured here).
- The model: a tiny Qwen3-MoE from its config (transformers AutoModelForCausalLM.from_config), one step's forward
  with labels, output_router_logits on and off: the bytes saved for backward (saved_tensors_hooks) differ by what
  the loss saves, and the tensors alive at the loss differ by the kept router logits.

Live bytes: tests/measure/loss_peaks.py LiveTracker (a TorchDispatchMode counting new storages, freed by
weakref.finalize); inputs made before the mode are not counted.

Run as a script: python -m tests.measure.router_loss prints JSON.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import zipfile

from tests.measure.loss_peaks import LiveTracker, SavedRecorder

TRANSFORMERS_OLD_WHEEL = os.environ.get(
    "TRANSFORMERS_OLD_WHEEL", "/tmp/tfw/5.15.1/transformers-5.15.1-py3-none-any.whl")


def old_loss_func(wheel: str = TRANSFORMERS_OLD_WHEEL):
    """load_balancing_loss_func of transformers 5.15.1 (before PR #48131), from its wheel, or None without it."""
    if not os.path.exists(wheel):
        return None
    import torch

    with zipfile.ZipFile(wheel) as z:
        text = z.read("transformers/models/qwen3_moe/modeling_qwen3_moe.py").decode()
    node = next(n for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == "load_balancing_loss_func")
    namespace = {"torch": torch}
    exec("from __future__ import annotations\n" + ast.get_source_segment(text, node), namespace)
    return namespace["load_balancing_loss_func"]


def function_peak(loss_func, L=4, T=512, E=16, k=4, dtype="bf16") -> dict:
    """The loss alone over L layers' router logits: forward peak above its inputs, saved bytes, backward peak."""
    import torch

    torch.manual_seed(0)
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    logits = tuple(torch.randn(T, E, dtype=dt, requires_grad=True) for _ in range(L))
    rec = SavedRecorder(exclude=logits)
    with LiveTracker() as tr:
        with rec.hooks():
            loss = loss_func(logits, E, k)
        forward_peak, saved = tr.peak, rec.total
        tr.reset_peak()
        loss.backward()
        backward_peak = tr.peak
    return {"L": L, "T": T, "E": E, "k": k, "dtype": dtype, "forward_peak": forward_peak, "saved": saved,
            "backward_peak": backward_peak, "LTE": L * T * E, "LTkE": L * T * k * E,
            "saved_by_tensor": rec.listing()}


TINY = {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "num_experts": 16, "num_experts_per_tok": 4, "vocab_size": 256, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "norm_topk_prob": True, "max_position_embeddings": 1024}


def model_router_terms(batch=1, seq=512) -> dict:
    """A tiny Qwen3-MoE's forward with labels, output_router_logits off and on: saved bytes and the router logits
    the output holds at the loss."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = {}
    for on in (False, True):
        torch.manual_seed(0)
        cfg = AutoConfig.for_model(**TINY)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        rec = SavedRecorder(exclude=tuple(model.parameters()) + (ids,))
        with rec.hooks():
            result = model(input_ids=ids, labels=ids, output_router_logits=on)
        kept = sum(t.untyped_storage().nbytes() for t in (result.router_logits or ()))
        out["on" if on else "off"] = {"saved": rec.total, "router_logits_kept": kept}
        del result
    L, T, E = TINY["num_hidden_layers"], batch * seq, TINY["num_experts"]
    out.update(LTE=L * T * E, saved_difference=out["on"]["saved"] - out["off"]["saved"])
    return out


def main(argv) -> int:
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    result = {"installed": function_peak(load_balancing_loss_func), "model": model_router_terms()}
    old = old_loss_func()
    if old is not None:
        result["5.15.1"] = function_peak(old)
    json.dump(result, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
