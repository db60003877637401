"""What the RL config importers share: the result (settings for rl/build.py, the policy's flags for today's CLI,
what was read, every key ignored with its reason, notes), the tokenizers of a run script's arguments, our small
scalar rule for Hydra override values, and the match of a Hugging Face model id to a preset.

Configs are data: read, never executed; a shell script's variables ($HOME) and substitutions stay text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List

from ...frameworks.presets import preset_for  # noqa: F401  (re-exported: the RL importers import it from here)
from ...frameworks.common import MAX_SCRIPT_CHARS  # noqa: F401  (re-exported: tests/test_rl_script_bounds.py)
from ...frameworks.common import boolean, count, fraction, number, one_of, script_line, shell_words
from ...values import Given

MAX_LISTED = 80
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclass
class ImportedRL:
    format: str
    settings: Dict = field(default_factory=dict)      # rl/build.py keys; "rollout" a dict of Rollout fields
    policy: Dict[str, str] = field(default_factory=dict)   # today's flags for the policy: "--gpus" -> "8"
    read: Dict[str, object] = field(default_factory=dict)  # key -> value, as the file gives them
    ignored: List[dict] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    given_as: Dict[str, str] = field(default_factory=dict)  # a key read under its current name -> as the file wrote it

    def set(self, key: str, value) -> None:
        if key.startswith("rollout."):
            self.settings.setdefault("rollout", {})[key[8:]] = value
        else:
            self.settings[key] = value

    def ignore(self, key: str, reason: str) -> None:
        self.ignored.append({"key": key, "reason": reason})

    def merged(self, explicit: dict) -> dict:
        """The imported settings with every explicit one winning (the rollout's field by field)."""
        out = {**self.settings, **{k: v for k, v in explicit.items() if k != "rollout"}}
        rollout = {**self.settings.get("rollout", {}), **explicit.get("rollout", {})}
        if rollout:
            out["rollout"] = rollout
        return out

    def policy_flags(self, rest: list) -> list:
        """Today's flags for the policy: the ones given win; a model named on the command line replaces the
        imported one whichever way it is named."""
        given = {a.split("=")[0] for a in rest if a.startswith("--")}
        model_given = bool(given & {"--model", "--config", "--hub", "--layers"})
        extra = []
        for flag, value in self.policy.items():
            if flag in given or (flag == "--model" and model_given):
                continue
            extra += [flag] if value is None else [flag, str(value)]
        return list(rest) + extra

    def to_dict(self) -> dict:
        return {"format": self.format, "set": {k: v for k, v in self.read.items()},
                "policy_flags": dict(self.policy), "ignored_keys": self.ignored[:MAX_LISTED],
                "ignored_more": max(0, len(self.ignored) - MAX_LISTED), "notes": list(self.notes)}


COUNT_LIMIT = 10**9        # a batch, length or GPU count in an RL config: far above any real run, exact in products
GPU_LIMIT = 10**7          # the page's and the CLI's most workers (scenario.INT_LIMITS)


class KeyReader:
    """A getter over a file's items: each key read is recorded in the import's `read` and in `used` (the keys left
    over are the ignored ones). The typed getters check a value with zerocalc/values.py, the one typed reader
    of every importer, before any arithmetic sees it; null (or an absent key) reads as the default."""

    def __init__(self, items: dict, imp: ImportedRL):
        self.items, self.imp, self.used = items, imp, set()

    def __call__(self, key, default=None):
        if key in self.items:
            self.used.add(key)
            self.imp.read[key] = self.items[key]
            return self.items[key]
        return default

    def name(self, key: str) -> str:
        """The key as the file wrote it (an earlier release's flag name), for refusals."""
        return self.imp.given_as.get(key, key)

    def _typed(self, check, key, default, *args, **kwargs):
        value = self(key, default)
        value = default if value is None else value
        return None if value is None else check(self.name(key), value, *args, **kwargs)

    def count(self, key, default=None, lo: int = 1, hi: int = COUNT_LIMIT):
        return self._typed(count, key, default, lo, hi)

    def fraction(self, key, default=None):
        return self._typed(fraction, key, default)

    def number(self, key, default, lo: float, hi: float):
        return self._typed(number, key, default, lo, hi)

    def flag(self, key, default=None):
        return self._typed(boolean, key, default)

    def one_of(self, key, default, options, what: str = ""):
        return self._typed(one_of, key, default, options, what=what)


LONG_INTEGER = re.compile(r"[+-]?[0-9][0-9_]*")     # digits only: int() refused it for its length alone


def scalar(text: str):
    """A Hydra override's value by our small rule: true / false, null, an integer, a number, a quoted string
    unquoted; anything else (a list, ${...}, $HOME/...) stays text."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    try:
        return int(t)
    except ValueError:
        if LONG_INTEGER.fullmatch(t):          # over Python's digit limit: said in words, refused where read
            return Given(f"an integer of {sum(c.isdigit() for c in t):,} digits")
    try:
        return float(t)
    except ValueError:
        return t


def script_tokens(source, what: str) -> list:
    """A run script's words after its line continuations and comments go (shlex, POSIX rules); the launcher
    words before the first flag or override are dropped by the caller."""
    return shell_words(script_line(source, what, what, "verl's and OpenRLHF's example scripts are 2-6 KB"), what)


def flatten(data, prefix: str = "") -> dict:
    """A nested mapping as dotted keys (lists and scalars are values)."""
    out = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


# Hub models whose config.json builds the same tensors as a preset (every shape field equal)
def model_flags(imported: ImportedRL, key: str, model_id) -> None:
    """The policy's architecture from a model id: a preset when the name matches one, else a note."""
    preset = preset_for(model_id)
    if preset:
        imported.policy["--model"] = preset
        imported.notes.append(f"{key} = {model_id}: the {preset} preset, matched by name (give --model, --config "
                              "or --hub to use another architecture)")
    else:
        imported.notes.append(f"{key} = {model_id}: no preset matches its name; give the architecture with "
                              "--model, --config (its config.json) or --hub")


def is_key(word: str) -> bool:
    return bool(KEY.match(word))
