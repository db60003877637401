"""Measure the loss end's live bytes on the CPU: torchtune's chunked cross entropy, Hugging Face's ForCausalLMLoss
and torchtitan's CrossEntropyLoss / ChunkedLossWrapper, run from their own code (test-only; needs torch,
transformers for the Hugging Face path, spmd-types for torchtitan's). Findings and formulas: /work/notes/loss_report.md.

Results (bytes per T x V element, w the logits' width, n chunks; inputs excluded; T x h and V x h terms aside):
- HF ForCausalLMLoss: forward peak w + 4 + 4 (w = 4: 8); saved 4 (fp32 log-softmax); backward peak 12 (the saved
  log-softmax, nll_loss_backward's fp32 gradient, _log_softmax_backward_data's fp32 result), + w when the caller
  still holds the logits (the Trainer does not: compute_loss returns only the loss).
- torchtune chunked, eager: forward peak w + 4 + 4/n (w = 4: w + 4); saved 4 (every chunk's fp32 log-softmax
  stays: chunking does not shrink what is saved); backward peak 4 + 8/n (autograd runs every chunk's loss backward
  before any projection backward, so the bf16 chunk gradients, w in all, pile up behind it).
- torchtitan CrossEntropyLoss: as HF with the logits dropped. ChunkedLossWrapper: the whole loss end, its backward
  included, runs in forward, one chunk at a time: peak (w + 12) / n, nothing T x V saved.

What runs
- torchtune 0.6.1 (the unpacked wheel at /work/src/torchtune, or TORCHTUNE_LOSS_FILE): the loss is
  torchtune/modules/loss/ce_chunked_output_loss.py CEWithChunkedOutputLoss, loaded from that file by path
  (importlib), unchanged; `import torchtune` itself fails with torchao 0.18 (torchtune/modules/common_utils.py:19
  imports torchao.dtypes.nf4tensor, gone there), and the loss file needs only torch. Its forward (lines 66-83):
  labels.chunk(n, dim=1) and reshape, each logits chunk reshape(-1, V), then per chunk compute_cross_entropy
  (line 41-43): F.cross_entropy(logits.float(), labels, reduction="sum"), summed and divided by the count of
  unmasked labels. The model side is TransformerDecoder.chunked_output (torchtune/modules/transformer.py:482-501,
  called from unembed, line 655-656 when set_num_output_chunks was called, recipes/full_finetune_single_device.py
  :296-298): `[self.output(chunk) for chunk in last_hidden_state.chunk(self.num_output_chunks, dim=1)]` with
  self.output an nn.Linear(h, V, bias=False) in the model's dtype, so the chunks are in that dtype (no .float()
  there; the unchunked path, line 659, upcasts the whole output). That list comprehension is the one line not
  imported (the module's package does not import); it runs here as written on a torch.nn.Linear. The step
  follows the recipe's _loss_step (full_finetune_single_device.py:632-655): labels shifted by hstack with an
  ignore column, `loss = self._loss_fn(logits, labels)`, then `del logits` before backward.
- Hugging Face: transformers' own ForCausalLMLoss (transformers/loss/loss_utils.py: logits.float(), pad and shift
  the labels, view(-1, V), fixed_cross_entropy -> F.cross_entropy, reduction "sum" / num_items_in_batch or "mean")
  on the output of a bias-free nn.Linear, as LlamaForCausalLM.forward calls it. keep_logits=True keeps the logits
  referenced through backward (a loop that holds the model output); Trainer.compute_loss (trainer.py) returns
  only the loss, so under the Trainer the logits die with its `outputs` local before backward.

How it is measured
- Live bytes: a TorchDispatchMode sees every aten op's outputs; each new storage (deduplicated by its data_ptr;
  an output sharing a storage with one of the op's inputs, a view or an in-place result, is not new) adds its nbytes, and weakref.finalize on the storage subtracts them
  when it is freed. Everything made before the mode (hidden states, head weight, labels) is not counted, so the
  numbers are above the inputs. Tensors a kernel allocates and frees inside one aten op are invisible (none
  here of T x V size on the CPU kernels used: log_softmax, nll_loss, _log_softmax_backward_data,
  nll_loss_backward, _to_copy, mm).
- Saved tensors: torch.autograd.graph.saved_tensors_hooks around the forward; the pack hook records each saved
  tensor's storage once (by data_ptr), so a view of a saved tensor or a tensor saved twice counts once.
- Numbers returned (bytes): saved (every saved storage, the inputs excepted, listed by dtype and shape),
  forward_peak (most live during the output projection and the loss's forward), after_forward (live when the step
  has dropped the logits, before backward), loss_backward_peak (most live from the start of backward until the
  gradient of the last logits chunk is ready, i.e. before any output-projection backward runs), backward_peak
  (the whole backward, the projection's grad_input and grad_weight included), and the same less after_forward's
  start where useful. Each call runs in a few seconds for T=256, V=4096, h=64.

Run as a script: python -m tests.measure.loss_peaks [T V h [dtype]] prints JSON for torchtune (n = 1, 2, 8, 16) and\nHugging Face (logits dropped before backward, and kept).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import weakref

TORCHTUNE_LOSS_FILE = os.environ.get(
    "TORCHTUNE_LOSS_FILE", "/work/src/torchtune/torchtune/modules/loss/ce_chunked_output_loss.py")


def _torch():
    import torch

    return torch


def _dtype(name):
    torch = _torch()
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def load_torchtune_loss(path: str = TORCHTUNE_LOSS_FILE):
    """torchtune's CEWithChunkedOutputLoss class from its own source file (no torchtune package import)."""
    spec = importlib.util.spec_from_file_location("torchtune_ce_chunked_output_loss", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CEWithChunkedOutputLoss


def _input_ptrs(args, kwargs):
    from torch.utils._pytree import tree_leaves

    torch = _torch()
    return {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)}


class LiveTracker:
    """A TorchDispatchMode-based counter of live tensor storage bytes (see the module docstring)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker._see(out, _input_ptrs(args, kwargs))
                return out

        self.mode = _Mode()
        self.live = 0
        self.peak = 0
        self._ptrs = {}
        self.marks = {}

    def _see(self, out, inputs=frozenset()):
        torch = _torch()
        if isinstance(out, torch.Tensor):
            st = out.untyped_storage()
            ptr, n = st.data_ptr(), st.nbytes()
            if n == 0 or ptr in self._ptrs or ptr in inputs:    # a view or in-place result: not new storage
                return
            self._ptrs[ptr] = n
            self.live += n
            self.peak = max(self.peak, self.live)
            weakref.finalize(st, self._free, ptr)
        elif isinstance(out, (list, tuple)):
            for o in out:
                self._see(o, inputs)

    def _free(self, ptr):
        self.live -= self._ptrs.pop(ptr, 0)

    def reset_peak(self):
        self.peak = self.live

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


class SavedRecorder:
    """saved_tensors_hooks that list each saved storage once (dtype, shape, bytes), the given inputs excepted, while
    it is alive (read at the forward's end: what stays saved for backward)."""

    def __init__(self, exclude=()):
        self.exclude = {t.untyped_storage().data_ptr() for t in exclude}
        self.items = {}

    def pack(self, t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in self.exclude and ptr not in self.items and st.nbytes():
            self.items[ptr] = (str(t.dtype).replace("torch.", ""), tuple(t.shape), st.nbytes())
            weakref.finalize(st, self.items.pop, ptr, None)     # freed (a chunk's backward ran): no longer saved
        return t

    def hooks(self):
        torch = _torch()
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    @property
    def total(self) -> int:
        return sum(n for _, _, n in self.items.values())

    def listing(self):
        out = {}
        for dt, shape, n in self.items.values():
            key = f"{dt}{list(shape)}"
            c = out.setdefault(key, [0, 0])
            c[0] += 1
            c[1] += n
        return {k: {"count": c, "bytes": b} for k, (c, b) in out.items()}


def _inputs(T, V, h, dtype, batch, seed=0):
    torch = _torch()
    torch.manual_seed(seed)
    dt = _dtype(dtype)
    assert T % batch == 0
    s = T // batch
    hidden = torch.randn(batch, s, h, dtype=dt, requires_grad=True)      # the final norm's output [b, s, h]
    head = torch.nn.Linear(h, V, bias=False).to(dt)
    labels = torch.randint(0, V, (batch, s))
    return hidden, head, labels


def _step(T, V, h, dtype, batch, forward, keep_logits=False):
    """Run forward() -> (loss, logits, hooks_on) under the tracker; returns the measured numbers."""
    torch = _torch()
    torch.set_num_threads(1)
    hidden, head, labels = _inputs(T, V, h, dtype, batch)
    rec = SavedRecorder(exclude=(hidden, head.weight, labels))
    done = {}
    with LiveTracker() as tr:
        with rec.hooks():
            loss, logits = forward(hidden, head, labels)
        forward_peak = tr.peak
        saved, saved_by_tensor = rec.total, rec.listing()
        chunks = [] if logits is None else logits if isinstance(logits, list) else [logits]
        count = len(chunks)

        def mark(i):
            def hook(g):
                done[i] = True
                if len(done) == count:
                    tr.marks["loss_backward_peak"] = tr.peak
                return g
            return hook

        for i in range(count):
            chunks[i].register_hook(mark(i))
        del chunks
        if not keep_logits:
            del logits
        after_forward = tr.live
        tr.reset_peak()
        loss.backward()
        backward_peak = tr.peak
        del loss
    assert len(done) == count
    return {"T": T, "V": V, "h": h, "dtype": dtype, "batch": batch,
            "saved": saved, "saved_by_tensor": saved_by_tensor,
            "forward_peak": forward_peak, "after_forward": after_forward,
            "loss_backward_peak": tr.marks.get("loss_backward_peak", backward_peak), "backward_peak": backward_peak,
            "TV": T * V}


def torchtune_chunked(T=256, V=4096, h=64, dtype="bf16", num_output_chunks=8, batch=2):
    """torchtune's TransformerDecoder.chunked_output + CEWithChunkedOutputLoss, as its recipes' _loss_step runs
    them (module docstring), eager. (compile=True recipes wrap compute_cross_entropy in torch.compile,
    torchtune/training/_compile.py:76-79; Inductor's kernels allocate outside the dispatcher, so this tracker
    cannot see them: not measured here.)"""
    torch = _torch()
    Loss = load_torchtune_loss()
    loss_fn = Loss(num_output_chunks=num_output_chunks)
    ignore = torch.full((batch, 1), loss_fn.ignore_index)

    def forward(hidden, head, labels):
        # transformer.py:498-501 chunked_output
        logits = [head(chunk) for chunk in hidden.chunk(num_output_chunks, dim=1)]
        # full_finetune_single_device.py:641-643 the label shift
        labels = torch.hstack((labels[..., 1:], ignore))
        return loss_fn(logits, labels), logits

    out = _step(T, V, h, dtype, batch, forward)
    out.update(impl="torchtune CEWithChunkedOutputLoss", num_output_chunks=num_output_chunks)
    return out


def huggingface(T=256, V=4096, h=64, dtype="bf16", batch=2, keep_logits=False, num_items=True):
    """transformers' ForCausalLMLoss on an nn.Linear head's logits (module docstring)."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    torch = _torch()

    def forward(hidden, head, labels):
        logits = head(hidden)
        n = torch.tensor(labels.numel()) if num_items else None
        return ForCausalLMLoss(logits, labels, vocab_size=V, num_items_in_batch=n), logits

    out = _step(T, V, h, dtype, batch, forward, keep_logits=keep_logits)
    out.update(impl="transformers ForCausalLMLoss", keep_logits=keep_logits)
    return out


TORCHTITAN_SRC = os.environ.get("TORCHTITAN_SRC", "/work/src/torchtitan")


def load_torchtitan_loss(src: str = TORCHTITAN_SRC):
    """torchtitan 0.3.0's torchtitan/components/loss.py, imported from the unpacked wheel. It needs spmd_types
    (pip install --no-deps spmd-types==0.3.1); torchtitan/config/manager.py imports tyro for its command line,
    which the loss never uses: when tyro is absent a placeholder module stands in for it."""
    import types

    if src not in sys.path:
        sys.path.insert(0, src)
    try:
        import tyro  # noqa: F401
    except ImportError:
        class _Any:
            def __getattr__(self, k):
                if k.startswith("__"):
                    raise AttributeError(k)
                return _Any()

            def __call__(self, *a, **k):
                return a[0] if len(a) == 1 and callable(a[0]) and not k else _Any()

            def __getitem__(self, k):
                return _Any()

            def __or__(self, other):
                return _Any()

            def __mro_entries__(self, bases):
                return (object,)

        class _Stub(types.ModuleType):
            def __getattr__(self, k):
                if k.startswith("__"):
                    raise AttributeError(k)
                return _Any()

        for name in ("tyro", "tyro.conf", "tyro.constructors", "tyro.extras"):
            sys.modules[name] = _Stub(name)
    import torchtitan.components.loss as loss_module

    return loss_module


def torchtitan_ce(T=256, V=4096, h=64, dtype="bf16", batch=2):
    """torchtitan's CrossEntropyLoss (components/loss.py cross_entropy_loss: pred.flatten(0, 1).float(),
    F.cross_entropy(reduction="sum"), then / global_valid_tokens in __call__), eager, on the decoder's lm_head output
    (models/common/decoder.py forward: lm_head(h), no .float()); trainer.py _forward_backward_body drops pred
    (`del pred`) before loss.backward()."""
    L = load_torchtitan_loss()
    torch = _torch()
    loss_fn = L.CrossEntropyLoss.Config().build(compile_config=None)

    def forward(hidden, head, labels):
        logits = head(hidden)
        loss, _ = loss_fn(logits, labels, torch.tensor(float(labels.numel())))
        return loss, logits

    out = _step(T, V, h, dtype, batch, forward)
    out.update(impl="torchtitan CrossEntropyLoss")
    return out


def torchtitan_chunked(T=256, V=4096, h=64, dtype="bf16", num_chunks=8, batch=2):
    """torchtitan's ChunkedLossWrapper (components/loss.py:567-835, default num_chunks 8, the llama3 / deepseek_v3
    configs' loss): the model skips its lm_head and returns the final norm's output; the wrapper splits it into
    contiguous detached chunks, runs lm_head + CrossEntropyLoss + chunk_loss.backward() per chunk inside the
    forward, gathers the chunks' input gradients in an fp32 GradAccumulator and returns a loss whose backward hands
    that gradient (cast to the model dtype) to the decoder. Here `pred` is the hidden-states leaf itself; the
    whole loss end runs in 'forward', so backward is only the hand-over."""
    L = load_torchtitan_loss()
    torch = _torch()
    wrapper = L.ChunkedLossWrapper.Config(num_chunks=num_chunks).build(compile_config=None)

    def forward(hidden, head, labels):
        wrapper.set_lm_head(head)
        loss, _ = wrapper(hidden, labels, torch.tensor(float(labels.numel())))
        return loss, None

    out = _step(T, V, h, dtype, batch, forward)
    out.update(impl="torchtitan ChunkedLossWrapper", num_output_chunks=num_chunks)
    return out


def per_tv(r):
    """The numbers as bytes per T x V element (the formulas' coefficients), rounded."""
    return {k: round(r[k] / r["TV"], 4) for k in
            ("saved", "forward_peak", "after_forward", "loss_backward_peak", "backward_peak")}


def main(argv):
    flags = [a for a in argv if a.startswith("--")]
    argv = [a for a in argv if not a.startswith("--")]
    T, V, h = (int(x) for x in argv[:3]) if len(argv) >= 3 else (256, 4096, 64)
    dtype = argv[3] if len(argv) >= 4 else "bf16"
    argv = flags
    rows = []
    for n in (1, 2, 8, 16):
        rows.append(torchtune_chunked(T, V, h, dtype, num_output_chunks=n))
    rows.append(huggingface(T, V, h, dtype))
    rows.append(huggingface(T, V, h, dtype, keep_logits=True))
    if "--torchtitan" in argv:
        rows.append(torchtitan_ce(T, V, h, dtype))
        for n in (1, 8):
            rows.append(torchtitan_chunked(T, V, h, dtype, num_chunks=n))
    for r in rows:
        r["per_TV"] = per_tv(r)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
