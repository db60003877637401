"""The page's script runs on the matrix's four plans (issue 36), timed in AppTest: opening Peak and step, then doubling
dp there, and doubling dp on the overview. No browser: what the server computes and serialises per action, the part
a hosted page's visitor waits for beside their own browser's drawing (benchmarks/matrix.py times both, in Chromium on
this machine).

Each run and view uses a plan of its own (the sequence 16 tokens shorter and the CUDA context 37 MiB larger each),
so no answer or allocator replay is reused from an earlier one; each checkout runs in its own processes (its own
imports and worker pool), alternated `--rounds` times, `--runs` runs per round.

Run: python benchmarks/script_runs.py [--root DIR] [--against DIR] [--rounds 3] [--runs 4]
(--root: the checkout measured, default this one; --against: a second checkout, e.g. `git archive` of the commit
before a change, measured alternately).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANS = {   # name: (link parameters, dp): the matrix's plans (benchmarks/matrix.py)
    "deepseek-v3 dp32 pp8 ep32": ({"model": "deepseek-v3", "workers": 32, "pp": 8, "ep": 32}, 32),
    "gemma-3-27b x 8": ({"model": "gemma-3-27b", "workers": 8}, 8),
    "llama-3.1-405b tp8 pp16 dp8": ({"model": "llama-3.1-405b", "workers": 8, "tp": 8, "pp": 16}, 8),
    "llama-3-8b x 8": ({"model": "llama-3-8b", "workers": 8}, 8),
}


def _runs(root: str, first: int, runs: int) -> dict:
    """{(plan, action): [ms, ...]} for `runs` runs of every plan, in this process (the checkout's own)."""
    sys.path.insert(0, root)
    from streamlit.testing.v1 import AppTest
    out: dict = {}

    def timed(key, run):
        start = time.perf_counter()
        run()
        out.setdefault(key, []).append((time.perf_counter() - start) * 1000)
    for i in range(first, first + runs):
        for plan, (params, dp) in PLANS.items():
            for j, view in enumerate(("Overview", "Peak and step")):
                at = AppTest.from_file(str(Path(root) / "app.py"), default_timeout=120)
                own = 2 * i + j                   # a plan of its own per run and view: no answer or replay reused
                own_plan = {**params, "seq_len": 4096 - 16 * own, "cuda_context_bytes": 2**30 + own * 37 * 2**20}
                for k, v in own_plan.items():
                    at.query_params[k] = str(v)
                at.run()
                if view != "Overview":
                    at.session_state["tab"] = view
                    timed(f"{plan} / {view} / open view", at.run)
                timed(f"{plan} / {view} / change dp",
                      lambda: at.number_input(key="workers").set_value(2 * dp).run())
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(ROOT))
    parser.add_argument("--against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)   # (first run, runs): one process
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_runs(args.root, *args.child)))
        return
    roots = [r for r in (args.against, args.root) if r]
    samples = {root: {} for root in roots}
    for r in range(args.rounds):
        for root in roots:            # each checkout in a fresh process, on the same plans
            done = subprocess.run([sys.executable, __file__, "--root", root, "--child", str(r * args.runs),
                                   str(args.runs)], capture_output=True, text=True, check=True)
            for key, xs in json.loads(done.stdout.strip().splitlines()[-1]).items():
                samples[root].setdefault(key, []).extend(xs)
    print(f"medians of {args.rounds * args.runs} script runs (ms)" + (", before -> after" if args.against else ""))
    print("| plan / view / action | " + " | ".join(Path(r).name or r for r in roots) + " |")
    print("|---|" + "---:|" * len(roots))
    for key in samples[roots[0]]:
        print(f"| {key} | " + " | ".join(f"{statistics.median(samples[r][key]):.0f}" for r in roots) + " |")


if __name__ == "__main__":
    main()
