"""App rerun time after an input change, next to a bare Streamlit app with one slider and one Plotly chart,
measured side by side in the same process with AppTest (script execution and element serialisation; the
browser's drawing is not included). Target: at most 2x the bare app (issue 12).

Run: python benchmarks/app_rerun.py [rounds]
"""

import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
BARE = '''
import plotly.graph_objects as go
import streamlit as st
n = st.slider("n", 1, 100, 10, key="n")
st.plotly_chart(go.Figure(go.Bar(x=list(range(n)), y=[i * i for i in range(n)])))
'''


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1000


def main(rounds: int = 30):
    with tempfile.TemporaryDirectory() as tmp:
        bare_path = Path(tmp) / "bare_app.py"
        bare_path.write_text(BARE)
        bare = AppTest.from_file(str(bare_path), default_timeout=60)
        app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
        bare.run()
        app.run()
        bare_times, app_times, scenario_times = [], [], []
        for i in range(rounds):  # alternate, so both see the same machine state
            bare_times.append(timed(lambda: bare.slider(key="n").set_value(10 + i % 50).run()))
            app_times.append(timed(lambda: app.number_input(key="workers").set_value(8 + (i % 50) * 8).run()))
            scenario_times.append(timed(lambda: app.number_input(key="micro_batch").set_value(1 + i % 8).run()))
    med = statistics.median
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, {rounds} reruns each")
    print(f"{'app':42} {'median ms':>10} {'p90 ms':>8} {'ratio':>6}")
    p90 = lambda xs: sorted(xs)[int(0.9 * (len(xs) - 1))]  # noqa: E731
    base = med(bare_times)
    for name, xs in (("bare: 1 slider + 1 Plotly chart", bare_times), ("zerocalc: workers changed", app_times),
                     ("zerocalc: micro-batch changed", scenario_times)):
        print(f"{name:42} {med(xs):10.1f} {p90(xs):8.1f} {med(xs) / base:6.2f}")
    print("target: zerocalc / bare <= 2")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
