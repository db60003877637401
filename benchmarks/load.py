"""Load and soak against a real `streamlit run` on 127.0.0.1, driven by Debian's Chromium (Playwright).

The browsers run on the same machine as the server, so on a small machine their rendering, not the server,
dominates the latencies under load; the server's own CPU time per rerun is printed apart.

One command, bounded, stops by itself:
    python benchmarks/load.py --sessions 20 --changes 10 --soak 1000
prints a table and, with --json, a JSON line; `--image zerocalc` loads a container of that Docker image instead
of a local server. Every input change sets a new worker count and waits until the per-worker chart in the page holds
exactly the bytes the core computes for it: the time measured is input change to updated chart. Errors (timeouts,
wrong numbers, page or console errors) are counted, never retried.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.server import CHROMIUM, CHROMIUM_ARGS, READY, cpu_seconds, rss_bytes, start, stop  # noqa: E402
from zerocalc.states.zero import model_states  # noqa: E402
from ui.state.convert import from_query, resolve  # noqa: E402

CHART_BYTES = """() => {
  const plot = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');
  if (!plot || !plot.data) return null;
  const bars = plot.data.filter(t => t.offsetgroup === 'states');       // the overview's model-state bars
  return (bars.length ? bars : plot.data).map(t => Array.from(t.customdata || []));
}"""


def expected_chart(workers: int) -> list:
    """The overview's model-state bars (bytes per category per stage) for the default view at `workers`."""
    resolved = resolve(from_query({"workers": str(workers)})[0])
    report = model_states(resolved.scenario)
    return [[r.per_worker_by_category[c] for r in report.stages] for c in ("parameters", "gradients", "optimizer")]


async def change_workers(page, workers: int, timeout_ms: int = 300_000) -> float:
    """Set the worker count; seconds until the chart shows the core's numbers for it."""
    want = expected_chart(workers)
    box = page.get_by_label("Data-parallel workers (dp)", exact=True)
    start_time = time.perf_counter()
    await box.fill(str(workers), timeout=timeout_ms)
    await box.press("Enter", timeout=timeout_ms)
    await page.wait_for_function(f"(want) => JSON.stringify(({CHART_BYTES})()) === JSON.stringify(want)", arg=want,
                                 timeout=timeout_ms, polling=20)
    return time.perf_counter() - start_time


async def open_page(browser):
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(300_000)  # a starved client is slow, not failed: only real failures count
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return context, page, errors


async def open_chart(page) -> None:
    """The page ready, then the overview's chart section opened (issue 36: the chart is drawn only while its
    section is open; CHART_BYTES reads it)."""
    await page.wait_for_selector(READY, timeout=120_000)
    await page.locator("[data-testid=stExpander] summary", has_text="Chart: model states and peak").click()
    await page.wait_for_selector("[data-testid=stPlotlyChart] .js-plotly-plot", timeout=120_000)


async def session(browser, base: str, index: int, changes: int, results: dict, arrival_s: float = 0.0,
                  think_s: float = 0.0):
    await asyncio.sleep(arrival_s)           # users arrive a moment apart, not in the same millisecond
    context, page, errors = await open_page(browser)
    try:
        await page.goto(base + "/")
        await open_chart(page)
        for step in range(changes):
            await asyncio.sleep(think_s)          # a user reads the result before the next change
            workers = 16 + 8 * ((index * changes + step) % 500)  # a new value each time
            try:
                results["latencies"].append(await change_workers(page, workers))
                print(f"session {index} change {step}: {results['latencies'][-1]:.2f} s", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 - counted as an error, the session goes on
                results["errors"].append(f"session {index} change {step}: {type(exc).__name__}")
                shown = await page.evaluate(CHART_BYTES)
                value = await page.get_by_label("Data-parallel workers (dp)", exact=True).input_value()
                print(f"session {index} change {step}: {type(exc).__name__} {str(exc)[:80]!r}; url {page.url}; "
                      f"box {value}; chart {str(shown)[:80]}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001
        results["errors"].append(f"session {index}: {type(exc).__name__}: {str(exc)[:120]}")
    finally:
        results["errors"].extend(f"session {index} page: {e[:120]}" for e in errors)
        await context.close()


def serve(image: str):
    """(pid, base URL, stop) of the page: `streamlit run app.py` here, or a container of `image` (its main process
    is streamlit itself, so the host reads its memory and CPU time from /proc like a local server's)."""
    if not image:
        proc, base = start()
        return proc.pid, base, lambda: stop(proc)
    from tests.e2e import container

    name = container.run(image)
    try:
        base = container.base_url(name)
        container.wait_healthy(name, base)
        return container.host_pid(name), base, lambda: container.remove(name)
    except Exception:
        container.remove(name)
        raise


async def run(args) -> dict:
    from playwright.async_api import async_playwright

    pid, base, done = serve(args.image)
    out = {"sessions": args.sessions, "changes": args.changes, "soak_reruns": args.soak, "think_s": args.think,
           "image": args.image}
    try:
        out["rss_idle"] = rss_bytes(pid)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            single = {"latencies": [], "errors": []}
            await session(browser, base, 0, args.changes, single)
            out["rss_one_session"] = rss_bytes(pid)
            many = {"latencies": [], "errors": []}
            cpu_before = cpu_seconds(pid)
            await asyncio.gather(*(session(browser, base, i + 1, args.changes, many, 0.25 * i, args.think)
                                   for i in range(args.sessions)))
            out["server_cpu_per_rerun_s"] = (cpu_seconds(pid) - cpu_before) / max(1, args.sessions * (
                args.changes + 1))    # each session: first page run + its changes
            out["rss_after_load"] = rss_bytes(pid)
            out["single"], out["concurrent"] = summary(single), summary(many)
            out["errors"] = single["errors"] + many["errors"]
            if args.soak:
                out["soak"] = await soak(browser, base, pid, args.soak)
                out["errors"] += out["soak"].pop("errors")
            await browser.close()
    finally:
        done()
    return out


async def soak(browser, base: str, pid: int, reruns: int) -> dict:
    """One session, `reruns` input changes; server memory sampled every tenth of the way."""
    context, page, errors = await open_page(browser)
    samples, failures, latencies = [], [], []
    try:
        await page.goto(base + "/")
        await open_chart(page)
        samples.append(rss_bytes(pid))
        for i in range(reruns):
            try:
                latencies.append(await change_workers(page, 16 + 8 * (i % 500)))
            except Exception as exc:  # noqa: BLE001
                failures.append(f"soak rerun {i}: {type(exc).__name__}")
            if (i + 1) % max(1, reruns // 10) == 0:
                samples.append(rss_bytes(pid))
    finally:
        await context.close()
    return {"rss_samples": samples, "rss_growth": samples[-1] - samples[0] if samples else 0,
            "latency": summary({"latencies": latencies})["latency"], "errors": failures + errors}


def summary(results: dict) -> dict:
    xs = sorted(results["latencies"])
    if not xs:
        return {"count": 0, "latency": {}}
    return {"count": len(xs), "latency": {"median_s": statistics.median(xs), "p95_s": xs[int(0.95 * (len(xs) - 1))],
                                          "max_s": xs[-1]}}


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def print_table(out: dict) -> None:
    where = f" on image {out['image']}" if out["image"] else ""
    print(f"load{where}: {out['sessions']} concurrent sessions x {out['changes']} input changes ({out['think_s']:g} s "
          f"between changes), soak {out['soak_reruns']}")
    for name in ("single", "concurrent"):
        lat = out[name]["latency"]
        if lat:
            print(f"  {name:11} {out[name]['count']:5} changes  median {lat['median_s'] * 1000:7.0f} ms  "
                  f"p95 {lat['p95_s'] * 1000:7.0f} ms  max {lat['max_s'] * 1000:7.0f} ms")
    print(f"  server CPU per rerun under load: {out['server_cpu_per_rerun_s'] * 1000:.0f} ms "
          f"(the rest of each latency is {out['sessions']} headless browsers sharing the server's cores)")
    print(f"  errors: {len(out['errors'])}")
    for e in out["errors"][:10]:
        print(f"    {e}")
    print(f"  server RSS: idle {mib(out['rss_idle'])}, one session {mib(out['rss_one_session'])}, after "
          f"{out['sessions']} more {mib(out['rss_after_load'])} "
          f"({mib((out['rss_after_load'] - out['rss_one_session']) / max(1, out['sessions']))} per extra session)")
    if "soak" in out:
        s = out["soak"]
        print(f"  soak: RSS {', '.join(mib(x) for x in s['rss_samples'])}; growth {mib(s['rss_growth'])}; "
              f"median change {s['latency'].get('median_s', 0) * 1000:.0f} ms")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--soak", type=int, default=1000, help="reruns in one session (0: no soak)")
    parser.add_argument("--think", type=float, default=1.0, help="seconds a user waits between changes (1.0)")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    parser.add_argument("--image", default="", help="load a container of this Docker image instead of a local "
                                                    "`streamlit run` (started, then removed)")
    args = parser.parse_args(argv)
    out = asyncio.run(run(args))
    print_table(out)
    if args.json:
        print(json.dumps(out))
    return 0 if not out["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
