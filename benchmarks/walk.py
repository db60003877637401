"""How one scenario walks through the core's modules: the calls that cross from one module into another while
`full_report(answers=False)` (the first screen) and `layout_report` build a report from cold caches.

- visits: calls whose callee lives in another module than its caller (a step from one room into the next);
- modules: the distinct modules visited;
- climbs: visits into a module already on the call stack below (a lower layer calling back up into the one that
  called it, such as the ZeRO rules calling the per-rank report back for its communication), and visits from a
  module into a higher layer's (tests/test_structure.py LAYERS); the imports forbid the second kind, a callback
  or a method of a higher layer's object would still do it;
- per module: how often the walk enters each of ranks, peak, layout (and their successors' names).

Run: python benchmarks/walk.py   (prints a table; the note of a restructure reports its before and after)
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.model_states import _zerocalc_caches  # noqa: E402
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.model.presets import MODEL_PRESETS  # noqa: E402
from zerocalc.layout import Layout  # noqa: E402
from zerocalc.output.report import full_report  # noqa: E402
from tests.test_structure import layer_of  # noqa: E402
from zerocalc.scenario import Scenario  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

WATCHED = ("ranks", "peak", "layout", "placement", "model_states", "zero")


def _module(frame) -> str:
    name = frame.f_globals.get("__name__", "")
    return name if name.startswith("zerocalc") else ""


def _layer(module: str) -> int:
    return 99 if module in ("zerocalc", "zerocalc.__main__") else layer_of(module)[0]


def walk(fn) -> dict:
    """Run fn from cold caches and count its cross-module calls inside zerocalc."""
    for cached in _zerocalc_caches():
        cached.cache_clear()
    visits, climbs, entered = 0, 0, Counter()
    stack = []

    def profile(frame, event, arg):
        nonlocal visits, climbs
        if event == "call":
            module = _module(frame)
            caller = stack[-1] if stack else ""
            if module and caller and module != caller:
                visits += 1
                entered[module] += 1
                if module in stack or _layer(module) > _layer(caller):
                    climbs += 1
            stack.append(module or caller)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return {"visits": visits, "modules": len(entered), "climbs": climbs, "entered": entered}


def _cases():
    arch = MODEL_PRESETS["llama-3-70b"][0]
    dense = Scenario.from_convention("megatron", params=param_count(arch), workers=8)
    layout = Workload(arch, micro_batch=2, seq_len=4096,
                      layout=Layout(tp=8, pp=4, sequence_parallel=True, micro_batches=16))
    small = MODEL_PRESETS["llama-3-8b"][0]
    one = Scenario(params=param_count(small), workers=8, param_dtype="bf16", grad_dtype="bf16")
    return {"llama-3-8b, dp 8 (one rank class)": lambda: full_report(one, Workload(small), answers=False),
            "llama-3-70b, dp 8 x tp 8 x pp 4 (three rank classes)": lambda: full_report(dense, layout,
                                                                                          answers=False)}


def main():
    print(f"{'scenario':56} {'visits':>7} {'modules':>8} {'climbs':>7}  entries of " + ", ".join(WATCHED))
    for name, fn in _cases().items():
        w = walk(fn)
        per = {m.rsplit(".", 1)[-1]: n for m, n in w["entered"].items()}
        counts = ", ".join(f"{m} {per.get(m, 0)}" for m in WATCHED if m in per)
        print(f"{name:56} {w['visits']:>7} {w['modules']:>8} {w['climbs']:>7}  {counts}")


if __name__ == "__main__":
    main()
