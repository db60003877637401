"""Every format found in a pasted text, merged into one Measurement (each quantity from the most exact format)."""

from __future__ import annotations

from ...scenario import FieldError
from .deepspeed import read_deepspeed
from .measurement import (
    FORMATS,
    MAX_TEXT_CHARS,
    MAX_TEXT_LINES,
    QUANTITIES,
    CalibrationError,
    Measurement,
    formats_sentence,
)
from .memory_stats import read_memory_stats
from .memory_summary import read_memory_summary
from .nvidia_smi import read_nvidia_smi
from .plain import read_plain
from .probe import read_probe
from .torch_oom import read_torch_oom

_PARSERS = {"probe": read_probe, "memory_stats": read_memory_stats, "memory_summary": read_memory_summary,
            "deepspeed": read_deepspeed, "torch_oom": read_torch_oom, "nvidia_smi": read_nvidia_smi,
            "plain": read_plain}


def _checked(text) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise CalibrationError(type(text).__name__, "text (str)")
    if len(text) > MAX_TEXT_CHARS:
        raise CalibrationError(f"{len(text):,} characters", f"at most {MAX_TEXT_CHARS:,} characters")
    lines = text.count("\n") + 1
    if lines > MAX_TEXT_LINES:
        raise CalibrationError(f"{lines:,} lines", f"at most {MAX_TEXT_LINES:,} lines (a run's memory figures fit in "
                               "a few hundred; nvidia-smi prints one row a GPU)")
    if not text.strip():
        raise CalibrationError(text, formats_sentence())
    return text


def _one(name: str, text, gb: str = "decimal") -> Measurement:
    text = _checked(text)
    got = _PARSERS[name](text, gb) if name == "plain" else _PARSERS[name](text)
    if got is None:
        raise CalibrationError(text.strip(), formats_sentence((name,)))
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
        raise CalibrationError(text.strip(), formats_sentence())
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
                       next((m.gpu_name for m in found if m.gpu_name), None),
                       max((m.failed_request_bytes for m in found if m.failed_request_bytes is not None), default=None),
                       next((m.failed_phase for m in found if m.failed_phase), None),
                       next((m.failed_frame for m in found if m.failed_frame), None))
