"""Text that came from a visitor reaches the page as text, never as markup.

A link's keys and values, an uploaded file's name and strings, a pasted measurement, a Hub answer: any of them can
carry markdown (links, images that make the browser fetch a URL), Streamlit's own directives (:material/...: icons,
:red[...] colours, $...$ maths), autolinks (www.example.com, full-width dots, decimal IPs) or HTML. Markdown
escaping that covers all of Streamlit's dialect is a moving target, so these sinks do not use markdown at all: the
text is HTML-escaped into st.html, which renders it as it is (no markdown, no autolinking, no script).

Bidi and zero-width controls (which reorder or hide what a message says) are shown as visible marks, and every
text is cut to a length a page can hold, with the length said.
"""

from __future__ import annotations

import html
import unicodedata

import streamlit as st

MAX_CHARS = 2_000            # one message; a detail line gets MAX_LINE
MAX_LINE = 400
MAX_DETAILS = 60
# Bidirectional embeddings, overrides and isolates, and the invisible characters that can hide text:
# zero-width space / non-joiner / joiner, word joiner, invisible operators, the BOM, the Arabic and Mongolian marks.
_INVISIBLE = {0x061C, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064,
              0xFEFF, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
KINDS = ("info", "success", "warning", "error")
ICONS = {"info": "ℹ️", "success": "✓", "warning": "⚠️", "error": "✕"}
ALERT_CSS = """<style>
.zc-alert { border-radius: 0.5rem; padding: 0.75rem 1rem; margin: 0 0 0.5rem 0; font-size: 0.95rem;
            line-height: 1.5; overflow-wrap: anywhere; }
.zc-alert ul { margin: 0.35rem 0 0 0; padding-left: 1.2rem; font-size: 0.875rem; }
.zc-alert-info { background: rgba(28, 131, 225, 0.1); color: #004280; }
.zc-alert-success { background: rgba(33, 195, 84, 0.1); color: #177233; }
.zc-alert-warning { background: rgba(255, 189, 69, 0.2); color: #926c05; }
.zc-alert-error { background: rgba(255, 43, 43, 0.09); color: #7d353b; }
.zc-plain-caption { font-size: 0.875rem; color: rgba(49, 51, 63, 0.6); margin: 0 0 0.5rem 0;
                    overflow-wrap: anywhere; }
</style>"""


def _mark(ch: str) -> str:
    code = ord(ch)
    if code in _INVISIBLE:
        return f"[U+{code:04X}]"
    if unicodedata.category(ch) == "Cc" and ch not in "\n\t":
        return f"[U+{code:04X}]"
    return ch


def clean(text, limit: int = MAX_CHARS) -> str:
    """The text with bidi, zero-width and control characters shown as [U+XXXX] marks, cut to `limit` characters
    (with its length said when cut)."""
    text = str(text)
    cut = len(text) > limit
    shown = "".join(_mark(c) for c in (text[:limit] if cut else text))
    return f"{shown}... ({len(text):,} characters)" if cut else shown


def file_name(name, limit: int = 80) -> str:
    """An uploaded file's name as every surface shows it (messages, the stage table and its CSV): clean()'s marks
    for bidi, zero-width and control characters, cut to `limit`. Markup stays text: st.html sinks escape it, and a
    table cell or a CSV field is never rendered."""
    return clean(name, limit)


def escaped(text, limit: int = MAX_CHARS) -> str:
    """clean(text) as HTML: for building the page's own HTML blocks around a visitor's words."""
    return html.escape(clean(text, limit), quote=True).replace("\n", "<br>")


def alert_html(kind: str, text, details=()) -> str:
    details = list(details)
    items = "".join(f"<li>{escaped(d, MAX_LINE)}</li>" for d in details[:MAX_DETAILS])
    if len(details) > MAX_DETAILS:
        items += f"<li>... and {len(details) - MAX_DETAILS:,} more</li>"
    return (f'<div class="zc-alert zc-alert-{kind}" role="alert" data-testid="zc-alert-{kind}">'
            f'{ICONS[kind]} {escaped(text)}{f"<ul>{items}</ul>" if items else ""}</div>')


def alert(kind: str, text, details=(), where=st) -> None:
    """A message box (kind: info, success, warning, error) whose text and detail lines are shown literally."""
    where.html(ALERT_CSS + alert_html(kind, text, details))


def caption(text, where=st) -> None:
    where.html(f'{ALERT_CSS}<p class="zc-plain-caption" data-testid="zc-caption">{escaped(text)}</p>')
