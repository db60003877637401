"""The arguments of a `swift sft|rlhf|pt ...` shell script, as ms-swift's examples write them: line continuations,
comments, `NAME=value` assignments (a plain `nproc_per_node=2` line, or `CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2`
before the command), `$NAME` / `${NAME}` of those assignments, and `$(expr A op B)` over integers (the examples'
`--gradient_accumulation_steps $(expr 16 / $nproc_per_node)`). Anything else a shell would expand stays text and is
refused where it is read. Nothing runs."""

from __future__ import annotations

import re

from ..common import FrameworkConfigError, script_line, shell_words

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\S*)$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
EXPR = re.compile(r"\$\(expr\s+(-?\d{1,9})\s*([-+*/])\s*(-?\d{1,9})\s*\)")
COMMANDS = ("sft", "rlhf", "pt")


def script_arguments(source) -> tuple:
    """(the command: sft / rlhf / pt, {flag: value or [values]}, {environment name: value}) of the script."""
    joined = script_line(source, "ms-swift script", "script", "ms-swift's examples are 1-3 KB")
    env = {}
    for word in _split(joined):                       # the assignments first, then their uses expanded
        found = ASSIGN.match(word)
        if found:
            env[found.group(1)] = _expand(found.group(2), env)
    words = _split(_expand(joined, env))
    i = 0
    while i < len(words) and not (words[i] == "swift" and i + 1 < len(words) and words[i + 1] in COMMANDS):
        i += 1
    if i >= len(words):
        raise FrameworkConfigError("config", "no swift command", "a script that runs swift sft, swift rlhf or "
                                                                 "swift pt (ms-swift's examples)")
    command, flags, words = words[i + 1], {}, words[i + 2:]
    i = 0
    while i < len(words):
        if not words[i].startswith("--"):
            i += 1
            continue
        name, _, inline = words[i][2:].partition("=")
        values, j = [], i + 1
        while j < len(words) and not words[j].startswith("--"):
            values.append(words[j])
            j += 1
        flags[name] = _scalar(inline) if inline else (True if not values else _scalar(values[0]) if len(values) == 1
                                                      else [_scalar(v) for v in values])
        i = j
    return command, flags, env


def _split(text: str) -> list:
    return shell_words(text, "script")


def _expand(text: str, env: dict) -> str:
    text = VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)
    return EXPR.sub(lambda m: str(_arith(int(m.group(1)), m.group(2), int(m.group(3)))), text)


def _arith(a: int, op: str, b: int) -> int:
    if op == "/":
        return a // b if b else 0
    return a + b if op == "+" else a - b if op == "-" else a * b


def _scalar(word: str):
    low = word.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(word) if len(word) < 40 else word
        except ValueError:
            pass
    return word
