"""A small read-only table as one static HTML block instead of Streamlit's data grid (issue 36: the grid costs the
browser about 4x the CPU of a plain table here, benchmarks/elements.py). Every cell is escaped text (plain.escaped:
uploaded names and link values reach tables); a non-text cell also carries its exact value (data-v, JSON), which the
shown text rounds, so a reader (and the tests) can get the number the core gave."""

from __future__ import annotations

import html
import json
import math

from .plain import MAX_LINE, escaped

MAX_ROWS = 60          # larger tables keep the data grid (it scrolls and sorts)
CSS = """<style>
.zc-table-wrap { overflow-x: auto; margin: 0 0 0.5rem 0; }
.zc-table { border-collapse: collapse; font-size: 0.875rem; line-height: 1.35; }
.zc-table th, .zc-table td { border: 1px solid rgba(49, 51, 63, 0.12); padding: 0.25rem 0.55rem; text-align: left;
                             vertical-align: top; white-space: nowrap; }
.zc-table th { background: rgba(240, 242, 246, 0.9); font-weight: 600; color: rgba(49, 51, 63, 0.8); }
.zc-table td.zc-num { text-align: right; font-variant-numeric: tabular-nums; }
</style>"""


def shown(value) -> str:
    """A cell's text: numbers as the grid showed them (up to 4 decimals), yes/no for booleans, blank for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        text = f"{value:,.4f}".rstrip("0").rstrip(".")
        return text if text not in ("", "-0") else "0"
    return str(value)


def _plain(value):
    """numpy scalars as Python's (pandas hands cells out as numpy types)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


def _cell(value) -> str:
    value = _plain(value)
    if isinstance(value, str):
        return f"<td>{escaped(value, MAX_LINE)}</td>"
    exact = "" if value is None else f' data-v="{html.escape(json.dumps(value), quote=True)}"'
    return f'<td class="zc-num"{exact}>{escaped(shown(value), MAX_LINE)}</td>'


def html_table(df, name: str) -> str:
    """The frame as one <table> (no index), named for the page's tests and styles."""
    head = "".join(f"<th>{escaped(c, MAX_LINE)}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in df.itertuples(index=False))
    return (f'{CSS}<div class="zc-table-wrap"><table class="zc-table" data-testid="zc-table" '
            f'data-name="{html.escape(name, quote=True)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            f'</table></div>')
