"""What the caching allocator's model costs the page's searches (issue 32, the model as the default): solve() and
the fixes search the page runs (ui/server/compute.py _fixes: answers/combined.py advice) with fragmentation_percent None
(the model) and 5 (the flat point), on the page's plans (benchmarks/matrix.py's four and Llama-3.1-70B tp 8 pp 2),
best of 3 by time.process_time, every core cache emptied before each call.

    python benchmarks/allocator_default.py [--rounds 3] [--plans llama8,70b] [--what solve,fixes]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.model_states import _zerocalc_caches  # noqa: E402

PLANS = {
    "llama8": {"model": "llama-3-8b", "workers": "8"},
    "70b": {"model": "llama-3.1-70b", "workers": "1", "tp": "8", "pp": "2"},
    "dsv3": {"model": "deepseek-v3", "workers": "1", "ep": "8", "pp": "8"},
    "gemma27": {"model": "gemma-3-27b", "workers": "8"},
    "405b": {"model": "llama-3.1-405b", "workers": "8", "tp": "8", "pp": "16", "sequence_parallel": "true"},
}


def best_of(fn, rounds: int):
    best, out = float("inf"), None
    for _ in range(rounds):
        for cached in _zerocalc_caches():
            cached.cache_clear()
        started = time.process_time()
        out = fn()
        best = min(best, time.process_time() - started)
    return best, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--plans", default=",".join(PLANS))
    p.add_argument("--what", default="solve,fixes")
    args = p.parse_args(argv)
    from ui.state.convert import from_query, resolve
    from zerocalc.answers.combined import advice
    from zerocalc.answers.solve import solve
    from zerocalc.parallel.ranks import layout_report
    what = args.what.split(",")
    print("| plan | reserve | fits | report (ms) | solve() (s) | fixes search (s) | fixes shown |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name in args.plans.split(","):
        r = resolve(from_query(PLANS[name])[0])
        stage = r.state["stage"]
        for percent in (5, None):
            w = replace(r.workload, fragmentation_percent=percent)
            rep, report = best_of(lambda: layout_report(r.scenario, w), args.rounds)
            fits = report.peaks[stage].fits
            sol = best_of(lambda: solve(r.scenario, w), args.rounds)[0] if "solve" in what else float("nan")
            fx, shown = best_of(lambda: advice(r.scenario, w, stage, True), args.rounds) if "fixes" in what \
                else (float("nan"), [])
            print(f"| {name} | {'model' if percent is None else f'{percent} %'} | {fits} | {rep * 1e3:.0f} | "
                  f"{sol:.2f} | {fx:.2f} | {len(shown)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
