"""FSDP1 (`FullyShardedDataParallel`, FlatParameter units) communication buffers per rank on CPU.

FSDP1 runs on the CPU with gloo when it is given `device_id=torch.device("cpu")`: _init_utils.py
_init_device_handle raises "FSDP needs a non-CPU accelerator device" only when no device_id is given and the
module sits on the CPU (torch 2.13.0, git cf30153c). Nothing is patched: the code measured is torch's own.

`fsdp1_buffers(world=2, runs=[...])` starts `world` gloo processes; for each run (its keys over the call's) each
builds the same random Hugging Face Llama in fp32, optionally adds peft LoRA, and wraps it as accelerate's
TRANSFORMER_BASED_WRAP does (transformer_auto_wrap_policy over LlamaDecoderLayer: each block a FlatParameter, the
embeddings, final norm and head in the root's), or with `"wrap": "peft"` as peft's fsdp_auto_wrap_policy (each
leaf with a trainable weight its own unit too: what FSDP1 needs for LoRA with use_orig_params=False), with
MixedPrecision(param_dtype, reduce_dtype) (none with `"param_dtype": None`: the model's `dtype` throughout, as
Answer.AI's fsdp_qlora runs bf16), `use_orig_params` and `backward_prefetch` ("pre": torch's default, "post",
"none"). One forward + backward is sampled after every op
(a TorchDispatchMode) for the storages FSDP1 holds beyond the sharded state: every handle's unsharded padded flat
parameter (`_full_param_padded`, freed by resizing its storage to 0), its low-precision shard (`_mp_shard`), its
unsharded gradient (`flat_param.grad` at the unsharded size), and, in the post-backward hook, the gradient
autograd computed, its reduce-dtype copy and the padded reduce-scatter input (_runtime_utils.py
_post_backward_hook, _reduce_grad, _get_reduce_scatter_tensors). The new sharded gradient, kept as
`_saved_grad_shard` (and the views use_orig_params gives the original parameters into it), is the sharded
gradient zerocalc's ledger counts: never counted here. Gradients of the original
parameters that autograd holds before they reach the flat parameter are followed through weak references to
backward outputs of a parameter's shape (the activations here are 3-D, the weights 1-D or 2-D).
Reported per run, in bytes: `at_loss`, `forward`, `backward` (start of backward to block 0's pre-backward),
`backward_all`, and per unit: flat numel (unpadded, padded), its trainable numel and the unsharded gradient numel
seen (`units`); `saved_grad_shards`: each unit's `_saved_grad_shard` when the final callback starts (with
`"offload": True`, CPUOffload(offload_params=True), whether it is still held beside its `_cpu_grad` copy);
`refused`: the error text where FSDP1 refuses the wrap.
"""

from __future__ import annotations

import functools
import os
import weakref

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _nbytes(t, seen):
    if t is None:
        return 0
    st = t.untyped_storage()
    if not st.nbytes() or st.data_ptr() in seen:
        return 0
    seen.add(st.data_ptr())
    return st.nbytes()


def _storages(handles, inflight, shapes, parts=None):
    """Bytes of the storages FSDP1 holds beyond the shards; `parts` (a dict) gets them by name."""
    seen, total = set(), 0

    def add(name, t):
        nonlocal total
        b = _nbytes(t, seen)
        total += b
        if parts is not None and b:
            parts[name] = parts.get(name, 0) + b

    for h in handles:          # the sharded gradients (and the views use_orig_params gives the original
        # parameters into them) are the ledger's, not a buffer: never counted
        shard = getattr(h.flat_param, "_saved_grad_shard", None)
        if shard is not None:
            seen.add(shard.untyped_storage().data_ptr())
    for i, h in enumerate(handles):
        fp = h.flat_param
        add(f"{i}.unsharded", getattr(fp, "_full_param_padded", None))
        add(f"{i}.mp_shard", getattr(fp, "_mp_shard", None))
        g = fp.grad
        if g is not None and g.numel() >= fp._unpadded_unsharded_size.numel():
            add(f"{i}.grad.{str(g.dtype).removeprefix('torch.')}", g)
    for k, t in inflight.items():
        add("reduce." + k, t)
    for t in list(shapes):
        add("param-shaped grads", t)
    return total


def _model(case):
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
    from torch.distributed.fsdp.wrap import _or_policy, lambda_auto_wrap_policy, transformer_auto_wrap_policy
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from tests.measure.peft_lora import DTYPES, wrap
    from tests.measure.saved_tensors import build_from_config

    model = build_from_config({**case["config"], "attn_implementation": "sdpa"}, DTYPES[case.get("dtype", "fp32")])
    if case["finetune"] == "lora":
        model = wrap(model, rank=case.get("rank", 8), target=case.get("target", "q,v"),
                     autocast_adapter_dtype=case.get("autocast_adapter_dtype", True))
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
    if case["wrap"] == "peft":                         # peft/utils/other.py fsdp_auto_wrap_policy's lambda policy
        leaf = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: not list(m.children())
                                 and getattr(m, "weight", None) is not None and m.weight.requires_grad)
        policy = functools.partial(_or_policy, policies=[leaf, policy])
    mp = None if case["param_dtype"] is None else \
        MixedPrecision(param_dtype=DTYPES[case["param_dtype"]], reduce_dtype=DTYPES[case["reduce_dtype"]])
    offload = None
    if case.get("offload"):
        from torch.distributed.fsdp import CPUOffload
        offload = CPUOffload(offload_params=True)
        # test-only, host side: init_flat_param_attributes pins the CPU shard (pin_memory needs an accelerator)
        # and the final callback synchronizes the device stream (torch.cpu.Stream has no synchronize; CPU work
        # is synchronous). Both become no-ops; every allocation FSDP1 makes runs as it is.
        torch.Tensor.pin_memory = lambda self, *a, **k: self
        torch.cpu.Stream.synchronize = lambda self: None
    from torch.distributed.fsdp import BackwardPrefetch
    prefetch = {"pre": BackwardPrefetch.BACKWARD_PRE, "post": BackwardPrefetch.BACKWARD_POST, "none": None}
    return FSDP(model, auto_wrap_policy=policy, device_id=torch.device("cpu"), mixed_precision=mp,
                use_orig_params=case["use_orig_params"], cpu_offload=offload,
                backward_prefetch=prefetch[case.get("backward_prefetch", "pre")])


def _measure(case):
    import torch
    import torch.distributed.fsdp._runtime_utils as ru
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.utils._python_dispatch import TorchDispatchMode

    run = {k: v for k, v in case.items() if k not in ("runs", "config")}
    try:
        model = _model(case)
    except ValueError as exc:
        return dict(run=run, refused=str(exc).splitlines()[0])
    modules = FSDP.fsdp_modules(model)
    handles = [m._handle for m in modules if m._handle is not None]
    block0 = next(m for m in modules if m.module.__class__.__name__ == "LlamaDecoderLayer")
    inflight, marks = {}, {"phase": None, "backward": 0, "tail": 0, "backward_all": 0, "forward": 0}
    grads_seen, parts = {}, {}
    shapes = {tuple(s) for h in handles for s in h.flat_param._shapes}
    waiting = weakref.WeakSet()

    def sample():
        phase = marks["phase"]
        if phase is None:
            return
        b = _storages(handles, inflight, waiting)
        for key in (("forward",) if phase == "forward" else ("backward_all", phase)):
            if b > marks[key]:
                marks[key] = b
                _storages(handles, inflight, waiting, parts.setdefault(key, {}))
                parts[key] = {}
                _storages(handles, inflight, waiting, parts[key])

    originals = {n: getattr(ru, n) for n in ("_post_backward_hook", "_get_reduce_scatter_tensors", "_pre_backward_hook",
                                             "_post_backward_final_callback")}
    final = {}

    def final_callback(state, module):
        """What the end of backward holds before the final callback hands the gradients to the optimizer: each
        unit's `_saved_grad_shard` (with offload: beside its copy in `_cpu_grad`)."""
        if not final:
            for h in handles:
                fp = h.flat_param
                shard, cpu = getattr(fp, "_saved_grad_shard", None), getattr(fp, "_cpu_grad", None)
                if shard is not None:
                    final.setdefault("saved_grad_shards", []).append(
                        dict(numel=shard.numel(), bytes=shard.untyped_storage().nbytes(),
                             dtype=str(shard.dtype).removeprefix("torch."),
                             beside_cpu_grad=cpu is not None and cpu.untyped_storage().data_ptr()
                             != shard.untyped_storage().data_ptr()))
        return originals["_post_backward_final_callback"](state, module)

    def post_backward_hook(state, handle, *unused):
        flat_param = handle.flat_param
        if flat_param.grad is not None:
            grads_seen[id(handle)] = (flat_param.grad.numel(), str(flat_param.grad.dtype).removeprefix("torch."))
            # a second tensor on the storage, as torch's `autograd_computed_grad = flat_param.grad.data`: the
            # hook then points flat_param.grad at a reduce-dtype copy with `.data =`
            inflight["computed"] = flat_param.grad.data
        try:
            return originals["_post_backward_hook"](state, handle, *unused)
        finally:
            inflight.clear()

    def get_reduce_scatter_tensors(state, unsharded_grad):
        padded, new = originals["_get_reduce_scatter_tensors"](state, unsharded_grad)
        inflight.update(unsharded=unsharded_grad, padded=padded)     # `new` becomes _saved_grad_shard: the ledger's
        sample()
        return padded, new

    def pre_backward_hook(state, module, handle, grad, *unused):
        if handle is block0._handle and marks["phase"] == "backward":
            marks["phase"] = "tail"
        return originals["_pre_backward_hook"](state, module, handle, grad, *unused)

    ru._post_backward_hook, ru._get_reduce_scatter_tensors = post_backward_hook, get_reduce_scatter_tensors
    ru._pre_backward_hook = pre_backward_hook
    ru._post_backward_final_callback = final_callback

    class Sampler(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if marks["phase"] in ("backward", "tail") and isinstance(out, torch.Tensor) and out.dim() < 3 \
                    and tuple(out.shape) in shapes:
                waiting.add(out)
            sample()
            return out

    torch.manual_seed(1)
    ids = torch.randint(0, case["config"]["vocab_size"], (case["batch"], case["seq"]))
    try:
        with Sampler():
            marks["phase"] = "forward"
            loss = model(input_ids=ids, labels=ids).loss
            marks["at_loss"] = _storages(handles, inflight, waiting)
            marks["phase"] = "backward"
            loss.backward()
            marks["phase"] = None
    finally:
        for n, f in originals.items():
            setattr(ru, n, f)
    units = []
    for m in modules:
        h = m._handle
        if h is None:
            continue
        fp = h.flat_param
        # use_orig_params keeps the original parameters (_params); without it a unit is uniformly trainable
        params = int(sum(s.numel() for s in fp._shapes))
        trainable = sum(s.numel() for s, p in zip(fp._shapes, fp._params) if p.requires_grad) \
            if fp._params is not None else params * fp.requires_grad
        units.append(dict(name=m.module.__class__.__name__, root=m._is_root,
                          numel=fp._unpadded_unsharded_size.numel(), padded=fp._padded_unsharded_size.numel(),
                          params=params, trainable=trainable,
                          requires_grad=fp.requires_grad, grad=grads_seen.get(id(h))))
    return dict(run=run, loss=float(loss.detach()), units=units, parts=parts, **final,
                **{k: marks[k] for k in ("at_loss", "forward", "backward", "tail", "backward_all")})


def _worker(rank, world, port, outdir, case):
    from tests.measure.fsdp2_lora import run_cases
    run_cases(rank, world, port, outdir, case, _measure)


def fsdp1_buffers(world: int = 2, timeout: float = 180, **case) -> list:
    """Run the measurement on `world` CPU processes; one dict per rank (see the module docstring)."""
    from tests.measure.fsdp2_lora import run_workers
    from tests.measure.peft_lora import llama_config

    case = {"param_dtype": "bf16", "reduce_dtype": "fp32", "batch": 2, "seq": 32, "config": llama_config(),
            "finetune": "full", "wrap": "blocks", "use_orig_params": False, **case}
    case["runs"] = case.get("runs") or [{}]
    return run_workers("tests.measure.fsdp1_buffers", world, case, timeout)
