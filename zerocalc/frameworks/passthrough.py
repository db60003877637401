"""An export over the file it was imported from (issue 35: a LLaMA-Factory ds_config lost
stage3_gather_16bit_weights_on_model_save, gradient_clipping, zero_allow_untested_optimizer, pin_memory and its
fp16 loss-scale keys on export, and its "auto" batch sizes came back frozen at 8).

The rule, on the two documents as nested mappings:
- every key the export writes takes the plan's value, except a key the file held as "auto" whose value the plan did
  not move: it stays "auto" (the framework resolves it again, as it did for the file);
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
        if _get(original, path) == AUTO and dotted in auto_values and auto_values[dotted] == value:
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
