"""nvidia-smi --query-gpu=memory.used,memory.total CSV (any header, units, columns, GPUs) and the plain table's
Memory-Usage column. nvidia-smi's MiB is 2^20 bytes.
"""

from __future__ import annotations

import re
from typing import Optional

from .measurement import Measurement, Reading
from .sizes import text_lines, to_bytes

# Possessive (*+, ++) wherever what follows cannot start with what was taken: nothing is ever given back.
_SMI_VALUE = re.compile(r"([0-9]++(?:\.[0-9]++)?)\s*+(MiB|GiB|KiB|B)?", re.ASCII)
_SMI_HEADER_CELL = re.compile(r"([A-Za-z_.]++)\s*+(?:\[([A-Za-z%]++)\])?", re.ASCII)
_SMI_TABLE = re.compile(r"\|\s*+([0-9]++)MiB\s*+/\s*+([0-9]++)MiB\s*+\|", re.ASCII)
_SMI_NA = ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]")


def _smi_value(cell: str, header_unit: Optional[str]) -> Optional[int]:
    cell = cell.strip()
    if cell in _SMI_NA:
        return None
    m = _SMI_VALUE.fullmatch(cell)
    if not m:
        raise ValueError(cell)
    return to_bytes(m.group(1), m.group(2) or header_unit or "MiB")


def _smi_rows(text: str):
    """(label, used, total) per data row of --query-gpu CSV output; None if there is none."""
    header, rows, notes = None, [], []
    names, units, memory = ["memory.used", "memory.total"], {}, True
    for line in text_lines(text):
        cells = [c.strip() for c in line.split(",")]
        if not line.strip():
            continue
        if any(c.startswith(("memory.used", "memory.total")) for c in cells):
            header = []
            for c in cells:
                m = _SMI_HEADER_CELL.fullmatch(c)
                header.append((m.group(1), m.group(2)) if m else (c, None))
            # what each row is read with, once per header (per row, a wide header made this quadratic)
            names, units = [h[0] for h in header], {h[0]: h[1] for h in header}
            memory = "memory.used" in names or "memory.total" in names
            continue
        if len(cells) != len(names) or not memory:
            continue
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


def read_nvidia_smi(text: str) -> Optional[Measurement]:
    rows, notes = _smi_rows(text)
    table = False
    if not rows:
        for m in _SMI_TABLE.finditer(text):
            rows.append((f"GPU {len(rows)}", to_bytes(m.group(1), "MiB"), to_bytes(m.group(2), "MiB"), None))
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
