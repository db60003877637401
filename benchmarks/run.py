"""The benchmark table: core speed, solvers, app rerun and browser latency against a bare Streamlit app, cold start,
and server memory per extra session. Prints the machine first, then one row per measurement (median and spread).
The app's rows are measured side by side with the bare app in the same run (reruns and browser changes alternated).

Run: python benchmarks/run.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.app_rerun import BARE  # noqa: E402
from benchmarks.model_states import layout_cases, uncached  # noqa: E402
from benchmarks.load import change_workers, open_page  # noqa: E402
from tests.e2e.server import CHROMIUM, CHROMIUM_ARGS, READY, rss_bytes, start, stop  # noqa: E402
from ui.state.fields import defaults  # noqa: E402
from ui.state.convert import resolve  # noqa: E402
from zerocalc.states.zero import model_states  # noqa: E402
from zerocalc.output.report import full_report  # noqa: E402
from zerocalc.answers.solve import lowest_stage, max_micro_batch, min_workers  # noqa: E402

ROWS = []


def row(name: str, samples: list, unit: str, note: str = ""):
    xs = sorted(samples)
    q1, q3 = xs[len(xs) // 4], xs[(3 * len(xs)) // 4]
    ROWS.append((name, statistics.median(xs), q1, q3, len(xs), unit, note))


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import plotly
    import streamlit
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, streamlit {streamlit.__version__}, plotly {plotly.__version__}")


def micro(fn, repeat=15, number=200):
    return [t / number for t in timeit.repeat(fn, repeat=repeat, number=number)]


def core():
    resolved = resolve(defaults())
    s, w = resolved.scenario, resolved.workload
    row("core: model-state report (model_states)", [t * 1e6 for t in micro(lambda: model_states(s))], "us")
    row("core: full report for the UI (full_report)",
        [t * 1e3 for t in micro(uncached(lambda: full_report(s, w)), number=20)],
        "ms", "model states, peak, solvers, fits-on, scaling")
    for name, fn in (("max micro-batch", max_micro_batch), ("min workers", min_workers),
                     ("lowest stage", lowest_stage)):
        row(f"core: solver, {name} (4 stages)", [t * 1e3 for t in micro(uncached(lambda fn=fn: fn(s, w)), number=20)],
            "ms", "target < 5 ms")
    for name, (fn, target) in layout_cases().items():
        row(f"core: {name}", [t * 1e3 for t in micro(fn, repeat=7, number=5)], "ms", f"target < {target:g} ms")


def app_rerun(rounds: int):
    from streamlit.testing.v1 import AppTest

    with tempfile.TemporaryDirectory() as tmp:
        bare_path = Path(tmp) / "bare_app.py"
        bare_path.write_text(BARE)
        bare = AppTest.from_file(str(bare_path), default_timeout=60)
        app = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=60)
        bare.run()
        app.run()
        b, a = [], []
        for i in range(rounds):
            t = time.perf_counter()
            bare.slider(key="n").set_value(10 + i % 50).run()
            b.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            app.number_input(key="workers").set_value(16 + (i % 50) * 8).run()
            a.append((time.perf_counter() - t) * 1e3)
    row("app rerun after an input change (AppTest): bare app", b, "ms", "1 slider + 1 Plotly chart")
    row("app rerun after an input change (AppTest): zerocalc", a, "ms",
        f"ratio {statistics.median(a) / statistics.median(b):.2f}x (target 2x)")


async def browser_side(rounds: int, sessions: int):
    """The bare app and zerocalc side by side in one browser: both servers up at once, their changes alternated
    (so a busy moment of the machine falls on both), and cold starts alternated too."""
    from playwright.async_api import async_playwright

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bare_app.py").write_text(BARE)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            bare_cold, app_cold = [], []
            for attempt in range(3):
                seconds, bare_proc, _, bare_ctx, bare_page = await cold_start(browser, "bare_app.py", Path(tmp))
                bare_cold.append(seconds)
                seconds, app_proc, app_base, app_ctx, app_page = await cold_start(browser, "app.py", root)
                app_cold.append(seconds)
                if attempt == 0:
                    bare_times, bare_settled, app_times, app_settled = [], [], [], []
                    slider = bare_page.get_by_role("slider")
                    for i in range(rounds):
                        t, s = await bare_change(bare_page, slider, i)
                        bare_times.append(t)
                        bare_settled.append(s)
                        t, s = await app_change(app_page, 16 + 8 * i)
                        app_times.append(t)
                        app_settled.append(s)
                    per_session = await session_memory(browser, app_proc, app_base, sessions)
                for ctx, proc in ((bare_ctx, bare_proc), (app_ctx, app_proc)):
                    await ctx.close()
                    stop(proc)
            await browser.close()
    ratio = statistics.median(app_times) / statistics.median(bare_times)
    row("browser: input change to updated chart, bare app", bare_times, "ms", "slider key press, 1 chart")
    row("browser: input change to updated chart, zerocalc", app_times, "ms",
        f"ratio {ratio:.2f}x (target 2x); workers typed + Enter")
    row("browser: input change to settled page, bare app", bare_settled, "ms", "chart drawn and script idle")
    row("browser: input change to settled page, zerocalc", app_settled, "ms",
        f"ratio {statistics.median(app_settled) / statistics.median(bare_settled):.2f}x")
    row("cold start to first chart drawn, bare app", bare_cold, "s")
    row("cold start to first chart drawn, zerocalc", app_cold, "s",
        f"ratio {statistics.median(app_cold) / statistics.median(bare_cold):.2f}x (target 1.3x); server start + "
        "first page + its first chart")
    row("server memory per extra open session", [per_session], "MiB", f"{sessions} sessions opened")


async def cold_start(browser, app: str, cwd: Path):
    t = time.perf_counter()
    proc, base = start(app, cwd)
    context, page, _ = await open_page(browser)
    await page.goto(base + "/")
    await page.wait_for_selector(READY, timeout=120_000)
    await page.locator("[data-testid=stPlotlyChart] .js-plotly-plot").first.wait_for(timeout=120_000)
    return time.perf_counter() - t, proc, base, context, page


async def bare_change(page, slider, i: int):
    """(ms to the updated chart, ms to the settled page) for one slider key press."""
    await page.wait_for_selector(READY)
    n_before = await page.evaluate("() => document.querySelector('.js-plotly-plot').data[0].x.length")
    t = time.perf_counter()
    await slider.focus()
    await slider.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
    await page.wait_for_function(
        "(n) => { const p = document.querySelector('.js-plotly-plot'); "
        "return p && p.data && p.data[0].x.length !== n; }", arg=n_before, polling=10)
    chart = (time.perf_counter() - t) * 1e3
    await page.wait_for_selector(READY)
    return chart, (time.perf_counter() - t) * 1e3


async def app_change(page, workers: int):
    await page.wait_for_selector(READY)
    t = time.perf_counter()
    chart = await change_workers(page, workers) * 1e3
    await page.wait_for_selector(READY)
    return chart, (time.perf_counter() - t) * 1e3


async def session_memory(browser, proc, base: str, sessions: int) -> float:
    """MiB of server memory each extra open session adds."""
    before = rss_bytes(proc.pid)
    extra = []
    for _ in range(sessions):
        ctx, pg, _ = await open_page(browser)
        await pg.goto(base + "/")
        await pg.wait_for_selector(READY, timeout=120_000)
        await pg.locator("[data-testid=stPlotlyChart]").first.wait_for()
        extra.append(ctx)
    used = (rss_bytes(proc.pid) - before) / sessions / 2**20
    for ctx in extra:
        await ctx.close()
    return used


def print_rows():
    print(f"{'measurement':58} {'median':>9} {'q1':>9} {'q3':>9} {'n':>4}  unit  note")
    for name, med, q1, q3, n, unit, note in ROWS:
        print(f"{name:58} {med:9.2f} {q1:9.2f} {q3:9.2f} {n:4}  {unit:4}  {note}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds = 5 if args.quick else 20
    print("machine:", machine())
    core()
    app_rerun(rounds)
    if os.path.exists(CHROMIUM):
        asyncio.run(browser_side(rounds, 3 if args.quick else 5))
    else:
        print(f"(browser rows skipped: {CHROMIUM} not found)")
    print_rows()


if __name__ == "__main__":
    main()
