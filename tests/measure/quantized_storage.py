"""Bytes a bitsandbytes-quantized base weight occupies, per tensor, measured on CPU (test-only; needs bitsandbytes).

`linear4bit_storage(out, in, ...)` quantizes one bnb.nn.Linear4bit (Params4bit) and lists every tensor the layer
keeps: the packed 4-bit data, quant_state.absmax, the code table, and with double quantization (compress_statistics)
the offset and state2.absmax / state2.code. `linear8bit_storage(out, in)` does the same for Linear8bitLt
(Int8Params: int8 CB + fp32 SCB). `formula_4bit_bytes` / `formula_8bit_bytes` are the closed forms derived from
bitsandbytes 0.50.2 (functional.quantize_4bit, quantize_blockwise; backends/*/ops.py quantize_4bit), checked here
against the measured tensors. `load_quantized_model(config, ...)` saves a tiny random model locally and reloads it
with from_pretrained(quantization_config=BitsAndBytesConfig(...)), listing what stays unquantized.

Tensors shared between layers (one object, counted once) are found by data_ptr: `shared` in the output lists them.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "uint8": torch.uint8}


def _t(name, t: torch.Tensor) -> dict:
    return dict(name=name, shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."), numel=t.numel(),
                bytes=t.numel() * t.element_size(), ptr=t.untyped_storage().data_ptr())


def quant_state_tensors(qs) -> list:
    out = [_t("absmax", qs.absmax), _t("code", qs.code)]
    if qs.nested:
        out += [_t("offset", qs.offset), _t("state2.absmax", qs.state2.absmax), _t("state2.code", qs.state2.code)]
    return out


def linear4bit_storage(out_features: int, in_features: int, quant_type="nf4", blocksize=64, double_quant=True,
                       dtype="bf16", quant_storage="uint8", bias=False, layers=1) -> dict:
    """Quantize `layers` Linear4bit modules of out x in and return their tensors (bytes exact)."""
    import bitsandbytes as bnb

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        lin = bnb.nn.Linear4bit(in_features, out_features, bias=bias, compute_dtype=DTYPES[dtype],
                                compress_statistics=double_quant, quant_type=quant_type,
                                quant_storage=DTYPES[quant_storage])
        lin.weight = bnb.nn.Params4bit(torch.randn(out_features, in_features, dtype=DTYPES[dtype]),
                                       requires_grad=False, blocksize=blocksize, compress_statistics=double_quant,
                                       quant_type=quant_type, quant_storage=DTYPES[quant_storage], module=lin)
        lin.weight._quantize("cpu")          # what .to(device) / from_pretrained do on first placement
        mods.append(lin)
    per_layer = []
    for lin in mods:
        qs = lin.weight.quant_state
        tensors = [_t("weight(packed)", lin.weight.data)] + quant_state_tensors(qs)
        if bias:
            tensors.append(_t("bias", lin.bias))
        per_layer.append(tensors)
    counts = {}
    for tensors in per_layer:
        for t in tensors:
            counts[t["ptr"]] = counts.get(t["ptr"], 0) + 1
    first = per_layer[0]
    qs = mods[0].weight.quant_state
    result = dict(out_features=out_features, in_features=in_features, n=out_features * in_features,
                  quant_type=quant_type, blocksize=blocksize, double_quant=double_quant, dtype=dtype,
                  quant_storage=quant_storage, nested_blocksize=qs.state2.blocksize if qs.nested else None,
                  quant_state_dtype=str(qs.dtype).removeprefix("torch."),
                  tensors=[{k: v for k, v in t.items() if k != "ptr"} for t in first],
                  shared_between_layers=[t["name"] for t in first if counts[t["ptr"]] > 1],
                  bytes_per_layer=sum(t["bytes"] for t in first))
    result["formula"] = formula_4bit_bytes(result["n"], blocksize, double_quant, DTYPES[quant_storage].itemsize)
    return result


def formula_4bit_bytes(n: int, blocksize: int = 64, double_quant: bool = True, storage_itemsize: int = 1) -> dict:
    """Exact bytes of one 4-bit weight of n elements, per tensor (bitsandbytes 0.50.2).

    packed data: (n + 1) // (2 * itemsize) elements of quant_storage (uint8: ceil(n / 2) bytes);
    blocks = ceil(n / blocksize) absmax values: fp32 (4 B each) without double quant, else uint8 (1 B each) plus
    state2.absmax fp32 per ceil(blocks / 256) nested blocks, a 0-d fp32 offset, and a private copy of the
    256-entry fp32 dynamic code (state2.code, 1024 B); the 16-entry fp32 4-bit code (64 B) is allocated per layer too.
    """
    blocks = -(-n // blocksize)
    data = (n + 1) // (2 * storage_itemsize) * storage_itemsize
    parts = dict(data=data, code=16 * 4)
    if double_quant:
        parts.update(absmax=blocks * 1, offset=4, state2_absmax=4 * -(-blocks // 256), state2_code=256 * 4)
    else:
        parts.update(absmax=blocks * 4)
    parts["total"] = sum(parts.values())
    return parts


def linear8bit_storage(out_features: int, in_features: int, dtype="bf16", threshold=0.0, bias=False) -> dict:
    import bitsandbytes as bnb

    torch.manual_seed(0)
    lin = bnb.nn.Linear8bitLt(in_features, out_features, bias=bias, has_fp16_weights=False, threshold=threshold)
    lin.weight = bnb.nn.Int8Params(torch.randn(out_features, in_features, dtype=DTYPES[dtype]),
                                   requires_grad=False, has_fp16_weights=False)
    lin.weight._quantize("cpu")
    w = lin.weight
    tensors = [_t("weight(CB)", w.data), _t("SCB", w.SCB)]
    if w.CB is not None and w.CB.untyped_storage().data_ptr() != w.data.untyped_storage().data_ptr():
        tensors.append(_t("CB(separate)", w.CB))
    return dict(out_features=out_features, in_features=in_features, n=out_features * in_features,
                tensors=[{k: v for k, v in t.items() if k != "ptr"} for t in tensors],
                cb_is_data=w.CB is not None and w.CB.data_ptr() == w.data.data_ptr(),
                bytes_per_layer=sum(t["bytes"] for t in tensors),
                formula=formula_8bit_bytes(out_features, in_features))


def formula_8bit_bytes(out_features: int, in_features: int) -> dict:
    """Int8Params after quantization: CB int8 out x in (it is .data) + SCB fp32 per output row."""
    parts = dict(data=out_features * in_features, SCB=4 * out_features)
    parts["total"] = sum(parts.values())
    return parts


def load_quantized_model(config: dict, **quant) -> dict:
    """Save a random model from `config` locally, reload it through BitsAndBytesConfig, list every stored tensor."""
    return describe_model(quantized_model(config, **quant))


def quantized_model(config: dict, bits=4, quant_type="nf4", double_quant=True, compute_dtype="bf16",
                    torch_dtype="bf16", quant_storage="uint8", skip_modules=None, attn_implementation="sdpa"):
    """A random model from `config`, saved to a temporary folder and reloaded with from_pretrained + bitsandbytes."""
    from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**{"use_cache": False, **config})
    model = AutoModelForCausalLM.from_config(cfg).to(DTYPES[torch_dtype])
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        if bits == 4:
            q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type,
                                   bnb_4bit_use_double_quant=double_quant,
                                   bnb_4bit_compute_dtype=DTYPES[compute_dtype],
                                   bnb_4bit_quant_storage=DTYPES[quant_storage],
                                   llm_int8_skip_modules=skip_modules)
        else:
            q = BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip_modules)
        qmodel = AutoModelForCausalLM.from_pretrained(d, quantization_config=q, dtype=DTYPES[torch_dtype],
                                                      device_map="cpu", attn_implementation=attn_implementation)
    return qmodel.train()


def describe_model(qmodel) -> dict:
    rows, seen = [], set()
    for name, p in qmodel.named_parameters():
        row = dict(name=name, cls=type(p).__name__, shape=list(p.shape), dtype=str(p.dtype).removeprefix("torch."),
                   bytes=p.numel() * p.element_size(), trainable=p.requires_grad)
        seen.add(p.untyped_storage().data_ptr())
        qs = getattr(p, "quant_state", None)
        if qs is not None:
            extra = [t for t in quant_state_tensors(qs)]
            row["quant_state"] = [{k: v for k, v in t.items() if k != "ptr"} for t in extra]
            row["quant_state_bytes"] = sum(t["bytes"] for t in extra)
            row["orig_shape"] = list(qs.shape)
            row["blocksize"] = qs.blocksize
        if getattr(p, "SCB", None) is not None:
            row["SCB"] = _t("SCB", p.SCB)
            row["SCB"].pop("ptr")
        rows.append(row)
    buffers = [dict(name=n, shape=list(b.shape), dtype=str(b.dtype).removeprefix("torch."),
                    bytes=b.numel() * b.element_size()) for n, b in qmodel.named_buffers()]
    total = sum(r["bytes"] + r.get("quant_state_bytes", 0) + r.get("SCB", {}).get("bytes", 0) for r in rows)
    modules = {n: type(m).__name__ for n, m in qmodel.named_modules() if n.endswith(("q_proj", "lm_head",
                                                                                  "embed_tokens", "norm"))}
    return dict(params=rows, buffers=buffers, total_bytes=total, module_classes=modules,
                footprint=qmodel.get_memory_footprint())


def dequant_transients(out_features: int = 1024, in_features: int = 256, tokens: int = 256, quant_type="nf4",
                       blocksize=64, double_quant=True, weight_dtype="bf16", compute_dtype="bf16") -> dict:
    """Temporaries a Linear4bit allocates in one training forward and backward on CPU (torch.profiler).

    The input requires grad (as under LoRA), the 4-bit weight does not. For each phase, every bitsandbytes op
    with the net bytes it leaves allocated when it returns (its output): dequantize_4bit -> the full out x in
    weight in `compute_dtype` (forward, via gemm_4bit's default implementation) or in the quant_state dtype
    (backward, MatMul4Bit.backward: F.dequantize_4bit(B, state).to(grad_output.dtype)); dequantize_blockwise -> the
    fp32 absmax of ceil(n / blocksize) blocks (double quantization only). Also reports what ctx keeps.
    """
    import bitsandbytes as bnb
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    lin = bnb.nn.Linear4bit(in_features, out_features, bias=False, compute_dtype=DTYPES[compute_dtype],
                            compress_statistics=double_quant, quant_type=quant_type)
    lin.weight = bnb.nn.Params4bit(torch.randn(out_features, in_features, dtype=DTYPES[weight_dtype]),
                                   requires_grad=False, blocksize=blocksize, compress_statistics=double_quant,
                                   quant_type=quant_type, module=lin)
    lin.weight._quantize("cpu")
    lin.train()
    x = torch.randn(1, tokens, in_features, dtype=DTYPES[compute_dtype], requires_grad=True)
    lin(x).sum().backward()                   # warm-up: lazy code tables, compute dtype
    phases = {}
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(_t("saved", t)) or t, lambda t: t):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            y = lin(x)
    phases["forward"] = prof
    node = y.grad_fn
    while node is not None and "MatMul4Bit" not in type(node).__name__:
        node = node.next_functions[0][0] if node.next_functions else None
    ctx_tensors = [None if t is None else _t("ctx.tensors", t) for t in getattr(node, "tensors", ())]
    g = torch.ones_like(y)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        y.backward(g)
    phases["backward"] = prof
    result = dict(out_features=out_features, in_features=in_features, tokens=tokens, n=out_features * in_features,
                  blocks=-(-(out_features * in_features) // blocksize), double_quant=double_quant,
                  weight_dtype=weight_dtype, compute_dtype=compute_dtype,
                  saved_for_backward=[{k: v for k, v in t.items() if k != "ptr"} for t in saved],
                  ctx_tensors=[t and {k: v for k, v in t.items() if k != "ptr"} for t in ctx_tensors])
    for phase, p in phases.items():
        result[phase] = [dict(op=e.name, bytes=e.cpu_memory_usage) for e in p.events()
                         if e.name.startswith("bitsandbytes::") or e.name in ("aten::to", "aten::_to_copy")
                         and e.cpu_memory_usage]
    return result
