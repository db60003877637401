"""What one Streamlit element costs the browser here (issue 36): the same content drawn as a Plotly chart (with and
without its mode bar), a Vega-Lite bar chart, a Glide data grid (st.dataframe), st.table or one static HTML table,
and a row of buttons against one markdown block with one picker. Each variant is its own page (a link). Measured:
the time from a click that draws COUNT of it to the settled page (matrix.py's settle), and the CPU time every process
of the run spent meanwhile (browser, driver, server: /proc); the "nothing" variant is the click's own cost. Variants
alternate within each round, so a busy moment of the shared machine falls on all.

Run: python benchmarks/elements.py [--rounds 5] [--count 3] [--kinds plotly,html] [--first-load]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile

import psutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.matrix import DESKTOP, PHONE, first_load, new_page, settle, settled_after  # noqa: E402
from tests.e2e.server import CHROMIUM, CHROMIUM_ARGS, start, stop  # noqa: E402

APP = '''
import html
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

kind, count = st.query_params.get("kind", "nothing"), int(st.query_params.get("count", "3"))
on = st.toggle("draw", key="draw", value=st.query_params.get("on") == "1")     # on=1: drawn on the first page
st.caption(f"drawn: {on}")       # every click changes the page, also the "nothing" variant's (matrix.py's settle)
ROWS = [{"stage": f"ZeRO-{i}", "parameters": f"{16.06 * (i + 1):.2f} GB", "gradients": f"{8.1 / (i + 1):.2f} GB",
         "optimizer": f"{96.4 / (i + 1):.2f} GB", "peak": f"{70.2 - i:.2f} GB", "fits": i % 2 == 0}
        for i in range(6)]
df = pd.DataFrame(ROWS)


def figure():
    fig = go.Figure()
    for t, name in enumerate(("parameters", "gradients", "optimizer", "activations", "logits", "buffers")):
        fig.add_bar(x=[f"ZeRO-{i}" for i in range(4)], y=[float(t + i) for i in range(4)], name=name)
    fig.update_layout(barmode="stack", height=380, title="peak per GPU")
    return fig


def html_table(frame):
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    return f'<table class="zc-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


if on:
    for i in range(count):
        if kind == "plotly":
            st.plotly_chart(figure(), key=f"c{i}", theme=None)
        elif kind == "plotly_nobar":
            st.plotly_chart(figure(), key=f"c{i}", theme=None, config={"displayModeBar": False})
        elif kind == "plotly_static":
            st.plotly_chart(figure(), key=f"c{i}", theme=None, config={"displayModeBar": False, "staticPlot": True})
        elif kind == "vega":
            st.bar_chart(pd.DataFrame({"stage": [f"ZeRO-{i}" for i in range(4)], "GB": [1.0, 2.0, 3.0, 4.0]}),
                         x="stage", y="GB", height=380)
        elif kind == "dataframe":
            st.dataframe(df, hide_index=True, key=f"t{i}")
        elif kind == "dataframe_csv":
            st.dataframe(df, hide_index=True, key=f"t{i}")
            st.download_button("CSV", b"x", key=f"d{i}", on_click="ignore")
        elif kind == "table":
            st.table(df)
        elif kind == "html":
            st.html(html_table(df))
        elif kind == "buttons":
            for j in range(6):
                left, right = st.columns([6, 1])
                left.markdown(f"{j + 1}. change number {j} to something cheaper")
                right.button("Apply", key=f"b{i}_{j}")
        elif kind == "one_block":
            st.markdown("\\n".join(f"{j + 1}. change number {j} to something cheaper" for j in range(6)))
            left, right = st.columns([4, 1], vertical_alignment="bottom")
            left.selectbox("Apply a change", range(6), key=f"s{i}")
            right.button("Apply", key=f"b{i}")
'''
KINDS = ("nothing", "plotly", "plotly_nobar", "plotly_static", "vega", "dataframe", "dataframe_csv", "table", "html",
         "buttons", "one_block")


def tree_cpu() -> float:
    """CPU seconds of every process this one started (the browser's, the driver's, the server's), from /proc."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


async def one(page, base: str, kind: str, count: int) -> tuple:
    """(ms, CPU s) of the third click: drawn, removed, drawn again (what each rerun of a view pays; the first draw
    also loads the kind's script)."""
    await page.goto(f"{base}/?kind={kind}&count={count}")
    await settle(page)
    toggle = page.get_by_text("draw", exact=True)
    await settled_after(page, toggle.click)
    await settled_after(page, toggle.click)
    cpu = tree_cpu()
    ms = await settled_after(page, toggle.click)
    return ms, tree_cpu() - cpu


async def run(args) -> dict:
    from playwright.async_api import async_playwright

    out = {k: [] for k in args.kinds}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "elements_app.py").write_text(APP)
        proc, base = start("elements_app.py", Path(tmp))
        try:
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                if args.first_load:         # a new browser context per load: each kind's script compiled cold
                    for r in range(args.rounds):
                        for kind in args.kinds:
                            for device, size in (("desktop", DESKTOP), ("phone", PHONE)):
                                ms = await first_load(browser, f"{base}/?kind={kind}&count=1&on=1", size)
                                out.setdefault(f"{kind}, first load, {device}", []).append((ms, 0.0))
                        print(f"round {r}: " + ", ".join(f"{k} {v[-1][0]:.0f} ms" for k, v in out.items() if v),
                              file=sys.stderr)
                    return {k: v for k, v in out.items() if v}
                context, page = await new_page(browser)
                for r in range(args.rounds):
                    for kind in args.kinds:
                        out[kind].append(await one(page, base, kind, args.count))
                    print(f"round {r}: " + ", ".join(f"{k} {v[-1][0]:.0f} ms {v[-1][1]:.2f} s" for k, v in out.items()),
                          file=sys.stderr)
                await context.close()
                await browser.close()
        finally:
            stop(proc)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--first-load", action="store_true",
                        help="time instead a first load (new context, desktop and phone) of a page with one of each")
    args = parser.parse_args()
    args.kinds = args.kinds.split(",")
    out = asyncio.run(run(args))
    if args.first_load:
        print("| page with one | first load, median ms | samples |\n|---|---:|---|")
        for kind, xs in out.items():
            print(f"| {kind} | {statistics.median(x[0] for x in xs):.0f} | {', '.join(f'{x[0]:.0f}' for x in xs)} |")
        return
    ms0, cpu0 = (statistics.median(x[i] for x in out.get("nothing", [(0, 0)])) for i in (0, 1))
    print(f"| drawn ({args.count} of each) | median ms | each, over nothing | median CPU ms | each, over nothing |\n"
          "|---|---:|---:|---:|---:|")
    for kind, xs in out.items():
        ms, cpu = (statistics.median(x[i] for x in xs) for i in (0, 1))
        print(f"| {kind} | {ms:.0f} | {(ms - ms0) / args.count:+.0f} | {1000 * cpu:.0f} | "
              f"{1000 * (cpu - cpu0) / args.count:+.0f} |")


if __name__ == "__main__":
    main()
