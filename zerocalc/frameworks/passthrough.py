"""An export over the file it was imported from (issue 35: a LLaMA-Factory ds_config lost
stage3_gather_16bit_weights_on_model_save, gradient_clipping, zero_allow_untested_optimizer, pin_memory and its
fp16 loss-scale keys on export, and its "auto" batch sizes came back frozen at 8).

The rule, on the two documents as nested mappings:
- every key the export writes takes the plan's value, except a key the file held as "auto" whose value the plan did
  not move (or that the import left for the framework to derive from the others, recorded as None): it stays
  "auto" (the framework resolves it again, as it did for the file);
- every key of the file the export does not write passes through unchanged, and the export names them (zerocalc
  does not model them, so it neither changes nor drops them);
- a key of the file that the export replaces by another spelling (stage3_* aliases) is listed as replaced.
"""

from __future__ import annotations

import copy
from typing import Dict, List, Tuple

AUTO = "auto"


def _leaves(data, prefix: Tuple[str, ...] = ()):
    """(path, value) of every non-mapping value of a nested mapping."""
    for key, value in data.items():
        path = prefix + (str(key),)
        if isinstance(value, dict) and value:
            yield from _leaves(value, path)
        else:
            yield path, value


def _get(data, path):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _set(data, path, value) -> None:
    for key in path[:-1]:
        if not isinstance(data.get(key), dict):
            data[key] = {}
        data = data[key]
    data[path[-1]] = value


def over_file(written: dict, original: dict, auto_values: Dict[str, object]) -> Tuple[dict, List[str], List[str],
                                                                                   List[str]]:
    """(the merged document, the dotted keys passed through unchanged, the keys kept as "auto", the file's keys
    the export replaced with a value of another shape, which are dropped).
    `auto_values`: dotted key -> the value its "auto" resolved to on import (ImportedConfig.auto_keys)."""
    out = copy.deepcopy(original)
    written_paths = set()
    kept_auto = []
    for path, value in _leaves(written):
        written_paths.add(path)
        dotted = ".".join(path)
        if _get(original, path) == AUTO and dotted in auto_values and auto_values[dotted] in (value, None):
            kept_auto.append(dotted)
            continue                                  # the plan kept what "auto" gave: the file's "auto" stays
        _set(out, path, value)
    passed, dropped = [], []
    for path, _ in _leaves(original):
        if path in written_paths:
            continue
        (dropped if any(path[:len(w)] == w for w in written_paths) else passed).append(".".join(path))
    return out, passed, kept_auto, dropped


def notes(passed: List[str], kept_auto: List[str], dropped: List[str]) -> List[str]:
    """The sentences an export over its file adds to what it cannot express."""
    out = []
    if passed:
        out.append("passed through from the imported file unchanged (zerocalc does not model them): "
                   + ", ".join(passed[:40]) + (f" and {len(passed) - 40} more" if len(passed) > 40 else ""))
    if kept_auto:
        out.append("kept \"auto\" as the file had it (the plan did not move them): " + ", ".join(kept_auto))
    if dropped:
        out.append("dropped (the plan writes these keys with another shape): " + ", ".join(dropped))
    return out


def _aliases(fmt: str) -> Dict[Tuple[str, ...], Tuple[str, ...]]:
    """path -> the other spelling of the same key (DeepSpeed's pydantic aliases: stage3_max_live_parameters is
    max_live_parameters; a file gives one of the two, never both)."""
    if fmt != "deepspeed":
        return {}
    from .deepspeed.schema import ZERO_FIELDS
    pairs = {("zero_optimization", name): ("zero_optimization", alias) for name, (alias, *_) in ZERO_FIELDS.items()
             if alias}
    return {**pairs, **{b: a for a, b in pairs.items()}}


def _nested(tables: dict) -> dict:
    """torchtitan's {table or (table, sub): {key: value}} as one nested mapping (as tomllib reads a file)."""
    out = {}
    for name, body in tables.items():
        node = out
        for part in name if isinstance(name, tuple) else (name,):
            node = node.setdefault(part, {})
        node.update(body)
    return out


def _tables(nested: dict, prefix: Tuple[str, ...] = ()) -> dict:
    """The inverse: every mapping holding values becomes a table named by its path (dump_toml's form)."""
    out = {}
    values = {k: v for k, v in nested.items() if not isinstance(v, dict)}
    if values and prefix:
        out[prefix if len(prefix) > 1 else prefix[0]] = values
    for key, value in nested.items():
        if isinstance(value, dict):
            out.update(_tables(value, prefix + (key,)))
    return out


def over_file_of(fmt: str, data: dict, export_notes: list, base: dict, auto_values) -> Tuple[dict, list]:
    """(the export over the imported file, its notes with what passed through): the format's own shapes."""
    written = _nested(data) if fmt == "torchtitan" else data
    extra = []
    if fmt == "accelerate" and _get(base, ("deepspeed_config", "deepspeed_config_file")) is not None:
        # accelerate refuses plugin keys beside a deepspeed_config_file (DeepSpeedPlugin's check): the stage, offload
        # and accumulation stay in that file, which --export deepspeed writes
        written = {k: v for k, v in written.items() if k not in ("deepspeed_config", "mixed_precision")}
        extra.append("the DeepSpeed settings stay in the file deepspeed_config_file names (accelerate takes no "
                     "plugin keys beside it): export them with the deepspeed format")
    aliases = _aliases(fmt)
    written = _respelled(written, base, aliases) if aliases else written
    merged, passed, kept, dropped = over_file(written, base, auto_values or {})
    merged = _tables(merged) if fmt == "torchtitan" else merged
    return merged, list(export_notes) + notes(passed, kept, dropped) + extra


def _respelled(written: dict, base: dict, aliases) -> dict:
    """The export with each key the file spells the other way written in the file's spelling."""
    out = copy.deepcopy(written)
    for path, value in list(_leaves(written)):
        other = aliases.get(path)
        if other is not None and _get(base, path) is None and _get(base, other) is not None:
            parent = _get(out, path[:-1])
            parent.pop(path[-1], None)
            _set(out, other, value)
    return out
