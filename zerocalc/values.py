"""The one typed reader of config values, used by every importer (DeepSpeed JSON, accelerate YAML, torchtitan TOML,
verl / TRL / OpenRLHF, a Hugging Face config.json): each value's type and range is checked before any arithmetic,
`range` or constructor sees it, and a refusal names the key, describes what was given in words ("an integer of
5,000 digits", "a list of 2 items", "the text 'x'", "the number 8.5") and says what is allowed.

The rules, decided once here:
- a count is an int. A bool is refused (True is not 1 in a config), text is refused, and a float is refused even
  when integral: OpenRLHF's and TRL's argparse (type=int) refuse "2.0", torchtitan's and accelerate's readers
  here always took ints only, and a count written 8.0 or 8.5 is a typo to point at, not to round. `lax=True` is
  pydantic v2's lax int, for DeepSpeed's own models only: bools, integral floats and decimal text ("5",
  " 1_000 ", "2.0") are read as DeepSpeed reads them; 8.5 is still refused;
- every integer is held to MAX_DIGITS digits before it is converted or compared, and the loaders refuse the ones
  Python cannot even parse (over 4,300 digits: json / yaml / tomllib raise ValueError);
- hex and octal text ("0x10", "0o17") is never a number: YAML 1.1 and TOML already read unquoted 0x10 as the
  integer 16 (their own rule, so accepted as 16); as text it is refused, with the reason;
- NaN and infinities are refused wherever a number is read; lists and mappings wherever a scalar belongs.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Optional

from .scenario import FieldError

MAX_DIGITS = 30                  # a config count beyond 10**30 is a typo or an attack; no byte count comes near
COUNT_MAX = 10**18               # the default ceiling of a count: exact in every sum and product the core forms
_DECIMAL = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0*)?")
_RADIX = re.compile(r"[+-]?0[xXoObB][0-9a-fA-F_]+")
PYDANTIC_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
PYDANTIC_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
# accelerate's own truth values (accelerate/utils/environment.py str_to_bool): y, yes, t, true, on, 1 / n, no, f,
# false, off, 0; the YAML loader has already turned unquoted yes/no/true/false into booleans.
ACCELERATE_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
ACCELERATE_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})


def digits(number: int) -> int:
    """How many decimal digits an int has, without str() (which raises over 4,300 digits)."""
    n = abs(number)
    if n < 10:
        return 1
    guess = int(n.bit_length() * 0.30102999566398)        # log10(2): the true count is guess or guess + 1
    return guess + 1 if n >= 10**guess else guess


class Given(str):
    """What a refusal got, in words, for a value that has no short honest repr (a huge integer, a list, a
    mapping): repr() gives the words unquoted, so every message that writes `got {value!r}` stays truthful."""

    def __repr__(self) -> str:
        return str(self)


def describe(value) -> str:
    """A value in words, as a message should say what was given."""
    if isinstance(value, Given):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        count = digits(value)
        return f"the integer {value}" if count <= MAX_DIGITS else f"an integer of {count:,} digits"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN (not a number)"
        if math.isinf(value):
            return "infinity" if value > 0 else "minus infinity"
        return f"the number {value!r}"
    if isinstance(value, str):
        if not value:
            return "empty text"
        if len(value) > 60:
            return f"the text {value[:60]!r}... ({len(value):,} characters)"
        return f"the text {value!r}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} item{'s' * (len(value) != 1)}"
    if isinstance(value, dict):
        return f"a mapping of {len(value):,} key{'s' * (len(value) != 1)}"
    return f"a {type(value).__name__}"


def shown(value):
    """The value a refusal keeps in `.value`: short scalars as they are (their repr is honest), anything else its
    description (a Given)."""
    if isinstance(value, Given) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if digits(value) <= MAX_DIGITS else Given(describe(value))
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return value if len(value) <= 80 else value[:80] + "..."
    return Given(describe(value))


_LONG_RUN = re.compile(r"[0-9][0-9_]{%d,}" % (sys.get_int_max_str_digits() or 4300))


def long_integer(text: str):
    """(offset, digits) of the first integer too long for Python to read (json, yaml and tomllib raise ValueError
    on it), or None: a loader's ValueError is then said in these words, not Python's."""
    found = _LONG_RUN.search(text)
    return None if found is None else (found.start(), len(found.group().replace("_", "")))


def long_integer_refusal(error, text: str, what: str):
    """The refusal of a file holding an integer Python cannot read, at its line and column (None: not that)."""
    found = long_integer(text)
    if found is None:
        return None
    line = text.count("\n", 0, found[0]) + 1
    column = found[0] - (text.rfind("\n", 0, found[0]) + 1) + 1
    exc = error("config", Given(f"an integer of {found[1]:,} digits at line {line}, column {column}"),
                f"valid {what}, whose numbers have at most {MAX_DIGITS} digits")
    exc.line, exc.column = line, column
    return exc


class Refusal(FieldError):
    """A FieldError whose message says what was given in words (describe), never as a repr that could pass a
    description off as quoted text; `given` keeps those words, `value` a short honest form (shown)."""

    def __init__(self, field: str, value, allowed: str):
        super().__init__(field, shown(value), allowed)
        self.given = describe(value)
        self.args = (f"{self.field}: got {self.given}; allowed: {self.allowed}",)


def _range_text(lo, hi, noun: str = "an integer") -> str:
    if lo is None and hi is None:
        return noun
    if hi is None:
        return f"{noun} of at least {lo:,}"
    if lo is None:
        return f"{noun} of at most {hi:,}"
    return f"{noun} from {lo:,} to {hi:,}"


def count(key: str, value, lo: Optional[int] = 1, hi: Optional[int] = COUNT_MAX, *, lax: bool = False,
          what: str = "", error=None) -> int:
    """An integer within [lo, hi] (either bound None: open). See the module's rules for bools, floats and text."""
    error = error or Refusal
    allowed = what or _range_text(lo, hi)
    number = None
    if isinstance(value, Given):                    # already described: an integer a tokenizer could not read
        raise error(key, value, f"{allowed} (at most {MAX_DIGITS} digits)")
    if isinstance(value, bool):
        if not lax:
            raise error(key, value, allowed)
        number = int(value)
    elif isinstance(value, int):
        if digits(value) > MAX_DIGITS:
            raise error(key, value, f"{allowed} (at most {MAX_DIGITS} digits)")
        number = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise error(key, value, allowed)
        if not lax or value != int(value):              # 2.0 too: argparse's int and tomllib's refuse it
            raise error(key, value, allowed)
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if _RADIX.fullmatch(text):
            raise error(key, value, f"{allowed}, written in decimal (hex, octal and binary text is not read as a "
                                    "number)")
        if not lax or len(text) > MAX_DIGITS + 8 or not _DECIMAL.fullmatch(text):
            raise error(key, value, allowed)
        number = int(text.replace("_", "").split(".")[0])
    else:
        raise error(key, value, allowed)
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise error(key, value, allowed)
    return number


def number(key: str, value, lo: float, hi: float, *, low_open: bool = False, lax: bool = False, what: str = "",
           error=None) -> float:
    """A finite number within [lo, hi] ((lo, hi] with low_open) as a float; ints of any size compared exactly
    first (float() of a 400-digit int raises). lax: decimal text too (pydantic's lax float)."""
    error = error or Refusal
    allowed = what or (f"a number above {lo} and at most {hi}" if low_open else f"a number from {lo} to {hi}")
    if isinstance(value, (bool, Given)) or not isinstance(value, (int, float, str)):
        raise error(key, value, allowed)
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = float(text) if lax and len(text) <= 40 and not _RADIX.fullmatch(text) else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise error(key, value, allowed)
        value_f = parsed
    elif isinstance(value, int):
        if digits(value) > MAX_DIGITS:
            raise error(key, value, allowed)
        value_f = float(value)
    else:
        value_f = value
    if not math.isfinite(value_f) or value_f > hi or value_f < lo or (low_open and value_f == lo):
        raise error(key, value, allowed)
    return value_f


def fraction(key: str, value, error=None) -> float:
    """A share of something: above 0, at most 1."""
    return number(key, value, 0.0, 1.0, low_open=True, what="a fraction above 0 and at most 1", error=error)


def boolean(key: str, value, *, rule: str = "strict", error=None) -> bool:
    """true or false. rule "pydantic" (DeepSpeed's models) also reads 0 / 1 and yes/no/on/off/t/f/y/n text;
    "accelerate" its str_to_bool words and 0 / 1."""
    error = error or Refusal
    if isinstance(value, bool):
        return value
    if rule == "pydantic":
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in PYDANTIC_TRUE | PYDANTIC_FALSE:
            return value.lower() in PYDANTIC_TRUE
    if rule == "accelerate" and isinstance(value, (str, int)) and not isinstance(value, bool):
        text = str(value).lower() if isinstance(value, str) or value in (0, 1) else ""
        if text in ACCELERATE_TRUE | ACCELERATE_FALSE:
            return text in ACCELERATE_TRUE
        raise error(key, value, "true or false (accelerate also reads yes/no, on/off, 1/0)")
    raise error(key, value, "true or false")


def one_of(key: str, value, options, *, fold_case: bool = False, what: str = "", error=None):
    """value if it is one of options (optionally ignoring case), in the options' spelling. Only text and numbers
    are compared: a list or mapping is refused, never hashed."""
    error = error or Refusal
    allowed = what or "one of " + ", ".join(str(o) for o in options)
    if isinstance(value, str) and fold_case:
        for option in options:
            if isinstance(option, str) and option.lower() == value.lower():
                return option
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool) and \
            not (isinstance(value, int) and digits(value) > MAX_DIGITS):
        for option in options:
            if type(option) is type(value) and option == value:
                return option
    raise error(key, value, allowed)


def text(key: str, value, *, optional: bool = False, what: str = "text", error=None):
    """A string (a path, a name); None too when optional."""
    error = error or Refusal
    if isinstance(value, str) or (optional and value is None):
        return value
    raise error(key, value, what + (" or null" if optional else ""))


__all__ = ["MAX_DIGITS", "COUNT_MAX", "Given", "Refusal", "describe", "digits", "shown", "count", "number",
           "fraction", "boolean", "one_of", "text"]
