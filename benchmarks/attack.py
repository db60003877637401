"""A bystander's page time while another visitor attacks the same server.

Two measurements. The server's own: a bystander thread asks the core for a fresh state's answers (what each of
its reruns asks) while --attackers threads ask the costliest legal answers back to back (a new layout search of a
large model on 2^20 GPUs each time), once computed in the server's process, as Streamlit's session threads would,
and once through ui/worker.py's worker process, as the page does. Then the browsers' (the hosted page, serve.py, on
127.0.0.1, driven by Debian's Chromium; on a 2-core machine the browsers' own rendering weighs most, so a control
row runs the same sessions on small pages).

The bystander changes the worker count and waits for the chart to show the core's numbers (benchmarks/load.py's
measure), first with the server idle, then while --attackers sessions each loop over the costliest legal actions
a link allows: a new state of a large model on 2^20 GPUs with the layout search asked for (about a second of
server CPU each, inside the search's bounds), and a 1 MB DeepSpeed config of 95,000 unknown keys. The target:
the bystander's median under attack within 1.5x of idle.

The attackers' browser runs at nice 19: on a real host their browsers render on their own machines, so here their
rendering must not take the bystander's browser's cores; what the attack costs the server is what is measured.

    python benchmarks/attack.py [--attackers 3] [--changes 15] [--browsers]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.load import change_workers, open_page  # noqa: E402
from tests.budget_cases import LIMIT, _keys  # noqa: E402
from tests.e2e.server import CHROMIUM, CHROMIUM_ARGS, READY, cpu_seconds, start, stop  # noqa: E402

HEAVY = ("?model=qwen3-235b-a22b&workers=1048576&seq_len={seq}", "?model=custom&layers=1024&hidden=8192&heads=64"
         "&kv_heads=64&ffn=32768&workers=1048576&seq_len={seq}")
LIGHT = ("?model=gpt2&seq_len={seq}", "?model=gpt2&workers=2&seq_len={seq}")


async def bystander(browser, base: str, changes: int, think_s: float, offset: int) -> list:
    context, page, _ = await open_page(browser)
    try:
        await page.goto(base + "/")
        await page.wait_for_selector(READY, timeout=120_000)
        out = []
        for step in range(changes):
            await asyncio.sleep(think_s)
            out.append(await change_workers(page, 16 + 8 * (offset + step)))
        return out
    finally:
        await context.close()


async def attacker(browser, base: str, index: int, stop_at: list, done: list, upload: Path, kinds: str):
    context, page, _ = await open_page(browser)
    step = 0
    try:
        while not stop_at:
            seq = 2 ** (10 + (index * 7 + step) % 8)           # a new state each time: nothing cached helps
            await page.goto(base + "/" + (LIGHT if kinds == "light" else HEAVY)[step % 2].format(seq=min(seq, 1024)
                                                                                             if kinds == "light"
                                                                                             else seq))
            await page.wait_for_selector(READY, timeout=300_000)
            if kinds in ("search", "both"):
                await page.locator("[data-testid=stMain]").get_by_role("radio", name="Layouts and ranks",
                                                                        exact=True).click()
                await page.wait_for_selector(READY, timeout=300_000)
                await page.get_by_text("Search every tp x pp x cp x dp layout", exact=False).click()
                await page.wait_for_selector(READY, timeout=300_000)
            if kinds == "upload" or (kinds == "both" and step % 3 == 2):
                await page.locator("[data-testid=stSidebar]").get_by_role("button", name="Load a config",
                                                                          exact=True).click()
                await page.wait_for_selector(READY, timeout=300_000)
                await page.locator("[data-testid=stSidebar] [data-testid=stFileUploaderDropzoneInput]").nth(1) \
                    .set_input_files(str(upload))
                await page.wait_for_selector(READY, timeout=300_000)
            done.append(step)
            step += 1
    except Exception as exc:  # noqa: BLE001 - an attacker that fails only stops attacking
        print(f"attacker {index} stopped: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
    finally:
        await context.close()


async def run(args) -> dict:
    from playwright.async_api import async_playwright

    proc, base = start("serve.py")
    tmp = Path(tempfile.mkdtemp())
    niced = tmp / "chromium-nice19"
    niced.write_text(f'#!/bin/sh\nexec nice -n 19 {CHROMIUM} "$@"\n')
    niced.chmod(0o755)
    upload = tmp / "ds_config.json"
    upload.write_text("{" + ",".join(['"zero_optimization":{"stage":2}'] + _keys(LIMIT - 40)) + "}")
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            hostile = await p.chromium.launch(executable_path=str(niced), args=CHROMIUM_ARGS)
            await bystander(browser, base, 3, 0.2, 0)                 # warm: the first page run and its imports
            idle = await bystander(browser, base, args.changes, args.think, 10)
            stop_at, done = [], []
            attackers = [asyncio.create_task(attacker(hostile, base, i, stop_at, done, upload, args.attack))
                         for i in range(args.attackers)]
            await asyncio.sleep(5)                                    # the attack under way
            cpu = cpu_seconds(proc.pid)
            started = time.perf_counter()
            attacked = await bystander(browser, base, args.changes, args.think, 100)
            wall = time.perf_counter() - started
            cpu = cpu_seconds(proc.pid) - cpu
            stop_at.append(True)
            await asyncio.gather(*attackers)
            await hostile.close()
            await browser.close()
    finally:
        stop(proc)
    return {"idle": idle, "attacked": attacked, "attack_actions": len(done), "server_cpu_share": cpu / wall}


def _bystander_answers(i: int) -> float:
    from ui.state import from_query, resolve
    from zerocalc.answers.fixes import fixes
    from zerocalc.output.report import full_report
    r = resolve(from_query({"model": "llama-3-8b", "workers": str(16 + 8 * i), "seq_len": str(1024 + i)})[0])
    started = time.perf_counter()
    full_report(r.scenario, r.workload, 1.5, answers=True)
    fixes(r.scenario, r.workload, r.state["stage"])
    return time.perf_counter() - started


def _attack_answers(stop: list, k: int, through_worker: bool) -> None:
    from ui.state import from_query, resolve
    from ui.worker import run as in_worker
    from zerocalc.output.report import full_report
    i = 0
    while not stop:
        query = {"model": "qwen3-235b-a22b", "workers": "1048576", "seq_len": str(2 ** (10 + (k * 7 + i) % 8)),
                 "micro_batch": str(1 + i)}
        r = resolve(from_query(query)[0])
        in_worker(through_worker, full_report, r.scenario, r.workload, 1.5, True)
        i += 1


def server_side(attackers: int, changes: int) -> dict:
    import threading
    from ui.worker import isolated
    from ui.state import from_query, resolve
    from zerocalc.output.report import full_report
    isolated(full_report, resolve(from_query({})[0]).scenario, None)          # the worker started
    out = {}
    for through_worker in (False, True):
        idle = [_bystander_answers(i) for i in range(changes)]
        stop = []
        threads = [threading.Thread(target=_attack_answers, args=(stop, k, through_worker)) for k in range(attackers)]
        for t in threads:
            t.start()
        time.sleep(1)
        attacked = [_bystander_answers(1000 + i) for i in range(changes)]
        stop.append(True)
        for t in threads:
            t.join()
        out["worker" if through_worker else "inline"] = (statistics.median(idle), statistics.median(attacked))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attackers", type=int, default=3)
    parser.add_argument("--changes", type=int, default=15)
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--attack", choices=("search", "upload", "both", "light"), default="both",
                        help="light: the same sessions loading small pages (the control: what browsers alone cost)")
    parser.add_argument("--browsers", action="store_true", help="also the browser measurement (minutes)")
    args = parser.parse_args(argv)
    server = server_side(args.attackers, 3 * args.changes)
    print(f"the server's own: a bystander's answers for a fresh state ({3 * args.changes} each), "
          f"{args.attackers} attackers asking a new 2^20-GPU layout search back to back:")
    for name, (idle, attacked) in server.items():
        where = "in the server's process" if name == "inline" else "in the worker process (ui/worker.py)"
        print(f"  attack {where:40} idle {idle * 1000:6.1f} ms  attacked {attacked * 1000:6.1f} ms  "
              f"ratio {attacked / idle:.2f}x")
    if not args.browsers:
        return 0
    out = asyncio.run(run(args))
    idle, attacked = statistics.median(out["idle"]), statistics.median(out["attacked"])
    print(f"bystander, input change to updated chart ({args.changes} changes each):")
    print(f"  idle server        median {idle * 1000:6.0f} ms  max {max(out['idle']) * 1000:6.0f} ms")
    print(f"  {args.attackers} attackers        median {attacked * 1000:6.0f} ms  max {max(out['attacked']) * 1000:6.0f} ms"
          f"  ({out['attack_actions']} costly actions done meanwhile; server busy {out['server_cpu_share']:.0%} "
          "of a core)")
    print(f"  ratio {attacked / idle:.2f}x (target 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
