"""A field's text form in a link: what is allowed, its parse (never evaluated; bounded before parsing) and its
format. Fields are ui.state.fields.Field rows (kind, choices, lo, hi)."""

from __future__ import annotations

import math

from zerocalc.units import parse_capacity, parse_count

from .stages import parse_ints
from .step import lengths_from_text, lengths_text

MAX_VALUE_CHARS = 64          # longer URL values are refused before parsing


def allowed(f) -> str:
    if f.kind == "choice":
        return "one of " + ", ".join(f.choices)
    if f.kind == "bool":
        return "true or false"
    if f.kind in ("multi", "ints"):
        return "a comma-separated list of " + ", ".join(f.choices) + " (or nothing)"
    if f.kind == "points":
        return f.choices[0] + " (or nothing)"
    if f.kind in ("prob", "factor"):
        return f"a number from {f.lo:g} to {f.hi:g}"
    if f.kind == "bytes":
        return "a capacity with its unit, from 1 GiB to 1 PiB (48 GB, 44.4 GiB, 46068 MiB; a bare number is bytes)"
    return f"an integer from {f.lo:,} to {f.hi:,}"


def parse_value(f, text: str):
    """The value a URL string denotes for this field; ValueError when it is not allowed."""
    text = str(text).strip()
    if f.kind == "ints":             # bounded by its own reader (ui/state/stages.py)
        return parse_ints(text) if text else ()
    if f.kind == "points":           # bounded by its own reader (zerocalc/step/batches.py parse_points)
        if len(text) > 4 * MAX_VALUE_CHARS:
            raise ValueError("too long")
        return lengths_from_text(text)
    if len(text) > MAX_VALUE_CHARS:
        raise ValueError("too long")
    if f.kind == "choice":
        if text not in f.choices:
            raise ValueError(text)
        return text
    if f.kind == "bool":
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(text)
        return text.lower() in ("true", "1")
    if f.kind == "multi":
        items = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if any(t not in f.choices for t in items):
            raise ValueError(text)
        return items
    if f.kind in ("prob", "factor"):
        value = float(text)
        if not math.isfinite(value) or not f.lo <= value <= f.hi:
            raise ValueError(text)
        return value
    value = parse_capacity(text) if f.kind == "bytes" else parse_count(text)
    if not f.lo <= value <= f.hi:
        raise ValueError(text)
    return value


def format_value(f, value) -> str:
    if f.kind == "bool":
        return "true" if value else "false"
    if f.kind in ("multi", "ints"):
        return ",".join(map(str, value))
    if f.kind == "points":
        return lengths_text(value)
    if f.kind in ("prob", "factor"):
        return repr(float(value))
    return str(value)
