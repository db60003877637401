"""DeepSpeed's see_memory_usage and memory_status lines (their "GB" is bytes / 1024**3: GiB)."""

from __future__ import annotations

import re
from typing import Optional

from .measurement import GIB, CalibrationError, Measurement, Reading
from .sizes import NUMBER, decimal_places, half_unit, scaled_bytes, text_lines

_DS_UNIT = r"(GB|MB|KB)"
DS_LINE = re.compile(rf"\bMA ({NUMBER}) {_DS_UNIT}\s++Max_MA ({NUMBER}) {_DS_UNIT}\s++CA ({NUMBER}) {_DS_UNIT}\s++"
                      rf"Max_CA ({NUMBER}) {_DS_UNIT}", re.ASCII)
DS_STATUS = re.compile(rf"current alloc=({NUMBER})GB \(delta=-?{NUMBER}GB max=({NUMBER})GB\) "
                        rf"current cache=({NUMBER})GB "
                        rf"\(delta=-?{NUMBER}GB max=({NUMBER})GB\)", re.ASCII)
# The logger's prefix before a label ("[2024-01-01 10:00:00,000] [INFO] [utils.py:800:see_memory_usage] before
# forward"): the first bracket that closes right after see_memory_usage. Searched with no leading ".*?" and no
# bracket inside the brackets, each '[' scans only to the next bracket: linear (the old "^.*?\[[^\]]*" scanned from
# every '[' to the line's end, quadratic on a run of '[').
_DS_PREFIX = re.compile(r"\[[^\[\]]*see_memory_usage\]", re.ASCII)
_DS_BINARY = {"GB": 2**30, "MB": 2**20, "KB": 2**10}   # see_memory_usage divides by 1024 ** k


def _ds_label(previous: str) -> Optional[str]:
    prefix = _DS_PREFIX.search(previous)
    label = previous[prefix.end():].strip() if prefix else previous.strip()
    if not label or "CPU Virtual Memory" in label or DS_LINE.search(label) or len(label) > 120:
        return None
    return label


def _ds_values(line: str):
    """(MA, Max_MA, CA, Max_CA in bytes, their rounding for the peaks, the label on the line), or None."""
    m = DS_LINE.search(line)
    if m:
        ma, ma_u, max_ma, max_ma_u, ca, ca_u, max_ca, max_ca_u = m.groups()
        values = [scaled_bytes(n, _DS_BINARY[u]) for n, u in ((ma, ma_u), (max_ma, max_ma_u), (ca, ca_u),
                                                          (max_ca, max_ca_u))]
        return (*values, half_unit(decimal_places(max_ma), _DS_BINARY[max_ma_u]),
                half_unit(decimal_places(max_ca), _DS_BINARY[max_ca_u]), _ds_label(line[:m.start()]))
    s = DS_STATUS.search(line)
    if s:
        values = [scaled_bytes(n, GIB) for n in s.groups()]
        return (*values, half_unit(4, GIB), half_unit(4, GIB), line[:s.start()].strip()[:120] or None)
    return None


def read_deepspeed(text: str) -> Optional[Measurement]:
    if "Max_MA" not in text and "current alloc=" not in text:
        return None
    readings, alloc, reserved = [], [], []
    tol_alloc = tol_res = 0
    previous = ""
    skipped = []
    for line in text_lines(text):
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
