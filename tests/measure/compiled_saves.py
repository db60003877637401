"""What torch.compile (Inductor, default min-cut partitioner) saves for backward for one decoder block and for the
loss, measured on the CPU (test-only; needs torch and transformers).

Method. The compiled autograd function (AOTAutograd's CompiledFunction) stores its activations with
ctx.save_for_backward, which autograd's saved_tensors_hooks see, so the pack-hook recording of saved_tensors.py
works on the compiled block: every packed tensor is recorded once per storage, parameter storages excluded.
Saved *symbolic ints* go to ctx.symints and are not tensors; with dynamic=False there are none. The compile is
warmed up once without hooks, then measured on a second call (no recompile), so the hooks cannot leak into tracing.
Names of the compiled saves come from the partitioner's forward graph (its outputs after the user outputs), names
of eager saves from a dispatch mode that remembers which aten op produced each storage.

Entries are (shape, dtype, nbytes). Saved tensors that alias one of the block's inputs are reported separately:
"input" is the hidden state the block is called with (kept by the previous block / embedding anyway, but a
distinct tensor in memory per block), "shared" are the position embeddings / mask every block receives (one copy
for the whole model).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import (
    CheckpointPolicy,
    create_selective_checkpoint_contexts,
)
from torch.utils.checkpoint import checkpoint as _checkpoint

from tests.measure.saved_tensors import _tensors, build_from_config

aten = torch.ops.aten


# ---------------------------------------------------------------- naming the saved tensors

class _Partitions:
    """Wraps Inductor's default partitioner to keep, per compile, the names / metas of the saved values."""

    def __init__(self):
        self.graphs = []
        self._orig = None

    def __enter__(self):
        import torch._inductor.compile_fx as cfx

        self._orig = orig = cfx.min_cut_rematerialization_partition

        def wrapped(joint, joint_inputs, *args, **kwargs):
            fw, bw = orig(joint, joint_inputs, *args, **kwargs)
            n_fwd = kwargs.get("num_fwd_outputs")
            out = next(n for n in fw.graph.nodes if n.op == "output")
            vals = list(out.args[0])
            saved = []
            for n in vals[n_fwd:]:
                v = n.meta.get("val") if hasattr(n, "meta") else None
                target = str(getattr(n, "target", n))
                if isinstance(v, torch.Tensor):
                    saved.append((n.name, target, tuple(v.shape), v.dtype))
                else:
                    saved.append((getattr(n, "name", str(n)), target, "symint" if v is not None else None, None))
            self.graphs.append(saved)
            return fw, bw

        cfx.min_cut_rematerialization_partition = wrapped
        return self

    def __exit__(self, *exc):
        import torch._inductor.compile_fx as cfx

        cfx.min_cut_rematerialization_partition = self._orig


class _Producers(TorchDispatchMode):
    """storage data_ptr -> name of the aten op that first wrote it (eager naming)."""

    def __init__(self):
        super().__init__()
        self.by_ptr = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = out if isinstance(out, (tuple, list)) else (out,)
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs)) if t.untyped_storage().nbytes()}
        for i, t in enumerate(flat):
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                ptr = t.untyped_storage().data_ptr()
                if ptr in inputs:            # a view or an in-place op: keep the producer's name
                    continue
                name = func.__name__ if len(flat) == 1 else f"{func.__name__}[{i}]"
                self.by_ptr[ptr] = name      # the latest writer: freed storages are reused
        return out


# ---------------------------------------------------------------- recording

class _Saves:
    def __init__(self, params, inputs, shared):
        self.params = {p.untyped_storage().data_ptr() for p in params}
        self.inputs = {t.untyped_storage().data_ptr() for t in inputs}
        self.shared = {t.untyped_storage().data_ptr() for t in shared}
        self.seen, self.alive = set(), []
        self.order = []          # every pack, in order, with its storage ptr (to align with graph names)
        self.saved, self.input, self.shared_saved = [], [], []

    def pack(self, t):
        if not isinstance(t, torch.Tensor):
            return t
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        self.order.append((ptr, tuple(t.shape), t.dtype))
        if ptr in self.seen or ptr in self.params or not storage.nbytes():
            return t
        self.seen.add(ptr)
        self.alive.append(t)
        entry = (tuple(t.shape), t.dtype, storage.nbytes(), ptr)
        if ptr in self.inputs:
            self.input.append(entry)
        elif ptr in self.shared:
            self.shared_saved.append(entry)
        else:
            self.saved.append(entry)
        return t


def _run_recorded(fn, args, params, inputs, shared, names_by_ptr=None):
    rec = _Saves(params, inputs, shared)
    with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
        out = fn(*args)
    return rec, out


def _strip(entries):
    return [(shape, dtype, nbytes) for shape, dtype, nbytes, _ in entries]


def _names_compiled(rec, graph):
    """Align the packs of one CompiledFunction call with the forward graph's saved-value list."""
    tensor_names = [(name, target) for name, target, shape, _ in graph if shape != "symint"]
    by_ptr = {}
    for (ptr, shape, dtype), (name, target) in zip(rec.order, tensor_names):
        by_ptr.setdefault(ptr, f"{name} <{target}>")
    return by_ptr


def _named(entries, by_ptr):
    return [(by_ptr.get(ptr, "?"), shape, dtype, nbytes) for shape, dtype, nbytes, ptr in entries]


def _named_input(entries):
    return [("<block input>", shape, dtype, nbytes) for shape, dtype, nbytes in entries]


def _total(entries):
    return sum(e[2] for e in entries)


# ---------------------------------------------------------------- the block and its call

def _blocks(model):
    base = model.base_model
    return base.h if hasattr(base, "h") else base.layers


def _layer_call(model, batch, seq):
    """Run the model once (no grad) and capture the args / kwargs it passes to its first block."""
    captured = {}

    def hook(module, args, kwargs):
        captured.setdefault("call", (args, dict(kwargs)))

    block = _blocks(model)[0]
    h = block.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=torch.randint(0, model.config.vocab_size, (batch, seq)))
    finally:
        h.remove()
    args, kwargs = captured["call"]
    kwargs.pop("cache", None)
    kwargs.pop("past_key_values", None)
    kwargs.pop("layer_past", None)
    kwargs["use_cache"] = False
    if args:
        hidden, rest = args[0], args[1:]
    else:
        hidden, rest = kwargs.pop("hidden_states"), ()
    return block, hidden, rest, kwargs


def _first_tensor(out):
    return out if isinstance(out, torch.Tensor) else next(_tensors(out))


# ---------------------------------------------------------------- torchtitan's op-level SAC, re-written

CPU_FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default


def op_sac_save_ops():
    """torchtitan 0.3.0 SelectiveAC's default save set (compute-intensive ops of the default partitioner op list,
    SDPA variants, max, flex attention, linear, topk, reduce_scatter / all_to_all), plus the CPU flash attention
    op as the CPU stand-in of the CUDA flash kernel (_scaled_dot_product_flash_attention, which is in the list)."""
    from torch._functorch.partitioners import get_default_op_list

    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {
        aten._scaled_dot_product_cudnn_attention.default,
        aten._scaled_dot_product_attention_math.default,
        aten._scaled_dot_product_fused_attention_overrideable.default,
        aten.max.default,
        aten.linear.default,
        aten.topk.default,
        torch._higher_order_ops.flex_attention,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        torch.ops._c10d_functional.all_to_all_single.default,
        CPU_FLASH,
    }
    return ops


def op_sac_context():
    save_ops = op_sac_save_ops()
    mm_ops = (aten.mm.default, aten.linear.default)
    counts = {"forward": 0, "recompute": 0}     # fresh per block call

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in mm_ops:
            counts[mode] += 1
        if func in save_ops:
            if func in mm_ops and counts[mode] % 2 == 0:     # the 2nd, 4th, ... mm of the block is recomputed
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class _OpSAC(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block
        self.storages = storages = []  # eager: the SAC caches (func -> outputs kept for the recompute)

        def context_fn():                # a plain function: Dynamo does not accept a bound method here
            contexts = op_sac_context()
            storages.append(getattr(contexts[0], "storage", None))
            return contexts

        self.context_fn = context_fn

    def forward(self, *args, **kwargs):
        return _checkpoint(self.block, *args, use_reentrant=False, context_fn=self.context_fn, **kwargs)


def _sac_cached(storages, params, inputs):
    """(name, shape, dtype, nbytes) of what eager SAC keeps in its cache, one per storage."""
    params = {p.untyped_storage().data_ptr() for p in params}
    inputs = {t.untyped_storage().data_ptr() for t in inputs}
    seen, out = set(), []
    for storage in storages:
        for key, outs in (storage or {}).items():
            name = getattr(key[0] if isinstance(key, tuple) else key, "__name__", str(key))
            values = outs.values() if isinstance(outs, dict) else outs
            unwrapped = [torch.utils._pytree.tree_map(lambda w: getattr(w, "val", w), v,
                                                      is_leaf=lambda w: hasattr(w, "val")) for v in values]
            for t in _tensors(unwrapped):
                st = t.untyped_storage()
                ptr = st.data_ptr()
                if ptr in seen or ptr in params or ptr in inputs or not st.nbytes():
                    continue
                seen.add(ptr)
                out.append((name, tuple(t.shape), t.dtype, st.nbytes()))
    return out


# ---------------------------------------------------------------- public functions

def _compile(fn, fullgraph):
    return torch.compile(fn, fullgraph=fullgraph, dynamic=False)


def _measure_pair(fn, args, params, inputs, shared, fullgraph=True):
    """Eager and compiled saves of fn(*args). Returns a dict."""
    torch._dynamo.reset()
    prod = _Producers()
    with prod:
        rec_e, _ = _run_recorded(fn, args, params, inputs, shared)
    eager_names = prod.by_ptr

    used_fullgraph = fullgraph
    with _Partitions() as parts:
        try:
            cfn = _compile(fn, fullgraph)
            cfn(*args)                       # compile (forward; backward compiles lazily, never needed here)
        except Exception:                    # a graph break: retry without fullgraph
            if not fullgraph:
                raise
            torch._dynamo.reset()
            parts.graphs.clear()
            used_fullgraph = False
            cfn = _compile(fn, False)
            cfn(*args)
        n_graphs = len(parts.graphs)
        with torch._dynamo.config.patch(error_on_recompile=True):
            rec_c, _ = _run_recorded(cfn, args, params, inputs, shared)
    graph_names = _names_compiled(rec_c, parts.graphs[-1]) if n_graphs == 1 else {}
    symints = sum(1 for g in parts.graphs for _, _, shape, _ in g if shape == "symint")
    graph_tensors = sum(1 for g in parts.graphs for _, _, shape, _ in g if shape != "symint")
    return {
        "eager": _strip(rec_e.saved),
        "eager_input": _strip(rec_e.input),
        "eager_shared": _strip(rec_e.shared_saved),
        "eager_named": _named(rec_e.saved + rec_e.input, eager_names),
        "compiled": _strip(rec_c.saved),
        "compiled_input": _strip(rec_c.input),
        "compiled_shared": _strip(rec_c.shared_saved),
        "compiled_named": _named(rec_c.saved + rec_c.input, graph_names),
        "eager_bytes": _total(rec_e.saved),
        "compiled_bytes": _total(rec_c.saved),
        "fullgraph": used_fullgraph,
        "graphs": n_graphs,
        "saved_symints": symints,
        "graph_saved_tensors": graph_tensors,    # what the partitioner's forward graph hands to backward
        "packs": len(rec_c.order),               # what the pack hook saw (equal: every saved value is packed)
    }


def compiled_block_saves(config: dict, dtype=torch.bfloat16, batch=2, seq=64, checkpoint=None):
    """Saved-for-backward tensors of one decoder block (model.model.layers[0] / transformer.h[0]), compiled with
    torch.compile(default mode, fullgraph if possible, dynamic=False), against the same block eager.

    checkpoint=None: plain; "op": torchtitan's op-level selective AC wrapped around the block, then compiled (the
    eager count is then that of the eager block *without* SAC: under eager SAC the checkpoint's own hooks replace
    ours).
    Returns a dict; "compiled" / "eager" are lists of (shape, dtype, nbytes), the block's input hidden state
    separately in "compiled_input" / "eager_input", position embeddings etc. in "*_shared"."""
    model = build_from_config({**config, "attn_implementation": "sdpa"}, dtype)
    block, hidden, rest, kwargs = _layer_call(model, batch, seq)
    x = torch.randn(hidden.shape, dtype=dtype).requires_grad_()
    shared = list(_tensors((rest, kwargs)))
    target = _OpSAC(block) if checkpoint == "op" else block
    if checkpoint not in (None, "op"):
        raise ValueError(f"checkpoint={checkpoint!r}: None or 'op'")

    def fn(x):
        return _first_tensor(target(x, *rest, **kwargs))

    result = _measure_pair(fn, (x,), list(block.parameters()), [x], shared)
    if checkpoint == "op":
        # eager SAC: checkpoint's own hooks replace ours inside the block (we see only its input); what it keeps
        # is the SAC cache of the first (eager) call: the outputs of every MUST_SAVE op, needed by backward or not
        first = target.storages[0] if target.storages else None
        cached = _sac_cached([first], block.parameters(), [x] + shared)
        result["eager_named"] = cached + _named_input(result["eager_input"])
        result["eager"] = [(shape, dtype, nbytes) for _, shape, dtype, nbytes in cached]
        result["eager_bytes"] = _total(result["eager"])
    result["checkpoint"] = checkpoint
    return result


def compiled_loss_saves(config: dict, dtype=torch.bfloat16, batch=2, seq=64, what="loss"):
    """What the loss saves, eager vs compiled: what="loss": F.cross_entropy(logits.float()) on bf16 logits (the
    compiled region is the loss alone, as torchtitan compiles its loss function); what="head+loss": final norm +
    lm_head + that loss compiled together. The region's input (logits / final hidden state) is reported in
    "*_input"."""
    model = build_from_config({**config, "attn_implementation": "sdpa"}, dtype)
    base = model.base_model
    norm = base.ln_f if hasattr(base, "ln_f") else base.norm
    head = model.lm_head
    V, h = model.config.vocab_size, model.config.hidden_size
    labels = torch.randint(0, V, (batch, seq))

    def loss_fn(logits):
        return F.cross_entropy(logits.float().reshape(-1, V), labels.reshape(-1))

    if what == "loss":
        x = torch.randn(batch, seq, V, dtype=dtype).requires_grad_()
        fn = loss_fn
        params = []
    elif what == "head+loss":
        x = torch.randn(batch, seq, h, dtype=dtype).requires_grad_()

        def fn(x):
            return loss_fn(head(norm(x)))

        params = list(norm.parameters()) + list(head.parameters())
    else:
        raise ValueError(f"what={what!r}: 'loss' or 'head+loss'")
    result = _measure_pair(fn, (x,), params, [x], [labels])
    result["what"] = what
    return result


# ---------------------------------------------------------------- tiny configs used by the report

def llama_config(hidden=64, ffn=160, heads=4, kv_heads=2, vocab=512, layers=2):
    return dict(model_type="llama", hidden_size=hidden, intermediate_size=ffn, num_attention_heads=heads,
                num_key_value_heads=kv_heads, num_hidden_layers=layers, vocab_size=vocab,
                max_position_embeddings=256, hidden_act="silu", tie_word_embeddings=False)


def qwen3_config(hidden=64, ffn=160, heads=4, kv_heads=2, head_dim=32, vocab=512, layers=2):
    return dict(model_type="qwen3", hidden_size=hidden, intermediate_size=ffn, num_attention_heads=heads,
                num_key_value_heads=kv_heads, head_dim=head_dim, num_hidden_layers=layers, vocab_size=vocab,
                max_position_embeddings=256, tie_word_embeddings=False)


def gpt2_config(hidden=64, ffn=None, heads=4, vocab=512, layers=2):
    return dict(model_type="gpt2", n_embd=hidden, n_inner=ffn, n_head=heads, n_layer=layers, vocab_size=vocab,
                n_positions=256, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def qwen3_moe_config(hidden=64, moe_ffn=48, heads=4, kv_heads=2, head_dim=16, experts=4, top_k=2, vocab=512,
                     layers=2):
    return dict(model_type="qwen3_moe", hidden_size=hidden, intermediate_size=4 * moe_ffn,
                moe_intermediate_size=moe_ffn, num_experts=experts, num_experts_per_tok=top_k,
                decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, num_attention_heads=heads,
                num_key_value_heads=kv_heads, head_dim=head_dim, num_hidden_layers=layers, vocab_size=vocab,
                max_position_embeddings=256, tie_word_embeddings=False)


def format_result(result):
    lines = [(f"fullgraph={result['fullgraph']} graphs={result['graphs']} saved_symints={result['saved_symints']} "
              f"graph_saved_tensors={result['graph_saved_tensors']} packs={result['packs']}")]
    for kind in ("eager", "compiled"):
        lines.append(f"{kind}: {result[kind + '_bytes']} bytes in {len(result[kind])} tensors; "
                     f"input {result[kind + '_input']}; shared {result[kind + '_shared']}")
        for name, shape, dtype, nbytes in result[kind + "_named"]:
            lines.append(f"   {name:60s} {list(shape)!s:18s} {str(dtype).replace('torch.', ''):9s} {nbytes}")
    return "\n".join(lines)
