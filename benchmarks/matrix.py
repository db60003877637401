"""The page's speed matrix (issue 36): every view on four plans, three actions each, timed in Debian's Chromium from
the action to the settled page, beside a bare Streamlit app measured in the same run.

- plans (links): Llama-3-8B on 8 GPUs, Gemma-3-27B on 8, DeepSeek-V3 with EP and PP (256 GPUs), Llama-3.1-405B in
  3D (tp 8 x pp 16 x dp 8, 1,024 GPUs);
- actions, per plan and view: open the view (from the overview), change a sidebar field (dp doubled), open the
  "Load a config" section, upload the plan's config.json (tests/fixtures/model_configs);
- first load: a new browser context on the default link, desktop (1280 x 900) and phone (390 x 844, touch, no CPU
  throttling: run.py does none either), the bare app's first load beside it.

Settled: the script idle and connected, no stale element left from the previous run, no skeleton, every Plotly
chart drawn, and all of that held for SETTLE_MS (a view that draws in two passes is settled after the second). Each
(plan, view, repeat) opens a fresh session on a link with its own CUDA-context size (1 GiB + under 0.3 GiB), so the
server's per-state caches and its replays are cold for it, as for a visitor's own plan. The bare app's slider change is timed after
every action of the app, so a busy moment of this shared machine falls on both; "x bare" is a cell's median over the
bare change's median (a first load's: over the bare app's first load on the same device, loads alternated).

Run: python benchmarks/matrix.py [--repeats 3] [--plans dsv3,405b] [--views "Peak and step,RL"] [--root DIR]
[--against DIR] (--root: another checkout's app, e.g. `git archive` of the commit before a change; --against: a
second checkout measured alternately with it in the same run, the fair before/after on a shared machine; --json
FILE keeps the samples, and `--compare BEFORE.json AFTER.json` prints two runs side by side).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.app_rerun import BARE  # noqa: E402
from tests.e2e.server import CHROMIUM, CHROMIUM_ARGS, start, stop  # noqa: E402

TABS = ("Overview", "Model states", "Peak and step", "Layouts and ranks", "Compare", "Calibrate",
        "Framework configs", "RL", "How to read it")            # ui.share.TABS (not imported: --root may differ)
CONFIGS = ROOT / "tests" / "fixtures" / "model_configs"
PLANS = {   # name: (link parameters, dp, the config.json its upload sends)
    "llama-3-8b x 8": ({"model": "llama-3-8b", "workers": 8}, 8, "llama-3.1-8b.json"),
    "gemma-3-27b x 8": ({"model": "gemma-3-27b", "workers": 8}, 8, "gemma-3-27b.json"),
    "deepseek-v3 dp32 pp8 ep32": ({"model": "deepseek-v3", "workers": 32, "pp": 8, "ep": 32}, 32, "deepseek-v3.json"),
    "llama-3.1-405b tp8 pp16 dp8": ({"model": "llama-3.1-405b", "workers": 8, "tp": 8, "pp": 16,
                                     "sequence_parallel": "true"}, 8, "llama-3.1-405b.json"),
}
SHORT = {"llama8": "llama-3-8b x 8", "gemma27": "gemma-3-27b x 8", "dsv3": "deepseek-v3 dp32 pp8 ep32",
         "405b": "llama-3.1-405b tp8 pp16 dp8"}
SETTLE_MS = 150
TIMEOUT_MS = 60_000
DESKTOP = {"viewport": {"width": 1280, "height": 900}}
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 3}

# Counts the script runs the page shows (each switch of the app root to "running") and stamps the page's last change
# (an element added, removed or edited, a run starting or ending), before any of the page's own scripts.
WATCH = """
window.__zcRuns = 0; window.__zcChanged = 0;
new MutationObserver((records) => {
  window.__zcChanged = performance.now();
  for (const r of records) if (r.type === 'attributes' && r.target.getAttribute('data-test-script-state') === 'running')
    window.__zcRuns++;
}).observe(document, {childList: true, characterData: true, subtree: true, attributes: true,
                      attributeFilter: ['data-test-script-state', 'data-stale']});
"""
# Settled: the script idle and connected, nothing stale or skeletal, every Plotly chart drawn, something changed since
# the action (a run; or, 1.5 s on, any change: a very short run may never show "running" in the DOM), and no change
# for `hold` ms. The time is the page's last change (window.__zcChanged).
SETTLED = """([runs, t0, hold]) => {
  const app = document.querySelector('[data-testid=stApp]');
  const ran = window.__zcRuns > runs || (window.__zcChanged > t0 && performance.now() - t0 > 1500);
  return app && ran && app.dataset.testScriptState === 'notRunning'
    && app.dataset.testConnectionState === 'CONNECTED'
    && !document.querySelector('[data-stale=true], [data-testid=stSkeleton], [data-testid=stAppSkeleton]')
    && Array.from(document.querySelectorAll('[data-testid=stPlotlyChart]')).every(c => c.querySelector('.main-svg'))
    && performance.now() - window.__zcChanged >= hold;
}"""
UNSETTLED = """(runs) => { const app = document.querySelector('[data-testid=stApp]'); return {
  runs: [window.__zcRuns, runs], script: app && app.dataset.testScriptState,
  link: app && app.dataset.testConnectionState,
  stale: document.querySelectorAll('[data-stale=true]').length,
  skeletons: document.querySelectorAll('[data-testid=stSkeleton], [data-testid=stAppSkeleton]').length,
  charts: Array.from(document.querySelectorAll('[data-testid=stPlotlyChart]')).map(c => !!c.querySelector('.main-svg')),
  quiet_ms: performance.now() - window.__zcChanged}; }"""


async def settled_after(page, action) -> float:
    """ms from the action to the settled page (page clock)."""
    runs, t0 = await page.evaluate("[window.__zcRuns, performance.now()]")
    await action()
    await settle(page, runs, t0)
    return await page.evaluate("window.__zcChanged") - t0


async def settle(page, runs: int = 0, t0: float = 0.0) -> None:
    """Wait for the settled page; on a timeout, say what was still unsettled."""
    try:
        await page.wait_for_function(SETTLED, arg=[runs, t0, SETTLE_MS], polling=10, timeout=TIMEOUT_MS)
    except Exception:
        print("not settled:", await page.evaluate(UNSETTLED, runs), file=sys.stderr)
        raise


async def new_page(browser, device=DESKTOP):
    context = await browser.new_context(**device)
    await context.add_init_script(WATCH)
    page = await context.new_page()
    page.set_default_timeout(180_000)
    return context, page


async def first_load(browser, url: str, device) -> float:
    """ms from navigation to the settled first page in a new (cold) browser context."""
    context, page = await new_page(browser, device)
    try:
        await page.goto(url)
        await settle(page)
        return await page.evaluate("window.__zcChanged")      # the page clock starts at the navigation
    finally:
        await context.close()


class Bare:
    """The bare app's slider change, timed the same way."""

    def __init__(self, page):
        self.page, self.i, self.times = page, 0, []

    async def change(self):
        slider = self.page.get_by_role("slider")
        self.i += 1
        key = "ArrowRight" if self.i % 2 else "ArrowLeft"

        async def act():
            await slider.focus()
            await slider.press(key)
        self.times.append(await settled_after(self.page, act))


def link(base: str, params: dict, bust: int) -> str:
    # a state of its own (the caches cold) whose capacity is bust x 256 KiB lower: the solvers' probes (the longest
    # sequence, the fewest workers) then land on other lengths and counts than another link's, so that few allocator
    # replays are reused from an earlier link (a replay does not depend on the context's bytes; the probes do, through
    # the card's room). The peaks move by at most 0.3 GiB (bust under 1,100), a few tenths of a percent of the cards.
    query = {**params, "cuda_context_bytes": 2**30 + bust * 2**18}
    return base + "/?" + "&".join(f"{k}={v}" for k, v in query.items())


async def plan_view(page, base: str, plan: str, view: str, bust: int, bare: Bare, out: dict):
    params, dp, config = PLANS[plan]
    await page.goto(link(base, params, bust))
    await settle(page)
    main, side = page.locator("[data-testid=stMain]"), page.locator("[data-testid=stSidebar]")
    if view != "Overview":
        out[(plan, view, "open view")].append(
            await settled_after(page, lambda: main.get_by_role("radio", name=view, exact=True).click()))
        await bare.change()
    box = page.get_by_label("Data-parallel workers (dp)", exact=True)

    async def change():
        await box.fill(str(2 * dp))
        await box.press("Enter")
    out[(plan, view, "change dp")].append(await settled_after(page, change))
    await bare.change()
    out[(plan, view, "open Load section")].append(await settled_after(
        page, lambda: side.get_by_role("button", name="Load a config", exact=True).click()))
    await bare.change()
    dropzone = side.locator("[data-testid=stFileUploaderDropzoneInput]").first
    await dropzone.wait_for(state="attached")
    took = await settled_after(page, lambda: dropzone.set_input_files(str(CONFIGS / config)))
    if not await page.get_by_text(f"Loaded {config}", exact=False).count():   # an upload never sent: no time
        raise RuntimeError("the upload was not answered")
    out[(plan, view, "upload config.json")].append(took)
    await bare.change()


async def run(args) -> dict:
    """{root: samples}: the served checkout's, and with --against the other checkout's, measured alternately (each
    first load and each (plan, view) on one, then on the other) beside one bare app."""
    from playwright.async_api import async_playwright

    roots = [args.root] + ([args.against] if args.against else [])
    outs = {root: defaultdict(list) for root in roots}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bare_app.py").write_text(BARE)
        apps = {root: start("app.py", Path(root)) for root in roots}
        bare_proc, bare_base = start("bare_app.py", Path(tmp))
        try:
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                bare_ctx, bare_page = await new_page(browser)
                await bare_page.goto(bare_base + "/")
                await settle(bare_page)
                bare = Bare(bare_page)
                for _, app_base in apps.values():
                    await first_load(browser, app_base + "/", DESKTOP)       # the server's imports, once
                for r in range(args.repeats):
                    for name, device in (("desktop", DESKTOP), ("phone", PHONE)):
                        for root, (_, app_base) in apps.items():
                            out = outs[root]
                            out[("first load", name, "bare app")].append(
                                await first_load(browser, bare_base + "/", device))
                            out[("first load", name, "zerocalc")].append(
                                await first_load(browser, app_base + "/", device))
                context, page = await new_page(browser)
                bust = 0
                for r in range(args.repeats):
                    for plan in args.plans:
                        for view in args.views:
                            bust += 1
                            for root, (_, app_base) in apps.items():
                                t = time.perf_counter()
                                try:
                                    await plan_view(page, app_base, plan, view, bust + 100 * (args.offset % 10), bare,
                                                    outs[root])
                                except Exception as exc:  # noqa: BLE001 - counted, the matrix goes on
                                    outs[root][(plan, view, "failed")].append(0)
                                    print(f"[{r}] {plan} / {view} failed: {str(exc)[:200]}", file=sys.stderr)
                                print(f"[{r}] {root}: {plan} / {view}: {time.perf_counter() - t:.1f} s",
                                      file=sys.stderr)
                await context.close()
                await bare_ctx.close()
                await browser.close()
        finally:
            for proc, _ in apps.values():
                stop(proc)
            stop(bare_proc)
    for out in outs.values():
        out[("bare app", "slider", "change")] = bare.times
    return outs


def table(out: dict) -> str:
    bare = statistics.median(out[("bare app", "slider", "change")])
    lines = [f"bare app's change (median of {len(out[('bare app', 'slider', 'change')])}): {bare:.0f} ms", "",
             "| plan | view | action | median ms | runs | x bare |", "|---|---|---|---:|---|---:|"]
    for (plan, view, action), xs in out.items():
        if plan == "bare app":
            continue
        med = statistics.median(xs)
        runs = ", ".join(f"{x:.0f}" for x in xs)
        base = statistics.median(out[(plan, view, "bare app")]) if plan == "first load" else bare
        lines.append(f"| {plan} | {view} | {action} | {med:.0f} | {runs} | {med / base:.2f}x |")
    return "\n".join(lines)


def compare(before_path: str, after_path: str) -> str:
    """Two runs' --json side by side: each cell's median and its multiple of that run's bare change."""
    runs = [json.loads(Path(p).read_text()) for p in (before_path, after_path)]
    bare = [statistics.median(r["bare app / slider / change"]) for r in runs]
    lines = [f"bare app's change: {bare[0]:.0f} ms before, {bare[1]:.0f} ms after", "",
             "| plan | view | action | before ms | x bare | after ms | x bare |", "|---|---|---|---:|---:|---:|---:|"]
    for key in runs[0]:
        if key.startswith("bare app") or key.endswith("failed") or key not in runs[1]:
            continue
        meds = [statistics.median(r[key]) for r in runs]
        plan, view, action = key.split(" / ")
        base = [statistics.median(r[f"{plan} / {view} / bare app"]) for r in runs] if plan == "first load" else bare
        lines.append(f"| {plan} | {view} | {action} | {meds[0]:.0f} | {meds[0] / base[0]:.2f}x | {meds[1]:.0f} | "
                     f"{meds[1] / base[1]:.2f}x |")
    for i, r in enumerate(runs):
        failed = sum(len(v) for k, v in r.items() if k.endswith("failed"))
        lines.append(f"\n{('before', 'after')[i]}: {failed} failed cell(s)")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plans", default=",".join(SHORT), help="comma-separated: " + ", ".join(SHORT))
    parser.add_argument("--views", default=",".join(TABS))
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose app.py is served")
    parser.add_argument("--offset", type=int, default=int(time.time()) % 1000,
                        help="spreads the links' cache-busting sizes between runs on one server (its last digit)")
    parser.add_argument("--against", help="another checkout measured alternately with --root in the same run "
                        "(before/after under the same load); its samples go to the --json file's .against.json")
    parser.add_argument("--json", help="also write the raw samples to this file")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="print two --json files side by side")
    args = parser.parse_args()
    if args.compare:
        print(compare(*args.compare))
        return
    args.plans = [SHORT.get(p, p) for p in args.plans.split(",")]
    args.views = [v for v in args.views.split(",") if v]
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    outs = asyncio.run(run(args))
    out = outs[args.root]
    print(table(out))
    print(f"\nload average after: {os.getloadavg()}")
    if args.json:
        files = {args.root: args.json, args.against: str(Path(args.json).with_suffix(".against.json"))}
        for root, samples in outs.items():
            Path(files[root]).write_text(json.dumps({" / ".join(k): v for k, v in samples.items()}, indent=1))
        if args.against:
            print("\n--against (before) and the served root (after), measured alternately:\n")
            print(compare(files[args.against], files[args.root]))

if __name__ == "__main__":
    main()
