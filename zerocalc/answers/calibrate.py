"""Calibration: read what a real run printed, and set it against the estimate.

parse(text) recognises each format below on its own (several pasted together are merged) and returns one
Measurement in exact integer bytes. The formats, and where each is defined:

- "probe": the one line tools/zerocalc_probe.py prints ("zerocalc-probe v1 gpu=... forward.alloc=..."), per-phase
  peaks from torch.cuda.max_memory_allocated / max_memory_reserved and the driver's view from mem_get_info.
- "memory_stats": torch.cuda.memory_stats() as JSON, as its printed OrderedDict, or the nested form of
  memory_stats_as_nested_dict(); keys "allocated_bytes.all.peak", "reserved_bytes.all.peak", ... (torch/cuda/memory.py
  memory_stats; the nested keys from torch/csrc/cuda/Module.cpp THCPModule_memoryStats).
- "memory_summary": the table torch.cuda.memory_summary() prints (torch/cuda/memory.py memory_summary); its sizes
  are floored by _format_size (sz //= 1024 per unit step), so each is exact to within one unit, upwards.
- "deepspeed": DeepSpeed's see_memory_usage lines "MA 1.23 GB  Max_MA 2.34 GB  CA 3.45 GB  Max_CA 4 GB"
  (deepspeed/runtime/utils.py): the values are bytes / (1024 * 1024 * 1024), so "GB" there means GiB; MA, Max_MA and
  CA are rounded to 2 decimals, Max_CA to a whole GiB (round() without digits). Also its memory_status lines
  ("current alloc=...GB (delta=...GB max=...GB) current cache=...GB (... max=...GB)"), likewise / 1024**3.
- "torch_oom": the CUDA out-of-memory message of the caching allocator (c10/cuda/CUDACachingAllocator.cpp,
  format_size: 2 decimals of bytes / KiB / MiB / GiB), current values at the failure.
- "nvidia_smi": nvidia-smi --query-gpu=memory.used,memory.total --format=csv (header "memory.used [MiB],
  memory.total [MiB]", rows "81000 MiB, 81559 MiB"; also noheader / nounits, extra columns, several GPUs), and the
  "Memory-Usage" column of the plain nvidia-smi table ("12345MiB / 81559MiB"). nvidia-smi's MiB is 2^20 bytes.
- "plain": labelled numbers such as "max_memory_allocated: 12345" (bytes) or "Peak reserved: 66.3 GiB".
  "GB" / "MB" there mean 10^9 / 10^6 bytes (zerocalc's GB) unless parse(..., gb="binary"): many scripts print
  bytes / 1024**3 and call it GB; the Measurement's notes say which reading was used.

compare(measurement, peak, workload) then sets each measured figure against the part of the estimate that it
counts, and says which Workload assumption would absorb the difference (see compare's docstring).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Dict, Optional, Tuple

from ..scenario import FieldError
from ..units import format_bytes

MAX_TEXT_CHARS = 1_000_000      # the app's upload cap; longer pastes are refused, not truncated silently
PROBE_PREFIX = "zerocalc-probe"
PROBE_VERSION = 1
FORMATS = ("probe", "memory_stats", "memory_summary", "deepspeed", "torch_oom", "nvidia_smi", "plain")
FORMAT_HELP = {
    "probe": "the line tools/zerocalc_probe.py prints (zerocalc-probe v1 ...)",
    "memory_stats": "torch.cuda.memory_stats() as JSON or printed (\"allocated_bytes.all.peak\": ...)",
    "memory_summary": "the table torch.cuda.memory_summary() prints",
    "deepspeed": "DeepSpeed see_memory_usage lines (MA ... Max_MA ... CA ... Max_CA ...)",
    "torch_oom": "a CUDA out of memory message (Tried to allocate ... is reserved by PyTorch but unallocated)",
    "nvidia_smi": "nvidia-smi --query-gpu=memory.used,memory.total --format=csv lines, or the nvidia-smi table",
    "plain": "labelled numbers (max_memory_allocated: 12345, max_memory_reserved: 70.2 GiB)",
}
QUANTITIES = ("allocated_peak_bytes", "reserved_peak_bytes", "nvidia_smi_used_bytes", "nvidia_smi_total_bytes")
BINARY = {"B": 1, "BYTES": 1, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50}
DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
GIB = 2**30
MAX_BYTES = 2**60               # no device measures more; larger numbers are typos or garbage


class CalibrationError(FieldError):
    """Text that no parser understands, or a value in it that cannot be a measurement. Field "calibration"."""

    def __init__(self, value, allowed: str = None):
        shown = value if not isinstance(value, str) or len(value) <= 80 else value[:80] + "..."
        super().__init__("calibration", shown, allowed or _formats_sentence())


def _formats_sentence(names=FORMATS) -> str:
    return "text in one of these formats: " + "; ".join(f"{n} ({FORMAT_HELP[n]})" for n in names)


@dataclass(frozen=True)
class Reading:
    """One row of a multi-row paste: a GPU of nvidia-smi, a see_memory_usage line, a probe phase or rank."""
    label: str
    allocated_peak_bytes: Optional[int] = None
    reserved_peak_bytes: Optional[int] = None
    used_bytes: Optional[int] = None
    total_bytes: Optional[int] = None


@dataclass(frozen=True)
class Measurement:
    """What a run used, in bytes (None: not in the text). Peaks are the largest over every row / line / rank given.
    per_phase (allocated) and per_phase_reserved come from the probe's line; tolerance_bytes says, per quantity,
    how far the printed rounding lets the true value lie from the one read (0 or absent: exact)."""
    allocated_peak_bytes: Optional[int] = None
    reserved_peak_bytes: Optional[int] = None
    nvidia_smi_used_bytes: Optional[int] = None
    nvidia_smi_total_bytes: Optional[int] = None
    per_phase: Dict[str, int] = field(default_factory=dict)
    per_phase_reserved: Dict[str, int] = field(default_factory=dict)
    source_format: str = ""
    notes: Tuple[str, ...] = ()
    readings: Tuple[Reading, ...] = ()
    tolerance_bytes: Dict[str, int] = field(default_factory=dict)
    gpu_name: Optional[str] = None

    def to_dict(self) -> dict:
        return {"allocated_peak_bytes": self.allocated_peak_bytes, "reserved_peak_bytes": self.reserved_peak_bytes,
                "nvidia_smi_used_bytes": self.nvidia_smi_used_bytes,
                "nvidia_smi_total_bytes": self.nvidia_smi_total_bytes, "per_phase": dict(self.per_phase),
                "per_phase_reserved": dict(self.per_phase_reserved), "source_format": self.source_format,
                "notes": list(self.notes), "readings": [asdict(r) for r in self.readings],
                "tolerance_bytes": dict(self.tolerance_bytes), "gpu_name": self.gpu_name}


# ---------------------------------------------------------------------------------------------------- sizes

_NUM = r"[0-9][0-9,_]*(?:\.[0-9]+)?"


def _scaled(number: str, scale: int) -> int:
    """Exact bytes of a printed decimal number of `scale`-byte units, rounded half-even to a whole byte."""
    raw = number.replace(",", "").replace("_", "")
    if not raw or len(raw) > 40:
        raise CalibrationError(number, "a number of at most 40 digits")
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise CalibrationError(number, "a decimal number") from None
    if not value.is_finite() or value < 0 or value.adjusted() > 20:
        raise CalibrationError(number, f"a size from 0 to {MAX_BYTES:,} bytes")
    result = int((value * scale).to_integral_value(rounding=ROUND_HALF_EVEN))
    if result > MAX_BYTES:
        raise CalibrationError(number, f"a size from 0 to {MAX_BYTES:,} bytes")
    return result


def _unit_scale(unit: str, gb: str = "decimal") -> int:
    key = (unit or "B").upper()
    if key in BINARY:
        return BINARY[key]
    if key in DECIMAL:
        return DECIMAL[key] if gb == "decimal" else 2 ** (10 * ("KMGT".index(key[0]) + 1))
    raise CalibrationError(unit, "a size unit: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB")


def _size(number: str, unit: str = "B", gb: str = "decimal") -> int:
    """Exact bytes of a printed number and unit. "GB" is 10^9 bytes unless gb="binary" (then GB, MB, KB are GiB,
    MiB, KiB)."""
    return _scaled(number, _unit_scale(unit, gb))


def _half_unit(decimals: int, scale: int) -> int:
    """The largest rounding error of a value printed to `decimals` places of `scale` bytes: half a last digit."""
    return int((Decimal(scale) / 2 / Decimal(10) ** decimals).to_integral_value(rounding=ROUND_CEILING))


def _decimals(number: str) -> int:
    return len(number.split(".", 1)[1]) if "." in number else 0


def _lines(text: str):
    return [line.rstrip("\r") for line in text.split("\n")]


# ---------------------------------------------------------------------------------------------------- probe

_PROBE_KEY = re.compile(r"(?:^|\s)([A-Za-z0-9_\-][A-Za-z0-9_.\-]*)=", re.ASCII)
_PROBE_START = re.compile(PROBE_PREFIX + r"\s+v([0-9]+)\b", re.ASCII)
PROBE_FIELDS = {"alloc": "allocated_peak_bytes", "reserved": "reserved_peak_bytes", "driver_used": "used_bytes"}


def _probe_pairs(body: str) -> Dict[str, str]:
    keys = list(_PROBE_KEY.finditer(body))
    pairs = {}
    for k, nxt in zip(keys, keys[1:] + [None]):
        pairs[k.group(1)] = body[k.end():nxt.start() if nxt else len(body)].strip()
    return pairs


def _probe_int(key: str, value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,19}", value, re.ASCII) or int(value) > MAX_BYTES:
        raise CalibrationError(f"{key}={value}", f"{key} as a whole number of bytes (the probe prints integers)")
    return int(value)


def _parse_probe(text: str) -> Optional[Measurement]:
    lines = [(m, line) for line in _lines(text) for m in [_PROBE_START.search(line)] if m]
    if not lines:
        return None
    alloc, reserved, used, total, per_phase, per_reserved, readings, names = [], [], [], [], {}, {}, [], set()
    notes = []
    for number, (m, line) in enumerate(lines, 1):
        if int(m.group(1)) != PROBE_VERSION:
            raise CalibrationError(line.strip(), f"a line of probe format v{PROBE_VERSION} (this one is "
                                                 f"v{m.group(1)}: update zerocalc, or use the probe shipped with it)")
        pairs = _probe_pairs(line[m.end():])
        rank = pairs.get("rank")
        label = f"rank {rank}" if rank is not None else f"line {number}"
        if pairs.get("gpu"):
            names.add(pairs["gpu"])
        line_total = _probe_int("total", pairs["total"]) if "total" in pairs else None
        phases: Dict[str, Dict[str, int]] = {}
        for key, value in pairs.items():
            phase, _, what = key.rpartition(".")
            if phase and what in PROBE_FIELDS:
                phases.setdefault(phase, {})[what] = _probe_int(key, value)
        for phase, got in phases.items():
            if "alloc" in got:
                per_phase[phase] = max(per_phase.get(phase, 0), got["alloc"])
            if "reserved" in got:
                per_reserved[phase] = max(per_reserved.get(phase, 0), got["reserved"])
            readings.append(Reading(f"{label} {phase}", got.get("alloc"), got.get("reserved"),
                                    got.get("driver_used"), line_total))
        line_alloc = [g["alloc"] for g in phases.values() if "alloc" in g]
        line_res = [g["reserved"] for g in phases.values() if "reserved" in g]
        line_used = [g["driver_used"] for g in phases.values() if "driver_used" in g]
        for key, bucket, per in (("alloc", alloc, line_alloc), ("reserved", reserved, line_res),
                                 ("driver_used", used, line_used)):
            if key in pairs:
                per = per + [_probe_int(key, pairs[key])]
            if per:
                bucket.append(max(per))
        if line_total is not None:
            total.append(line_total)
        if not phases and not any(k in pairs for k in PROBE_FIELDS):
            notes.append(f"{label}: no phase was recorded (call probe.phase(...) around forward, backward and the "
                         "optimizer step)")
    if not (alloc or reserved or used or total):
        raise CalibrationError(lines[0][1].strip(), "a probe line with at least one recorded phase")
    notes.append("probe: peaks per phase from torch.cuda.max_memory_allocated / max_memory_reserved with "
                 "reset_peak_memory_stats between phases; driver_used is total - free from torch.cuda.mem_get_info "
                 "at each phase's end (the whole device, every process on it, as nvidia-smi counts)")
    if len(lines) > 1:
        notes.append(f"probe: {len(lines)} lines; each figure is the largest over them")
    return Measurement(max(alloc, default=None), max(reserved, default=None), max(used, default=None),
                       max(total, default=None), per_phase, per_reserved, "probe", tuple(notes), tuple(readings), {},
                       " / ".join(sorted(names)) or None)


# ---------------------------------------------------------------------------------------------- memory_stats

_STAT_PAIR = re.compile(r"""['"]([A-Za-z_][A-Za-z0-9_.]{0,120})['"]\s*[:,]\s*(-?[0-9]{1,20})\b""", re.ASCII)


def _flatten(obj, prefix="", out=None, depth=0) -> dict:
    out = {} if out is None else out
    if depth > 8:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    elif isinstance(obj, int) and not isinstance(obj, bool):
        out[prefix] = obj
    return out


def _parse_memory_stats(text: str) -> Optional[Measurement]:
    if "allocated_bytes" not in text and "reserved_bytes" not in text:
        return None
    stats = {}
    stripped = text.strip()
    if stripped[:1] == "{":
        try:
            stats = _flatten(json.loads(stripped))
        except (ValueError, RecursionError):
            stats = {}
    if not stats:
        stats = {k: int(v) for k, v in _STAT_PAIR.findall(text)}
    if "allocated_bytes.all.peak" not in stats and "reserved_bytes.all.peak" not in stats:
        return None
    got, skipped = {}, []
    for key in ("allocated_bytes.all.peak", "reserved_bytes.all.peak"):
        if key in stats:
            if 0 <= stats[key] <= MAX_BYTES:
                got[key] = stats[key]
            else:
                skipped.append(f"memory_stats: skipped {key} = {stats[key]}: not a size from 0 to {MAX_BYTES:,} bytes")
    if not got:
        return Measurement(source_format="memory_stats", notes=tuple(skipped))
    notes = skipped + ["memory_stats: allocated_bytes.all.peak and reserved_bytes.all.peak are exact byte counts "
                       "since the last reset_peak_memory_stats (torch/cuda/memory.py)"]
    for key, what in (("allocated_bytes.all.current", "allocated now"), ("reserved_bytes.all.current",
                      "reserved now"), ("requested_bytes.all.peak", "peak requested by tensors before the "
                      "allocator's rounding"), ("inactive_split_bytes.all.peak", "peak non-releasable (split) bytes")):
        if key in stats:
            notes.append(f"memory_stats: {what}: {stats[key]:,} bytes ({key})")
    if stats.get("num_alloc_retries"):
        notes.append(f"memory_stats: {stats['num_alloc_retries']} cudaMalloc retries (num_alloc_retries): the "
                     "allocator flushed its cache to fit, so the reserved peak was capped by the GPU")
    if stats.get("num_ooms"):
        notes.append(f"memory_stats: {stats['num_ooms']} out-of-memory errors (num_ooms)")
    return Measurement(got.get("allocated_bytes.all.peak"), got.get("reserved_bytes.all.peak"),
                       source_format="memory_stats", notes=tuple(notes))


# -------------------------------------------------------------------------------------------- memory_summary

_SUMMARY_SIZE = re.compile(r"([0-9]+)\s*(B|KiB|MiB|GiB|TiB|PiB)\b", re.ASCII)
_SUMMARY_ROWS = {"Allocated memory": "allocated", "GPU reserved memory": "reserved", "Requested memory": "requested",
                 "Non-releasable memory": "non-releasable"}


def _parse_memory_summary(text: str) -> Optional[Measurement]:
    if "PyTorch CUDA memory summary" not in text:
        return None
    found, tol = {}, {}
    device = re.search(r"device ID\s+([0-9]+)", text, re.ASCII)
    retries = re.search(r"cudaMalloc retries:\s*([0-9]+)", text, re.ASCII)
    ooms = re.search(r"CUDA OOMs:\s*([0-9]+)", text, re.ASCII)
    for line in _lines(text):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] not in _SUMMARY_ROWS or _SUMMARY_ROWS[cells[0]] in found:
            continue
        sizes = [_SUMMARY_SIZE.fullmatch(c) for c in cells[1:5]]
        if len(sizes) < 2 or not sizes[1]:
            continue
        number, unit = sizes[1].groups()      # the "Peak Usage" column
        found[_SUMMARY_ROWS[cells[0]]] = _size(number, unit)
        tol[_SUMMARY_ROWS[cells[0]]] = BINARY[unit.upper()] - 1 if unit != "B" else 0
    if "allocated" not in found and "reserved" not in found:
        return None
    notes = ["memory_summary: the \"Peak Usage\" column, floored to its unit by _format_size (torch/cuda/memory.py): "
             "each true peak lies up to one unit above the value read"]
    for what in ("requested", "non-releasable"):
        if what in found:
            notes.append(f"memory_summary: peak {what} memory: {found[what]:,} bytes (floored)")
    if retries and int(retries.group(1)):
        notes.append(f"memory_summary: {retries.group(1)} cudaMalloc retries: the allocator flushed its cache to fit")
    if ooms and int(ooms.group(1)):
        notes.append(f"memory_summary: {ooms.group(1)} CUDA OOMs")
    tolerance = {q: tol[k] for q, k in (("allocated_peak_bytes", "allocated"), ("reserved_peak_bytes", "reserved"))
                 if k in tol}
    readings = (Reading(f"device {device.group(1)}", found.get("allocated"), found.get("reserved")),) if device else ()
    return Measurement(found.get("allocated"), found.get("reserved"), source_format="memory_summary",
                       notes=tuple(notes), readings=readings, tolerance_bytes=tolerance)


# ------------------------------------------------------------------------------------------------- deepspeed

_DS_UNIT = r"(GB|MB|KB)"
_DS_LINE = re.compile(rf"\bMA ({_NUM}) {_DS_UNIT}\s+Max_MA ({_NUM}) {_DS_UNIT}\s+CA ({_NUM}) {_DS_UNIT}\s+"
                      rf"Max_CA ({_NUM}) {_DS_UNIT}", re.ASCII)
_DS_STATUS = re.compile(rf"current alloc=({_NUM})GB \(delta=-?{_NUM}GB max=({_NUM})GB\) current cache=({_NUM})GB "
                        rf"\(delta=-?{_NUM}GB max=({_NUM})GB\)", re.ASCII)
_DS_PREFIX = re.compile(r"^.*?\[[^\]]*see_memory_usage\]\s*", re.ASCII)
_DS_BINARY = {"GB": 2**30, "MB": 2**20, "KB": 2**10}   # see_memory_usage divides by 1024 ** k


def _ds_label(previous: str) -> Optional[str]:
    label = _DS_PREFIX.sub("", previous).strip()
    if not label or "CPU Virtual Memory" in label or _DS_LINE.search(label) or len(label) > 120:
        return None
    return label


def _ds_values(line: str):
    """(MA, Max_MA, CA, Max_CA in bytes, their rounding for the peaks, the label on the line), or None."""
    m = _DS_LINE.search(line)
    if m:
        ma, ma_u, max_ma, max_ma_u, ca, ca_u, max_ca, max_ca_u = m.groups()
        values = [_scaled(n, _DS_BINARY[u]) for n, u in ((ma, ma_u), (max_ma, max_ma_u), (ca, ca_u),
                                                          (max_ca, max_ca_u))]
        return (*values, _half_unit(_decimals(max_ma), _DS_BINARY[max_ma_u]),
                _half_unit(_decimals(max_ca), _DS_BINARY[max_ca_u]), _ds_label(line[:m.start()]))
    s = _DS_STATUS.search(line)
    if s:
        values = [_scaled(n, GIB) for n in s.groups()]
        return (*values, _half_unit(4, GIB), _half_unit(4, GIB), line[:s.start()].strip()[:120] or None)
    return None


def _parse_deepspeed(text: str) -> Optional[Measurement]:
    if "Max_MA" not in text and "current alloc=" not in text:
        return None
    readings, alloc, reserved = [], [], []
    tol_alloc = tol_res = 0
    previous = ""
    skipped = []
    for line in _lines(text):
        try:
            got = _ds_values(line)
        except CalibrationError as err:
            skipped.append(f"deepspeed: skipped {line.strip()[:80]!r}: not {err.allowed}")
            continue
        if got:
            now_a, peak_a, now_r, peak_r, tol_a, tol_r, label = got
            tol_alloc, tol_res = max(tol_alloc, tol_a), max(tol_res, tol_r)
            label = label or _ds_label(previous)
            peak_a = max(peak_a, now_a)
            alloc.append(peak_a)
            reserved.append(max(peak_r, now_r, peak_a))
            readings.append(Reading(label or f"line {len(readings) + 1}", peak_a, reserved[-1]))
        if line.strip():
            previous = line
    if not alloc:
        return Measurement(source_format="deepspeed", notes=tuple(skipped)) if skipped else None
    notes = skipped + [
        "deepspeed: see_memory_usage divides by 1024 * 1024 * 1024 (deepspeed/runtime/utils.py), so its \"GB\" is "
        "GiB; read as such",
        "deepspeed: Max_MA / Max_CA are peaks since the previous see_memory_usage call (it resets the peak stats); "
        "the figures here are the largest over all lines",
        "deepspeed: Max_CA is rounded to a whole GiB; the reserved peak is taken as the largest of Max_CA, CA and "
        "Max_MA (it can be no smaller than those), so it is known only to about half a GiB"]
    if len(readings) > 1:
        top = max(readings, key=lambda r: r.allocated_peak_bytes)
        notes.append(f"deepspeed: {len(readings)} lines; the largest Max_MA at \"{top.label}\"")
    return Measurement(max(alloc), max(reserved), source_format="deepspeed", notes=tuple(notes),
                       readings=tuple(readings),
                       tolerance_bytes={"allocated_peak_bytes": tol_alloc, "reserved_peak_bytes": tol_res})


# ------------------------------------------------------------------------------------------------- torch OOM

def _oom_size_re(name: str) -> str:
    return rf"(?P<{name}>[0-9]+(?:\.[0-9]+)?) (?P<{name}_unit>bytes|KiB|MiB|GiB)"


_ANY_SIZE = r"[0-9]+(?:\.[0-9]+)? (?:bytes|KiB|MiB|GiB)"
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
    return _size(number, "B" if unit == "bytes" else unit)


def _oom_tol(number, unit) -> int:
    return 0 if unit == "bytes" else _half_unit(_decimals(number), BINARY[unit.upper()])


def _parse_torch_oom(text: str) -> Optional[Measurement]:
    if "out of memory" not in text:
        return None
    try:
        return _read_torch_oom(text)
    except CalibrationError as err:
        return Measurement(source_format="torch_oom", notes=(f"torch_oom: skipped the message: not {err.allowed}",))


def _read_torch_oom(text: str) -> Optional[Measurement]:
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
               "nvidia_smi_total_bytes": _oom_tol(*total)}
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
               "nvidia_smi_total_bytes": _oom_tol(*_oom_get(m, "total"))}
        used_note = None
    notes = [f"torch_oom: values at the failed allocation on GPU {m.group('gpu')} (c10/cuda/CUDACachingAllocator.cpp): "
             f"the step needed at least {format_bytes(_oom_size(*_oom_get(m, 'ask')), 'binary')} more than it could "
             "get, so its real peak is higher than these"]
    if used_note:
        notes.append(f"torch_oom: the used figure is {used_note}")
    return Measurement(alloc, reserved, used, total_b, source_format="torch_oom", notes=tuple(notes),
                       tolerance_bytes={k: v for k, v in tol.items() if v})


# ------------------------------------------------------------------------------------------------ nvidia-smi

_SMI_VALUE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(MiB|GiB|KiB|B)?", re.ASCII)
_SMI_HEADER_CELL = re.compile(r"([A-Za-z_.]+)\s*(?:\[([A-Za-z%]+)\])?", re.ASCII)
_SMI_TABLE = re.compile(r"\|\s*([0-9]+)MiB\s*/\s*([0-9]+)MiB\s*\|", re.ASCII)
_SMI_NA = ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]")


def _smi_value(cell: str, header_unit: Optional[str]) -> Optional[int]:
    cell = cell.strip()
    if cell in _SMI_NA:
        return None
    m = _SMI_VALUE.fullmatch(cell)
    if not m:
        raise ValueError(cell)
    return _size(m.group(1), m.group(2) or header_unit or "MiB")


def _smi_rows(text: str):
    """(label, used, total) per data row of --query-gpu CSV output; None if there is none."""
    header, rows, notes = None, [], []
    for line in _lines(text):
        cells = [c.strip() for c in line.split(",")]
        if not line.strip():
            continue
        if any(c.startswith(("memory.used", "memory.total")) for c in cells):
            header = []
            for c in cells:
                m = _SMI_HEADER_CELL.fullmatch(c)
                header.append((m.group(1), m.group(2)) if m else (c, None))
            continue
        names = [h[0] for h in header] if header else ["memory.used", "memory.total"]
        if len(cells) != len(names) or ("memory.used" not in names and "memory.total" not in names):
            continue
        units = {h[0]: h[1] for h in header} if header else {}
        try:
            values = {n: _smi_value(c, units.get(n)) for n, c in zip(names, cells)
                      if n in ("memory.used", "memory.total")}
        except ValueError:
            continue
        other = {n: c for n, c in zip(names, cells) if n in ("index", "name", "pci.bus_id", "uuid", "gpu_name")}
        label = " ".join(other[k] for k in ("index", "name", "pci.bus_id", "uuid", "gpu_name") if k in other)
        rows.append((label or f"GPU {len(rows)}", values.get("memory.used"), values.get("memory.total"),
                     other.get("name") or other.get("gpu_name")))
    if not header:
        notes.append("nvidia_smi: no header line, so the columns were read as memory.used, memory.total (the "
                     "order of --query-gpu=memory.used,memory.total)")
    return rows, notes


def _parse_nvidia_smi(text: str) -> Optional[Measurement]:
    rows, notes = _smi_rows(text)
    table = False
    if not rows:
        for m in _SMI_TABLE.finditer(text):
            rows.append((f"GPU {len(rows)}", _size(m.group(1), "MiB"), _size(m.group(2), "MiB"), None))
        table, notes = bool(rows), ["nvidia_smi: read from the Memory-Usage column of the nvidia-smi table"]
    if not rows:
        return None
    if not table and not any(u is not None or t is not None for _, u, t, _ in rows):
        notes.append("nvidia_smi: every memory value is [N/A] (unified-memory systems and some MIG or vGPU "
                     "setups report none)")
    with_used = [r for r in rows if r[1] is not None]
    top = max(with_used, key=lambda r: r[1]) if with_used else None
    totals = [r[2] for r in rows if r[2] is not None]
    total = top[2] if top and top[2] is not None else (max(totals) if totals else None)
    if len(rows) > 1:
        notes.append(f"nvidia_smi: {len(rows)} rows; used is the largest ({top[0] if top else 'none'}), since the "
                     "fullest GPU is the one that runs out")
    notes.append("nvidia_smi: memory.used is everything on the device (CUDA context, every process), sampled at "
                 "one moment, in MiB = 2^20 bytes")
    names = sorted({r[3] for r in rows if r[3]})
    return Measurement(None, None, top[1] if top else None, total, source_format="nvidia_smi",
                       notes=tuple(notes), readings=tuple(Reading(r[0], None, None, r[1], r[2]) for r in rows),
                       tolerance_bytes={"nvidia_smi_used_bytes": 2**20} if top else {},   # whole MiB printed
                       gpu_name=" / ".join(names) or None)


# ----------------------------------------------------------------------------------------------------- plain

_LABELS = (
    ("allocated_peak_bytes", r"(?:torch\.cuda\.)?max_memory_allocated(?:\(\))?|max[ _.-]?(?:mem(?:ory)?[ _.-]?)?"
                             r"alloc(?:ated)?|peak[ _.-]?(?:mem(?:ory)?[ _.-]?)?alloc(?:ated)?|alloc(?:ated)?[ _.-]?"
                             r"peak"),
    ("reserved_peak_bytes", r"(?:torch\.cuda\.)?max_memory_(?:reserved|cached)(?:\(\))?|max[ _.-]?(?:mem(?:ory)?"
                            r"[ _.-]?)?(?:reserved|cached)|peak[ _.-]?(?:mem(?:ory)?[ _.-]?)?(?:reserved|cached)|"
                            r"(?:reserved|cached)[ _.-]?peak"),
    ("nvidia_smi_used_bytes", r"nvidia[ _-]?smi[ _.-]?used|driver[ _.-]?used|gpu[ _.-]?memory[ _.-]?used"),
    ("nvidia_smi_total_bytes", r"nvidia[ _-]?smi[ _.-]?total|gpu[ _.-]?memory[ _.-]?total|total[ _.-]?memory"),
)
_PLAIN = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(f"(?P<{q.split('_bytes')[0]}>{p})" for q, p in _LABELS) +
                    r")\s*(?:[:=]|\bis\b|->)?\s*(" + _NUM + r")\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?"
                    r"(?![A-Za-z0-9])", re.ASCII | re.IGNORECASE)


def _claimed(line: str) -> bool:
    """A line another format reads (the plain labels would otherwise pick numbers out of it)."""
    return bool(_PROBE_START.search(line) or _DS_LINE.search(line) or _DS_STATUS.search(line) or
                "out of memory" in line or line.lstrip().startswith("|") or _STAT_PAIR.search(line))


def _parse_plain(text: str, gb: str = "decimal") -> Optional[Measurement]:
    values: Dict[str, list] = {}
    tol: Dict[str, int] = {}
    notes, decimal_units, readings = [], False, []
    for line in _lines(text):
        if _claimed(line):
            continue
        for m in _PLAIN.finditer(line):
            quantity = next(q for q, _ in _LABELS if m.group(q.split("_bytes")[0]))
            number, unit = m.group(len(_LABELS) + 2), m.group(len(_LABELS) + 3)
            if unit is None and "." in number:
                notes.append(f"plain: skipped {m.group(0).strip()!r}: a fraction needs a unit (bytes are whole)")
                continue
            scale = _unit_scale(unit, gb)
            try:
                value = _scaled(number, scale)
            except CalibrationError as err:
                notes.append(f"plain: skipped {m.group(0).strip()!r}: not {err.allowed}")
                continue
            decimal_units |= (unit or "B").upper() in DECIMAL
            values.setdefault(quantity, []).append(value)
            if scale > 1:
                tol[quantity] = max(tol.get(quantity, 0), _half_unit(_decimals(number), scale))
            readings.append(Reading(m.group(1), **{_READING_FIELD[quantity]: values[quantity][-1]}))
    if not values:
        return Measurement(source_format="plain", notes=tuple(notes)) if notes else None
    if decimal_units:
        notes.append("plain: GB / MB read as 10^9 / 10^6 bytes (zerocalc's GB)" if gb == "decimal" else
                     "plain: GB / MB read as GiB / MiB (2^30 / 2^20 bytes), as asked")
        if gb == "decimal":
            notes.append("plain: if the script divided by 1024**3 (DeepSpeed, many training loops) it printed GiB "
                         "and called it GB; parse again with gb='binary' (the figure grows by 7.4%)")
    if any(len(v) > 1 for v in values.values()):
        notes.append("plain: a label given more than once: each figure is the largest")
    return Measurement(*(max(values[q]) if q in values else None for q in QUANTITIES), source_format="plain",
                       notes=tuple(notes), readings=tuple(readings), tolerance_bytes=tol)


_READING_FIELD = {"allocated_peak_bytes": "allocated_peak_bytes", "reserved_peak_bytes": "reserved_peak_bytes",
                  "nvidia_smi_used_bytes": "used_bytes", "nvidia_smi_total_bytes": "total_bytes"}


# ---------------------------------------------------------------------------------------------- entry points

_PARSERS = {"probe": _parse_probe, "memory_stats": _parse_memory_stats, "memory_summary": _parse_memory_summary,
            "deepspeed": _parse_deepspeed, "torch_oom": _parse_torch_oom, "nvidia_smi": _parse_nvidia_smi,
            "plain": _parse_plain}


def _checked(text) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise CalibrationError(type(text).__name__, "text (str)")
    if len(text) > MAX_TEXT_CHARS:
        raise CalibrationError(f"{len(text):,} characters", f"at most {MAX_TEXT_CHARS:,} characters")
    if not text.strip():
        raise CalibrationError(text, _formats_sentence())
    return text


def _one(name: str, text, gb: str = "decimal") -> Measurement:
    text = _checked(text)
    got = _PARSERS[name](text, gb) if name == "plain" else _PARSERS[name](text)
    if got is None:
        raise CalibrationError(text.strip(), _formats_sentence((name,)))
    if not any(getattr(got, q) is not None for q in QUANTITIES):
        raise CalibrationError(text.strip(), "a measurement with at least one figure: " + "; ".join(got.notes))
    return got


def parse_probe(text) -> Measurement:
    return _one("probe", text)


def parse_memory_stats(text) -> Measurement:
    return _one("memory_stats", text)


def parse_memory_summary(text) -> Measurement:
    return _one("memory_summary", text)


def parse_deepspeed(text) -> Measurement:
    return _one("deepspeed", text)


def parse_torch_oom(text) -> Measurement:
    return _one("torch_oom", text)


def parse_nvidia_smi(text) -> Measurement:
    return _one("nvidia_smi", text)


def parse_plain(text, gb: str = "decimal") -> Measurement:
    return _one("plain", text, gb)


def parse(text, gb: str = "decimal") -> Measurement:
    """Every format found in the text, merged: each quantity from the most exact format that gives it (smallest
    printed rounding, then the order of FORMATS), with a note where another format disagrees. CalibrationError (a
    FieldError on "calibration") names the formats understood when none is found. `gb`: "decimal" (GB = 10^9
    bytes) or "binary" (GB = GiB), for the plain format only; the others say what they mean."""
    if gb not in ("decimal", "binary"):
        raise FieldError("gb", gb, "one of decimal, binary")
    text = _checked(text)
    found = []
    for name in FORMATS:
        got = _PARSERS[name](text, gb) if name == "plain" else _PARSERS[name](text)
        if got is not None:
            found.append(got)
    if not found:
        raise CalibrationError(text.strip(), _formats_sentence())
    useful = [m for m in found if any(getattr(m, q) is not None for q in QUANTITIES)]
    if not useful:
        raise CalibrationError(text.strip(), "a measurement with at least one figure; read as "
                               + " + ".join(m.source_format for m in found) + ", it has none: "
                               + "; ".join(n for m in found for n in m.notes))
    return useful[0] if len(useful) == 1 else _merge(useful)


def _merge(found) -> Measurement:
    """Each quantity from the format that gives it most exactly (the smallest tolerance; ties: the order of
    FORMATS), with a note for every other format that gives a different value."""
    values, tolerance, notes = {}, {}, []
    for q in QUANTITIES:
        given = [(m.tolerance_bytes.get(q, 0), i, m) for i, m in enumerate(found) if getattr(m, q) is not None]
        if not given:
            continue
        tol, _, best = min(given, key=lambda g: g[:2])
        values[q] = getattr(best, q)
        if tol:
            tolerance[q] = tol
        for _, _, m in given:
            if m is not best and getattr(m, q) != values[q]:
                notes.append(f"{m.source_format} gives {q} = {getattr(m, q):,} bytes; kept {values[q]:,} from "
                             f"{best.source_format}, the more exact")
    per_phase = next((m.per_phase for m in found if m.per_phase), {})
    per_reserved = next((m.per_phase_reserved for m in found if m.per_phase_reserved), {})
    return Measurement(*(values.get(q) for q in QUANTITIES), per_phase, per_reserved,
                       "+".join(m.source_format for m in found),
                       tuple(n for m in found for n in m.notes) + tuple(notes),
                       tuple(r for m in found for r in m.readings), tolerance,
                       next((m.gpu_name for m in found if m.gpu_name), None))


# ------------------------------------------------------------------------------------------------ comparison

TENSOR_EXCLUDED = ("allocator reserve", "CUDA context")


@dataclass(frozen=True)
class Residual:
    """One measured figure against the part of the estimate it counts."""
    quantity: str                 # "allocated", "reserved", "nvidia-smi used"
    measured_bytes: int
    estimated_bytes: int
    estimate_covers: str          # which components of the estimate it is compared with
    phase: str                    # the estimate's phase where that part is largest
    tolerance_bytes: int = 0      # the measurement's printed rounding

    @property
    def residual_bytes(self) -> int:
        """measured - estimated: positive when the run used more than estimated."""
        return self.measured_bytes - self.estimated_bytes

    @property
    def residual_percent(self) -> Optional[float]:
        """For display only; the residual's exact value is residual_bytes."""
        return None if not self.estimated_bytes else 100.0 * self.residual_bytes / self.estimated_bytes

    @property
    def within_rounding(self) -> bool:
        return abs(self.residual_bytes) <= self.tolerance_bytes

    def to_dict(self) -> dict:
        return {"quantity": self.quantity, "measured_bytes": self.measured_bytes,
                "estimated_bytes": self.estimated_bytes, "residual_bytes": self.residual_bytes,
                "residual_percent": self.residual_percent, "estimate_covers": self.estimate_covers,
                "phase": self.phase, "tolerance_bytes": self.tolerance_bytes, "within_rounding": self.within_rounding}


@dataclass(frozen=True)
class PhaseResidual:
    """A probe phase against the estimate's phase of the same name (forward, backward, optimizer_step)."""
    phase: str
    measured_allocated_bytes: Optional[int]
    estimated_tensor_bytes: int
    measured_reserved_bytes: Optional[int]
    estimated_reserved_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Suggestion:
    """A Workload assumption, the value that would absorb a residual, and why."""
    field: str
    current: int
    suggested: int
    sentence: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Calibration:
    measurement: Measurement
    stage: Optional[int]
    residuals: Tuple[Residual, ...]
    phases: Tuple[PhaseResidual, ...]
    suggestions: Tuple[Suggestion, ...]
    sentences: Tuple[str, ...]

    def residual(self, quantity: str) -> Optional[Residual]:
        return next((r for r in self.residuals if r.quantity == quantity), None)

    def suggestion(self, field_name: str) -> Optional[Suggestion]:
        return next((s for s in self.suggestions if s.field == field_name), None)

    def suggested_workload(self, workload, fields=None):
        """The workload with the suggested assumptions set (all of them, or those named in `fields`)."""
        chosen = {s.field: s.suggested for s in self.suggestions if fields is None or s.field in fields}
        return replace(workload, **chosen) if chosen else workload

    def to_dict(self) -> dict:
        return {"stage": self.stage, "measurement": self.measurement.to_dict(),
                "residuals": [r.to_dict() for r in self.residuals], "phases": [p.to_dict() for p in self.phases],
                "suggestions": [s.to_dict() for s in self.suggestions], "sentences": list(self.sentences)}


def _phases_of(peak) -> Tuple[Optional[int], Dict[str, Dict[str, int]]]:
    if isinstance(peak, dict):
        if not isinstance(peak.get("phases"), dict):
            raise FieldError("peak", type(peak).__name__, "a StagePeak or a report \"peak\" row with \"phases\"")
        return peak.get("stage"), peak["phases"]
    phases = getattr(peak, "phases", None)
    if not isinstance(phases, dict):
        raise FieldError("peak", type(peak).__name__, "a StagePeak or a report \"peak\" row with \"phases\"")
    return getattr(peak, "stage", None), phases


def _largest(parts_by_phase: Dict[str, int]) -> Tuple[str, int]:
    phase = max(parts_by_phase, key=lambda p: (parts_by_phase[p], p))
    return phase, parts_by_phase[phase]


def _ceil_percent(numerator: int, denominator: int) -> int:
    """The smallest whole percent p with denominator * p / 100 >= numerator (numerator >= 0)."""
    return -(-100 * numerator // denominator)


def _gib(n: int) -> str:
    return format_bytes(n, "binary")


def compare(measurement: Measurement, peak, workload) -> Calibration:
    """The measurement against one stage's estimated peak (a peak.StagePeak, or a report's "peak" row).

    Rules, each a like-for-like comparison:
    - torch.cuda.max_memory_allocated counts live tensors only: compared with the estimate's tensors, every
      component except "allocator reserve" and "CUDA context", in the phase where they are largest;
    - max_memory_reserved adds the caching allocator's cached, unused blocks: compared with tensors + "allocator
      reserve";
    - nvidia-smi's memory.used adds the CUDA context and whatever else is on the device: compared with the whole
      peak (tensors + reserve + context).
    Absorbing assumptions (the Workload's): fragmentation_percent from the measured (reserved - allocated) as a
    share of allocated, rounded up to a whole percent; cuda_context_bytes from the measured used - reserved. A
    residual on the tensors themselves belongs to no assumption: its sentence says where to look. Exact integers
    throughout; percentages are floats for display only.
    """
    if not isinstance(measurement, Measurement):
        raise FieldError("measurement", type(measurement).__name__, "a calibrate.Measurement (from parse)")
    stage, phases = _phases_of(peak)
    tensors = {p: sum(v for k, v in parts.items() if k not in TENSOR_EXCLUDED) for p, parts in phases.items()}
    reserved = {p: tensors[p] + parts.get("allocator reserve", 0) for p, parts in phases.items()}
    whole = {p: sum(parts.values()) for p, parts in phases.items()}
    m, tol = measurement, measurement.tolerance_bytes
    residuals, sentences, suggestions = [], [], []
    for quantity, value, estimate, covers, tkey in (
            ("allocated", m.allocated_peak_bytes, tensors, "tensors: every component except allocator reserve and "
             "CUDA context", "allocated_peak_bytes"),
            ("reserved", m.reserved_peak_bytes, reserved, "tensors + allocator reserve", "reserved_peak_bytes"),
            ("nvidia-smi used", m.nvidia_smi_used_bytes, whole, "the whole peak: tensors + allocator reserve + "
             "CUDA context", "nvidia_smi_used_bytes")):
        if value is not None and estimate:
            phase, est = _largest(estimate)
            residuals.append(Residual(quantity, value, est, covers, phase, tol.get(tkey, 0)))

    alloc_r = next((r for r in residuals if r.quantity == "allocated"), None)
    if alloc_r is not None:
        if alloc_r.within_rounding:
            sentences.append(f"Live tensors: measured {_gib(alloc_r.measured_bytes)} against "
                             f"{_gib(alloc_r.estimated_bytes)} estimated, equal within the printed rounding.")
        else:
            pct = alloc_r.residual_percent
            more = alloc_r.residual_bytes > 0
            hint = ("whether the run keeps tensors the estimate does not count (EMA weights, a reference model, "
                    "cached batches, eager attention scores)" if more else
                    "whether the run avoids tensors the estimate counts (a fused or chunked loss that never holds "
                    "the fp32 logits, activation checkpointing, offload)")
            sentences.append(
                f"Live tensors: the run allocated {_gib(abs(alloc_r.residual_bytes))} {'more' if more else 'less'} "
                f"than estimated ({pct:+.1f}%, estimated peak in {alloc_r.phase}). No allocator or context "
                "assumption absorbs this: check the micro-batch, sequence length, recompute, attention kernel and "
                f"dtypes, and {hint}.")

    cur_f, cur_c = workload.fragmentation_percent, workload.cuda_context_bytes
    if m.reserved_peak_bytes is not None:
        base = m.allocated_peak_bytes if m.allocated_peak_bytes is not None else (
            alloc_r.estimated_bytes if alloc_r is not None else _largest(tensors)[1] if tensors else None)
        if base:
            cached = max(0, m.reserved_peak_bytes - base)
            pct = min(100, _ceil_percent(cached, base))
            source = "measured" if m.allocated_peak_bytes is not None else "estimated (no allocated figure given)"
            suggestions.append(Suggestion(
                "fragmentation_percent", cur_f, pct,
                f"The caching allocator held {_gib(cached)} beyond the {_gib(base)} of live tensors "
                f"({source}): {100.0 * cached / base:.1f}% of them. fragmentation_percent = {pct} would absorb it "
                f"(now {cur_f})."))
    if m.nvidia_smi_used_bytes is not None:
        if m.reserved_peak_bytes is not None:
            base, what = m.reserved_peak_bytes, "PyTorch reserved (measured)"
        else:
            est = _largest(reserved)[1] if reserved else 0
            base, what = est, "the estimated tensors + allocator reserve (no reserved figure given)"
        outside = max(0, m.nvidia_smi_used_bytes - base)
        suggestions.append(Suggestion(
            "cuda_context_bytes", cur_c, min(outside, 2**40),
            f"nvidia-smi saw {_gib(m.nvidia_smi_used_bytes)} in use, {_gib(base)} of it {what}: the other "
            f"{_gib(outside)} is the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers and any other process on "
            f"that GPU. cuda_context_bytes = {min(outside, 2**40):,} would absorb it (now {cur_c:,}, "
            f"{_gib(cur_c)})."))
        if m.reserved_peak_bytes is not None and m.nvidia_smi_used_bytes < m.reserved_peak_bytes:
            sentences.append("nvidia-smi shows less than PyTorch's reserved peak: it was sampled at another moment "
                             "(or on another GPU), so the context figure is a lower bound.")
    if m.nvidia_smi_total_bytes is not None and m.nvidia_smi_total_bytes != workload.capacity_bytes:
        suggestions.append(Suggestion(
            "gpu_memory", workload.capacity_bytes, m.nvidia_smi_total_bytes,
            f"The GPU reports {m.nvidia_smi_total_bytes:,} bytes ({_gib(m.nvidia_smi_total_bytes)}) in total; the "
            f"estimate assumes {workload.capacity_bytes:,} ({workload.gpu_label}). gpu_memory = "
            f"{m.nvidia_smi_total_bytes:,} would use the measured capacity."))

    phase_rows = []
    for phase in phases:
        a, r = m.per_phase.get(phase), m.per_phase_reserved.get(phase)
        if a is not None or r is not None:
            phase_rows.append(PhaseResidual(phase, a, tensors[phase], r, reserved[phase]))
    unknown = sorted(set(m.per_phase) - set(phases))
    if unknown:
        sentences.append("Probe phases with no estimate of that name (forward, backward, optimizer_step): "
                         + ", ".join(unknown) + ".")
    if not residuals:
        sentences.append("Nothing to compare: the measurement has no allocated, reserved or nvidia-smi figure.")
    return Calibration(m, stage, tuple(residuals), tuple(phase_rows), tuple(suggestions), tuple(sentences))


def compare_stage(measurement: Measurement, scenario, workload, stage: int) -> Calibration:
    """compare() against the worst rank's peak of one ZeRO stage of a scenario and workload."""
    from ..parallel.ranks import layout_report
    return compare(measurement, layout_report(scenario, workload).peaks[stage], workload)
