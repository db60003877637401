"""Labelled numbers: "max_memory_allocated: 12345" (bytes), "Peak reserved: 66.3 GiB". GB / MB are 10^9 / 10^6
bytes unless read with gb="binary".
"""

from __future__ import annotations

import re
from typing import Dict, Optional

from .deepspeed import DS_LINE, DS_STATUS
from .measurement import DECIMAL, QUANTITIES, CalibrationError, Measurement, Reading
from .memory_stats import _STAT_PAIR
from .probe import _PROBE_START
from .sizes import NUMBER, decimal_places, half_unit, scaled_bytes, text_lines, unit_scale

_LABELS = (
    ("allocated_peak_bytes", r"(?:torch\.cuda\.)?max_memory_allocated(?:\(\))?|max[ _.-]?(?:mem(?:ory)?[ _.-]?)?"
                             r"alloc(?:ated)?|peak[ _.-]?(?:mem(?:ory)?[ _.-]?)?alloc(?:ated)?|alloc(?:ated)?[ _.-]?"
                             r"peak"),
    ("reserved_peak_bytes", r"(?:torch\.cuda\.)?max_memory_(?:reserved|cached)(?:\(\))?|max[ _.-]?(?:mem(?:ory)?"
                            r"[ _.-]?)?(?:reserved|cached)|peak[ _.-]?(?:mem(?:ory)?[ _.-]?)?(?:reserved|cached)|"
                            r"(?:reserved|cached)[ _.-]?peak"),
    ("nvidia_smi_used_bytes", r"nvidia[ _-]?smi[ _.-]?used|driver[ _.-]?used|gpu[ _.-]?memory[ _.-]?used"),
    ("usable_total_bytes", r"total[ _.-]?capacity|(?:torch[ _.-]?)?total_memory|mem_get_info[ _.-]?total"),
    ("nvidia_smi_total_bytes", r"nvidia[ _-]?smi[ _.-]?total|gpu[ _.-]?memory[ _.-]?total|memory\.total|"
                               r"total[ .-]?memory"),
)
# The blanks around the separator are possessive (\s*+): neither the separator nor the number starts with a blank,
# so giving one back never helps a match, and two plain \s* around an optional separator try every split of a
# run of blanks (issue 38: "max_alloc" + 63,950 spaces + "x" took 107 s).
_PLAIN = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(f"(?P<{q.split('_bytes')[0]}>{p})" for q, p in _LABELS) +
                    r")\s*+(?:[:=]|\bis\b|->)?\s*+(" + NUMBER + r")\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?"
                    r"(?![A-Za-z0-9])", re.ASCII | re.IGNORECASE)


def _claimed(line: str) -> bool:
    """A line another format reads (the plain labels would otherwise pick numbers out of it)."""
    return bool(_PROBE_START.search(line) or DS_LINE.search(line) or DS_STATUS.search(line) or
                "out of memory" in line or line.lstrip().startswith("|") or _STAT_PAIR.search(line))


def read_plain(text: str, gb: str = "decimal") -> Optional[Measurement]:
    values: Dict[str, list] = {}
    tol: Dict[str, int] = {}
    notes, decimal_units, readings = [], False, []
    for line in text_lines(text):
        if _claimed(line):
            continue
        for m in _PLAIN.finditer(line):
            quantity = next(q for q, _ in _LABELS if m.group(q.split("_bytes")[0]))
            number, unit = m.group(len(_LABELS) + 2), m.group(len(_LABELS) + 3)
            if unit is None and "." in number:
                notes.append(f"plain: skipped {m.group(0).strip()!r}: a fraction needs a unit (bytes are whole)")
                continue
            scale = unit_scale(unit, gb)
            try:
                value = scaled_bytes(number, scale)
            except CalibrationError as err:
                notes.append(f"plain: skipped {m.group(0).strip()!r}: not {err.allowed}")
                continue
            decimal_units |= (unit or "B").upper() in DECIMAL
            values.setdefault(quantity, []).append(value)
            if scale > 1:
                tol[quantity] = max(tol.get(quantity, 0), half_unit(decimal_places(number), scale))
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
                  "nvidia_smi_used_bytes": "used_bytes", "nvidia_smi_total_bytes": "total_bytes",
                  "usable_total_bytes": "total_bytes"}
