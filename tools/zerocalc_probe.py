#!/usr/bin/env python3
"""zerocalc probe: record GPU memory peaks per phase of a training step and print one line to paste into zerocalc's
calibration (zerocalc.answers.calibrate.parse reads it).

Copy this one file next to your training script; it needs only torch, imported when a probe starts:

    from zerocalc_probe import Probe

    probe = Probe()                           # the current CUDA device; rank from torch.distributed if initialised
    for step, batch in enumerate(loader):
        with probe.phase("forward"):
            loss = model(**batch).loss
        with probe.phase("backward"):
            loss.backward()                   # DeepSpeed: engine.backward(loss)
        with probe.phase("optimizer_step"):
            optimizer.step()                  # DeepSpeed: engine.step()
            optimizer.zero_grad(set_to_none=True)
        if step == 3:                         # a few steps: the first optimizer step creates its state
            probe.report()                    # prints: zerocalc-probe v1 gpu=... total=... forward.alloc=... ...
            break

Each rank prints its own line; paste them all (zerocalc takes the largest). Name the phases forward, backward and
optimizer_step to have each compared with zerocalc's phase of that name.

What it records, per phase (the largest over the steps): torch.cuda.max_memory_allocated (live tensors) and
max_memory_reserved (the caching allocator's segments), with torch.cuda.reset_peak_memory_stats at the start of
each phase; and total - free from torch.cuda.mem_get_info at the phase's end: the whole device as the driver (and
nvidia-smi) sees it, CUDA context and other processes included. It resets PyTorch's peak statistics: code of yours
that reads them sees per-phase peaks.

Without CUDA it records nothing and says so once; `python zerocalc_probe.py --fake` (or Probe(fake=True)) prints
a line from made-up numbers, to try the paste.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager

FORMAT_VERSION = 1
PREFIX = f"zerocalc-probe v{FORMAT_VERSION}"
PHASE_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}\Z")
GIB = 2**30

# Made-up peaks for the dry run: (allocated, reserved) per phase, the driver's view adds a 1 GiB context.
FAKE_PEAKS = {
    "forward": (60 * GIB + 123_456_768, 64 * GIB),
    "backward": (66 * GIB + 987_654_144, 70 * GIB + 2**21),
    "optimizer_step": (31 * GIB + 555_745_280, 70 * GIB + 2**21),
}
FAKE_TOTAL = 84_943_257_600          # an H100 80GB HBM3 as mem_get_info totals it: 81,008 MiB (nvidia-smi: 81,559)
FAKE_GPU = "fake GPU (dry run)"
FAKE_CONTEXT = GIB


def format_line(gpu: str, total: int, phases: dict, rank=None, steps=None) -> str:
    """The probe's one line. `phases`: name -> {"alloc": bytes, "reserved": bytes, "driver_used": bytes} (any
    subset). Pure: no torch, so it can be checked anywhere."""
    gpu = " ".join(str(gpu).replace("=", "-").split()) or "unknown"
    parts = [PREFIX, f"gpu={gpu}", f"total={int(total)}"]
    if rank is not None:
        parts.append(f"rank={int(rank)}")
    if steps is not None:
        parts.append(f"steps={int(steps)}")
    peaks = {"alloc": [], "reserved": [], "driver_used": []}
    for name, got in phases.items():
        if not PHASE_NAME.match(name):
            raise ValueError(f"phase name {name!r}: use letters, digits, '_' or '-' (1 to 64 characters)")
        for key in ("alloc", "reserved", "driver_used"):
            if got.get(key) is not None:
                parts.append(f"{name}.{key}={int(got[key])}")
                peaks[key].append(int(got[key]))
    parts += [f"{key}={max(values)}" for key, values in peaks.items() if values]
    return " ".join(parts)


class _Torch:
    """The real backend: torch.cuda on one device. torch is imported here, never at module import."""

    def __init__(self, device=None):
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available")
        self.torch = torch
        self.device = torch.cuda.current_device() if device is None else torch.device(device)

    def name(self) -> str:
        return self.torch.cuda.get_device_name(self.device)

    def reset(self):
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self):
        cuda = self.torch.cuda
        free, total = cuda.mem_get_info(self.device)
        return cuda.max_memory_allocated(self.device), cuda.max_memory_reserved(self.device), total - free, total

    def rank(self):
        dist = getattr(self.torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank()
        return None


class _Fake:
    """The dry-run backend: FAKE_PEAKS for the phase being recorded (others get the forward numbers)."""

    def __init__(self, peaks=None):
        self.table = dict(FAKE_PEAKS if peaks is None else peaks)
        self.current = None

    def name(self) -> str:
        return FAKE_GPU

    def reset(self):
        pass

    def enter(self, phase):
        self.current = phase

    def peaks(self):
        alloc, reserved = self.table.get(self.current, next(iter(self.table.values())))
        return alloc, reserved, reserved + FAKE_CONTEXT, FAKE_TOTAL

    def rank(self):
        return None


class Probe:
    """Per-phase memory peaks of one GPU. Use `with probe.phase(name):` around each phase of the step, then
    `probe.report()` (prints the line) or `probe.line()` (returns it)."""

    def __init__(self, device=None, fake: bool = False, rank=None, fake_peaks=None, quiet: bool = False):
        self.phases = {}
        self.steps = 0
        self.error = None
        self.quiet = quiet
        try:
            self.backend = _Fake(fake_peaks) if fake else _Torch(device)
        except Exception as exc:          # no torch, no CUDA: record nothing, never break the training run
            self.backend, self.error = None, f"{type(exc).__name__}: {exc}"
            self._say(f"zerocalc-probe: nothing is recorded ({self.error}); Probe(fake=True) gives a dry run")
        self.rank = rank if rank is not None or self.backend is None else self.backend.rank()
        self.gpu = self.backend.name() if self.backend else None
        self.total = None

    def _say(self, text):
        if not self.quiet:
            print(text, file=sys.stderr)

    @property
    def active(self) -> bool:
        return self.backend is not None

    @contextmanager
    def phase(self, name: str):
        """Record the peaks of the code inside the block under `name` (the largest over repeated blocks)."""
        if not PHASE_NAME.match(name):
            raise ValueError(f"phase name {name!r}: use letters, digits, '_' or '-' (1 to 64 characters)")
        if self.backend is None:
            yield
            return
        if hasattr(self.backend, "enter"):
            self.backend.enter(name)
        self.backend.reset()
        try:
            yield
        finally:                          # also after an out-of-memory error: the peak reached is the news
            alloc, reserved, used, total = self.backend.peaks()
            got = self.phases.setdefault(name, {"alloc": 0, "reserved": 0, "driver_used": 0})
            got["alloc"], got["reserved"] = max(got["alloc"], alloc), max(got["reserved"], reserved)
            got["driver_used"] = max(got["driver_used"], used)
            self.total = total
            if name == next(iter(self.phases)):
                self.steps += 1

    def line(self):
        """The line to paste, or None when nothing was recorded."""
        if self.backend is None or not self.phases:
            return None
        return format_line(self.gpu, self.total, self.phases, self.rank, self.steps)

    def report(self, file=None):
        """Print the line (to stdout, or `file`) and return it; without a recording, say why and return None."""
        text = self.line()
        if text is None:
            self._say("zerocalc-probe: nothing recorded" + (f" ({self.error})" if self.error else
                                                            ": wrap each phase in `with probe.phase(name):`"))
            return None
        print(text, file=file or sys.stdout, flush=True)
        return text


def _demo() -> Probe:
    """A tiny step on the GPU: a matmul forward, its backward and an Adam step."""
    import torch
    probe = Probe()
    if not probe.active:
        return probe
    model = torch.nn.Linear(4096, 4096, device="cuda")
    opt = torch.optim.Adam(model.parameters())
    for _ in range(3):
        x = torch.randn(1024, 4096, device="cuda")
        with probe.phase("forward"):
            loss = model(x).square().mean()
        with probe.phase("backward"):
            loss.backward()
        with probe.phase("optimizer_step"):
            opt.step()
            opt.zero_grad(set_to_none=True)
    return probe


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args and args[0] == "--fake":
        probe = Probe(fake=True)
        for _ in range(2):
            for name in FAKE_PEAKS:
                with probe.phase(name):
                    pass
        probe.report()
        return 0
    probe = _demo()
    return 0 if probe.report() else 1


if __name__ == "__main__":
    sys.exit(main())
