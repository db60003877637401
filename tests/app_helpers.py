"""Helpers for the AppTest suites: run the app with a link and open views and sections, read what it drew (text,
figures, tables, the verdict cards), and the core's own report for the same link.
"""

import html as html_lib
import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ui.state.convert import from_query, resolve
from ui.drawing.panels import LAZY_SECTIONS, OVERVIEW_CHART
from ui.sidebar.widgets import SECTIONS as SECTION_ROWS
from zerocalc.output.report import full_report
from zerocalc.units import UNIT_BYTES, format_bytes

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TABS = ("Overview", "Model states", "Peak and step", "Layouts and ranks", "Compare", "Calibrate",
        "Framework configs", "RL", "How to read it")
SECTIONS = ("sec_load", "sec_arch", "sec_precision", "sec_cluster", "sec_parallel", "sec_recipe", "sec_step",
            "sec_assumptions", "sec_display")


def set_sections(at, opened=(), closed=()):
    """Open and close sidebar sections as their pills do (widgets.OPEN_SECTIONS holds the open sections' keys)."""
    now = set(at.session_state["sections"] or ()) if "sections" in at.session_state else set()
    at.session_state["sections"] = [k for k, *_ in SECTION_ROWS if k in (now | set(opened)) - set(closed)]
# Issue 13's job (Llama-3-8B, 8 workers, ZeRO-2, micro-batch 4, sequence 4096) on a card PyTorch can use 44 GB
# of: the A100 40GB it was filed on gives PyTorch 39.39 GiB (42.30 GB), where full recompute at micro-batch 1
# (43.2 GB with the 8-GPU group's NCCL buffers, step/nccl.py) no longer fits.
ISSUE_13 = {"model": "llama-3-8b", "gpu": "custom", "gpu_memory": "44GB", "micro_batch": "4", "seq_len": "4096",
            "stage": "2"}


def run_app(query=None, tab=None, sections=()):
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    open_lazy(at, (OVERVIEW_CHART,))      # the overview's chart, drawn only while its section is open (issue 36)
    at.run()
    assert not at.exception, at.exception
    if tab or sections:
        if sections:
            set_sections(at, sections)
        if tab:
            at.session_state["tab"] = tab
            open_lazy(at)
        at.run()
        assert not at.exception, at.exception
    return at


def open_lazy(at, keys=LAZY_SECTIONS):
    """Open the views' sections drawn only while open (ui.drawing.panels.LAZY_SECTIONS), as a click on each would: the
    suites read what they draw. Each view closes them again (ui/drawing/panels.py lazy); tests/test_app_lazy.py checks
    that."""
    for key in keys:
        at.session_state[key] = True


def open_tab(at, name):
    at.session_state["tab"] = name
    open_lazy(at)
    at.run()
    assert not at.exception, at.exception
    return at


def open_sections(at, *names):
    set_sections(at, names)
    at.run()
    assert not at.exception, at.exception
    return at


def alerts(at, kind: str) -> list:
    """The text of each plain-text alert of a kind (info, success, warning, error: ui/drawing/plain.py), as shown."""
    out = []
    for h in at.get("html"):
        for body in re.findall(rf'data-testid="zc-alert-{kind}">(.*?)</div>', h.proto.body, flags=re.S):
            text = re.sub(r"<li>", " ", body)
            out.append(html_lib.unescape(re.sub(r"<[^>]+>", "", text)).split(" ", 1)[-1].strip())
    return out


def plain_captions(at) -> list:
    return [html_lib.unescape(re.sub(r"<[^>]+>", "", m)) for h in at.get("html")
            for m in re.findall(r'data-testid="zc-caption">(.*?)</p>', h.proto.body, flags=re.S)]


def warnings_shown(at) -> str:
    """The warnings as the page renders them: Streamlit's (markdown escapes removed) and the plain-text ones."""
    return " ".join([re.sub(r"\\(.)", r"\1", w.value) for w in at.warning] + alerts(at, "warning"))


def header_text(at) -> str:
    """The page's title and its line of what is being checked (one HTML block)."""
    body = next(h.proto.body for h in at.get("html") if 'data-testid="zc-header"' in h.proto.body)
    return html_lib.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", " ", body, flags=re.S))


def captions(at) -> str:
    """The header's line and every caption."""
    return " ".join([header_text(at)] + [c.value for c in at.caption] + plain_captions(at))


def answer_text(at) -> str:
    """The verdict's sentence ("Does it fit on ...? ... Checking ZeRO-2: ..."), '' without a peak."""
    body = next((h.proto.body for h in at.get("html") if 'data-testid="zc-answer"' in h.proto.body), "")
    match = re.search(r'<p class="zc-answer"[^>]*>(.*?)</p>', body, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", "", match.group(1))) if match else ""


def text_of(at) -> str:
    """The verdict's sentence and every markdown, as read."""
    markdown = re.sub(r"\\(.)", r"\1", " ".join(m.value for m in at.markdown)).replace("**", "")
    shown = " ".join(a for kind in ("info", "success", "warning", "error") for a in alerts(at, kind))
    return f"{answer_text(at)} {markdown} {shown}"


def core_report(query):
    """What the core says for the state a link describes: the oracle for the app's numbers."""
    resolved = resolve(from_query(query)[0])
    return full_report(resolved.scenario, resolved.workload, resolved.state["buffer_factor"])


def figure(at, key):
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith(key) or key in chart.proto.id:
            return json.loads(chart.proto.spec)
    raise AssertionError(f"no chart {key}")


def has_figure(at, key) -> bool:
    return any(key in chart.proto.id for chart in at.get("plotly_chart"))


TABLE_COLUMN = {"stage_table": "redundancy", "verdict_table": "fits", "fits_on_table": "GPU",
                "deepspeed_table": "estimator", "ledger_table": "bytes/param", "activation_table": "term"}


def table(at, key):
    """A dataframe by a column only it has (AppTest keeps no key on plain dataframes)."""
    return dataframe_with(at, TABLE_COLUMN.get(key, key))


def dataframe_with(at, column):
    """The data grid or the static HTML table (ui/drawing/static_table.py) with this column, as a DataFrame."""
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    for df in html_tables(at):
        if column in df.columns:
            return df
    raise AssertionError(f"no table with column {column!r}")


def all_tables(at) -> list:
    """Every table on the page as a DataFrame: the data grids and the static HTML tables."""
    return [df.value for df in at.dataframe] + html_tables(at)


def html_tables(at) -> list:
    """The page's static HTML tables as DataFrames: a cell's text, or its exact value where it carries one."""
    import pandas as pd

    def value(attrs, text):
        exact = re.search(r'data-v="([^"]*)"', attrs)
        return json.loads(html_lib.unescape(exact.group(1))) if exact else html_lib.unescape(text)
    found = []
    for block in at.get("html"):
        for table in re.findall(r'<table class="zc-table".*?</table>', block.proto.body, flags=re.S):
            head = [html_lib.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table, flags=re.S)]
            rows = [[value(a, t) for a, t in re.findall(r"<td([^>]*)>(.*?)</td>", row, flags=re.S)]
                    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], flags=re.S)]
            found.append(pd.DataFrame(rows, columns=head))
    return found


def traces(fig):
    return {t["name"]: t for t in fig["data"]}


def states(at) -> list:
    """The model-state bars of the overview (its left bars; the whole chart without a peak)."""
    if has_figure(at, "fig_overview"):
        return [t for t in figure(at, "fig_overview")["data"] if t.get("offsetgroup") == "states"]
    return figure(at, "fig_per_worker")["data"]


def peak_bars(at) -> list:
    return [t for t in figure(at, "fig_overview")["data"] if t.get("offsetgroup") == "peak"]


def verdict_html(at) -> str:
    """The verdict block's HTML: the cards (a ZeRO stage's, or with the RL view open an RL GPU class's)."""
    return next(h.proto.body for h in at.get("html") if 'data-testid="zc-verdict"' in h.proto.body)


def verdict_cards(at) -> list:
    """The verdict cards: (stage, fits, text) from the page's HTML."""
    body = next(h.proto.body for h in at.get("html") if 'data-testid="zc-verdict"' in h.proto.body)
    cards = []
    for m in re.finditer(r'data-stage="(\d)" data-fits="(true|false)">(.*?)</div></div>', body):
        cards.append((int(m.group(1)), m.group(2) == "true", html_lib.unescape(re.sub(r"<[^>]+>", " ", m.group(3)))))
    return cards


def subtotals(at) -> list:
    """The model-state subtotal per worker at each stage as the page shows it: the last line of each verdict card,
    or a metric per stage when there is no peak (params-only)."""
    if any('data-testid="zc-verdict"' in h.proto.body for h in at.get("html")):
        return [re.search(r"model states (.+?) per worker", text).group(1) for _, _, text in verdict_cards(at)]
    return [m.value for m in at.metric][:4]


def assert_overview_matches_core(at, report, unit="GB"):
    traces = states(at)
    for category in ("parameters", "gradients", "optimizer"):
        # a mixture-of-experts model's bars come per parameter group ("experts: parameters", "fp32: optimizer")
        mine = [t for t in traces if t["name"] == category or t["name"].endswith(f": {category}")]
        want = [s["per_worker_bytes"][category] for s in report["stages"]]
        assert [sum(t["customdata"][i] for t in mine) for i in range(len(want))] == want
        assert [sum(t["y"][i] for t in mine) for i in range(len(want))] == pytest.approx(
            [b / UNIT_BYTES[unit] for b in want])
    if "peak" in report:        # the cards: the model states the peak's phase holds (gradients freed are not there)
        want = [p["phases"][p["peak_phase"]].get("model states", 0) for p in report["peak"]]
    else:
        want = [s["per_worker_total_bytes"] for s in report["stages"]]
    assert subtotals(at) == [format_bytes(b, unit) for b in want]
    if "peak" in report:
        bars = {t["name"]: t for t in peak_bars(at)}
        for p in report["peak"]:
            parts = p["phases"][p["peak_phase"]]
            assert sum(t["customdata"][p["stage"]] for t in bars.values()) == sum(parts.values()) == p["peak_bytes"]
        cards = verdict_cards(at)
        assert [(s, f) for s, f, _ in cards] == [(p["stage"], p["fits"]) for p in report["peak"]]
        for (_, _, text), p in zip(cards, report["peak"]):
            assert format_bytes(p["peak_bytes"], unit) in text
            assert format_bytes(abs(p["headroom_bytes"]), unit) in text
            assert ("headroom" in text) == p["fits"] and ("over" in text) == (not p["fits"])
