"""Our own YAML and TOML writers for the exports: nested mappings of scalars (and flat lists), nothing else.

YAML strings are left plain only when PyYAML's resolver (and yaml_subset's) would read them back as the same
string; otherwise they are quoted. Floats always carry a dot, because YAML 1.1 reads 1e+16 as a string.
"""

from __future__ import annotations

import math
import re

from .yaml_subset import _BOOL, _DATE, _FLOAT, _INT, _INT60, _NULL

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _yaml_scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "." not in text:
            mantissa, _, exponent = text.partition("e")
            text = f"{mantissa}.0" + (f"e{exponent if exponent[0] in '+-' else '+' + exponent}" if exponent else "")
        return text
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and not any(r.fullmatch(value) for r in (_BOOL, _NULL, _INT, _FLOAT, _INT60,
                                                                              _DATE)):
            return value
        if all(0x20 <= ord(c) < 0x7F or ord(c) >= 0xA0 for c in value):
            return "'" + value.replace("'", "''") + "'"
        return '"' + "".join(_yaml_escape(c) for c in value) + '"'
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _yaml_escape(ch: str) -> str:
    if ch in '"\\':
        return "\\" + ch
    if 0x20 <= ord(ch) < 0x7F or ord(ch) >= 0xA0:
        return ch
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def dump_yaml(data: dict, comments=()) -> str:
    lines = [f"# {c}" for c in comments]

    def walk(node: dict, indent: int):
        for key, value in node.items():
            head = " " * indent + _yaml_scalar(key) + ":"
            if isinstance(value, dict):
                if value:
                    lines.append(head)
                    walk(value, indent + 2)
                else:
                    lines.append(head + " {}")
            elif isinstance(value, list):
                lines.append(head + " [" + ", ".join(_yaml_scalar(v) for v in value) + "]")
            else:
                lines.append(head + " " + _yaml_scalar(value))

    walk(data, 0)
    return "\n".join(lines) + "\n"


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
    """{table: {key: scalar or list}} (one level of tables, as torchtitan's configs use)."""
    lines = [f"# {c}" for c in comments]
    for name, body in tables.items():
        if lines:
            lines.append("")
        lines.append(f"[{_toml_key(name)}]")
        for key, value in body.items():
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
