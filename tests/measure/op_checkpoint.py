"""Measure what a Hugging Face model keeps under op-level selective checkpointing (test-only; torch, transformers).

The policy is torchtitan 0.3.0's rule (torchtitan/distributed/activation_checkpoint.py SelectiveAC._wrap_block),
written here from its description, not copied: save the outputs of torch's compute-intensive ops
(torch._functorch.partitioners.get_default_op_list) and of SDPA, max and topk, except every second aten.mm per
block call. On the CPU, SDPA runs aten._scaled_dot_product_flash_attention_for_cpu, which is not in that list;
it stands in for CUDA's _scaled_dot_product_flash_attention (in the list), with the same saved outputs (output and
fp32 logsumexp).

What a block keeps is measured by liveness, not by hooks (inside a checkpoint autograd's pack hooks are the
checkpoint's own): every storage an op creates during the forward is watched with a StorageWeakRef, and the ones
still alive after forward + loss (before backward) are what the policy's cache, the checkpoint inputs and the
graph keep. Outside the blocks the usual pack-hook recorder (saved_tensors.py) counts the ends. Parameter storages
are excluded.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from tests.measure.saved_tensors import _Recorder, _tensors, gpu_semantics

MM_OPS = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)


def _save_ops() -> set:
    from torch._functorch.partitioners import get_default_op_list
    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {torch.ops.aten.max.default, torch.ops.aten.topk.default,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}     # the CPU stand-in
    return ops


ATTENTION_OPS = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, torch.ops.aten.bmm.default)


def torchtitan_op_policy(recompute_shapes=frozenset(), mm="every-other", addmm=True, attention=True, others=True):
    """A fresh policy per block call. torchtitan's (the defaults): the save list's outputs kept, a counter of mm
    ops with every second one recomputed; an mm whose right-hand side has one of `recompute_shapes` (in, out) is
    recomputed and not counted (force_recompute_mm_shapes_by_fqns, ["moe.router.gate"] by default). The other
    policies of zerocalc's OP_POLICIES: `mm` "all" or "none", without addmm, attention or the rest of the list."""
    save, count = _save_ops(), {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in MM_OPS:
            if tuple(args[1].shape) in recompute_shapes:
                return CheckpointPolicy.PREFER_RECOMPUTE
            count[mode] += 1
            keep = mm == "all" or mm == "every-other" and count[mode] % 2 == 1
        elif func == torch.ops.aten.addmm.default:
            keep = addmm
        elif func in ATTENTION_OPS:
            keep = attention
        else:
            keep = others and func in save
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


class _Watch(TorchDispatchMode):
    """Every output storage of the ops run while `on`, weakly referenced."""

    def __init__(self):
        super().__init__()
        self.on, self.storages = False, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.on:
            for t in _tensors(out):
                s = t.untyped_storage()
                if s.nbytes():
                    self.storages.append((StorageWeakRef(s), s.data_ptr(), s.nbytes()))
        return out


def measure_op_sac(model, batch: int, seq: int, **rule) -> dict:
    """Bytes kept per region ("embed", "layer", "head") after forward + loss, with every decoder block under the
    op-level policy (`rule`: torchtitan_op_policy's keywords; default torchtitan's)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    key = "activation_checkpointing_kwargs" if hasattr(model, "activation_checkpointing_enable") \
        else "gradient_checkpointing_kwargs"
    # the MoE router's gate (HF: mlp.gate), as torchtitan forces "moe.router.gate" to be recomputed
    routers = frozenset(tuple(m.weight.shape[::-1]) for n, m in model.named_modules()
                        if n.endswith("mlp.gate") and getattr(m, "weight", None) is not None)
    enable(**{key: {"use_reentrant": False,
                    "context_fn": lambda: create_selective_checkpoint_contexts(
                        torchtitan_op_policy(routers, **rule))}})
    rec, watch = _Recorder(model), _Watch()
    base = model.base_model
    blocks = base.h if hasattr(base, "h") else base.layers

    def enter_block(module, args, kwargs):
        rec.region, watch.on = "layer", True
        for t in _tensors((args, kwargs)):
            rec.add(t)                          # the checkpoint's inputs
        rec.checkpointing = True

    def leave_block(*_):
        watch.on = False

    final_norm = base.ln_f if hasattr(base, "ln_f") else base.norm
    handles = [b.register_forward_pre_hook(enter_block, with_kwargs=True) for b in blocks]
    handles += [b.register_forward_hook(leave_block) for b in blocks]
    def enter_head(*_):
        rec.region, rec.checkpointing = "head", False

    handles.append(final_norm.register_forward_pre_hook(enter_head))
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    try:
        with gpu_semantics(rec), watch:
            with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                loss = model(input_ids=ids, labels=ids).loss
            rec.paused = True
        kept = 0
        for ref, ptr, nbytes in watch.storages:
            if not ref.expired() and ptr not in rec.seen and ptr not in rec.params:
                rec.seen.add(ptr)
                kept += nbytes
        rec.by_region["layer"] += kept
        loss.backward()                         # the policy's recompute runs: the graph is usable
    finally:
        for h in handles:
            h.remove()
    return dict(rec.by_region)
