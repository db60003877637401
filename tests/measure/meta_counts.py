"""Parameter counts of a Hugging Face causal LM built from its config on the meta device (test-only oracle).

meta_counts(config) builds the model with transformers (no weights, no download, no remote code) and returns the
numbers zerocalc's architecture module must reproduce exactly:

- params: unique parameter elements (a tied embedding / lm_head is one tensor, counted once).
- expert_params: routed experts. Detected by module: every parameter owned directly by a module whose class name
  ends in "Experts" (transformers 5.x stores all experts of a layer as fused 3-D tensors, e.g.
  MixtralExperts.gate_up_proj [E, 2f, h] and .down_proj [E, h, f]; gpt-oss adds per-expert biases [E, 2f], [E, h]),
  plus, for older per-expert ModuleLists, everything below a module path segment named exactly "experts".
- shared_expert_params: everything below a module path segment containing "shared_expert" except
  Qwen2-MoE's "shared_expert_gate", which is reported as a router/gate weight.
- router_params: parameters owned by a module whose class name ends in "Router" (the top-k gate: weight [E, h],
  gpt-oss also a bias [E]) plus Qwen2-MoE's shared_expert_gate ([1, h]).
- dense_params: params - expert - shared - router (attention, dense MLPs, norms, embeddings, head).
- active_params: dense + shared + router + sum over MoE layers of routed_params_of_layer * top_k / num_experts
  (exact: each layer's expert tensors have a leading dimension num_experts, so the division is exact). Embedding and
  head are included (they are dense); active_params_non_embedding leaves out embed_tokens and an untied lm_head.
- largest_module: the module with the most parameters of its own (module.parameters(recurse=False)): what DeepSpeed
  ZeRO-3 gathers at once (stage3.py largest_layer_params). For fused 3-D experts this is all experts of one layer.
- layer_kinds: per decoder layer kind ("dense" or "moe"), the layer indices, and the parameter names (relative to the
  layer), shapes, dtypes and element counts of the first layer of that kind.

Multimodal configs with a "text_config" (Gemma 3 4B/12B/27B) are counted from their text_config by default (the
text decoder, as Gemma3ForCausalLM builds it); pass text_only=False to count the whole model.
"quantization_config" is dropped (FP8 DeepSeek-V3, MXFP4 gpt-oss): we count the model as trained, in bf16.
"""

from __future__ import annotations

import copy
import os
import re
from collections import OrderedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

DROPPED_KEYS = ("quantization_config", "auto_map")


def _is_routed_expert_module(module) -> bool:
    return type(module).__name__.endswith("Experts")


def _is_router_module(module) -> bool:
    return type(module).__name__.endswith("Router")


def _top_k(cfg) -> int | None:
    for key in ("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def build_meta_model(config: dict, text_only: bool = True, dtype=torch.bfloat16):
    """(model, config object, note) for a config dict, built on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_dict = copy.deepcopy(config)
    note = []
    if text_only and isinstance(cfg_dict.get("text_config"), dict):
        cfg_dict = cfg_dict["text_config"]
        note.append("built from text_config")
    for key in DROPPED_KEYS:
        if key in cfg_dict:
            cfg_dict.pop(key)
            note.append(f"dropped {key}")
    cfg_dict.setdefault("use_cache", False)
    model_type = cfg_dict.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **cfg_dict)
    with torch.device("meta"):
        if text_only or "text_config" not in config:
            model = AutoModelForCausalLM.from_config(cfg, trust_remote_code=False, dtype=dtype)
        else:
            from transformers import AutoModelForImageTextToText

            model = AutoModelForImageTextToText.from_config(cfg, trust_remote_code=False, dtype=dtype)
    return model, cfg, note


def _decoder_layers(model):
    base = model.base_model
    for attr in ("layers", "h"):
        if hasattr(base, attr):
            return f"{model.base_model_prefix}.{attr}", getattr(base, attr)
    lm = getattr(base, "language_model", None)
    if lm is not None and hasattr(lm, "layers"):
        return f"{model.base_model_prefix}.language_model.layers", lm.layers
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__}")


def meta_counts(config: dict, text_only: bool = True) -> dict:
    """Counts for one config dict (the parsed config.json). See the module docstring for each field."""
    model, cfg, note = build_meta_model(config, text_only=text_only)
    named_params = OrderedDict(model.named_parameters())  # remove_duplicate=True: tied weights once
    owner = {}  # id(param) -> first module name that owns it
    role = {}
    for mod_name, module in model.named_modules():
        segments = mod_name.split(".")
        for p_name, p in module.named_parameters(recurse=False):
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            if id(p) in owner:
                continue
            owner[id(p)] = mod_name
            if _is_routed_expert_module(module) or "experts" in segments:
                r = "routed_expert"
            elif "shared_expert_gate" in segments or _is_router_module(module):
                r = "router"
            elif any("shared_expert" in s for s in segments):
                r = "shared_expert"
            else:
                r = "dense"
            role[full] = r

    totals = {"routed_expert": 0, "shared_expert": 0, "router": 0, "dense": 0}
    for name, p in named_params.items():
        totals[role[name]] += p.numel()
    params = sum(p.numel() for p in named_params.values())

    # Active parameters: per MoE layer, routed params * top_k / num_experts.
    top_k = _top_k(cfg)
    layers_prefix, layers = _decoder_layers(model)
    active_routed = 0
    kinds = OrderedDict()
    for i, layer in enumerate(layers):
        experts = [m for m in layer.modules() if _is_routed_expert_module(m)]
        kind = "moe" if experts else "dense"
        if experts:
            for m in experts:
                n_exp = getattr(m, "num_experts", None)
                routed = sum(p.numel() for p in m.parameters(recurse=False))
                if not n_exp or routed % n_exp:
                    raise ValueError(f"layer {i}: cannot split {routed} expert params over {n_exp} experts")
                active_routed += routed // n_exp * top_k
        entry = kinds.setdefault(kind, {"layers": [], "params_per_layer": None, "tensors": None})
        entry["layers"].append(i)
        if entry["tensors"] is None:
            tensors = []
            for n, p in layer.named_parameters():
                tensors.append({"name": n, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", ""),
                                "numel": p.numel(), "role": role[f"{layers_prefix}.{i}.{n}"]})
            entry["tensors"] = tensors
            entry["params_per_layer"] = sum(t["numel"] for t in tensors)
            if experts:
                entry["num_experts"] = experts[0].num_experts
                entry["top_k"] = top_k
                entry["routed_params_per_layer"] = sum(t["numel"] for t in tensors if t["role"] == "routed_expert")
                entry["params_per_expert"] = entry["routed_params_per_layer"] // experts[0].num_experts
    active = totals["dense"] + totals["shared_expert"] + totals["router"] + active_routed

    # Tied embeddings and the embedding / head sizes.
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    head_w = getattr(head, "weight", None)
    tied = head_w is not None and head_w is emb
    emb_and_head = emb.numel() + (0 if tied or head_w is None else head_w.numel())

    # Largest single module by its own parameters.
    best_name, best = None, -1
    for mod_name, module in model.named_modules():
        own = sum(p.numel() for p in module.parameters(recurse=False))
        if own > best:
            best_name, best = mod_name, own

    outside = []
    layer_param_ids = {id(p) for p in layers.parameters()}
    for name, p in named_params.items():
        if id(p) not in layer_param_ids:
            outside.append({"name": name, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", ""),
                            "numel": p.numel()})
    buffers = {n: b.numel() for n, b in model.named_buffers() if not re.search(r"inv_freq|original_inv_freq", n)}
    persistent = {n for n in buffers if n.rsplit(".", 1)[-1] not in _non_persistent(model, n)}
    return {
        "model_class": type(model).__name__,
        "model_type": cfg.model_type,
        "note": note,
        "params": params,
        "expert_params": totals["routed_expert"],
        "shared_expert_params": totals["shared_expert"],
        "router_params": totals["router"],
        "dense_params": totals["dense"],
        "active_params": active,
        "active_params_non_embedding": active - emb_and_head,
        "embedding_and_head_params": emb_and_head,
        "tied_embeddings": tied,
        "top_k": top_k,
        "largest_module": {"name": best_name, "params": best},
        "num_layers": len(layers),
        "layer_kinds": kinds,
        "outside_layers": outside,
        "persistent_buffers": {n: buffers[n] for n in sorted(persistent)},
    }


def _non_persistent(model, buffer_name: str) -> set:
    mod_name = buffer_name.rsplit(".", 1)[0] if "." in buffer_name else ""
    module = model.get_submodule(mod_name) if mod_name else model
    return set(getattr(module, "_non_persistent_buffers_set", ()))


if __name__ == "__main__":
    import json
    import sys

    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as fh:
            out = meta_counts(json.load(fh))
        out.pop("layer_kinds")
        print(path, json.dumps(out, indent=1))
