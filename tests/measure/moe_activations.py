"""Bytes a Hugging Face MoE (or Gemma-style) model saves for backward, per region and per tensor (test-only).

A variant of saved_tensors.py for MoE / MLA models: every tensor autograd packs during forward + loss is recorded
once per storage (views of one storage count once; parameter storages are excluded), tagged with the innermost
module running when it was first packed, and, after the forward, with the autograd node(s) that hold it (found by
walking the graph from the loss and reading each node's saved tensors). Regions:

  embed          before the first decoder layer
  layer.<i>.<r>  inside decoder layer i, r one of: attn (self_attn.*), router (mlp.gate / mlp.router /
                 mlp.shared_expert_gate), experts (mlp.experts), shared (mlp.shared_expert(s)), mlp (the MoE block's own
                 ops, or a dense MLP), norm (*layernorm / *norm), block (the decoder layer's own ops: residual adds)
  head           final norm, lm_head and the loss

As in saved_tensors.py, scaled_dot_product_attention is computed by the CPU kernel but recorded as the CUDA
flash / memory-efficient kernels save it: query, key and value as passed, the output, and an fp32 logsumexp of
batch x heads x seq (PyTorch tools/autograd/derivatives.yaml). Dropout is 0 in these models.

transformers 5.24 runs all the families here through its "grouped_mm" experts path (integrations/moe.py,
grouped_mm_experts_forward): the default experts_implementation when the model class uses
@use_experts_implementation; on CPU with torch > 2.10 it calls torch.nn.functional.grouped_mm, as CUDA does on sm80+.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter, OrderedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BATCH, SEQ = 2, 128
_BASE = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
             max_position_embeddings=256, tie_word_embeddings=False, use_cache=False, attention_dropout=0.0)
TINY = {
    "mixtral": dict(_BASE, model_type="mixtral", intermediate_size=128, num_local_experts=8, num_experts_per_tok=2,
                    router_jitter_noise=0.0),
    "qwen2_moe": dict(_BASE, model_type="qwen2_moe", intermediate_size=512, moe_intermediate_size=128,
                      shared_expert_intermediate_size=256, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False),
    "qwen3_moe": dict(_BASE, model_type="qwen3_moe", head_dim=64, intermediate_size=512, moe_intermediate_size=128,
                      num_experts=8, num_experts_per_tok=2, norm_topk_prob=True),
    "deepseek_v2": dict(_BASE, model_type="deepseek_v2", num_key_value_heads=4, intermediate_size=512,
                        moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=64, qk_nope_head_dim=32,
                        qk_rope_head_dim=16, v_head_dim=32, n_group=1, topk_group=1, topk_method="greedy"),
    "deepseek_v3": dict(_BASE, model_type="deepseek_v3", num_key_value_heads=4, intermediate_size=512,
                        moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
                        first_k_dense_replace=1, q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32,
                        qk_rope_head_dim=16, v_head_dim=32, n_group=1, topk_group=1),
    # Gemma2ForCausalLM refuses sdpa in transformers 5.24 (_supports_sdpa = False: "sdpa does not support
    # softcapping"), so it runs eager attention here, which saves the fp32 s x s probabilities; Gemma 3 (sdpa) is
    # the Gemma-style model measured with flash semantics.
    "gemma2": dict(_BASE, model_type="gemma2", intermediate_size=512, head_dim=64, query_pre_attn_scalar=64,
                   sliding_window=64, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                   _attn_implementation="eager"),
    # gpt-oss: attention sinks, clamped SwiGLU experts with biases, fp32-weighted RMSNorm; transformers 5.24 runs it
    # with eager attention only (GptOssForCausalLM refuses sdpa).
    "gpt_oss": dict(_BASE, model_type="gpt_oss", intermediate_size=128, num_local_experts=8, num_experts_per_tok=2,
                    head_dim=64, sliding_window=64, layer_types=["sliding_attention", "full_attention"],
                    router_aux_loss_coef=0.0, _attn_implementation="eager"),
    # Mistral's sliding window, shorter than the sequence: every layer gets an explicit mask, so SDPA is called
    # with K and V repeated to every query head (the same path as Gemma 3's local layers).
    "mistral_window": dict(_BASE, model_type="mistral", intermediate_size=512, sliding_window=64),
    "gemma3": dict(_BASE, model_type="gemma3_text", intermediate_size=512, head_dim=64, query_pre_attn_scalar=64,
                   sliding_window=64, layer_types=["sliding_attention", "full_attention"]),
}


def build(config: dict, dtype=torch.bfloat16, attn="sdpa"):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = dict(config)
    attn = cfg.pop("_attn_implementation", attn)
    cfg = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    # dtype= (not .to(dtype)) keeps what the model class pins to fp32, as from_pretrained(dtype=...) does:
    # DeepSeek-V2/V3 _keep_in_fp32_modules_strict = ["gate.weight"] (+ "e_score_correction_bias" for V3). With
    # .to(bf16) the router weight would be bf16 and its per-call .type(torch.float32) copy would be saved as well.
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=dtype)
    return model.train()


def _region(module_name: str, layer_prefix: str, after_layers: bool) -> str:
    if not module_name.startswith(layer_prefix + "."):
        return "head" if after_layers else "embed"
    rest = module_name[len(layer_prefix) + 1:]
    idx, _, sub = rest.partition(".")
    parts = sub.split(".")
    if parts[0] == "self_attn":
        r = "attn"
    elif parts[0] == "mlp" and len(parts) > 1 and parts[1] in ("gate", "router", "shared_expert_gate"):
        r = "router"
    elif parts[0] == "mlp" and len(parts) > 1 and parts[1] == "experts":
        r = "experts"
    elif parts[0] == "mlp" and len(parts) > 1 and parts[1].startswith("shared_expert"):
        r = "shared"
    elif parts[0] == "mlp":
        r = "mlp"
    elif parts[0].endswith("norm") or parts[0].endswith("layernorm"):
        r = "norm"
    else:
        r = "block"
    return f"layer.{idx}.{r}"


class Recorder:
    def __init__(self, model):
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.entries = OrderedDict()        # storage ptr -> entry
        self.alive = []
        self.stack = [""]
        self.layer_prefix = None
        self.in_layers = False           # a decoder layer has started
        self.after_layers = False        # ... and the current module is outside the layers again
        self.paused = False
        self.synthetic = []                 # (module, description, bytes) not backed by a storage (fp32 lse)

    def current(self) -> str:
        return self.stack[-1]

    def add(self, t: torch.Tensor, label: str = ""):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if self.paused or ptr in self.params or not storage.nbytes():
            return
        if ptr in self.entries:
            return
        self.alive.append(t)
        self.entries[ptr] = {"module": self.current(), "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                             "bytes": storage.nbytes(), "label": label, "saved_by": [], "region": self.region()}

    def region(self) -> str:
        name = self.current()
        if self.layer_prefix and name.startswith(self.layer_prefix + "."):
            self.in_layers = True
        elif self.in_layers:
            self.after_layers = True
        return _region(name, self.layer_prefix or "\0", self.after_layers)

    def pack(self, t):
        self.add(t)
        return t


@contextlib.contextmanager
def cuda_sdpa_semantics(rec: Recorder):
    real_sdpa = F.scaled_dot_product_attention

    def sdpa(query, key, value, *args, **kwargs):
        was, rec.paused = rec.paused, True
        try:
            out = real_sdpa(query, key, value, *args, **kwargs)
        finally:
            rec.paused = was
        if not out.transpose(1, 2).is_contiguous():
            out = out.transpose(1, 2).contiguous().transpose(1, 2)
        for name, t in (("sdpa query", query), ("sdpa key", key), ("sdpa value", value), ("sdpa output", out)):
            rec.add(t, label=name)
        b, heads, s = query.shape[0], query.shape[1], query.shape[2]
        rec.synthetic.append({"module": rec.current(), "label": "sdpa logsumexp (fp32, CUDA flash/efficient)",
                              "shape": [b, heads, s], "dtype": "float32", "bytes": 4 * b * heads * s,
                              "saved_by": ["(CUDA flash/efficient attention backward)"], "region": rec.region()})
        return out

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = real_sdpa


def _walk_saved(loss, rec: Recorder):
    """Attach to each recorded storage the autograd nodes (and attribute) that saved it."""
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(fn for fn, _ in node.next_functions)
        names = [a for a in dir(node) if a.startswith("_saved_")]
        values = []
        for a in names:
            try:
                values.append((a, getattr(node, a)))
            except Exception:  # noqa: BLE001 - freed or non-tensor saved values
                continue
        if hasattr(node, "saved_tensors"):
            try:
                values.extend((f"saved_tensors[{i}]", v) for i, v in enumerate(node.saved_tensors))
            except Exception:  # noqa: BLE001
                pass
        for a, v in values:
            items = v if isinstance(v, (tuple, list)) else [v]
            for item in items:
                if isinstance(item, torch.Tensor):
                    ptr = item.untyped_storage().data_ptr()
                    if ptr in rec.entries:
                        tag = f"{type(node).__name__}.{a}"
                        if tag not in rec.entries[ptr]["saved_by"]:
                            rec.entries[ptr]["saved_by"].append(tag)


def measure(model, batch: int = BATCH, seq: int = SEQ, seed: int = 0) -> dict:
    """{"by_region": {region: bytes}, "tensors": [entry, ...], "loss": float} for one forward + loss."""
    rec = Recorder(model)
    layer_prefix = f"{model.base_model_prefix}.layers"
    rec.layer_prefix = layer_prefix
    handles = []

    def enter(name):
        def hook(module, args):
            rec.stack.append(name)
        return hook

    def leave(module, args, output):
        rec.stack.pop()

    for n, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(enter(n)))
        handles.append(m.register_forward_hook(leave))
    torch.manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    try:
        with cuda_sdpa_semantics(rec):
            with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                loss = model(input_ids=ids, labels=ids).loss
        _walk_saved(loss, rec)
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    tensors = []
    for e in list(rec.entries.values()) + rec.synthetic:
        e = dict(e)
        # Packed, but held only by autograd nodes that the loss cannot reach (e.g. DeepSeek-V3's group-limited
        # top-k over scores_for_choice, whose outputs are used as indices only): those nodes and what they saved
        # are freed when the forward's locals go, so they are not alive at backward. The emulated CUDA SDPA
        # tensors are kept (the CPU kernel that actually ran may have saved different ones).
        e["live"] = bool(e["saved_by"]) or e["label"].startswith("sdpa")
        tensors.append(e)
    by_region, dead = Counter(), Counter()
    for e in tensors:
        (by_region if e["live"] else dead)[e["region"]] += e["bytes"]
    return {"by_region": dict(by_region), "total": sum(by_region.values()), "dead_by_region": dict(dead),
            "tensors": tensors, "loss": loss.item(),
            "experts_implementation": getattr(model.config, "_experts_implementation", None),
            "tokens": batch * seq}


def layer_tensors(result: dict, layer: int) -> list:
    return [e for e in result["tensors"] if e["region"].startswith(f"layer.{layer}.")]


if __name__ == "__main__":
    import json
    import sys

    families = sys.argv[1:] or list(TINY)
    out = {}
    for fam in families:
        res = measure(build(TINY[fam]))
        res["attn_implementation"] = TINY[fam].get("_attn_implementation", "sdpa")
        out[fam] = res
        print(fam, res["experts_implementation"], res["total"], json.dumps(res["by_region"]))
    path = os.environ.get("MOE_ACT_OUT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"config": TINY, "batch": BATCH, "seq": SEQ, "results": out}, fh, indent=1)
