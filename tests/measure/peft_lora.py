"""Inventory of a peft LoRA / DoRA model: every parameter tensor, trainable or frozen (test-only; needs peft).

`lora_inventory(config, ...)` builds a small Hugging Face causal LM from a config dict with random weights
(tests/measure/saved_tensors.build_from_config), wraps it with `peft.get_peft_model(model, LoraConfig(...))`
and returns plain JSON-able data: per-tensor name, shape, dtype, elements, bytes and role, the totals peft itself
reports (`get_nb_trainable_parameters`), and the module names the target set resolved to (what "all-linear"
selects).

Facts this records (peft 0.21.2):
- lora_A[adapter] is an nn.Linear(in, r, bias=False): weight r x in; lora_B an nn.Linear(r, out, bias=False):
  weight out x r (peft/tuners/lora/layer.py, LoraLayer.update_layer).
- DoRA adds lora_magnitude_vector[adapter].weight with `out` elements (peft/tuners/lora/dora.py,
  DoraLinearLayer.update_layer: `self.weight = nn.Parameter(weight_norm)`, the row norms of W + s B A).
- modules_to_save wraps the module in ModulesToSaveWrapper: `original_module` stays (frozen) and
  `modules_to_save[adapter]` is a deep copy that trains (peft/utils/other.py).
- get_peft_model(..., autocast_adapter_dtype=True) upcasts bf16/fp16 adapter parameters to fp32
  (peft/tuners/tuners_utils.py, cast_adapter_dtype); the modules_to_save copy is not a tuner layer and keeps the
  base dtype.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from tests.measure.saved_tensors import build_from_config  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHORT = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
         "down": "down_proj"}


def llama_config(layers=2, hidden=256, heads=8, kv_heads=8, intermediate=1024, vocab=1000, seq=128,
                 tie=False) -> dict:
    return dict(model_type="llama", num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                num_key_value_heads=kv_heads, intermediate_size=intermediate, vocab_size=vocab,
                max_position_embeddings=seq, pad_token_id=0, tie_word_embeddings=tie)


def targets(spec):
    """"q,v" / ["q", "v"] / "all-linear" -> what LoraConfig.target_modules takes."""
    if spec == "all-linear":
        return "all-linear"
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [SHORT.get(t.strip(), t.strip()) for t in items]


def role(name: str) -> str:
    if "lora_magnitude_vector" in name:
        return "dora_magnitude"
    if "lora_A" in name:
        return "lora_A"
    if "lora_B" in name:
        return "lora_B"
    if "modules_to_save" in name:
        return "modules_to_save_copy"
    if "original_module" in name:
        return "modules_to_save_original"
    return "base"


def wrap(model, *, rank=8, target="q,v", dora=False, dropout=0.0, modules_to_save=None, alpha=None,
         autocast_adapter_dtype=True, bias="none"):
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, target_modules=targets(target),
                     lora_dropout=dropout, use_dora=dora, bias=bias, modules_to_save=modules_to_save,
                     task_type="CAUSAL_LM")
    return get_peft_model(model, cfg, autocast_adapter_dtype=autocast_adapter_dtype)


def inventory(peft_model) -> dict:
    tensors = []
    for name, p in peft_model.named_parameters():
        tensors.append(dict(name=name, shape=list(p.shape), dtype=str(p.dtype).removeprefix("torch."),
                            numel=p.numel(), bytes=p.numel() * p.element_size(), trainable=p.requires_grad,
                            role=role(name)))
    trainable, total = peft_model.get_nb_trainable_parameters()
    targeted = sorted(n.removeprefix("base_model.model.") for n, m in peft_model.named_modules()
                      if hasattr(m, "lora_A") and hasattr(m, "base_layer"))
    sums = {}
    for t in tensors:
        key = ("trainable" if t["trainable"] else "frozen") + ":" + t["dtype"]
        sums[key] = sums.get(key, 0) + t["bytes"]
    by_role = {}
    for t in tensors:
        by_role[t["role"]] = by_role.get(t["role"], 0) + t["numel"]
    return dict(tensors=tensors, peft_trainable=trainable, peft_total=total,
                trainable_params=sum(t["numel"] for t in tensors if t["trainable"]),
                frozen_params=sum(t["numel"] for t in tensors if not t["trainable"]),
                bytes_by_kind=sums, params_by_role=by_role, targeted_modules=targeted)


def lora_inventory(config: dict = None, dtype: str = "bf16", **lora) -> dict:
    """Build, wrap with peft and return the inventory (see module docstring). lora: wrap()'s keywords."""
    model = build_from_config({**(config or llama_config()), "attn_implementation": "sdpa"}, DTYPES[dtype])
    return inventory(wrap(model, **lora))


def formula_trainable(config: dict, *, rank, target, dora=False, modules_to_save=()) -> int:
    """The closed form the calculator should implement, for a Llama config (no biases)."""
    h, f, n_h, n_kv = (config["hidden_size"], config["intermediate_size"], config["num_attention_heads"],
                       config["num_key_value_heads"])
    d = h // n_h
    shapes = {"q_proj": (h, n_h * d), "k_proj": (h, n_kv * d), "v_proj": (h, n_kv * d), "o_proj": (n_h * d, h),
              "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}  # (in, out)
    names = list(shapes) if target == "all-linear" else targets(target)
    per_layer = sum(rank * shapes[n][0] + shapes[n][1] * rank + (shapes[n][1] if dora else 0) for n in names)
    extra = {"lm_head": config["vocab_size"] * h, "embed_tokens": config["vocab_size"] * h}
    return config["num_hidden_layers"] * per_layer + sum(extra[m] for m in modules_to_save)
