"""Measure the RL frameworks' log-probability and entropy ends on the CPU, from the frameworks' own files (test-only;
needs torch). What the numbers pin: zerocalc/rl/logprobs.py's rows and zerocalc/step/losses.py's, through
tests/fixtures/rl/logprob_peaks.json (tests/test_rl_logprobs.py re-measures when the sources are present).

What runs
- verl 0.9.1's utils/torch_functional.py (entropy_from_logits, entropy_from_logits_with_chunking,
  logprobs_from_logits_v2: the path without flash-attn), loaded from the unpacked wheel by path (VERL_SRC, default
  /tmp/x/src_verl: `pip download --no-deps verl==0.9.1` and unzip). Its module-level imports that these functions
  never call are stubbed (tensordict.TensorDict, verl.utils.device); the functions run unchanged.
- trl 1.16.0's trainer/utils.py selective_log_softmax and entropy_from_logits are the same row loop and chunked
  log-softmax; TRL runs its fused LM head on CUDA (losses.py "trl-fused": Triton, read from the code).
- CUDA autocast, as verl's forward_step runs them (torch.autocast(device_type="cuda", dtype=bf16)): the CPU has
  other autocast lists, so CUDAAutocast below applies the CUDA ones to the ops these functions call (torch
  aten/src/ATen/autocast_mode.cpp @008ec6b1 AutocastCUDA: logsumexp in AT_FORALL_FP32, a cast to fp32 first;
  softmax, log_softmax and sum in AT_FORALL_FP32_SET_OPT_DTYPE, called with dtype=float32, which for a bf16 input
  copies it to fp32 before the kernel: SoftMax.cpp softmax only fuses the cast for Half on CUDA).
- torch.compile (verl's FSDPEngineConfig use_torch_compile: true compiles entropy_from_logits, dynamic=True): the
  Inductor code is read back (run_and_get_code) and every buffer it allocates is listed; a T x V one would show
  as a two-dimensional empty_strided.

How it is measured: tests/measure/loss_peaks.py's LiveTracker (every new storage until it is freed) and
SavedRecorder (saved-tensor hooks); the logits are made before the tracker, so the figures are above them.

Run as a script: python -m tests.measure.rl_logprobs [T V] prints the JSON the fixture holds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types

VERL_SRC = os.environ.get("VERL_SRC", "/tmp/x/src_verl")
VERL_FILE = "verl/utils/torch_functional.py"


def verl_path(root: str = VERL_SRC) -> str:
    return os.path.join(root, VERL_FILE)


def load_verl_functional(path: str = None):
    """verl's utils/torch_functional.py as a module, its unused imports stubbed (module docstring)."""
    path = path or verl_path()
    stubs = {"tensordict": {"TensorDict": type("TensorDict", (), {})},
             "verl": {}, "verl.utils": {},
             "verl.utils.device": {"get_device_name": lambda: "cpu", "get_torch_device": lambda: None}}
    saved = {name: sys.modules.get(name) for name in stubs}
    try:
        for name, attrs in stubs.items():
            if name in sys.modules and name != "verl.utils.device":
                continue
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
        spec = importlib.util.spec_from_file_location("verl_torch_functional", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


def cuda_autocast():
    """A TorchFunctionMode applying CUDA autocast's fp32 policies to the ops the log-prob paths call (see above)."""
    import torch
    from torch.overrides import TorchFunctionMode

    low = (torch.bfloat16, torch.float16)
    set_dtype = {"softmax", "log_softmax", "sum"}
    to_fp32 = {"logsumexp"}

    class CUDAAutocast(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.dtype in low:
                if name in set_dtype and kwargs.get("dtype") is None:
                    kwargs["dtype"] = torch.float32
                elif name in to_fp32:
                    args = (first.float(),) + tuple(args[1:])
            return func(*args, **kwargs)

    return CUDAAutocast()


def _logits(T, V, dtype="bf16", requires_grad=False, seed=0):
    import torch
    torch.manual_seed(seed)
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    logits = torch.randn(T, V, dtype=dt, requires_grad=requires_grad)
    labels = torch.randint(0, V, (T,))
    return logits, labels


def nograd_peak(fn, T, V, dtype="bf16", autocast=True) -> int:
    """The most bytes live above the logits while fn(logits, labels) runs under no_grad (and CUDA autocast)."""
    import contextlib

    import torch

    from tests.measure.loss_peaks import LiveTracker
    torch.set_num_threads(1)
    logits, labels = _logits(T, V, dtype)
    mode = cuda_autocast() if autocast else contextlib.nullcontext()
    with torch.no_grad(), mode, LiveTracker() as tracker:
        out = fn(logits, labels)
        del out
    return tracker.peak


def train_figures(fn, T, V, dtype="bf16", autocast=True) -> dict:
    """fn(logits, labels) -> per-token log-probs, with gradients: what it saves above the logits, its forward peak,
    and its backward's peak (the log-probs' sum as the loss), all above the logits."""
    import contextlib

    import torch

    from tests.measure.loss_peaks import LiveTracker, SavedRecorder
    torch.set_num_threads(1)
    leaf, labels = _logits(T, V, dtype, requires_grad=True)
    rec = SavedRecorder(exclude=(leaf, labels))
    mode = cuda_autocast() if autocast else contextlib.nullcontext()
    with LiveTracker() as tracker:
        with rec.hooks(), mode:
            out = fn(leaf, labels)
        forward_peak, saved = tracker.peak, rec.total
        loss = out.float().sum()
        del out
        tracker.reset_peak()
        loss.backward()
        backward_peak = tracker.peak
    return {"saved": saved, "forward_peak": forward_peak, "backward_peak": backward_peak,
            "grad": leaf.grad.untyped_storage().nbytes()}


def compiled_buffers(fn, T, V, dtype="bf16") -> list:
    """The buffers Inductor's code for fn allocates (their sizes as written in the generated code)."""
    import re

    import torch
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    logits, _ = _logits(T, V, dtype)
    compiled = torch.compile(fn, dynamic=True)
    with torch.no_grad():
        _, codes = run_and_get_code(compiled, logits)
    found = []
    for code in codes:
        found += re.findall(r"empty_strided_cpu\(\(([^)]*)\)", code)
    return [b.strip().rstrip(",") for b in found]


def measure(T: int = 256, V: int = 4096) -> dict:
    verl = load_verl_functional()
    tv = T * V
    out = {"T": T, "V": V, "TV": tv, "sources": {"verl": "verl 0.9.1 " + VERL_FILE}}
    out["verl_entropy_eager_nograd"] = nograd_peak(lambda x, y: verl.entropy_from_logits(x), T, V)
    chunk = T // 4
    out["verl_entropy_chunked_nograd"] = {"chunk": chunk, "peak": nograd_peak(
        lambda x, y: verl.entropy_from_logits_with_chunking(x, chunk_size=chunk), T, V)}
    out["verl_logprobs_v2_nograd"] = nograd_peak(verl.logprobs_from_logits_v2, T, V)
    out["verl_logprobs_v2_train"] = train_figures(verl.logprobs_from_logits_v2, T, V)
    out["verl_entropy_compiled_buffers"] = compiled_buffers(verl.entropy_from_logits, T, V)
    return out


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(measure(*args), indent=1))
