"""Measure what Megatron's activation recompute keeps, on Hugging Face blocks (test-only; torch, transformers,
megatron-core).

megatron-core's TransformerLayer needs CUDA (Transformer Engine, its CUDA RNG tracker), so its checkpoints are
applied here at exactly the module boundaries its code checkpoints, with its own checkpoint functions
(megatron/core/tensor_parallel/random.py at megatron-core 0.16.1: CheckpointFunction, CheckpointWithoutOutput),
on the Hugging Face modules that play the same parts:

  core_attn       tensor_parallel.checkpoint(core attention)(q, k, v, mask)          attention.py
                  _checkpointed_attention_forward: here the attention interface HF calls
  layernorm       CheckpointWithoutOutput(input_layernorm), output discarded once self-attention returned;
                  the same for pre_mlp_layernorm once the MLP returned               transformer_layer.py
  mlp             tensor_parallel.checkpoint(mlp)(pre-MLP norm output), dense blocks only
  moe             tensor_parallel.checkpoint(MoE layer)(pre-MLP norm output)         moe/moe_layer.py forward
  shared_experts  tensor_parallel.checkpoint(shared_experts)(the same input)         moe_layer.shared_experts_compute
  moe_act         CheckpointWithoutOutput(the experts' activation)(fc1 output), its output discarded once
                  fc2 ran                                                            moe/experts.py TEGroupedMLP
  mla_up_proj     CheckpointWithoutOutput(q/kv up-projections + RoPE)(q_compressed, kv_compressed, k_pos_emb),
                  query, key and value discarded once core attention ran             multi_latent_attention.py
  full            tensor_parallel.checkpoint over groups of layers: "uniform" N layers per checkpoint,
                  "block" the first N layers of the block one by one                 transformer_block.py
                  _checkpointed_forward

The CUDA RNG state the checkpoints fork is replaced by the CPU one (_get_all_rng_states / _set_all_rng_states,
patched while measuring): nothing else in those functions needs a GPU. CheckpointWithoutOutput is built with
fp8=None (its default fp8=False sets self.fp8 = True, which only enters Transformer Engine's FP8 recompute
context: the same tensors are kept).

What is kept is read after forward + loss: every tensor autograd packed (the checkpoints' own inputs included)
counted once per storage at its size THEN (CheckpointWithoutOutput frees its output's storage with resize_(0)),
tagged with the region that packed it (embed, layer, head). scaled_dot_product_attention is computed on the CPU
and recorded as CUDA's flash kernel saves (saved_tensors.py gpu_semantics): q, k, v, output, fp32 logsumexp;
only while autograd records (inside a checkpoint's no-grad forward nothing is saved). Backward then runs, and the
gradients are compared with a plain run: the harness changes what is kept, never what is computed.
"""

from __future__ import annotations

import contextlib
import types
from collections import Counter

import torch
import torch.nn.functional as F

from tests.measure.saved_tensors import build_from_config


class _Kept:
    """Packed tensors by region, one per storage; their storages' bytes are read at the end."""

    def __init__(self, model):
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.region, self.seen, self.tensors, self.extra = "embed", set(), [], Counter()
        self.paused = False

    def add(self, t):
        storage = t.untyped_storage()
        key = storage._cdata      # the StorageImpl: a discarded output's freed address can be reused at once
        if self.paused or key in self.seen or storage.data_ptr() in self.params or not storage.nbytes():
            return
        self.seen.add(key)
        self.tensors.append((self.region, t))

    def pack(self, t):
        self.add(t)
        return t

    def by_region(self) -> Counter:
        out = Counter(self.extra)
        for region, t in self.tensors:
            out[region] += t.untyped_storage().nbytes()
        return out


@contextlib.contextmanager
def _cpu_megatron(kept: _Kept):
    """Megatron's checkpoints with the CPU RNG state only, and SDPA recorded as CUDA's flash kernel saves."""
    from megatron.core.tensor_parallel import random as mrandom

    real = mrandom._get_all_rng_states, mrandom._set_all_rng_states, F.scaled_dot_product_attention
    mrandom._get_all_rng_states = lambda: (torch.get_rng_state(), None, {})
    mrandom._set_all_rng_states = lambda cpu, cuda, tracker: torch.set_rng_state(cpu)

    def sdpa(query, key, value, *args, **kwargs):
        was, kept.paused = kept.paused, True          # the CPU kernel's own saves are not CUDA's
        try:
            out = real[2](query, key, value, *args, **kwargs)
        finally:
            kept.paused = was
        if not out.transpose(1, 2).is_contiguous():
            out = out.transpose(1, 2).contiguous().transpose(1, 2)     # flash's (b, s, heads, d) memory order
        if torch.is_grad_enabled() and not kept.paused:
            for t in (query, key, value, out):
                kept.add(t)
            kept.extra[kept.region] += 4 * query.shape[0] * query.shape[1] * query.shape[2]   # fp32 logsumexp
        return out

    F.scaled_dot_product_attention = sdpa
    try:
        yield mrandom
    finally:
        mrandom._get_all_rng_states, mrandom._set_all_rng_states, F.scaled_dot_product_attention = real


def _blocks(model):
    base = model.base_model
    return base, (base.h if hasattr(base, "h") else base.layers)


def _is_moe(layer) -> bool:
    return hasattr(layer.mlp, "experts")


# --- the selective modules: each wraps one Hugging Face module as Megatron's code wraps its counterpart ---------

def _checkpoint_module(mrandom, module, first_only=True):
    """tensor_parallel.checkpoint(module)(x): the module's first output only (a router's logits are not used)."""
    forward = module.forward

    def run(x):
        out = forward(x)
        return out[0] if isinstance(out, tuple) else out

    module.forward = lambda x, *a, **k: mrandom.checkpoint(run, False, x)


def _without_output(mrandom, module, consumer):
    """CheckpointWithoutOutput(module)(x), its output discarded when `consumer` has run (Megatron registers the
    recompute as a gradient hook of the consumer's output)."""
    state = {}
    forward = module.forward

    def wrapped(x, *a, **k):
        state["ckpt"] = mrandom.CheckpointWithoutOutput(fp8=None)
        return state["ckpt"].checkpoint(forward, x)

    def done(mod, args, out):
        ckpt = state.pop("ckpt", None)
        if ckpt is not None:
            ckpt.discard_output_and_register_recompute(out[0] if isinstance(out, tuple) else out)

    module.forward = wrapped
    return consumer.register_forward_hook(done)


def _core_attention(mrandom, model):
    """The attention interface HF calls (eager_attention_forward or sdpa) under tensor_parallel.checkpoint."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    import importlib

    module = importlib.import_module(type(_blocks(model)[1][0].self_attn).__module__)
    eager, sdpa = module.eager_attention_forward, ALL_ATTENTION_FUNCTIONS["sdpa"]

    def wrap(fn):
        def attention(self, q, k, v, mask, **kwargs):
            run = lambda q, k, v, mask: fn(self, q, k, v, mask, **kwargs)[0]      # noqa: E731
            return mrandom.checkpoint(run, False, q, k, v, mask), None
        return attention

    module.eager_attention_forward = wrap(eager)
    ALL_ATTENTION_FUNCTIONS["sdpa"] = wrap(sdpa)

    def undo():
        module.eager_attention_forward = eager
        ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa
    return undo


def _moe_act(mrandom, experts):
    """The experts' activation (HF's _apply_gate: act(gate) * up) under CheckpointWithoutOutput, discarded when the
    experts returned."""
    state = {}
    gate = experts._apply_gate

    def wrapped(gate_up):
        state["ckpt"] = mrandom.CheckpointWithoutOutput(fp8=None)
        return state["ckpt"].checkpoint(gate, gate_up)

    experts._apply_gate = wrapped

    def done(mod, args, out):
        state.pop("ckpt").discard_output_and_register_recompute(out)
    return experts.register_forward_hook(done)


def _mla_up_proj(mrandom, attn):
    """DeepseekV2Attention.forward with its up-projections and RoPE under CheckpointWithoutOutput, as Megatron's
    MLASelfAttention.get_query_key_value_tensors runs qkv_up_proj_and_rope_apply: inputs q_compressed (the q
    down-projection's normed output, or the hidden states), the normed KV latent and the un-rotated k_pos_emb (a
    view of the KV down-projection's output); query, key and value discarded once core attention ran."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    mod = __import__(type(attn).__module__, fromlist=["eager_attention_forward"])

    def rope(q_pe, k_pe, position_embeddings):
        if hasattr(mod, "apply_rotary_emb"):                     # DeepSeek-V2: complex frequencies
            return mod.apply_rotary_emb(q_pe, k_pe, position_embeddings)
        cos, sin = position_embeddings                           # DeepSeek-V3: cos / sin, maybe interleaved
        apply = mod.apply_rotary_pos_emb_interleave if attn.config.rope_interleave else mod.apply_rotary_pos_emb
        return apply(q_pe, k_pe, cos, sin)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None, **kwargs):
        b, s = hidden_states.shape[:-1]
        q_compressed = hidden_states if self.q_lora_rank is None else self.q_a_layernorm(self.q_a_proj(hidden_states))
        compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
        kv_nope, k_pe = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        k_nope = self.kv_a_layernorm(kv_nope).view(b, 1, s, self.kv_lora_rank)
        k_pe = k_pe.view(b, 1, s, self.qk_rope_head_dim)

        def up(q_compressed, k_nope, k_pe, *position):        # the rotary tables are inputs too, as in Megatron
            position = position[0] if len(position) == 1 else position
            q = self.q_proj(q_compressed) if self.q_lora_rank is None else self.q_b_proj(q_compressed)
            q = q.view(b, s, -1, self.qk_head_dim).transpose(1, 2)
            q_nope, q_pe = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
            q_pe, k_rot = rope(q_pe, k_pe, position)
            key, value = self.expand_kv(k_nope, k_rot)
            return torch.cat((q_nope, q_pe), dim=-1), key, value

        ckpt = mrandom.CheckpointWithoutOutput(fp8=None)
        tables = position_embeddings if isinstance(position_embeddings, tuple) else (position_embeddings,)
        query, key, value = ckpt.checkpoint(up, q_compressed, k_nope, k_pe, *tables)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, mod.eager_attention_forward)
        out, _ = attention(self, query, key, value, attention_mask, dropout=0.0, scaling=self.scaling, **kwargs)
        ckpt.discard_output_and_register_recompute(out)
        return self.o_proj(out.reshape(b, s, -1).contiguous()), None

    attn.forward = types.MethodType(forward, attn)


def apply_modules(mrandom, model, modules) -> list:
    """Megatron's --recompute-modules on the model's blocks; returns the undo callables and hook handles."""
    undo = []
    base, blocks = _blocks(model)
    if "core_attn" in modules:
        undo.append(_core_attention(mrandom, model))
    for layer in blocks:
        moe = _is_moe(layer)
        if "layernorm" in modules:
            undo.append(_without_output(mrandom, layer.input_layernorm, layer.self_attn).remove)
            undo.append(_without_output(mrandom, layer.post_attention_layernorm, layer.mlp).remove)
        if "mla_up_proj" in modules:
            _mla_up_proj(mrandom, layer.self_attn)
        if "moe_act" in modules and moe:
            undo.append(_moe_act(mrandom, layer.mlp.experts).remove)
        if "shared_experts" in modules and moe and getattr(layer.mlp, "shared_experts", None) is not None:
            _checkpoint_module(mrandom, layer.mlp.shared_experts)
        if ("mlp" in modules and not moe) or ("moe" in modules and moe):
            _checkpoint_module(mrandom, layer.mlp)
    return undo


# --- full recompute: groups of layers under one checkpoint (transformer_block._checkpointed_forward) -------------

class _Group(torch.nn.Module):
    """Layers [start, end) run under one tensor_parallel.checkpoint, with the tensors HF passes each layer."""

    def __init__(self, mrandom, layers):
        super().__init__()
        self.mrandom, self.layers = mrandom, torch.nn.ModuleList(layers)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None, position_ids=None, **kwargs):
        def run(hidden, cos, sin, mask, position_ids):
            for layer in self.layers:
                hidden = layer(hidden, attention_mask=mask, position_embeddings=(cos, sin), position_ids=position_ids)
            return hidden
        cos, sin = position_embeddings
        return self.mrandom.checkpoint(run, False, hidden_states, cos, sin, attention_mask, position_ids)


class _Skip(torch.nn.Module):
    def forward(self, hidden_states, **kwargs):
        return hidden_states


def apply_full(mrandom, model, method: str, num_layers: int):
    """Megatron's --recompute-granularity full --recompute-method uniform|block --recompute-num-layers N on the
    model's layers (one model chunk): uniform checkpoints each run of N layers as one unit; block checkpoints the
    first N layers one by one and runs the rest plainly."""
    base, blocks = _blocks(model)
    layers, new = list(blocks), []
    for i, layer in enumerate(layers):
        if method == "uniform":
            if i % num_layers == 0:
                new.append(_Group(mrandom, layers[i:i + num_layers]))
            else:
                new.append(_Skip())
        else:
            new.append(_Group(mrandom, [layer]) if i < num_layers else layer)
    if hasattr(base, "h"):
        base.h = torch.nn.ModuleList(new)
    else:
        base.layers = torch.nn.ModuleList(new)


def measure(config: dict, batch: int, seq: int, modules=(), full=None, dtype=torch.bfloat16):
    """(bytes kept per region, max gradient difference against a plain run) for a Hugging Face model built from
    `config` under Megatron's selective `modules`, or `full` = (method, num_layers)."""
    plain = build_from_config(config, dtype)
    model = build_from_config(config, dtype)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    plain(input_ids=ids, labels=ids).loss.backward()
    kept = _Kept(model)
    base, blocks = _blocks(model)
    with _cpu_megatron(kept) as mrandom:
        undo = apply_modules(mrandom, model, modules) if modules else []
        if full is not None:
            apply_full(mrandom, model, *full)
        base, blocks = _blocks(model)

        def enter(*_):
            kept.region = "layer"
        handles = [b.register_forward_pre_hook(enter) for b in blocks]
        final_norm = base.ln_f if hasattr(base, "ln_f") else base.norm
        handles.append(final_norm.register_forward_pre_hook(lambda *_: setattr(kept, "region", "head")))
        try:
            with torch.autograd.graph.saved_tensors_hooks(kept.pack, lambda t: t):
                loss = model(input_ids=ids, labels=ids).loss
            got = kept.by_region()
            loss.backward()
        finally:
            for h in handles:
                h.remove()
            for u in undo:
                u()
    diff = max((p.grad.float() - q.grad.float()).abs().max().item()
               for p, q in zip(plain.parameters(), model.parameters()) if p.grad is not None)
    return dict(got), diff
