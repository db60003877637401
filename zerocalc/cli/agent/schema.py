"""A CLI parser as a tool's input schema, and a tool's arguments back as that parser's argv.

The agent tools (cli/agent/commands.py) take exactly the CLI's flags, so the schema is read off the same argparse table
the CLI builds: a flag added there is a field here, with its help as the description and its choices as an enum.
Each field is the flag's long name without the dashes, dashes kept (`micro-batch`), so an agent's call reads like
the command line it stands for.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Dict, Iterable, List

from ...scenario import FieldError

# argparse types whose text may also be given as a JSON number (counts like "7B" or 124439808, capacities, ratios)
_NUMERIC_TYPES = {"_count": "integer", "_capacity": "integer", "int": "integer", "_factor": "number",
                  "_probability": "number", "float": "number"}
MAX_TEXT = 1_000_000          # a value (a config file's text) longer than this is refused, as the page's paste is


def _name(action: argparse.Action) -> str:
    return max(action.option_strings, key=len).lstrip("-")


def tool_actions(parser: argparse.ArgumentParser, skip: Iterable[str]) -> List[argparse.Action]:
    """The parser's optional flags a tool takes: not help/version, not the skipped dests (output format, listings)."""
    skipped = set(skip)
    return [a for a in parser._actions if a.option_strings and a.dest not in skipped
            and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]


def _field_schema(action: argparse.Action) -> dict:
    described = {"description": " ".join((action.help or "").split())} if action.help else {}
    if action.nargs == 0:                                          # store_true / store_const
        return {"type": "boolean", **described}
    if action.metavar == "PATH":
        return {"type": "string", "maxLength": MAX_TEXT, **described,
                "description": (f"the file's text (read as data, never executed). " + described.get("description", ""))
                .strip()}
    if action.choices is not None:
        values = list(action.choices)
        kind = "integer" if all(isinstance(v, int) for v in values) else "string"
        return {"type": kind, "enum": [v if kind == "integer" else str(v) for v in values], **described}
    kind = _NUMERIC_TYPES.get(getattr(action.type, "__name__", ""), None)
    if kind:
        return {"type": [kind, "string"], **described}
    return {"type": "string", **described}


def input_schema(actions: List[argparse.Action], extra: Dict[str, dict] = None) -> dict:
    properties = {_name(a): _field_schema(a) for a in actions}
    properties.update(extra or {})
    return {"type": "object", "properties": properties, "additionalProperties": False}


def to_argv(actions: List[argparse.Action], arguments: dict, files) -> List[str]:
    """The argv the arguments stand for. `files(name, text)` turns a file's text into a path the CLI reads.
    An unknown field or a value of the wrong JSON type is refused with a FieldError naming the field."""
    by_name = {_name(a): a for a in actions}
    argv: List[str] = []
    for name, value in arguments.items():
        action = by_name.get(name)
        if action is None:
            near = difflib.get_close_matches(str(name), list(by_name), n=3)     # the likely typo's fields first
            raise FieldError(name, value, (f"did you mean {' or '.join(near)}? " if near else "")
                             + "one of the tool's fields: " + ", ".join(sorted(by_name)))
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:
            if not isinstance(value, bool):
                raise FieldError(name, value, "true or false")
            argv += [flag] if value else []
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise FieldError(name, value, "a string or a number, as on the command line")
        text = str(value)
        if len(text) > MAX_TEXT:
            raise FieldError(name, f"{len(text):,} characters", f"at most {MAX_TEXT:,} characters")
        argv += [flag, files(name, text) if action.metavar == "PATH" else text]
    return argv
