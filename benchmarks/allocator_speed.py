"""The caching allocator model's cost (issue 32): simulated_reserve for one stage, a layout report and solve() with
fragmentation_percent None (the CLI's --fragmentation-percent model), best of 3 by time.process_time, every core
cache emptied before each call.

    python benchmarks/allocator_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.model_states import _zerocalc_caches  # noqa: E402

CASES = {
    "llama-3-8b, 8 GPUs": ["--model", "llama-3-8b", "--gpus", "8"],
    "llama-3.1-70b, tp 8 pp 2": ["--model", "llama-3.1-70b", "--gpus", "16", "--tp", "8", "--pp", "2"],
    "deepseek-v3, ep 8 pp 8": ["--model", "deepseek-v3", "--gpus", "64", "--ep", "8", "--pp", "8"],
}


def _inputs(argv):
    from zerocalc.cli.main import _inputs as inputs, build_parser
    scenario, _arch, workload, _imported = inputs(build_parser().parse_args(argv + ["--fragmentation-percent",
                                                                                     "model"]))
    return scenario, workload


def best_of(fn, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        for cached in _zerocalc_caches():
            cached.cache_clear()
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def main() -> int:
    from zerocalc.answers.solve import solve
    from zerocalc.parallel.ranks import report_for
    from zerocalc.step.allocator import simulated_reserve
    print("| case | simulated_reserve, one stage (ms) | report (ms) | solve() (s) |")
    print("|---|---:|---:|---:|")
    for name, argv in CASES.items():
        scenario, workload = _inputs(argv)
        view = report_for(scenario, workload).ranks[0]
        peak = view.peaks[max(view.peaks)] if isinstance(view.peaks, dict) else view.peaks[-1]
        one = best_of(lambda: simulated_reserve(peak, view.shape, low=False))
        report = best_of(lambda: report_for(scenario, workload))
        solved = best_of(lambda: solve(scenario, workload))
        print(f"| {name} | {one * 1e3:.1f} | {report * 1e3:.1f} | {solved:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
