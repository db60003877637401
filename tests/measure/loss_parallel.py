"""Per-rank live bytes of PyTorch's vocab-parallel cross entropy (torch.distributed.tensor.parallel.loss_parallel),
as torchtitan runs it under tensor parallelism, on the CPU with gloo (test-only; needs torch). The formulas are
zerocalc's (zerocalc/step/losses.py "huggingface, loss parallel"); tests/test_losses.py checks them against this.

`loss_parallel_peaks(T, V, h, dtype, world)` starts `world` gloo processes (tests.measure.fsdp2_lora.run_workers);
each builds an nn.Linear(h, V, bias=False) head in `dtype`, parallelizes it with
parallelize_module(head, mesh, ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)) (torchtitan's
output projection), feeds replicated hidden states [1, T, h] (requires_grad) and, under `with loss_parallel():`,
runs torchtitan's loss `F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`, then `del pred` and
loss.backward() (torchtitan's trainer drops pred before backward). A "plain" run (same code path with a plain
nn.Linear and no DTensor / loss_parallel, rank 0 only) gives the unparallel reference.

How it is measured
- Live bytes: a TorchDispatchMode sees every aten op. An op with a DTensor among its types is not run by the mode:
  it returns NotImplemented, so DTensor's own __torch_dispatch__ (and loss_parallel's custom handlers) run with the
  mode still on the stack, and the mode then sees every local aten op they issue (x.float()'s _to_copy, amax, sub,
  exp, gather, zeros_like, index_put_, ...) on the local [T, V/tp] tensors. Each new storage an op outputs (by
  data_ptr; views / in-place results share an input's storage and are not new) adds its nbytes; weakref.finalize on
  the storage subtracts them when it is freed. Fake tensors (DTensor's sharding propagation runs ops on
  FakeTensors) are skipped. Everything made before the mode (hidden states, head weight, labels) is excluded.
- Saved tensors: saved_tensors_hooks around the forward; a DTensor saved tensor counts its _local_tensor storage,
  each storage once, the inputs excepted, dropped when the storage is freed.
- Marks (bytes, per rank): head_out (live after the head: the local logits), forward_peak (most live from the head's
  output through the loss), forward_end (live at the loss, logits still held), saved (saved storages at the forward's
  end), after_del (live after `del pred`), loss_backward_peak (most live from backward's start until the gradient
  of pred, the bf16/fp32 head output, is ready: the loss end alone), backward_peak (the whole backward, head
  backward and its all-reduce included). big_ops lists every op output of >= T*V/tp/4 elements (or trace_numel)
  in order, with the live bytes after it, so each buffer can be named. `units` divides by the local T x V/tp
  element count.

Results (torch 2.13 CPU, tp = 2 and 1; bytes per local T x V/tp element, w the logits' width; T-sized extras aside,
logits dropped before backward as torchtitan does): forward peak w + 4 + 8 for bf16 (14), 4 + 8 for fp32 (12,
.float() is an alias); forward end w + 4; saved 4 (the local fp32 log-softmax); backward peak 16 for either dtype
(saved log-softmax + zeros_like + exp + add / mul); extras 12 T bytes in forward, 33 T + 12 in backward. The plain
F.cross_entropy reference: 10 / 8, saved 4, backward 12. torchtitan 0.3.0's own _LossParallelCrossEntropy (impl="titan")
gives the same T x V/tp coefficients.

Run as a script: python -m tests.measure.loss_parallel [T V h] prints the JSON for bf16 and fp32, tp = 2 and plain.
"""

from __future__ import annotations

import json
import sys
import weakref

import torch

from tests.measure.fsdp2_lora import run_cases, run_workers

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _is_fake(t) -> bool:
    """Fake / meta tensors (sharding propagation) and wrapper subclasses (DTensor, AsyncCollectiveTensor: no
    storage of their own; their inner tensors are seen as the outputs of the local ops that made them)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return isinstance(t, FakeTensor) or t.device.type == "meta" or is_traceable_wrapper_subclass(t)


class Tracker:
    """TorchDispatchMode live-bytes counter that lets DTensor ops fall through to DTensor and counts their local ops."""

    def __init__(self, big_numel=None):
        from torch.distributed._functional_collectives import AsyncCollectiveTensor
        from torch.distributed.tensor import DTensor
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        tr = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if any(issubclass(t, (DTensor, AsyncCollectiveTensor)) for t in types):
                    return NotImplemented          # DTensor dispatches; its local ops come back through this mode
                out = func(*args, **(kwargs or {}))
                ins = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs or {}))
                       if isinstance(t, torch.Tensor) and not _is_fake(t)}
                for o in tree_leaves(out):
                    if isinstance(o, torch.Tensor) and not _is_fake(o):
                        tr._see(func, o, ins)
                return out

        self.mode = _Mode()
        self.live = self.peak = 0
        self._ptrs = {}
        self.big_numel = big_numel
        self.big_ops = []
        self.dtensor_seen = False

    def _see(self, func, o, ins):
        st = o.untyped_storage()
        ptr, n = st.data_ptr(), st.nbytes()
        if n == 0 or ptr in self._ptrs or ptr in ins:
            return
        self._ptrs[ptr] = n
        self.live += n
        self.peak = max(self.peak, self.live)
        weakref.finalize(st, self._free, ptr)
        if self.big_numel and o.numel() >= self.big_numel:
            self.big_ops.append(dict(op=str(func), shape=list(o.shape), dtype=str(o.dtype).removeprefix("torch."),
                                     bytes=n, live_after=self.live))

    def _free(self, ptr):
        self.live -= self._ptrs.pop(ptr, 0)

    def mark(self, name):
        if self.big_numel:
            self.big_ops.append(dict(mark=name, live=self.live, peak=self.peak))

    def reset_peak(self):
        self.peak = self.live


class Saved:
    def __init__(self, exclude=()):
        self.exclude = {_local(t).untyped_storage().data_ptr() for t in exclude}
        self.items = {}

    def pack(self, t):
        loc = _local(t)
        st = loc.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in self.exclude and ptr not in self.items and st.nbytes():
            self.items[ptr] = (str(loc.dtype).removeprefix("torch."), tuple(loc.shape), st.nbytes(),
                               type(t).__name__)
            weakref.finalize(st, self.items.pop, ptr, None)
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def total(self):
        return sum(v[2] for v in self.items.values())

    def listing(self):
        return [dict(dtype=d, local_shape=list(s), bytes=n, kind=k) for d, s, n, k in self.items.values()]


def _local(t):
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


def measure(case: dict) -> dict:
    """One forward + backward on this rank (the gloo group is up); returns the marks (see the module docstring)."""
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    T, V, h, world = case["T"], case["V"], case["h"], dist.get_world_size()
    plain = case.get("plain", False)
    tp = 1 if plain else world
    dt = DTYPES[case["dtype"]]
    torch.manual_seed(0)
    head = torch.nn.Linear(h, V, bias=False).to(dt)
    hidden = torch.randn(1, T, h, dtype=dt, requires_grad=True)
    labels = torch.randint(0, V, (1, T))
    if plain:
        ctx = _null
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            loss_parallel,
            parallelize_module,
        )

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        head = parallelize_module(head, mesh, ColwiseParallel(output_layouts=Shard(-1), use_local_output=False))
        ctx = loss_parallel
    impl = case.get("impl", "loss_parallel")
    if impl == "titan":                 # torchtitan 0.3.0's own vocab-parallel CE (see loss_parallel_peaks)
        from torch.distributed.tensor import DTensor, Replicate

        from tests.measure.loss_peaks import load_torchtitan_loss

        titan = load_torchtitan_loss()
        ctx = _null
        labels_dt = DTensor.from_local(labels, mesh, [Replicate()], run_check=False)
    unit = T * (V // tp)
    tr = Tracker(big_numel=case.get("trace_numel") or unit // 4)
    rec = Saved(exclude=(hidden, head.weight, labels))
    out = {}
    grad_mark = {}
    with tr.mode, ctx():
        with rec.hooks():
            pred = head(hidden)
            out["head_out"] = tr.live
            out["pred_local_shape"] = list(_local(pred).shape)
            out["pred_type"] = type(pred).__name__
            tr.mark("head_out")
            if impl == "titan":
                loss = titan.cross_entropy_loss(pred, labels_dt)
            else:
                loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
        out["forward_peak"] = tr.peak
        out["forward_end"] = tr.live
        out["saved"] = rec.total()
        out["saved_tensors"] = rec.listing()
        tr.mark("loss")

        def _hook(g):
            grad_mark["loss_backward_peak"] = tr.peak
            grad_mark["live_at_pred_grad"] = tr.live
            tr.mark("pred_grad")

        pred.register_hook(_hook)
        del pred
        out["after_del"] = tr.live
        tr.mark("del_pred")
        tr.reset_peak()
        loss.backward()
        out["backward_peak"] = tr.peak
        out["after_backward"] = tr.live
        tr.mark("backward_end")
    out.update(grad_mark)
    out["loss"] = float(_local(loss).item()) if hasattr(loss, "_local_tensor") else float(loss.item())
    out.update(T=T, V=V, h=h, dtype=case["dtype"], tp=tp, plain=plain, impl="plain" if plain else impl,
               unit_elements=unit)
    out["units"] = {k: round(out[k] / unit, 4) for k in
                    ("head_out", "forward_peak", "forward_end", "saved", "after_del", "loss_backward_peak",
                     "backward_peak", "after_backward") if k in out}
    out["big_ops"] = tr.big_ops
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _worker(rank, world, port, outdir, case):
    run_cases(rank, world, port, outdir, case, measure)


def loss_parallel_peaks(T: int = 256, V: int = 4096, h: int = 64, dtype: str = "bf16", world: int = 2,
                        plain: bool = False, impl: str = "loss_parallel", trace_numel: int = 0,
                        timeout: float = 120) -> list:
    """Run the measurement on `world` gloo CPU processes; one dict per rank (see the module docstring).
    plain=True (use world=1): the unparallel reference, nn.Linear + F.cross_entropy without DTensor.
    impl="titan": instead of loss_parallel(), torchtitan 0.3.0's own loss (/work/src/torchtitan,
    components/loss.py cross_entropy_loss with DTensor pred and labels -> _cross_entropy_via_local_map ->
    _LossParallelCrossEntropy, reduction "sum"), which is what torchtitan 0.3.0 runs in place of loss_parallel().
    trace_numel: list in big_ops every op output of at least this many elements (default T*V/tp/4)."""
    run = dict(T=T, V=V, h=h, dtype=dtype, plain=plain, impl=impl, trace_numel=trace_numel)
    res = run_workers("tests.measure.loss_parallel", world, dict(runs=[run]), timeout)
    return [r["results"][0] for r in res]


if __name__ == "__main__":
    T, V, h = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (256, 4096, 64)
    rows = []
    for dtype in ("bf16", "fp32"):
        for world, plain in ((2, False), (1, True), (1, False)):
            for r in loss_parallel_peaks(T, V, h, dtype, world, plain):
                r = {k: v for k, v in r.items() if k != "big_ops"}
                rows.append(r)
    print(json.dumps(rows, indent=1))
