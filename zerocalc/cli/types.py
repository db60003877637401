"""The CLI's argument types: each parses one flag's text or raises argparse.ArgumentTypeError with the allowed
range; the parser that reports a bad argument as one line (UsageError), never argparse's usage block."""

from __future__ import annotations

import argparse
import math

from ..layout import parse_stage_layers
from ..model.finetune import HEAD_TARGET, TARGETS
from ..tables import DTYPE_BITS
from ..units import parse_capacity, parse_count


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, never the usage block
        raise UsageError(message)


def _count(text: str) -> int:
    try:
        return parse_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _stage_layers(text: str) -> tuple:
    try:
        return parse_stage_layers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _capacity(text: str) -> int:
    try:
        return parse_capacity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a number above 0 and at most 100")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a probability from 0 up to (not including) 1")
    return value


def _targets(text: str) -> tuple:
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    if items == ("all-linear",) or (items and all(t in TARGETS + (HEAD_TARGET,) for t in items)):
        return items
    raise argparse.ArgumentTypeError(f"got {text!r}; allowed: some of {','.join(TARGETS + (HEAD_TARGET,))}, "
                                     "or all-linear")


def _versions(text: str) -> tuple:
    """--versions transformers=4.45,bitsandbytes=0.43.1: the library releases the run used (zerocalc/versions.py)."""
    from ..versions import parse
    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _names(allowed):
    def parse(text: str) -> tuple:
        items = tuple(t.strip() for t in text.split(",") if t.strip())
        if not all(t in allowed for t in items):
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: some of {','.join(allowed)}")
        return items
    return parse


def _dtype_or_none(text: str):
    if text == "none":
        return "none"
    if text not in DTYPE_BITS:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: none, {', '.join(DTYPE_BITS)}")
    return text
