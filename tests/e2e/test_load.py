"""A small run of the load and soak benchmark (benchmarks/load.py) in CI: concurrent browser sessions and a
soak in one session against a real server must finish with no error and bounded server memory. The full run
(20 sessions x 10 changes, 1,000-rerun soak) is the same command with its defaults; its numbers are in
docs/benchmarks.md."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_small_load_and_soak_run_without_errors(server):  # `server` applies the browser tests' skip/fail rule
    done = subprocess.run([sys.executable, "benchmarks/load.py", "--sessions", "4", "--changes", "3", "--soak",
                           "40", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == []
    assert result["concurrent"]["count"] == 4 * 3 and result["single"]["count"] == 3
    assert result["soak"]["rss_growth"] < 100 * 2**20, result["soak"]["rss_samples"]
