"""Our TOML writer for the torchtitan export: tables of scalars (and flat lists), nothing else; tomllib reads it
back identically (the standard library has a TOML reader but no writer). YAML is written by PyYAML
(frameworks/accelerate/document.py).
"""

from __future__ import annotations

import math
import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_toml_escape(c) for c in value) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _toml_escape(ch: str) -> str:
    special = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    if ch in special:
        return special[ch]
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"\\u{ord(ch):04x}"
    return ch


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_value(key)


def dump_toml(tables: dict, comments=()) -> str:
    """{table: {key: scalar or list}}; a table named by a tuple is a nested one ([quantize.linear.float8])."""
    lines = [f"# {c}" for c in comments]
    for name, body in tables.items():
        if lines:
            lines.append("")
        path = name if isinstance(name, tuple) else (name,)
        lines.append(f"[{'.'.join(_toml_key(part) for part in path)}]")
        for key, value in body.items():
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
