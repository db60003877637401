"""Printed numbers and units -> exact bytes, with the rounding the printing allows."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal, InvalidOperation

from .measurement import BINARY, DECIMAL, MAX_BYTES, CalibrationError

NUMBER = r"[0-9][0-9,_]*(?:\.[0-9]+)?"


def scaled_bytes(number: str, scale: int) -> int:
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


def unit_scale(unit: str, gb: str = "decimal") -> int:
    key = (unit or "B").upper()
    if key in BINARY:
        return BINARY[key]
    if key in DECIMAL:
        return DECIMAL[key] if gb == "decimal" else 2 ** (10 * ("KMGT".index(key[0]) + 1))
    raise CalibrationError(unit, "a size unit: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB")


def to_bytes(number: str, unit: str = "B", gb: str = "decimal") -> int:
    """Exact bytes of a printed number and unit. "GB" is 10^9 bytes unless gb="binary" (then GB, MB, KB are GiB,
    MiB, KiB)."""
    return scaled_bytes(number, unit_scale(unit, gb))


def half_unit(decimals: int, scale: int) -> int:
    """The largest rounding error of a value printed to `decimals` places of `scale` bytes: half a last digit."""
    return int((Decimal(scale) / 2 / Decimal(10) ** decimals).to_integral_value(rounding=ROUND_CEILING))


def decimal_places(number: str) -> int:
    return len(number.split(".", 1)[1]) if "." in number else 0


def text_lines(text: str):
    return [line.rstrip("\r") for line in text.split("\n")]
