"""Units appear only here, at display time: GB = 10^9 bytes, GiB = 2^30 bytes, never one called the other.

Formatting divides exact integers with Decimal arithmetic, so 10^18 bytes prints without float rounding or
scientific notation. Parsing of counts ("7B", "1.5T", "1e9") is exact too.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext

UNIT_BYTES = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15, "EB": 10**18,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60,
}
DECIMAL_UNITS = ("B", "KB", "MB", "GB", "TB", "PB", "EB")
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
# "decimal" and "binary" pick the largest unit of that system that keeps the number >= 1.
UNIT_CHOICES = ("decimal", "binary") + tuple(UNIT_BYTES)

COUNT_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12, "P": 10**15}


def auto_unit(nbytes: int, system: str = "decimal") -> str:
    units = DECIMAL_UNITS if system == "decimal" else BINARY_UNITS
    chosen = units[0]
    for unit in units:
        if abs(nbytes) >= UNIT_BYTES[unit]:
            chosen = unit
    return chosen


def resolve_unit(nbytes: int, unit: str) -> str:
    return auto_unit(nbytes, unit) if unit in ("decimal", "binary") else unit


def in_unit(nbytes: int, unit: str, decimals: int = 2) -> str:
    """The number alone, in `unit`, rounded half-even to `decimals` places: in_unit(28_672 * 10**9, 'TB', 1) == '28.7'."""
    with localcontext() as ctx:
        ctx.prec = 60
        value = Decimal(nbytes) / Decimal(UNIT_BYTES[unit])
        quantum = Decimal(1).scaleb(-decimals)
        return f"{value.quantize(quantum, rounding=ROUND_HALF_EVEN):,f}"


def format_bytes(nbytes: int, unit: str = "decimal", decimals: int = 2) -> str:
    """'16.00 GB', '14.90 GiB', '512 B'. `unit` is a unit name or 'decimal' / 'binary' for automatic choice."""
    unit = resolve_unit(nbytes, unit)
    return f"{in_unit(nbytes, unit, 0 if unit == 'B' else decimals)} {unit}"


def percent_text(part: int, whole: int, decimals: int = 1) -> str:
    """part / whole as a percentage, with more decimals where the rounding would say 100% of a part that is not
    the whole (a fit at 99.96% is not "100.0%", nor a miss at 100.04%)."""
    pct = 100 * part / whole
    text = f"{pct:.{decimals}f}%"
    while part != whole and decimals < 6 and float(text[:-1]) == 100.0:
        decimals += 1
        text = f"{pct:.{decimals}f}%"
    if part != whole and float(text[:-1]) == 100.0:       # within a millionth: cut toward the side it is on
        step = 10 ** -decimals
        text = f"{100 - step if part < whole else 100 + step:.{decimals}f}%"
    return text


def parse_count(text: str) -> int:
    """'7B' -> 7_000_000_000; '1.5T', '350M', '1e9', '124439808', '1_000'. Must denote a whole number."""
    hint = f"not a count: {text!r} (examples: 7B, 1.5T, 350M, 1e9, 124439808)"
    raw = str(text).strip().replace("_", "").replace(",", "")
    suffix = raw[-1:].upper() if raw[-1:].isalpha() and raw[-1:].upper() in COUNT_SUFFIXES else ""
    number = raw[:-1] if suffix else raw
    if not number or len(number) > 40:
        raise ValueError(hint)
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(hint) from None
    if not value.is_finite() or value.adjusted() > 30:
        raise ValueError(f"{hint}: must be finite and below 10^31")
    with localcontext() as ctx:
        ctx.prec = 80
        value = value * COUNT_SUFFIXES[suffix]
        if value != value.to_integral_value():
            raise ValueError(f"not a whole number: {text!r}")
        return int(value)


_BYTE_UNITS = {u.lower(): u for u in UNIT_BYTES}
MIN_CAPACITY, MAX_CAPACITY = 2**30, 2**50


def parse_capacity(text: str) -> int:
    """A memory capacity with its unit: '48 GB' -> 48 * 10^9, '44.4 GiB', '46068 MiB', '85520809984 B'; rounded
    down to whole bytes. A bare number is bytes and must be at least 1 GiB: '48' is a missing unit, refused (taken
    as bytes it would be a 48-byte GPU). 'G', 'M' alone are refused as ambiguous (GB or GiB?)."""
    raw = str(text).strip().replace("_", "").replace(",", "")
    if not raw or len(raw) > 40:
        raise ValueError(f"not a capacity: {text!r} (examples: 48 GB, 44.4 GiB, 46068 MiB)")
    head = raw.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    number, unit = head.strip(), raw[len(head):]
    if not number:
        raise ValueError(f"not a capacity: {text!r} (examples: 48 GB, 44.4 GiB, 46068 MiB)")
    if unit and unit.lower() not in _BYTE_UNITS:
        raise ValueError(f"unknown unit {unit!r} in {text!r}: use B, MB, GB, TB (powers of 10) or MiB, GiB, TiB "
                         "(powers of 2)")
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a capacity: {text!r} (examples: 48 GB, 44.4 GiB, 46068 MiB)") from None
    if not value.is_finite() or value < 0 or value.adjusted() > 20:
        raise ValueError(f"not a capacity: {text!r}: a positive number with a unit, e.g. 48 GB")
    nbytes = int(value * UNIT_BYTES[_BYTE_UNITS[unit.lower()]]) if unit else int(value)
    if not unit and nbytes < MIN_CAPACITY:
        raise ValueError(f"{text!r} has no unit and is below 1 GiB as bytes: give the unit, e.g. {number} GB or "
                         f"{number} GiB")
    if not MIN_CAPACITY <= nbytes <= MAX_CAPACITY:
        raise ValueError(f"{text!r} is {nbytes:,} bytes: a GPU's capacity is from 1 GiB to 1 PiB")
    return nbytes


def capacity_text(nbytes: int) -> str:
    """The shortest exact spelling parse_capacity reads back: 48 * 10^9 -> '48 GB', 46068 MiB -> '46068 MiB'."""
    for unit in ("TB", "TiB", "GB", "GiB", "MB", "MiB"):
        if nbytes % UNIT_BYTES[unit] == 0:
            return f"{nbytes // UNIT_BYTES[unit]} {unit}"
    return f"{nbytes} B"
