"""The line tools/zerocalc_probe.py prints: "zerocalc-probe v1 gpu=... forward.alloc=..." (per-phase peaks from
torch.cuda.max_memory_allocated / max_memory_reserved, the driver's view from mem_get_info).
"""

from __future__ import annotations

import re
from typing import Dict, Optional

from .measurement import MAX_BYTES, CalibrationError, Measurement, Reading
from .sizes import text_lines

PROBE_PREFIX = "zerocalc-probe"
PROBE_VERSION = 1
# Possessive (*+, ++): neither "=" nor a word boundary after digits can follow a shorter take.
_PROBE_KEY = re.compile(r"(?:^|\s)([A-Za-z0-9_\-][A-Za-z0-9_.\-]*+)=", re.ASCII)
_PROBE_START = re.compile(PROBE_PREFIX + r"\s++v([0-9]++)\b", re.ASCII)
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


def read_probe(text: str) -> Optional[Measurement]:
    lines = [(m, line) for line in text_lines(text) for m in [_PROBE_START.search(line)] if m]
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
                       usable_total_bytes=max(total, default=None), per_phase=per_phase,
                       per_phase_reserved=per_reserved, source_format="probe", notes=tuple(notes),
                       readings=tuple(readings), gpu_name=" / ".join(sorted(names)) or None)
