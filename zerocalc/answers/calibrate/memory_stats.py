"""torch.cuda.memory_stats() as JSON, as its printed OrderedDict, or memory_stats_as_nested_dict()'s nested form."""

from __future__ import annotations

import json
import re
from typing import Optional

from .measurement import MAX_BYTES, Measurement

# Bounded, and possessive wherever what follows cannot start with what was taken: nothing is ever given back.
_STAT_PAIR = re.compile(r"""['"]([A-Za-z_][A-Za-z0-9_.]{0,120}+)['"]\s*+[:,]\s*+(-?[0-9]{1,20}+)\b""", re.ASCII)


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


def read_memory_stats(text: str) -> Optional[Measurement]:
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
