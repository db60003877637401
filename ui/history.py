"""Back and Forward (issue 33: "Apply and imports push browser history, so Back undoes them").

Every link the script writes is a browser history entry: Streamlit 1.67's frontend pushes it (App.tsx
handlePageInfoChanged: pushState; replaceState while a Back/Forward rerun is under way, so the page's own rewrite of
a restored link adds no entry). Back or Forward fires popstate; the frontend then reruns the script with the entry's
query and marks that rerun (onHistoryChange -> rerunScript.isHistoryNavigation, ClientState.is_history_navigation),
which the server keeps in the script-run context. That mark is the browser-side signal the reverted attempt lacked
(commit 60215d9 read the address bar whenever it was not the last link written, and a tab clicked while the previous
link was on its way was undone): only a run the browser marks follows the address bar. A widget's rerun that lands
while a Back is pending drops the mark (streamlit/runtime/scriptrunner_utils/script_requests.py): the click wins.

So every change that changes the link (an edit, a view, an applied fix, an import) is one entry and Back undoes the
last of them; ordinary edits push too, as Streamlit does (the server cannot ask the browser to replace instead).
What a link does not carry (an import's message, the imported file's name and its export overlay, a config's
dense-layer list) is kept per link written, so Back to an entry brings that entry's back, and an entry this session
never wrote (the link the page was opened with) brings none."""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from .state.fields import DENSE_IDS

EXTRAS = ("import_message", "framework_import", DENSE_IDS)     # session keys the link does not carry
WRITTEN = "_history_extras"      # session key: {link as a sorted tuple of (key, values): those keys' values}
KEEP = 64                        # links remembered per session (the oldest forgotten first)


def navigated() -> bool:
    """Whether the browser reran the script for Back or Forward (popstate), not for a widget or a timer."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return bool(ctx is not None and getattr(ctx, "is_history_navigation", False))


def _key(query: dict) -> tuple:
    return tuple(sorted((str(k), tuple(v)) for k, v in query.items()))


def remember(query: dict) -> None:
    """Keep what the session holds beside the link just written (called on every run with the link it writes)."""
    written = st.session_state.setdefault(WRITTEN, {})
    key = _key(query)
    written.pop(key, None)                               # the newest last: the oldest is dropped first
    written[key] = {name: st.session_state[name] for name in EXTRAS if name in st.session_state}
    while len(written) > KEEP:
        written.pop(next(iter(written)))


def restore(query: dict) -> None:
    """Bring back what the session held beside this link when it wrote it; nothing for a link it never wrote."""
    kept = st.session_state.get(WRITTEN, {}).get(_key(query), {})
    for name in EXTRAS:
        if name in kept:
            st.session_state[name] = kept[name]
        else:
            st.session_state.pop(name, None)
