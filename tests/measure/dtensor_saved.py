"""What a DTensor-aware saved-tensor hook counts (test-only; needs torch): each tensor's local shard (a DTensor
counts its local part; async collective outputs are waited on first), its layout, and a recorder that splits
autograd's saved tensors by region ("embed", "layer", "head") with the CUDA semantics of
tests/measure/saved_tensors.py. Used by tests/measure/tensor_parallel.py.
"""

from __future__ import annotations

from collections import Counter

import torch

from tests.measure.saved_tensors import _tensors

# ---------------------------------------------------------------------------------------------------------------
# Local tensors
# ---------------------------------------------------------------------------------------------------------------

def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor holding this rank's bytes: a DTensor's local shard, an async collective's waited output."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    for _ in range(8):
        if isinstance(t, DTensor):
            t = t._local_tensor
        elif isinstance(t, AsyncCollectiveTensor):
            t = t.trigger_wait()
        else:
            return t
    return t


def _layout(t):
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        return {"placements": [str(p) for p in t.placements], "global_shape": list(t.shape)}
    return None


def _nbytes(t: torch.Tensor) -> int:
    t = local_tensor(t)
    return t.numel() * t.element_size()


# ---------------------------------------------------------------------------------------------------------------
# Saved-tensor recorder (DTensor-aware; same regions and semantics as saved_tensors._Recorder)
# ---------------------------------------------------------------------------------------------------------------

class _Tally(Counter):
    """Counter of bytes per region; increments made outside _Recorder.add (gpu_semantics' fp32 logsumexp) are
    logged as listing entries too."""

    def __setitem__(self, key, value):
        rec = self.__dict__.get("rec")
        if rec is not None and not rec._adding:
            delta = value - self.get(key, 0)
            if delta:
                rec._extra(key, delta)
        super().__setitem__(key, value)


class _Recorder:
    def __init__(self, model, listing=False):
        self.params = {local_tensor(p).untyped_storage().data_ptr() for p in model.parameters()}
        self.seen, self.alive, self.entries = {}, [], []
        self.by_region = _Tally()
        self.by_region.rec = self
        self.region, self.paused, self.checkpointing = "embed", False, False
        self.listing, self._adding, self.stack, self.op = listing, False, [], None

    def _module(self):
        return self.stack[-1] if self.stack else ""

    def add(self, t: torch.Tensor, nbytes: int = None):
        local = local_tensor(t)
        storage = local.untyped_storage()
        ptr = storage.data_ptr()
        if self.paused or (self.checkpointing and self.region == "layer") or ptr in self.params or not storage.nbytes():
            return
        if ptr in self.seen:
            if self.listing:
                self.entries[self.seen[ptr]]["saves"] += 1
            return
        n = storage.nbytes() if nbytes is None else nbytes
        self.seen[ptr] = len(self.entries)
        self.alive.append(t)   # a freed storage's address could be reused and wrongly deduplicated
        self._adding = True
        self.by_region[self.region] += n
        self._adding = False
        self.entries.append({
            "region": self.region, "module": self._module(), "op": self.op, "shape": list(local.shape),
            "dtype": str(local.dtype).replace("torch.", ""), "bytes": n, "layout": _layout(t), "saves": 1,
            "nodes": [], "ptr": ptr,
        })

    def _extra(self, region, n):
        self.entries.append({"region": region, "module": self._module(), "op": "sdpa (CUDA flash logsumexp, fp32)",
                             "shape": None, "dtype": "float32", "bytes": n, "layout": None, "saves": 1,
                             "nodes": ["(no CPU tensor: counted as the CUDA kernel saves it)"], "ptr": None})

    def pack(self, t):
        self.add(t)
        return t

    def attribute_nodes(self, root):
        """Walk the autograd graph from `root` and name, per recorded storage, the nodes that saved it."""
        by_ptr = {e["ptr"]: e for e in self.entries if e["ptr"] is not None}
        seen, todo = set(), [root]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            todo.extend(f for f, _ in node.next_functions)
            names = [a for a in dir(node) if a.startswith("_saved_")]
            values = []
            for a in names:
                try:
                    values.append((a, getattr(node, a)))
                except Exception:  # noqa: BLE001 - freed / non-tensor saved values
                    pass
            if not names and hasattr(node, "saved_tensors"):
                try:
                    values.extend(("saved_tensors", v) for v in node.saved_tensors)
                except Exception:  # noqa: BLE001
                    pass
            for a, v in values:
                for t in _tensors(v):
                    try:
                        e = by_ptr.get(local_tensor(t).untyped_storage().data_ptr())
                    except Exception:  # noqa: BLE001
                        e = None
                    if e is not None:
                        tag = f"{node.name()}.{a.removeprefix('_saved_')}"
                        if tag not in e["nodes"]:
                            e["nodes"].append(tag)


class _OpNames(torch.overrides.TorchFunctionMode):
    """Remembers the torch-level function running, to name what the pack hook sees."""

    def __init__(self, rec):
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        outer, self.rec.op = self.rec.op, getattr(func, "__name__", str(func))
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.rec.op = outer
