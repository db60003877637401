"""The benchmark table: core speed, solvers, app rerun and browser latency against a bare Streamlit app, cold start,
and server memory per extra session. Prints the machine first, then one row per measurement (median and spread).

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
from ui.state import defaults, resolve  # noqa: E402
from zerocalc.model_states import model_states  # noqa: E402
from zerocalc.report import full_report  # noqa: E402
from zerocalc.solve import lowest_stage, max_micro_batch, min_workers  # noqa: E402

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
        f"ratio {statistics.median(a) / statistics.median(b):.1f}x (target 1.5x)")


async def browser_side(rounds: int, sessions: int):
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bare_app.py").write_text(BARE)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            bare_times, bare_cold = await bare_latency(browser, tmp, rounds)
            app_times, app_cold, per_session = await app_latency(browser, rounds, sessions)
            await browser.close()
    row("browser: input change to updated chart, bare app", bare_times, "ms")
    row("browser: input change to updated chart, zerocalc", app_times, "ms",
        f"ratio {statistics.median(app_times) / statistics.median(bare_times):.1f}x")
    row("cold start to first chart drawn, bare app", bare_cold, "s")
    row("cold start to first chart drawn, zerocalc", app_cold, "s", "server start + first page + 5 charts")
    row("server memory per extra open session", per_session, "MiB", f"{sessions} sessions opened")


async def cold_start(browser, app: str, cwd: Path):
    t = time.perf_counter()
    proc, base = start(app, cwd)
    context, page, _ = await open_page(browser)
    await page.goto(base + "/")
    await page.wait_for_selector(READY, timeout=120_000)
    await page.locator("[data-testid=stPlotlyChart] .js-plotly-plot").first.wait_for(timeout=120_000)
    return time.perf_counter() - t, proc, base, context, page


async def bare_latency(browser, tmp: str, rounds: int):
    cold, times = [], []
    for attempt in range(3):
        seconds, proc, base, context, page = await cold_start(browser, "bare_app.py", Path(tmp))
        cold.append(seconds)
        if attempt == 0:
            slider = page.get_by_role("slider")
            for i in range(rounds):
                n_before = await page.evaluate("() => document.querySelector('.js-plotly-plot').data[0].x.length")
                t = time.perf_counter()
                await slider.focus()
                await slider.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
                await page.wait_for_function(
                    "(n) => { const p = document.querySelector('.js-plotly-plot'); "
                    "return p && p.data && p.data[0].x.length !== n; }", arg=n_before, polling=10)
                times.append((time.perf_counter() - t) * 1e3)
        await context.close()
        stop(proc)
    return times, cold


async def app_latency(browser, rounds: int, sessions: int):
    cold, times, per_session = [], [], []
    root = Path(__file__).resolve().parents[1]
    for attempt in range(3):
        seconds, proc, base, context, page = await cold_start(browser, "app.py", root)
        cold.append(seconds)
        if attempt == 0:
            for i in range(rounds):
                times.append(await change_workers(page, 16 + 8 * i) * 1e3)
            before = rss_bytes(proc.pid)
            extra = []
            for _ in range(sessions):
                ctx, pg, _ = await open_page(browser)
                await pg.goto(base + "/")
                await pg.wait_for_selector(READY, timeout=120_000)
                await pg.locator("[data-testid=stPlotlyChart]").first.wait_for()
                extra.append(ctx)
            per_session.append((rss_bytes(proc.pid) - before) / sessions / 2**20)
            for ctx in extra:
                await ctx.close()
        await context.close()
        stop(proc)
    return times, cold, per_session


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
