"""Bytes autograd saves for backward under LoRA, DoRA and QLoRA, listed tensor by tensor (test-only; needs peft).

Same counting rules and CUDA semantics as tests/measure/saved_tensors.py (one count per storage, parameters
excluded, dropout masks as 1-byte bools, sdpa as CUDA's flash kernel saves it: q, k, v, out + fp32 logsumexp;
with non-reentrant checkpointing only each block's inputs are kept), with one correction: sdpa saves nothing
when none of q, k, v requires grad (saved_tensors.gpu_semantics records them unconditionally, which only matters
once layers are frozen). On top of the per-region totals, every saved
storage is listed with the region, the decoder layer, the innermost module running when it was first saved and
the autograd node(s) holding it (found by walking the graph from the loss before backward).

`measure_case(...)` builds one scenario from keywords and returns JSON-able data:
  mode="full"  : plain model, every parameter trains (the existing validation baseline)
  mode="frozen": plain model, every parameter frozen except the lm_head (no adapters)
  mode="lora" / "dora": peft LoRA over `target` with `rank`, `dropout`
  mode="qlora" : 4-bit base (bitsandbytes, from_pretrained of a locally saved model) + LoRA; `prepare=True` runs
                 peft.prepare_model_for_kbit_training (which upcasts every non-4-bit parameter to fp32)
  mode="lora8bit": the same over an 8-bit (LLM.int8, Linear8bitLt) base
bitsandbytes' autograd Functions keep some tensors as ctx attributes rather than through save_for_backward;
saved-tensor hooks cannot see those, so a forward hook on Linear4bit / Linear8bitLt adds them (node
"<Function> ctx attribute"): for MatMul4Bit only the packed weight (a parameter, so 0 bytes); for the 8-bit
Functions the layer input A.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tests.measure.saved_tensors import _Recorder, _tensors, build_from_config, gpu_semantics  # noqa: E402

_LAYER = re.compile(r"(?:^|\.)(?:layers|h)\.(\d+)(?:\.|$)")


class ListingRecorder(_Recorder):
    def __init__(self, model):
        super().__init__(model)
        self.entries, self.stack, self.in_sdpa, self.in_ctx, self._block_input = [], [], False, None, False

    def where(self):
        module = self.stack[-1] if self.stack else ""
        m = _LAYER.search(module)
        return module, (int(m.group(1)) if m else None)

    def add(self, t, nbytes=None):
        before = len(self.seen)
        region_before = self.by_region[self.region]
        super().add(t, nbytes)
        if len(self.seen) > before:
            module, layer = self.where()
            self.entries.append(dict(region=self.region, layer=layer, module=module, shape=list(t.shape),
                                     dtype=str(t.dtype).removeprefix("torch."),
                                     bytes=self.by_region[self.region] - region_before,
                                     ptr=t.untyped_storage().data_ptr(),
                                     node="sdpa (CUDA flash: q, k, v, out)" if self.in_sdpa else
                                     f"{self.in_ctx} ctx attribute" if self.in_ctx else None,
                                     block_input=self._block_input))


def _blocks_and_norm(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = base.model if hasattr(base, "model") else base.transformer
    blocks = inner.layers if hasattr(inner, "layers") else inner.h
    norm = inner.norm if hasattr(inner, "norm") else inner.ln_f
    return blocks, norm


def _clean(name: str) -> str:
    return name.removeprefix("base_model.model.").removeprefix("model.")


def _node_names(loss) -> dict:
    """storage data_ptr -> names of the autograd nodes (and their saved slots) that hold it."""
    found, seen, todo = defaultdict(set), set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        slots = [a for a in dir(node) if a.startswith("_saved_")]
        values = [(a.removeprefix("_saved_"), getattr(node, a, None)) for a in slots]
        if hasattr(node, "saved_tensors"):
            try:
                values += [(f"saved_tensors[{i}]", t) for i, t in enumerate(node.saved_tensors)]
            except RuntimeError:
                pass
        for slot, value in values:
            for t in _tensors(value):
                found[t.untyped_storage().data_ptr()].add(f"{name}.{slot}")
        todo.extend(n for n, _ in node.next_functions)
    return found


def measure_listing(model, batch: int, seq: int, checkpointing: bool = False, checkpointing_enabled: bool = False):
    """Forward + loss under the recorder, then backward; returns (by_region Counter, entries list)."""
    rec = ListingRecorder(model)
    if checkpointing and not checkpointing_enabled:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def enter_block(module, args, kwargs):
        rec.region = "layer"
        if checkpointing:
            rec.checkpointing, rec._block_input = False, True
            for t in _tensors((args, kwargs)):
                rec.add(t)
            rec.checkpointing, rec._block_input = True, False

    def push(name):
        def hook(module, args):
            rec.stack.append(name)
        return hook

    def pop(module, args, output):
        if rec.stack:
            rec.stack.pop()

    def ctx_attributes(module, args, output):
        # bitsandbytes' autograd Functions keep tensors as ctx attributes (MatMul4Bit: ctx.tensors = (None, B);
        # MatMul8bitLt: ctx.tensors = (CAt, subA, A); MatMul8bitFp: ctx.A), which saved-tensor hooks never see
        node, steps = getattr(output, "grad_fn", None), 0
        while node is not None and steps < 4 and "MatMul" not in type(node).__name__:
            node, steps = (node.next_functions[0][0] if node.next_functions else None), steps + 1
        if node is None or "MatMul" not in type(node).__name__ or rec.paused or rec.checkpointing:
            return
        rec.in_ctx = type(node).__name__
        try:
            for key, value in sorted(vars(node).items()):
                if key in ("tensors", "A", "B"):
                    for t in _tensors(value):
                        rec.add(t)
        finally:
            rec.in_ctx = None

    handles = []
    for name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(push(_clean(name))))
        if type(mod).__name__ in ("Linear8bitLt", "Linear4bit"):
            handles.append(mod.register_forward_hook(ctx_attributes))
        handles.append(mod.register_forward_hook(pop))
    # registered after the module-stack hooks, so they run after the push
    blocks, final_norm = _blocks_and_norm(model)
    handles += [b.register_forward_pre_hook(enter_block, with_kwargs=True) for b in blocks]
    handles.append(final_norm.register_forward_pre_hook(lambda *_: setattr(rec, "region", "head")))

    torch.manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    real_sdpa = None
    try:
        with gpu_semantics(rec):
            real_sdpa = F.scaled_dot_product_attention

            def sdpa(query, key, value, *args, **kwargs):
                # CUDA's flash / efficient kernels save only when autograd records the op: with no input that
                # requires grad (a frozen layer 0 under LoRA on the MLP only, say) nothing is saved.
                needs = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
                was_paused = rec.paused
                rec.in_sdpa, rec.paused = True, was_paused or not needs
                try:
                    out = real_sdpa(query, key, value, *args, **kwargs)
                finally:
                    rec.in_sdpa, rec.paused = False, was_paused
                if needs and not rec.paused and not rec.checkpointing:
                    module, layer = rec.where()
                    b, heads, s = query.shape[0], query.shape[1], query.shape[2]
                    rec.entries.append(dict(region=rec.region, layer=layer, module=module, shape=[b, heads, s],
                                            dtype="float32", bytes=4 * b * heads * s, ptr=None,
                                            node="sdpa (CUDA flash: logsumexp)", block_input=False))
                return out

            F.scaled_dot_product_attention = sdpa
            try:
                with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                    loss = model(input_ids=ids, labels=ids).loss
            finally:
                F.scaled_dot_product_attention = real_sdpa
            nodes = _node_names(loss) if not checkpointing else {}
            rec.paused = True
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    kept = Counter()
    for e in rec.entries:
        e["kept"] = True
        if e["node"] is None:
            names = sorted(nodes.get(e["ptr"], ()))
            if names:
                e["node"] = ", ".join(names)
            elif e.get("block_input"):
                e["node"] = "block input (checkpoint)"
            elif checkpointing:
                e["node"] = "?"             # the graph is not walked under checkpointing (it would recompute)
            else:
                # packed by a graph the loss does not reach (DoRA's lora_B(lora_A(eye)) is only used detached):
                # freed when the forward of that module returns, so not kept for backward
                e["node"], e["kept"] = "unreachable from the loss (freed after forward)", False
        e.pop("ptr")
        if e["kept"]:
            kept[e["region"]] += e["bytes"]
    dropped = sum(e["bytes"] for e in rec.entries if not e["kept"])
    assert sum(kept.values()) == sum(rec.by_region.values()) - dropped, "listing and harness totals disagree"
    return kept, rec.entries


def build_case(config: dict, mode: str = "lora", dtype: str = "bf16", rank: int = 8, target="q,v",
               dropout: float = 0.0, prepare: bool = True, checkpointing: bool = False, quant_type="nf4",
               double_quant=True, **lora):
    """The model for one scenario (see module docstring); returns (model, checkpointing_already_enabled)."""
    from tests.measure.peft_lora import DTYPES, wrap

    if mode in ("qlora", "lora8bit"):
        from peft import prepare_model_for_kbit_training

        from tests.measure.quantized_storage import quantized_model

        model = quantized_model(config, bits=4 if mode == "qlora" else 8, quant_type=quant_type,
                                double_quant=double_quant, compute_dtype=dtype, torch_dtype=dtype)
        enabled = False
        if prepare:
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=checkpointing,
                                                    gradient_checkpointing_kwargs={"use_reentrant": False})
            enabled = checkpointing
        model = wrap(model, rank=rank, target=target, dropout=dropout, **lora)
        return model.train(), enabled
    model = build_from_config({**config, "attn_implementation": "sdpa"}, DTYPES[dtype])
    if mode == "full":
        return model, False
    if mode == "frozen":
        for n, p in model.named_parameters():
            p.requires_grad_(n.startswith("lm_head"))
        return model, False
    model = wrap(model, rank=rank, target=target, dropout=dropout, dora=(mode == "dora"), **lora)
    return model.train(), False


def measure_case(config: dict = None, batch: int = 2, seq: int = 128, checkpointing: bool = False, **case) -> dict:
    """Build a scenario (build_case keywords), measure it, return totals per region / layer and the listing."""
    from tests.measure.peft_lora import llama_config

    config = config or llama_config()
    model, enabled = build_case(config, checkpointing=checkpointing, **case)
    by_region, entries = measure_listing(model, batch, seq, checkpointing=checkpointing, checkpointing_enabled=enabled)
    per_layer = Counter()
    for e in entries:
        if e["region"] == "layer" and e["kept"]:
            per_layer[e["layer"]] += e["bytes"]
    return dict(case=dict(case, checkpointing=checkpointing, batch=batch, seq=seq),
                by_region=dict(by_region), total=sum(by_region.values()),
                unreachable=sum(e["bytes"] for e in entries if not e["kept"]),
                per_layer={str(k): v for k, v in sorted(per_layer.items(), key=lambda kv: (kv[0] is None, kv[0]))},
                entries=entries)


def summarize(entries, layer=1) -> list:
    """One decoder layer's entries as compact rows: module, node, shape, dtype, bytes."""
    return [dict(module=e["module"].split(f"layers.{layer}.")[-1], node=e["node"], shape=e["shape"],
                 dtype=e["dtype"], bytes=e["bytes"], kept=e["kept"]) for e in entries if e["layer"] == layer]


def predicted(config: dict, batch: int = 2, seq: int = 128, mode: str = "lora", target="q,v", rank: int = 8,
              dropout: float = 0.0, prepare: bool = True, checkpointing: bool = False, **_) -> dict:
    """Closed form of what measure_case measures, for a Llama config with sdpa (CUDA flash semantics), a bf16
    base and peft's default fp32 adapters. Returns bytes per region and per layer ("0" and "1"..).

    act = bytes of the activation dtype: 2 (bf16), or 4 under QLoRA after prepare_model_for_kbit_training
    (every non-4-bit parameter upcast to fp32, so the residual stream and everything from it is fp32).
    Per token, per layer (T = batch x seq tokens):
      norms        2 x (4h + 4)          fp32 copy of the input + fp32 rsqrt, each RMSNorm (frozen weight)
      attention    act x (2 q + 2 kv) + 4 heads      q, k, v, out + fp32 logsumexp
      mlp          3 act f               silu input, silu output, up output
      full FT adds 2 act h (normalized, for the norm weights) + act h (q/k/v input) + act h (gate/up) + act f (down)
      per adapter  4 in + 4 r (+ in for the dropout mask) when the adapter dtype differs from the activation
                   dtype (each module saves its own fp32 cast of its input, q, k and v included);
                   with equal dtypes and no dropout the input storage is shared: 4h for q/k/v, 0 for o (it is
                   sdpa's out), 4h for gate/up, 4f for down, plus 4 r per adapter
      8-bit base   + act (2h + f): each Linear8bitLt keeps its input as ctx.A (shared storages, deduplicated
                   against the adapters' inputs when the dtypes match)
      DoRA adds    out x (act + 4) per token + 12 out per module; with dropout out x 8 per token + 12 out
                   + 4 out x in (an fp32 copy of W, saved by the base F.linear re-run on the dropped input)
    Layer 0 without checkpointing: the input norm saves nothing (the frozen embedding's output needs no grad;
    peft does not enable input grads unless checkpointing), + rotary cos, sin: 2 x seq x d x act; the q/k/v
    adapters there keep no dropout mask (their input needs no grad) and DoRA drops 4 out (+ 4 out x in with
    dropout) per q/k/v module.
    Checkpointing: act h per token per layer (the block input) + in layer 0 cos, sin and int64 position ids.
    Head: (4h + 4) + 4 V + 8 per token + 4 (fp32 norm input, rsqrt, fp32 log-softmax, int64 labels, total
    weight); full FT adds 2 act h (normalized + lm_head input) and the embedding's int64 ids (8 per token).
    """
    from tests.measure.peft_lora import SHORT

    h, n, kv, f, V = (config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"],
                      config["intermediate_size"], config["vocab_size"])
    d = h // n
    T, L = batch * seq, config["num_hidden_layers"]
    act = 4 if mode in ("qlora", "lora8bit") and prepare else 2
    dims = {"q_proj": (h, n * d), "k_proj": (h, kv * d), "v_proj": (h, kv * d), "o_proj": (n * d, h),
            "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}
    names = [] if mode in ("full", "frozen") else (
        list(dims) if target == "all-linear" else [SHORT.get(t, t) for t in target.split(",")])
    head = (4 * h + 4 + 4 * V + 8) * T + 4
    embed = 0
    if mode == "full":
        head += 2 * act * h * T
        embed = 8 * T
    if checkpointing:
        per = {str(i): act * h * T for i in range(L)}
        per["0"] += 2 * seq * d * act + 8 * seq
        return dict(embed=embed, head=head, per_layer=per, layer=sum(per.values()))
    core = 2 * (4 * h + 4) + act * (2 * n * d + 2 * kv * d) + 4 * n + 3 * act * f
    if mode == "full":
        core += 2 * act * h + act * h + act * h + act * f
    core *= T
    extra, const = 0, 0
    shared = act == 4                                   # adapter dtype (fp32) == activation dtype
    if shared and not dropout:
        extra += 4 * h * any(m in names for m in ("q_proj", "k_proj", "v_proj"))
        extra += 4 * h * any(m in names for m in ("gate_proj", "up_proj"))
        extra += 4 * f * ("down_proj" in names)
        extra += 4 * rank * len(names)
    else:
        for m in names:
            extra += 4 * dims[m][0] + 4 * rank + (dims[m][0] if dropout else 0)
    kept_inputs = 0
    if mode == "lora8bit":
        # every Linear8bitLt keeps its input as ctx.A (q/k/v share one, o's is sdpa's out, gate/up share one)
        kept_inputs = act * (2 * h + f)
        if shared and not dropout:       # the adapters' inputs are those same storages
            extra -= 4 * h * any(m in names for m in ("q_proj", "k_proj", "v_proj"))
            extra -= 4 * h * any(m in names for m in ("gate_proj", "up_proj"))
            extra -= 4 * f * ("down_proj" in names)
        extra += kept_inputs
    if mode == "dora":
        for m in names:
            i, o = dims[m]
            extra += o * (8 if dropout else act + 4)
            const += 12 * o + (4 * o * i if dropout else 0)
    layer = core + extra * T + const
    layer0 = layer + 2 * seq * d * act - (0 if mode == "full" else (4 * h + 4) * T)
    if kept_inputs:                      # layer 0's q/k/v input needs no grad: no autograd node keeps it
        layer0 -= act * h * T
        if shared and not dropout and any(m in names for m in ("q_proj", "k_proj", "v_proj")):
            layer0 += 4 * h * T          # ... but the fp32 adapters still save it
    for m in ("q_proj", "k_proj", "v_proj"):
        # in layer 0 these adapters' input needs no grad: no dropout mask is kept, and DoRA keeps neither
        # (magnitude scale - 1) nor, with dropout, the fp32 copy of W
        if m in names and mode != "full":
            i, o = dims[m]
            layer0 -= (i * T if dropout else 0) + (4 * o + (4 * o * i if dropout else 0) if mode == "dora" else 0)
    per = {"0": layer0, **{str(i): layer for i in range(1, L)}}
    return dict(embed=embed, head=head, per_layer=per, layer=sum(per.values()))
