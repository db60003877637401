"""What every framework importer shares: the error type, the result, the context for "auto", and a reader that
knows which keys of the file were used, so that every other key is reported (nothing is dropped silently).

Results are plain data (dicts and lists of field names and values) so callers need no classes beyond these two.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Optional

from .. import values
from ..tables import DTYPE_BITS

MAX_CONFIG_BYTES = 1_000_000   # the same cap as hf_config.MAX_CONFIG_BYTES and the app's 1 MB upload limit
MAX_LISTED = 50                # ignored keys listed one by one; the rest are counted (ImportedConfig.ignored_more)
FORMATS = ("deepspeed", "accelerate", "torchtitan")          # imported and exported
LAUNCHER_FORMATS = ("llamafactory", "hf_trainer", "axolotl", "torchtune", "litgpt", "swift")   # import only
IMPORT_FORMATS = FORMATS + LAUNCHER_FORMATS
MISSING = object()


class FrameworkConfigError(values.Refusal):
    """A framework config that cannot be read, or that the framework itself refuses. `field` is the dotted key
    (or "config" for a syntax error, with `line` and `column` set); the message says what was given in words."""

    def __init__(self, field: str, value, allowed: str, line: Optional[int] = None, column: Optional[int] = None):
        self.line, self.column = line, column
        super().__init__(field, value, allowed)


def decode_text(source, what: str) -> str:
    """Text from str or bytes, size-capped, UTF-8 only. Never a path: importers read what they are given."""
    if isinstance(source, (bytes, bytearray)):
        if len(source) > MAX_CONFIG_BYTES:
            raise FrameworkConfigError("config", f"{len(source):,} bytes", f"at most {MAX_CONFIG_BYTES:,} bytes")
        try:
            source = bytes(source).decode("utf-8")
        except UnicodeDecodeError:
            raise FrameworkConfigError("config", "(binary data)", f"UTF-8 {what} text") from None
    if not isinstance(source, str):
        raise FrameworkConfigError("config", type(source).__name__, f"{what} text (str or bytes)")
    if len(source) > MAX_CONFIG_BYTES:
        raise FrameworkConfigError("config", f"{len(source):,} characters", f"at most {MAX_CONFIG_BYTES:,}")
    return source[1:] if source.startswith("\ufeff") else source


# shlex grows each word one character at a time (Lib/shlex.py read_token: self.token + nextchar), so one long word
# costs more than linear time: one 64,000-character word read 0.09-0.12 s against 0.013-0.02 s at 16,000 (up to 9x for
# 4x the text; tests/test_linear_parsers.py). 32 KiB bounds that at a few hundredths of a second and is five times the
# largest example script (verl, OpenRLHF, ms-swift).
MAX_SCRIPT_CHARS = 32_768


def script_line(source, what: str, noun: str, examples: str) -> str:
    """A shell script as one line: decoded, at most MAX_SCRIPT_CHARS (`noun`, `examples`: how the refusal names
    it and its examples' size), blank and comment lines dropped, line continuations joined."""
    text = decode_text(source, what)
    if len(text) > MAX_SCRIPT_CHARS:
        raise FrameworkConfigError("config", f"{len(text):,} characters", f"a {noun} of at most "
                                   f"{MAX_SCRIPT_CHARS:,} characters ({examples})")
    return " ".join(ln.rstrip().rstrip("\\") for ln in text.splitlines()
                    if ln.strip() and not ln.strip().startswith("#"))


def shell_words(line: str, noun: str) -> list:
    """A line's words by shlex's POSIX rules, comments dropped; an unclosed quote is refused."""
    try:
        return shlex.split(line, comments=True)
    except ValueError as exc:
        raise FrameworkConfigError("config", str(exc), f"a {noun} whose quotes are closed") from None


def parse_json(source) -> dict:
    """The JSON object, or an error with its line and column. Duplicate keys are refused, as DeepSpeed's loader
    does (runtime/config_utils.py dict_raise_error_on_duplicate_keys)."""
    text = decode_text(source, "JSON")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise FrameworkConfigError("config", values.Given(f"line {exc.lineno}, column {exc.colno}: {exc.msg}"),
                                   "valid JSON (strict: no comments, no trailing commas)", exc.lineno, exc.colno) from None
    except _Duplicate as exc:
        raise FrameworkConfigError(exc.key, "a duplicate key", "each key once (DeepSpeed refuses duplicates)") from None
    except ValueError:                           # an integer over Python's digit limit (json raises ValueError)
        raise (long_integer_refusal(text, "JSON") or
               FrameworkConfigError("config", "JSON that cannot be read", "valid JSON")) from None
    except RecursionError:
        raise FrameworkConfigError("config", "JSON nested too deep to read", "valid JSON") from None
    if not isinstance(data, dict):
        raise FrameworkConfigError("config", type(data).__name__, "a JSON object at the top level")
    return data


# DeepSpeed reads a config path with hjson (runtime/config.py DeepSpeedConfig: hjson.load(..., object_pairs_hook=
# dict_raise_error_on_duplicate_keys)), which also takes #, // and /* */ comments. relax_json blanks them (lines and
# columns stay) so the strict parser can read the rest. hjson's other liberties (trailing commas, members separated
# by a line break, quoteless strings) stay JSON errors: the HF Trainer and accelerate load the file with json.load.


def relax_json(text: str) -> str:
    """The text with hjson's comments outside strings replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif ch == "#" or text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(c if c == "\n" else " " for c in text[i:j]))
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_relaxed_json(source):
    """(data, relaxed): strict JSON first; else the text with its comments blanked (relax_json), relaxed True. A
    text that is neither raises the error of the comment-free text."""
    try:
        return parse_json(source), False
    except FrameworkConfigError as strict:
        if strict.field != "config" or strict.line is None:
            raise
        relaxed = relax_json(decode_text(source, "JSON"))
        try:
            return parse_json(relaxed), True
        except FrameworkConfigError as exc:
            if exc.field != "config" or exc.line is None:
                raise
            raise FrameworkConfigError("config", exc.value, "valid JSON (no trailing commas: the HF Trainer and "
                                       "accelerate load it with json.load; #, // and /* */ comments are read, as "
                                       "DeepSpeed's hjson loader reads them)", exc.line, exc.column) from None


class _Duplicate(ValueError):
    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def line_col(text: str, pos: int):
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


@dataclass(frozen=True)
class ImportContext:
    """What "auto" resolves from: the model's hidden size and the current view (all optional).

    precision is the view's compute dtype (its comm_dtype, or else its param_dtype): the Trainer's --fp16/--bf16.
    """

    hidden_size: Optional[int] = None
    micro_batch: Optional[int] = None
    gradient_accumulation_steps: Optional[int] = None
    precision: Optional[str] = None
    workers: Optional[int] = None      # data-parallel degree of the view
    gpus: Optional[int] = None         # world size of the view

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "precision":
                if value is not None and value not in DTYPE_BITS:
                    raise FrameworkConfigError("context.precision", value, "a dtype name or None")
            elif value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise FrameworkConfigError(f"context.{f.name}", value, "a positive integer or None")

    @classmethod
    def of(cls, context) -> "ImportContext":
        if context is None:
            return cls()
        if isinstance(context, cls):
            return context
        if isinstance(context, dict):
            unknown = sorted(set(context) - {f.name for f in fields(cls)})
            if unknown:
                raise FrameworkConfigError("context", unknown[0], "one of " + ", ".join(f.name for f in fields(cls)))
            return cls(**context)
        raise FrameworkConfigError("context", type(context).__name__, "an ImportContext, a dict or None")


@dataclass(frozen=True)
class ImportedConfig:
    """One imported framework file, as plain data.

    scenario / workload: zerocalc.scenario.Scenario / zerocalc.step.workload.Workload field names -> values, only those
    the file determines (or the framework's default for an absent key that matters for memory).
    layout: tp, pp, vpp, cp, ep, sequence_parallel, micro_batches, schedule, gpus (world = dp x tp x pp x cp; dp is
    scenario["workers"]). selected_stage: the ZeRO stage the file chose (0-3), or None.
    auto_keys: [{"key", "value", "how"}] for every "auto" (or -1) the file left to the framework.
    ignored_keys: [{"key", "reason"}] for the first MAX_LISTED keys not used, ignored_more: how many more there were.
    notes: sentences on approximations and defaults.
    sources: "scenario.workers" -> the key (or default) that set it.
    """

    format: str
    scenario: dict
    workload: dict
    layout: dict
    selected_stage: Optional[int]
    auto_keys: list
    ignored_keys: list
    notes: list
    sources: dict
    ignored_more: int = 0
    model: str = ""          # the zerocalc preset the file names (a torchtitan flavor), "" when it names none
    finetune: dict = field(default_factory=dict)    # zerocalc.model.finetune.FineTune field names (launchers)
    follows: tuple = ()      # (key, path) of a DeepSpeed config the file points to, for the caller to read

    def to_dict(self) -> dict:
        """The JSON form: selected_stage, the filled fields, and imported{format, auto_keys, ignored_keys, notes}."""
        return {
            "selected_stage": self.selected_stage, "model": self.model or None,
            "scenario": dict(self.scenario), "workload": dict(self.workload), "layout": dict(self.layout),
            **({"finetune": {k: list(v) if isinstance(v, tuple) else v for k, v in self.finetune.items()}}
               if self.finetune else {}),
            "imported": {"format": self.format, "auto_keys": [dict(a) for a in self.auto_keys],
                         "ignored_keys": [dict(i) for i in self.ignored_keys], "ignored_more": self.ignored_more,
                         "notes": list(self.notes),
                         "sources": dict(self.sources)},
        }


class Builder:
    """Collects one import's fields, notes and keys, then freezes them into an ImportedConfig."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.parts = {"scenario": {}, "workload": {}, "layout": {}, "finetune": {}}
        self.follows = []
        self.stage: Optional[int] = None
        self.auto, self.ignored, self.notes, self.sources = [], [], [], {}
        self.ignored_names, self.ignored_more = set(), 0     # a set: a file of 100,000 keys costs linear time
        self.noted = set()
        self.model = ""
        self.sdpa = False       # transformers' SDPA kernel (attn_implementation sdpa): see build()

    def set(self, part: str, name: str, value, source: str) -> None:
        self.parts[part][name] = value
        self.sources[f"{part}.{name}"] = source

    def get(self, part: str, name: str, default=None):
        return self.parts[part].get(name, default)

    def auto_key(self, key: str, value, how: str) -> None:
        self.auto.append({"key": key, "value": value, "how": how})

    def ignore(self, key: str, reason: str) -> None:
        if key in self.ignored_names:
            return
        self.ignored_names.add(key)
        if len(self.ignored) < MAX_LISTED:
            self.ignored.append({"key": key, "reason": reason})
        else:
            self.ignored_more += 1

    def note(self, text: str) -> None:
        if text not in self.noted:                  # a set: membership in constant time, whatever a file holds
            self.noted.add(text)
            self.notes.append(text)

    def batching(self, packed: bool, source: str) -> None:
        """A launcher's batches as zerocalc's batch mode (step/batches.py, issue 37): rows packed to seq_len tokens,
        or each micro-batch padded to its longest sample (the worst step: seq_len, the verdict's)."""
        self.set("workload", "batch_mode", "packed" if packed else "padded", source)

    def build(self) -> ImportedConfig:
        w = self.parts["workload"]
        if w.get("batch_mode") == "packed" and w.get("attention") == "eager":
            # packed rows are kept apart only by varlen attention: with eager attention they are one long row
            self.set("workload", "batch_mode", "fixed", "packing with eager attention: one row of seq_len tokens")
        if self.sdpa and w.get("batch_mode") == "padded" and w.get("micro_batch", 1) > 1 and "repeat_kv" not in w:
            # a padded batch needs a mask, and transformers' SDPA takes grouped K and V only without one on CUDA
            # (integrations/sdpa_attention.py use_gqa_in_sdpa): repeat_kv first, copies the kernel saves
            self.set("workload", "repeat_kv", True, "transformers' SDPA under a padding mask: K and V repeated to "
                                                    "every query head (sdpa_attention.py use_gqa_in_sdpa)")
        if self.stage is not None and "shard_group" not in self.parts["scenario"]:
            # every framework read here shards over all data-parallel ranks unless the file says otherwise
            self.set("scenario", "shard_group", None, "default: sharded over all data-parallel workers")
        group, workers = self.parts["scenario"].get("shard_group"), self.parts["scenario"].get("workers")
        if group is not None and workers is not None and workers % group:
            raise FrameworkConfigError(self.sources["scenario.shard_group"], group,
                                       f"a divisor of the data-parallel size ({workers}) the file gives")
        return ImportedConfig(self.fmt, dict(self.parts["scenario"]), dict(self.parts["workload"]),
                              dict(self.parts["layout"]), self.stage, list(self.auto), list(self.ignored),
                              list(self.notes), dict(self.sources), self.ignored_more, self.model,
                              dict(self.parts["finetune"]), tuple(self.follows))


class Doc:
    """A parsed file with a record of the keys read, so the rest can be listed as ignored."""

    def __init__(self, data: dict):
        self.data = data
        self.seen = set()

    def mark(self, *path) -> None:
        self.seen.add(tuple(path))

    def has(self, *path) -> bool:
        node = self.data
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        return True

    def get(self, *path, default=MISSING):
        """The value at path (marked as read), or default when absent."""
        node = self.data
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        self.mark(*path)
        return node

    def section(self, *path) -> dict:
        """A mapping at path ({} when absent or null); anything else is refused by key."""
        value = self.get(*path, default=None)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise FrameworkConfigError(dotted(path), value, "a mapping (a JSON object / YAML or TOML table)")
        self.seen.discard(tuple(path))      # a section is read key by key
        return value

    def leftovers(self):
        """Dotted paths of the leaves (or whole unread sections) nobody read, in file order."""
        out = []

        def walk(node, path):
            if path in self.seen:
                return
            if isinstance(node, dict) and path and not any(p[:len(path)] == path for p in self.seen if p):
                out.append(path)            # a whole section untouched (an empty one too): report it once
                return
            if isinstance(node, dict):
                for key, value in node.items():
                    walk(value, path + (key,))
            elif path:
                out.append(path)

        for key, value in self.data.items():
            walk(value, (key,))
        return [dotted(p) for p in out]


def dotted(path) -> str:
    return ".".join(str(p) for p in path)


def require_mapping_keys(data: dict, where: str) -> None:
    """Every key a string (YAML and TOML allow others; no framework reads them)."""
    for key, value in data.items():
        if not isinstance(key, str):
            raise FrameworkConfigError(f"{where}{key!r}", key, "string keys")
        if isinstance(value, dict):
            require_mapping_keys(value, f"{where}{key}.")


# The value checks are zerocalc/values.py, the one typed reader every importer shares (config.json's with its own
# error class), bound here to the framework importers' error.
count = partial(values.count, error=FrameworkConfigError)
number = partial(values.number, error=FrameworkConfigError)
fraction = partial(values.fraction, error=FrameworkConfigError)
boolean = partial(values.boolean, error=FrameworkConfigError)
one_of = partial(values.one_of, error=FrameworkConfigError)
text = partial(values.text, error=FrameworkConfigError)


def long_integer_refusal(source: str, what: str):
    """The loaders' refusal of an integer over Python's digit limit, at its line and column (None: not that)."""
    return values.long_integer_refusal(FrameworkConfigError, source, what)
