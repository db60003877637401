"""Instructions per server rerun (AppTest) for zerocalc and the bare app: a count that does not move with the
machine's load, so a change of a few percent shows (wall-clock ratios here swing by 10-20% between runs).

Each app runs under valgrind (cachegrind, no cache simulation) twice: with 0 and with 8 measured input changes
after 3 warm-ups; the difference over 8 is one rerun. The zerocalc change sets a new worker count each time (a
state the per-state caches have not seen, as a user's next value). AppTest's 1 ms polling is replaced by joining
its script thread, so the count holds no sleeping loop; PYTHONHASHSEED is fixed.

Run: python benchmarks/instructions.py          (needs valgrind; about a minute)
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.app_rerun import BARE  # noqa: E402


def _changes(mode: str, n: int) -> None:
    """The measured body, run inside valgrind: 3 warm-up changes, then n."""
    import streamlit.testing.v1.local_script_runner as runner
    from streamlit.testing.v1 import AppTest

    runner.require_widgets_deltas = lambda r, timeout=3: r._script_thread.join(timeout)   # no polling loop
    if mode == "bare":
        path = Path(tempfile.mkdtemp()) / "bare_app.py"
        path.write_text(BARE)
        at = AppTest.from_file(str(path), default_timeout=600)
        change = lambda i: at.slider(key="n").set_value(10 + i % 50).run()          # noqa: E731
    else:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        change = lambda i: at.number_input(key="workers").set_value(16 + (i % 50) * 8).run()   # noqa: E731
    at.run()
    for i in range(47, 50):          # warm-ups on values the measured changes do not use
        change(i)
    for i in range(n):
        change(i)
    assert not at.exception, at.exception


def _count(mode: str, n: int) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           sys.executable, "-m", "benchmarks.instructions", "--run", mode, str(n)],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return int(re.search(r"I\s+refs:\s+([\d,]+)", done.stderr).group(1).replace(",", ""))


def main() -> None:
    per = {mode: (_count(mode, 8) - _count(mode, 0)) / 8 for mode in ("bare", "app")}
    print(f"{'app':10} {'instructions per rerun':>24}")
    for mode, label in (("bare", "bare"), ("app", "zerocalc")):
        print(f"{label:10} {per[mode] / 1e6:22.2f} M")
    print(f"ratio {per['app'] / per['bare']:.2f}x (target 2x)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        _changes(sys.argv[2], int(sys.argv[3]))
    else:
        main()
