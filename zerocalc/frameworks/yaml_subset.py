"""A strict subset of YAML: what `accelerate config` writes and people edit by hand. Standard library only.

Accepted: block mappings and block sequences (also a sequence at its key's indentation), plain, 'single' and
"double" quoted one-line scalars, # comments, one-line flow lists and maps of scalars ([a, b], {a: 1}), one
optional leading "---". Plain scalars resolve as PyYAML's safe_load (YAML 1.1) resolves them, because that is what
accelerate uses (commands/config/config_args.py: yaml.safe_load): null / ~, true/false/yes/no/on/off, decimal,
0x, 0b and leading-0 octal ints, floats with a dot, .inf, .nan.

Refused with the line and column: anchors, aliases (so no alias bombs), tags, directives, several documents,
block scalars (| and >), multi-line scalars, complex keys, merge keys, dates, base-60 numbers, duplicate keys,
tabs outside quotes, non-printable characters, nesting deeper than MAX_DEPTH, more than MAX_NODES nodes.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple

from .common import FrameworkConfigError, decode_text

MAX_DEPTH = 32
MAX_NODES = 100_000

# PyYAML 6 resolver.py, Resolver.add_implicit_resolver (YAML 1.1 implicit types).
_BOOL = re.compile(r"yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF")
_TRUE = frozenset("yes Yes YES true True TRUE on On ON".split())
_NULL = re.compile(r"~|null|Null|NULL|")
_INT = re.compile(r"[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+")
_INT60 = re.compile(r"[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+")
_FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_FLOAT60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*")
_DATE = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}.*)?")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r",
            "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028",
            "P": "\u2029"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_INDICATORS = "-?:,[]{}#&*!|>'\"%@`"
_REFUSED_START = {"&": "anchors", "*": "aliases", "!": "tags", "|": "block scalars", ">": "block scalars",
                  "%": "directives", "@": "reserved indicators", "`": "reserved indicators",
                  "?": "complex keys"}


class YamlError(FrameworkConfigError):
    def __init__(self, line: int, column: int, message: str):
        super().__init__("config", f"line {line}, column {column}: {message}",
                         "the YAML subset accelerate writes (block mappings and lists, plain or quoted scalars)",
                         line, column)


class Line(NamedTuple):
    number: int     # 1-based
    indent: int     # leading spaces
    text: str       # the line without its indentation (comments still in it)


def parse_yaml(source):
    """The document as dicts, lists and scalars (None for an empty document). Raises YamlError."""
    text = decode_text(source, "YAML")
    return _Parser(text).document()


def _printable(ch: str) -> bool:
    # The YAML 1.1 printable set, as PyYAML's Reader checks it.
    o = ord(ch)
    return (ch in "\t\n\r" or 0x20 <= o <= 0x7E or o == 0x85 or 0xA0 <= o <= 0xD7FF or 0xE000 <= o <= 0xFFFD
            or 0x10000 <= o <= 0x10FFFF)


class _Parser:
    def __init__(self, text: str):
        self.nodes = 0
        self.lines: List[Line] = []
        for number, raw in enumerate(text.split("\n"), 1):
            raw = raw[:-1] if raw.endswith("\r") else raw
            for col, ch in enumerate(raw, 1):
                if not _printable(ch) or ch == "\r":
                    raise YamlError(number, col, f"non-printable character {ch!r}")
            stripped = raw.lstrip(" ")
            if stripped.startswith("\t"):
                raise YamlError(number, len(raw) - len(stripped) + 1, "tabs cannot indent YAML")
            if stripped == "" or stripped.startswith("#"):
                continue
            self.lines.append(Line(number, len(raw) - len(stripped), stripped))
        self.i = 0

    # --- document level -------------------------------------------------------------------------------------
    def document(self):
        if self.lines and self.lines[0].indent == 0 and self._marker(self.lines[0].text) == "---":
            first = self.lines[0]
            rest = first.text[3:]
            comment = rest.find(" #")
            before = rest if comment < 0 else rest[:comment]
            if "\t" in before:                # PyYAML's scanner skips spaces only here: a tab starts no token
                raise YamlError(first.number, 4 + before.index("\t"), "tabs are only allowed inside quotes")
            if rest.strip() and not rest.strip().startswith("#"):
                raise YamlError(first.number, 5, "content after '---' on the same line")
            self.i = 1
        for line in self.lines[self.i:]:
            if line.indent == 0 and self._marker(line.text):
                raise YamlError(line.number, 1, "several documents ('---' or '...') are not supported")
            if line.text.startswith("%"):
                raise YamlError(line.number, line.indent + 1, "directives are not supported")
        if self.i >= len(self.lines):
            return None
        first = self.lines[self.i]
        value = self.block(first.indent, 0)
        if self.i < len(self.lines):
            line = self.lines[self.i]
            raise YamlError(line.number, line.indent + 1, "unexpected indentation or content")
        return value

    @staticmethod
    def _marker(text: str):
        for marker in ("---", "..."):
            if text == marker or text.startswith(marker + " "):
                return marker
        return None

    def _count(self, line: Line, col: int):
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise YamlError(line.number, col, f"more than {MAX_NODES:,} nodes")

    # --- block structure ------------------------------------------------------------------------------------
    def block(self, indent: int, depth: int):
        line = self.lines[self.i]
        if depth > MAX_DEPTH:
            raise YamlError(line.number, line.indent + 1, f"nesting deeper than {MAX_DEPTH}")
        if self._is_item(line.text):
            return self.sequence(indent, depth)
        if self._split_key(line) is not None:
            return self.mapping(indent, depth)
        value = self.inline_value(line, 0)       # a lone scalar document or item
        self.i += 1
        return value

    @staticmethod
    def _is_item(text: str) -> bool:
        return text == "-" or text.startswith("- ")

    def sequence(self, indent: int, depth: int) -> list:
        items = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent < indent:
                break
            if line.indent > indent or not self._is_item(line.text):
                if line.indent == indent and self._split_key(line) is not None:
                    break                      # the parent mapping continues (an indentless sequence ended)
                raise YamlError(line.number, line.indent + 1, "expected a '- ' list item at this indentation")
            self._count(line, line.indent + 1)
            rest = line.text[1:]
            content = rest.lstrip(" ")
            if not content or content.startswith("#"):
                self.i += 1
                items.append(self.child(indent, depth, allow_same=False))
                continue
            column = line.indent + 1 + (len(rest) - len(content))      # where the item's content starts
            self.lines[self.i] = Line(line.number, column, content)     # parse it as if it began a line there
            items.append(self.block(column, depth + 1))
        return items

    def mapping(self, indent: int, depth: int) -> dict:
        result = {}
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent < indent:
                break
            split = self._split_key(line) if line.indent == indent else None
            if split is None:
                if line.indent == indent and self._is_item(line.text):
                    break
                raise YamlError(line.number, line.indent + 1, "expected 'key: value' at this indentation")
            key, rest, rest_col, plain = split
            self._count(line, line.indent + 1)
            if key in result:
                raise YamlError(line.number, line.indent + 1, f"duplicate key {key!r}")
            if plain and key == "<<":
                raise YamlError(line.number, line.indent + 1, "merge keys ('<<') are not supported")
            body = rest.strip(" ")
            if body and not body.startswith("#"):
                result[key] = self.inline_value(Line(line.number, rest_col + (len(rest) - len(rest.lstrip(" "))),
                                                     rest.lstrip(" ")), 0)
                self.i += 1
                self._no_continuation(indent)
            else:
                self.i += 1
                result[key] = self.child(indent, depth, allow_same=True)
        return result

    def child(self, indent: int, depth: int, allow_same: bool):
        """The block under a key or '-' with nothing after it: deeper lines, an indentless list, or null."""
        if self.i < len(self.lines):
            nxt = self.lines[self.i]
            if nxt.indent > indent or (allow_same and nxt.indent == indent and self._is_item(nxt.text)):
                return self.block(nxt.indent, depth + 1)
        return None

    def _no_continuation(self, indent: int):
        if self.i < len(self.lines) and self.lines[self.i].indent > indent:
            line = self.lines[self.i]
            raise YamlError(line.number, line.indent + 1,
                            "unexpected indentation (multi-line scalars are not supported)")

    # --- keys -----------------------------------------------------------------------------------------------
    def _split_key(self, line: Line):
        """(key, text after the colon, its column, plain?) when the line is 'key: ...', else None."""
        text = line.text
        if not text or text[0] in "[{" or text[0] == "-" and self._is_item(text):
            return None                     # a list item, or a flow collection (flow keys are complex keys)
        if text[0] in "'\"":
            value, end = self.quoted(line, 0)
            j = end
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == ":" and (j + 1 == len(text) or text[j + 1] in " "):
                return value, text[j + 1:], line.indent + j + 1, False
            return None
        j = self._value_colon(text)
        if j is None:
            return None
        raw = text[:j].rstrip(" ")
        if not raw:
            raise YamlError(line.number, line.indent + 1, "a value without a key")
        self._check_plain_start(line, raw, 0)
        key = self.resolve(raw, line, 1)
        if isinstance(key, (dict, list)):
            raise YamlError(line.number, line.indent + 1, "complex keys are not supported")
        return key, text[j + 1:], line.indent + j + 1, True

    @staticmethod
    def _value_colon(text: str):
        """Index of the first ': ' (or a final ':') of a plain key, before any ' #' comment."""
        for j, ch in enumerate(text):
            if ch == "#" and j > 0 and text[j - 1] == " ":
                return None
            if ch == ":" and (j + 1 == len(text) or text[j + 1] == " "):
                return j
        return None

    # --- values on one line ---------------------------------------------------------------------------------
    def inline_value(self, line: Line, start: int):
        text = line.text
        ch = text[start]
        if ch in "'\"":
            value, end = self.quoted(line, start)
            self._only_comment(line, end)
            return value
        if ch in "[{":
            value, end = self.flow(line, start)
            self._only_comment(line, end)
            return value
        end = self._plain_end(text, start)
        raw = text[start:end].rstrip(" ")
        self._check_plain_start(line, raw, start)
        if self._value_colon(raw) is not None:
            raise YamlError(line.number, line.indent + start + 1, "a mapping cannot start here (': ' in a value)")
        if self._is_item(raw):
            raise YamlError(line.number, line.indent + start + 1, "a list cannot start here ('- ' in a value)")
        self._count(line, line.indent + start + 1)
        return self.resolve(raw, line, start + 1)

    @staticmethod
    def _plain_end(text: str, start: int) -> int:
        for j in range(start, len(text)):
            if text[j] == "#" and j > start and text[j - 1] == " ":
                return j
        return len(text)

    def _only_comment(self, line: Line, end: int):
        rest = line.text[end:]
        body = rest.lstrip(" ")
        if body and not (body.startswith("#") and len(rest) > len(body)):
            raise YamlError(line.number, line.indent + end + (len(rest) - len(body)) + 1,
                            "unexpected text after the value")

    def _check_plain_start(self, line: Line, raw: str, start: int):
        col = line.indent + start + 1
        if not raw:
            return
        first = raw[0]
        if first in _REFUSED_START and not (first == "?" and len(raw) > 1 and raw[1] != " "):
            raise YamlError(line.number, col, f"{_REFUSED_START[first]} ({first!r}) are not supported")
        if first in ",[]{}#":
            raise YamlError(line.number, col, f"a plain scalar cannot start with {first!r}")
        if "\t" in raw:
            raise YamlError(line.number, col + raw.index("\t"), "tabs are only allowed inside quotes")
        if first == ":" and (len(raw) == 1 or raw[1] == " "):
            raise YamlError(line.number, col, "a value indicator without a key")

    def quoted(self, line: Line, start: int):
        """A one-line quoted scalar starting at text[start]; returns (string, index after the closing quote)."""
        text, quote = line.text, line.text[start]
        out, j = [], start + 1
        while j < len(text):
            ch = text[j]
            if quote == "'" and ch == "'":
                if j + 1 < len(text) and text[j + 1] == "'":
                    out.append("'")
                    j += 2
                    continue
                return self._counted("".join(out), line, start), j + 1
            if quote == '"' and ch == '"':
                return self._counted("".join(out), line, start), j + 1
            if quote == '"' and ch == "\\":
                j = self._escape(line, j, out)
                continue
            out.append(ch)
            j += 1
        raise YamlError(line.number, line.indent + start + 1, "unclosed quote (multi-line scalars are not supported)")

    def _counted(self, value, line: Line, start: int):
        self._count(line, line.indent + start + 1)
        return value

    def _escape(self, line: Line, j: int, out: list) -> int:
        text = line.text
        if j + 1 >= len(text):
            raise YamlError(line.number, line.indent + j + 1, "line continuation in a quoted scalar")
        code = text[j + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            return j + 2
        if code in _HEX_ESCAPES:
            width = _HEX_ESCAPES[code]
            digits = text[j + 2:j + 2 + width]
            if len(digits) == width and all(c in "0123456789abcdefABCDEF" for c in digits):
                point = int(digits, 16)
                if point <= 0x10FFFF and not 0xD800 <= point <= 0xDFFF:
                    out.append(chr(point))
                    return j + 2 + width
        raise YamlError(line.number, line.indent + j + 1, f"unknown escape '\\{code}'")

    def flow(self, line: Line, start: int):
        """[a, b] or {a: 1, b: 2} of scalars, closed on the same line."""
        text, opener = line.text, line.text[start]
        closer = "]" if opener == "[" else "}"
        items, result = [], {}
        j = start + 1
        expect_item = True
        while True:
            while j < len(text) and text[j] == " ":
                j += 1
            if j >= len(text):
                raise YamlError(line.number, line.indent + start + 1,
                                "a flow collection must close on the same line")
            ch = text[j]
            if ch == closer:
                return (items if opener == "[" else result), j + 1
            if not expect_item:
                if ch != ",":
                    raise YamlError(line.number, line.indent + j + 1, f"expected ',' or {closer!r}")
                j += 1
                expect_item = True
                continue
            if ch == ",":
                raise YamlError(line.number, line.indent + j + 1, "an empty item in a flow collection")
            if ch in "[{":
                raise YamlError(line.number, line.indent + j + 1, "nested flow collections are not supported")
            quoted_key = ch in "'\""
            value, j = self._flow_scalar(line, j, closer)
            if opener == "{":
                while j < len(text) and text[j] == " ":
                    j += 1
                if j >= len(text) or text[j] != ":":
                    raise YamlError(line.number, line.indent + j + 1, "expected ':' in a flow mapping")
                j += 1
                while j < len(text) and text[j] == " ":
                    j += 1
                if j < len(text) and text[j] in "[{":
                    raise YamlError(line.number, line.indent + j + 1, "nested flow collections are not supported")
                item, j = (None, j) if j < len(text) and text[j] in ",}" else self._flow_scalar(line, j, closer)
                if value in result:
                    raise YamlError(line.number, line.indent + start + 1, f"duplicate key {value!r}")
                if value == "<<" and not quoted_key:
                    raise YamlError(line.number, line.indent + start + 1, "merge keys ('<<') are not supported")
                result[value] = item
            else:
                items.append(value)
            expect_item = False

    def _flow_scalar(self, line: Line, j: int, closer: str):
        text = line.text
        if j < len(text) and text[j] in "'\"":
            return self.quoted(line, j)
        end = j
        while end < len(text) and text[end] not in ",?[]{}" and not (
                text[end] == ":" and (end + 1 == len(text) or text[end + 1] in " ,[]{}")) and not (
                text[end] == "#" and end > j and text[end - 1] == " "):
            end += 1
        raw = text[j:end].rstrip(" ")
        if end < len(text) and text[end] == "#":
            raise YamlError(line.number, line.indent + end + 1, "a comment inside a flow collection")
        self._check_plain_start(line, raw, j)
        if not raw:
            raise YamlError(line.number, line.indent + j + 1, "an empty item in a flow collection")
        if raw[0] == ":" or (raw[0] in "-?" and (len(raw) == 1 or raw[1] == " ")):
            raise YamlError(line.number, line.indent + j + 1, f"{raw[0]!r} cannot start a flow item")
        self._count(line, line.indent + j + 1)
        return self.resolve(raw, line, j + 1), end

    # --- scalars --------------------------------------------------------------------------------------------
    @staticmethod
    def resolve(raw: str, line: Line, col: int):
        """A plain scalar's value, as PyYAML's SafeLoader resolves and constructs it."""
        where = (line.number, line.indent + col)
        if _NULL.fullmatch(raw):
            return None
        if _BOOL.fullmatch(raw):
            return raw in _TRUE
        if _INT.fullmatch(raw):
            return _int(raw, where)
        if _FLOAT.fullmatch(raw):
            return _float(raw)
        if _INT60.fullmatch(raw) or _FLOAT60.fullmatch(raw):
            raise YamlError(*where, f"base-60 number {raw!r}: quote it")
        if _DATE.fullmatch(raw):
            raise YamlError(*where, f"date {raw!r}: quote it")
        if raw == "<<":
            raise YamlError(*where, "merge keys ('<<') are not supported")
        if raw == "=":
            raise YamlError(*where, "the '=' value key is not supported")
        return raw


def _int(raw: str, where) -> int:
    # PyYAML constructor.py, SafeConstructor.construct_yaml_int.
    value = raw.replace("_", "")
    sign = -1 if value[0] == "-" else 1
    value = value[1:] if value[0] in "+-" else value
    try:
        if value == "0":
            return 0
        if value.startswith("0b"):
            return sign * int(value[2:], 2)
        if value.startswith("0x"):
            return sign * int(value[2:], 16)
        if value[0] == "0":
            return sign * int(value, 8)
        return sign * int(value)
    except ValueError:
        raise YamlError(*where, f"malformed number {raw!r}") from None


def _float(raw: str) -> float:
    # PyYAML constructor.py, SafeConstructor.construct_yaml_float.
    value = raw.replace("_", "").lower()
    sign = -1.0 if value[0] == "-" else 1.0
    value = value[1:] if value[0] in "+-" else value
    if value == ".inf":
        return sign * float("inf")
    if value == ".nan":
        return float("nan")
    return sign * float(value)
