"""What torchao float8 training (`convert_to_float8_training`, `Float8LinearConfig(emulate=True)`) keeps in memory,
measured on the CPU (test-only; needs torch and torchao, written against torchao 0.18.0).

Functions (each single-process call is fast, well under 20 s at the sizes used in tests):
- `saved_tensors(in_features, out_features, tokens, dtype, recipe, block)`: every tensor autograd packs during the
  forward of a converted `nn.Linear` (block="linear") or a Llama MLP (block="mlp": down(silu(gate(x)) * up(x))),
  recorded with `torch.autograd.graph.saved_tensors_hooks`, once per untyped storage (views and re-saves count
  once). Tensor subclasses (Float8TrainingTensor, DTensor) are opened with `__tensor_flatten__` so a saved float8
  tensor shows as its 1-byte `_data` plus its fp32 `_scale`. Saves whose storage is a parameter's (the
  Float8Linear saves `weight.t()`, a view of the parameter) are reported apart, in `param_saves`, and not counted
  as activation bytes. Each row: (shape, dtype, nbytes, module).
- `transients(in_features, out_features, tokens, dtype, recipe)`: the bytes allocated and freed during one
  Float8Linear forward and during its backward, tracked with a TorchDispatchMode that records every op output's
  storage (not a view of an already known storage) and drops it when a `weakref.finalize` on that storage fires.
  `*_peak_intermediate` is the peak of live bytes of storages that are dead when the call ends (the float8
  casts, their scales and the eager fp32 temporaries of the cast); `*_peak_total` also counts storages that
  survive the call (the output, or grad_input and the weight gradient).
- `buffers(in_features, out_features, dtype, recipe)`: parameters, buffers and tensor attributes of a converted
  module compared with the plain nn.Linear.
- the closed forms the measurements match exactly (CPU, eager) are zerocalc's: zerocalc/step/float8.py.
- `fsdp_float8_all_gather(...)`: the FSDP2 float8 all-gather (2 gloo processes, slower: about 10-25 s; not for
  every CI run). gloo has no float8 dtypes, so the all-gather itself runs on uint8 views of FSDP's float8 buffers.

What is approximated / not seen:
- emulate=True replaces `torch._scaled_mm` by `torch.mm(a._data.float() / a._scale, b._data.float() / b._scale)`
  inside Float8TrainingTensor's `__torch_dispatch__` (torchao/float8/float8_ops.py `float8_mm`). Ops run inside a
  subclass's `__torch_dispatch__` are not seen by the outer TorchDispatchMode, so neither these fp32 emulation
  temporaries nor the layout copies the real path makes (`preprocess_addmm`: `a_data.contiguous()`,
  `b_data.t().contiguous().t()`, 1 byte per element) are counted: the transients here are the casts only.
  What is saved for backward does not depend on emulate (float8_linear.py `matmul_with_hp_or_float8_args.forward`
  calls `ctx.save_for_backward(input_hp, weight_hp_t)` before any cast).
- Eager mode only: under torch.compile the cast (`abs/amax`, `to(float32) * scale`, `clamp`, `to(float8)`) fuses
  and its fp32 temporaries disappear, and AOTAutograd's partitioner decides what is saved (it may keep the float8
  cast of the input instead of the hp input): not measured here.
- Sizes are exact CPU storage bytes; the CUDA caching allocator rounds each block up to 512 bytes (scales are
  4-byte tensors, so on CUDA each occupies a 512-byte block).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def _dtype(d):
    return DTYPES[d] if isinstance(d, str) else d


def make_config(recipe: str = "tensorwise", **kw):
    """Float8LinearConfig for a recipe name, with emulate=True (CPU) unless overridden."""
    import dataclasses

    from torchao.float8 import Float8LinearConfig

    cfg = Float8LinearConfig.from_recipe_name(recipe)
    return dataclasses.replace(cfg, **{"emulate": True, **kw})


def _convert(module, recipe, **kw):
    from torchao.float8 import convert_to_float8_training

    return convert_to_float8_training(module, config=make_config(recipe, **kw))


def _leaves(t):
    """Plain tensors behind t (opens Float8TrainingTensor / DTensor / other traceable subclasses)."""
    if type(t) is torch.Tensor or type(t) is nn.Parameter or not hasattr(t, "__tensor_flatten__"):
        return [t]
    names, _ = t.__tensor_flatten__()
    out = []
    for n in names:
        out += _leaves(getattr(t, n))
    return out


def _sdtype(t):
    return str(t.dtype).removeprefix("torch.")


class MLP(nn.Module):
    """Llama MLP: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def _build(block, in_features, out_features, dtype, recipe, bias=False, **kw):
    torch.manual_seed(0)
    if block == "linear":
        m = nn.Linear(in_features, out_features, bias=bias)
    elif block == "mlp":  # in_features = hidden, out_features = intermediate
        m = MLP(in_features, out_features)
    else:
        raise ValueError(block)
    m = m.to(dtype)
    if recipe is not None:
        m = _convert(m, recipe, **kw)
    return m


def saved_tensors(in_features: int = 64, out_features: int = 128, tokens: int = 32, dtype="bf16",
                  recipe: str | None = "tensorwise", block: str = "linear", bias: bool = False, **config) -> dict:
    """Saved-for-backward tensors of one forward (see module docstring). recipe=None: the unconverted nn.Linear.

    Returns dict(saved=[(shape, dtype, nbytes, module)], param_saves=[(shape, dtype, param_name, module)],
    activation_bytes=int, by_module={module: bytes}, float8_saved=bool (any saved float8 data)).
    """
    dtype = _dtype(dtype)
    m = _build(block, in_features, out_features, dtype, recipe, bias=bias, **config)
    params = {p.untyped_storage().data_ptr(): n for n, p in m.named_parameters()}
    for n, p in m.named_parameters():  # FSDP-style wrapper subclasses: their inner storages too
        for leaf in _leaves(p):
            params.setdefault(leaf.untyped_storage().data_ptr(), n)
    stack = ["(root)"]
    handles = []
    for name, mod in m.named_modules():
        if name:
            handles.append(mod.register_forward_pre_hook(lambda mod, a, name=name: stack.append(name)))
            handles.append(mod.register_forward_hook(lambda mod, a, o: stack.pop() and None))
    seen, keep, saved, param_saves = set(), [], [], []

    def pack(t):
        for leaf in _leaves(t):
            st = leaf.untyped_storage()
            ptr = st.data_ptr()
            if ptr in params:
                param_saves.append((tuple(t.shape), _sdtype(leaf), params[ptr], stack[-1]))
                continue
            if ptr in seen or not st.nbytes():
                continue
            seen.add(ptr)
            keep.append(leaf)  # keep alive: a freed address could be reused and wrongly deduplicated
            saved.append((tuple(leaf.shape), _sdtype(leaf), st.nbytes(), stack[-1]))
        return t

    b = 2 if tokens % 2 == 0 else 1
    x = torch.randn(b, tokens // b, in_features, dtype=dtype, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = m(x)
    for h in handles:
        h.remove()
    y.float().sum().backward()  # the graph must still be valid
    by_module = {}
    for _, _, nb, mod in saved:
        by_module[mod] = by_module.get(mod, 0) + nb
    return {"saved": saved, "param_saves": param_saves, "activation_bytes": sum(r[2] for r in saved),
            "by_module": by_module, "float8_saved": any(r[1].startswith("float8") for r in saved)}


class _OpLog(TorchDispatchMode):
    """Logs ops that produce float8 outputs (the casts) and collectives, with shapes: where the casts happen."""

    def __init__(self):
        super().__init__()
        self.rows = []
        self.phase = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func)
        leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if "c10d" in name or any(t.dtype.itemsize == 1 and t.dtype.is_floating_point for t in leaves):
            self.rows.append((self.phase, name, [(tuple(t.shape), _sdtype(t)) for t in leaves]))
        return out


class _AllocTracker(TorchDispatchMode):
    """Timeline of op-output storages (+nbytes at creation, -nbytes when the storage is freed)."""

    def __init__(self, external):
        super().__init__()
        self.external = set(external)  # storages that existed before (inputs, params): their views are not new
        self.live = {}
        self.events = []  # (key, +-nbytes, op)
        self.n = 0
        self.phase = None

    def _free(self, key):
        if key in self.live:
            _, nb = self.live.pop(key)
            self.events.append((key, -nb, "free", self.phase))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            for leaf in _leaves(t):
                st = leaf.untyped_storage()
                ptr, nb = st.data_ptr(), st.nbytes()
                if not nb or ptr in self.external or any(p == ptr for p, _ in self.live.values()):
                    continue
                self.n += 1
                key = self.n
                self.live[key] = (ptr, nb)
                self.events.append((key, nb, f"{func}:{tuple(leaf.shape)}:{_sdtype(leaf)}", self.phase))
                weakref.finalize(st, self._free, key)
        return out

    def peaks(self, phase):
        """(peak of intermediates, peak of all) over the events of `phase`; survivors = allocated in phase, never
        freed within it."""
        ev = [e for e in self.events if e[3] == phase]
        freed = {k for k, d, _, _ in ev if d < 0}
        cur_i = cur_t = peak_i = peak_t = 0
        for k, d, _, _ in ev:
            cur_t += d
            if k in freed:
                cur_i += d
            peak_i, peak_t = max(peak_i, cur_i), max(peak_t, cur_t)
        allocs = [(op, d) for k, d, op, _ in ev if d > 0]
        survivors = sum(d for k, d, _, _ in ev if d > 0 and k not in freed)
        return peak_i, peak_t, survivors, allocs


def transients(in_features: int = 64, out_features: int = 128, tokens: int = 32, dtype="bf16",
               recipe: str | None = "tensorwise", **config) -> dict:
    """Transient bytes of one Float8Linear forward and of its backward (see module docstring).

    Returns dict(forward_peak_intermediate, forward_peak_total, forward_survivors, backward_peak_intermediate,
    backward_peak_total, backward_survivors, forward_allocs=[(op, nbytes)], backward_allocs=[...]).
    """
    dtype = _dtype(dtype)
    m = _build("linear", in_features, out_features, dtype, recipe, **config)
    x = torch.randn(tokens, in_features, dtype=dtype, requires_grad=True)
    g = torch.randn(tokens, out_features, dtype=dtype)
    external = [t.untyped_storage().data_ptr() for t in [x, g, *m.parameters()]
                for t in _leaves(t)]
    tr = _AllocTracker(external)
    with tr:
        tr.phase = "forward"
        y = m(x)
        tr.phase = "backward"
        y.backward(g)
        tr.phase = None
    out = {}
    for ph in ("forward", "backward"):
        pi, pt, surv, allocs = tr.peaks(ph)
        out.update({f"{ph}_peak_intermediate": pi, f"{ph}_peak_total": pt, f"{ph}_survivors": surv,
                    f"{ph}_allocs": allocs})
    del y
    return out


def buffers(in_features: int = 64, out_features: int = 128, dtype="bf16", recipe: str = "tensorwise",
            **config) -> dict:
    """Persistent state of a converted nn.Linear vs the plain one: parameters, buffers, tensor attributes."""
    dtype = _dtype(dtype)
    plain = _build("linear", in_features, out_features, dtype, None)
    conv = _build("linear", in_features, out_features, dtype, recipe, **config)

    def state(m):
        params = [(n, tuple(p.shape), _sdtype(p), type(p.data).__name__,
                   sum(leaf.untyped_storage().nbytes() for leaf in _leaves(p)))
                  for n, p in m.named_parameters()]
        bufs = [(n, tuple(b.shape), _sdtype(b), b.untyped_storage().nbytes()) for n, b in m.named_buffers()]
        attrs = [(k, tuple(v.shape), _sdtype(v)) for k, v in vars(m).items()
                 if isinstance(v, torch.Tensor) and k not in ("_parameters", "_buffers")]
        return {"params": params, "buffers": bufs, "tensor_attrs": attrs,
                    "bytes": sum(p[-1] for p in params) + sum(b[-1] for b in bufs)}

    return {"plain": state(plain), "converted": state(conv), "type": type(conv).__name__}


def _fsdp_measure(case):
    import torch.distributed as dist
    import torch.distributed.fsdp._fully_shard._fsdp_param as fp_mod
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    dtype = _dtype(case["dtype"])
    hidden, inter, tokens = case["hidden"], case["intermediate"], case["tokens"]
    torch.manual_seed(0)
    model = nn.Sequential(MLP(hidden, inter), MLP(hidden, inter)).to(dtype)
    if case["recipe"] is not None:
        model = _convert(model, case["recipe"], enable_fsdp_float8_all_gather=case["fp8_ag"])
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for blk in model:
        fully_shard(blk, mp_policy=mp)
    fully_shard(model, mp_policy=mp)

    def persistent():
        rows = {}
        for n, p in model.named_parameters():
            loc = getattr(p, "_local_tensor", p)  # not to_local(): a view drops _precomputed_scale
            leaves = _leaves(loc)
            rows[n] = {"type": type(loc).__name__,
                       "inner": [(tuple(t.shape), _sdtype(t), t.untyped_storage().nbytes()) for t in leaves],
                       "precomputed_scale": None if getattr(loc, "_precomputed_scale", None) is None else
                       (tuple(loc._precomputed_scale.shape), _sdtype(loc._precomputed_scale),
                        loc._precomputed_scale.untyped_storage().nbytes(),
                        loc._precomputed_scale.untyped_storage().data_ptr())}
        return rows

    # record each FSDPParam's all-gather inputs and outputs
    gathered = {}
    orig_init = fp_mod.FSDPParam.init_unsharded_param

    def init_unsharded_param(self):
        orig_init(self)
        outs = [(tuple(t.shape), _sdtype(t), t.untyped_storage().nbytes()) for t in self.all_gather_outputs]
        up = self._unsharded_param
        gathered[self._param_fqn] = {"all_gather_outputs": outs, "unsharded_type": type(up.data).__name__,
                                     "unsharded_inner": [(tuple(t.shape), _sdtype(t)) for t in _leaves(up.data)]}

    fp_mod.FSDPParam.init_unsharded_param = init_unsharded_param
    ag_inputs = {}
    orig_ag_inputs = fp_mod.FSDPParam.all_gather_inputs

    def all_gather_inputs(self):
        r = orig_ag_inputs.fget(self)
        ag_inputs[self._param_fqn] = [(tuple(t.shape), _sdtype(t), t.numel() * t.element_size()) for t in r]
        return r

    fp_mod.FSDPParam.all_gather_inputs = property(all_gather_inputs)
    # gloo has no float8 dtypes ("Invalid scalar type"): run the byte-identical all-gather on uint8 views and record
    # the buffer FSDP allocated (NCCL all-gathers float8 directly)
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as coll
    orig_call = coll.DefaultAllGather.__call__
    ag_buffers = []

    def ag_call(self, output_tensor, input_tensor, group, async_op=False):
        ag_buffers.append({"output": (tuple(output_tensor.shape), _sdtype(output_tensor), output_tensor.nbytes),
                               "input": (tuple(input_tensor.shape), _sdtype(input_tensor), input_tensor.nbytes)})
        if output_tensor.dtype.itemsize == 1 and output_tensor.dtype.is_floating_point:
            output_tensor, input_tensor = output_tensor.view(torch.uint8), input_tensor.view(torch.uint8)
        return orig_call(self, output_tensor, input_tensor, group, async_op)

    coll.DefaultAllGather.__call__ = ag_call
    try:
        before = persistent()
        x = torch.randn(2, tokens // 2, hidden, dtype=dtype, requires_grad=True)
        saved = []

        def pack(t):
            for leaf in _leaves(t.to_local() if hasattr(t, "to_local") else t):
                saved.append((leaf, tuple(leaf.shape), _sdtype(leaf), leaf.untyped_storage().nbytes()))
            return t

        log1 = _OpLog()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), log1:  # first step: no precomputed scales
            log1.phase = "forward"
            y = model(x)
        # storage bytes at pack time and after forward (FSDP frees resharded all-gather outputs: resize_(0))
        saved_after_fwd = [(sh, d, nb, leaf.untyped_storage().nbytes()) for leaf, sh, d, nb in saved]
        saved.clear()
        y.float().sum().backward()
        precompute_float8_dynamic_scale_for_fsdp(model)
        after = persistent()
        log = _OpLog()
        with log:  # second step uses the precomputed scales
            log.phase = "forward"
            y2 = model(x)
            log.phase = "backward"
            y2.float().sum().backward()
    finally:
        fp_mod.FSDPParam.init_unsharded_param = orig_init
        fp_mod.FSDPParam.all_gather_inputs = orig_ag_inputs
        coll.DefaultAllGather.__call__ = orig_call
    return {"case": {k: v for k, v in case.items() if k != "runs"}, "rank": dist.get_rank(),
                "all_gather_inputs": ag_inputs, "gathered": gathered, "all_gather_buffers": ag_buffers,
                "persistent_before": before, "step1_forward_casts_and_collectives": log1.rows,
                "step2_casts_and_collectives": log.rows,
                "persistent_after_precompute": after, "saved": saved_after_fwd}


def _worker(rank, world, port, outdir, case):
    from tests.measure.fsdp2_lora import run_cases
    run_cases(rank, world, port, outdir, case, _fsdp_measure, default=str)


def fsdp_float8_all_gather(world: int = 2, timeout: float = 180, **case) -> list:
    """FSDP2 (fully_shard, gloo, CPU) on two converted Llama MLPs: per rank and run, the all-gather inputs (what each
    rank sends), the all-gather outputs (the unsharded buffers), the unsharded parameter's type, the persistent
    sharded parameters before and after `precompute_float8_dynamic_scale_for_fsdp`, and the saved tensors.
    Default runs: bf16 all-gather (unconverted), float8 linears without and with enable_fsdp_float8_all_gather."""
    from tests.measure.fsdp2_lora import run_workers

    case = {"dtype": "bf16", "hidden": 64, "intermediate": 128, "tokens": 16, **case}
    case["runs"] = case.get("runs") or [{"recipe": None, "fp8_ag": False}, {"recipe": "tensorwise", "fp8_ag": False},
                                        {"recipe": "tensorwise", "fp8_ag": True}]
    return run_workers("tests.measure.float8_saves", world, case, timeout)
