"""The table torch.cuda.memory_summary() prints; its sizes are floored per unit step (exact within one unit, up)."""

from __future__ import annotations

import re
from typing import Optional

from .measurement import BINARY, Measurement, Reading
from .sizes import text_lines, to_bytes

# Possessive (*+, ++) wherever what follows cannot start with what was taken: nothing is ever given back.
_SUMMARY_SIZE = re.compile(r"([0-9]++)\s*+(B|KiB|MiB|GiB|TiB|PiB)\b", re.ASCII)
_SUMMARY_ROWS = {"Allocated memory": "allocated", "GPU reserved memory": "reserved", "Requested memory": "requested",
                 "Non-releasable memory": "non-releasable"}


def read_memory_summary(text: str) -> Optional[Measurement]:
    if "PyTorch CUDA memory summary" not in text:
        return None
    found, tol = {}, {}
    device = re.search(r"device ID\s++([0-9]+)", text, re.ASCII)
    retries = re.search(r"cudaMalloc retries:\s*+([0-9]+)", text, re.ASCII)
    ooms = re.search(r"CUDA OOMs:\s*+([0-9]+)", text, re.ASCII)
    for line in text_lines(text):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] not in _SUMMARY_ROWS or _SUMMARY_ROWS[cells[0]] in found:
            continue
        sizes = [_SUMMARY_SIZE.fullmatch(c) for c in cells[1:5]]
        if len(sizes) < 2 or not sizes[1]:
            continue
        number, unit = sizes[1].groups()      # the "Peak Usage" column
        found[_SUMMARY_ROWS[cells[0]]] = to_bytes(number, unit)
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
