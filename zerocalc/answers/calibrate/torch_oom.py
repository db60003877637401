"""The CUDA out-of-memory message of PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp)."""

from __future__ import annotations

import re
from typing import Optional

from ...units import format_bytes
from .measurement import BINARY, CalibrationError, Measurement
from .phase import PHASE_WORDS, failed_phase
from .sizes import decimal_places, half_unit, to_bytes


def _oom_size_re(name: str) -> str:
    return rf"(?P<{name}>[0-9]++(?:\.[0-9]++)?) (?P<{name}_unit>bytes|KiB|MiB|GiB)"   # possessive: a space follows


_ANY_SIZE = r"[0-9]++(?:\.[0-9]++)? (?:bytes|KiB|MiB|GiB)"
# c10/cuda/CUDACachingAllocator.cpp (torch >= 2.1): "CUDA out of memory. Tried to allocate X. GPU n has a total
# capacity of X of which X is free. " + proc_info ("Process p has X memory in use. " per process, then "Including
# non-PyTorch memory, this process has X memory in use. ") + allowed_info ("X allowed; ") + "Of the allocated memory X
# is allocated by PyTorch, " + private_pool_msg ("with X allocated in private pools (e.g., CUDA Graphs), ") + "and X
# is reserved by PyTorch but unallocated."
_OOM_NEW = re.compile(
    rf"out of memory\. Tried to allocate {_oom_size_re('ask')}\. (?:GPU|Device) (?P<gpu>[0-9]+) has a total "
    rf"capac(?:i)?ty of {_oom_size_re('total')} of which {_oom_size_re('free')} ?is free\. "
    rf"(?:Process [0-9]+ has {_ANY_SIZE} memory in use\. )*"
    rf"(?:Including non-PyTorch memory, this process has {_oom_size_re('process')} memory in use\. )?"
    rf"(?:{_ANY_SIZE} allowed; )?Of the allocated memory {_oom_size_re('allocated')} is allocated by PyTorch, "
    rf"(?:with {_oom_size_re('private')} allocated in private pools \(e\.g\., CUDA Graphs\), )?"
    rf"and {_oom_size_re('unallocated')} is reserved by PyTorch but unallocated", re.ASCII)
# The message before torch 2.1: "Tried to allocate X (GPU n; X total capacity; X already allocated; X free; [X allowed;]
# X reserved in total by PyTorch)".
_OOM_OLD = re.compile(
    rf"out of memory\. Tried to allocate {_oom_size_re('ask')} \(GPU (?P<gpu>[0-9]+); {_oom_size_re('total')} total "
    rf"capacity; {_oom_size_re('allocated')} already allocated; {_oom_size_re('free')} free; (?:{_ANY_SIZE} "
    rf"allowed; )?{_oom_size_re('reserved')} reserved in total by PyTorch\)", re.ASCII)


def _oom_get(m, name):
    return (m.group(name), m.group(name + "_unit")) if m.group(name) else None


def _oom_size(number, unit) -> int:
    return to_bytes(number, "B" if unit == "bytes" else unit)


def _oom_tol(number, unit) -> int:
    return 0 if unit == "bytes" else half_unit(decimal_places(number), BINARY[unit.upper()])


def read_torch_oom(text: str) -> Optional[Measurement]:
    if "out of memory" not in text:
        return None
    try:
        return _read_oom(text)
    except CalibrationError as err:
        return Measurement(source_format="torch_oom", notes=(f"torch_oom: skipped the message: not {err.allowed}",))


def _read_oom(text: str) -> Optional[Measurement]:
    m = _OOM_NEW.search(text)
    if m:
        allocated, private, unallocated = _oom_get(m, "allocated"), _oom_get(m, "private"), _oom_get(m, "unallocated")
        process, free, total = _oom_get(m, "process"), _oom_get(m, "free"), _oom_get(m, "total")
        alloc = _oom_size(*allocated) + (_oom_size(*private) if private else 0)
        reserved = alloc + _oom_size(*unallocated)
        total_b = _oom_size(*total)
        used = _oom_size(*process) if process else max(0, total_b - _oom_size(*free))
        tol = {"allocated_peak_bytes": _oom_tol(*allocated) + (_oom_tol(*private) if private else 0),
               "nvidia_smi_used_bytes": _oom_tol(*process) if process else _oom_tol(*free) + _oom_tol(*total),
               "usable_total_bytes": _oom_tol(*total)}
        tol["reserved_peak_bytes"] = tol["allocated_peak_bytes"] + _oom_tol(*unallocated)
        used_note = ("this process's own use, non-PyTorch memory included (the CUDA context too)" if process else
                     "total capacity - free: the whole device, every process on it")
    else:
        m = _OOM_OLD.search(text)
        if not m:
            return None
        alloc, reserved = _oom_size(*_oom_get(m, "allocated")), _oom_size(*_oom_get(m, "reserved"))
        total_b, used = _oom_size(*_oom_get(m, "total")), None
        tol = {"allocated_peak_bytes": _oom_tol(*_oom_get(m, "allocated")),
               "reserved_peak_bytes": _oom_tol(*_oom_get(m, "reserved")),
               "usable_total_bytes": _oom_tol(*_oom_get(m, "total"))}
        used_note = None
    notes = [f"torch_oom: values at the failed allocation on GPU {m.group('gpu')} (c10/cuda/CUDACachingAllocator.cpp): "
             f"the step needed at least {format_bytes(_oom_size(*_oom_get(m, 'ask')), 'binary')} more than it could "
             "get, so its real peak is higher than these"]
    if used_note:
        notes.append(f"torch_oom: the used figure is {used_note}")
    where = failed_phase(text)
    if where:
        notes.append(f"torch_oom: the traceback's frame {where[1]!r} puts the failure in {PHASE_WORDS[where[0]]}")
    return Measurement(alloc, reserved, used, usable_total_bytes=total_b, source_format="torch_oom", notes=tuple(notes),
                       tolerance_bytes={k: v for k, v in tol.items() if v},
                       failed_request_bytes=_oom_size(*_oom_get(m, "ask")),
                       failed_phase=where[0] if where else None, failed_frame=where[1] if where else None)
