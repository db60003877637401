"""URL <-> app state: read the link once per session, write it back after every change, show a copyable link."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit, urlunsplit

import streamlit as st

from zerocalc.units import parse_count

from .state import FIELDS, PARAMS_ONLY, canonical, from_query, resolve, to_query
from .widgets import seed

SEEDED = "_seeded"


def _query() -> dict:
    return {key: st.query_params.get_all(key) for key in st.query_params}


def start_session() -> list:
    """On a session's first run, seed every widget from the link; return the link's warnings (once)."""
    if SEEDED in st.session_state:
        # Keep the values of widgets not drawn this run (a collapsed choice) across reruns.
        for f in FIELDS:
            if f.name in st.session_state:
                st.session_state[f.name] = st.session_state[f.name]
        if "params_text" in st.session_state:
            st.session_state["params_text"] = st.session_state["params_text"]
        return []
    state, warnings = from_query(_query())
    resolved = resolve(state)
    seed(resolved.state)
    st.session_state.setdefault("params_text", str(resolved.state["params"]))
    st.session_state[SEEDED] = True
    return warnings + resolved.warnings


def params_from_text(state: dict) -> list:
    """Parse the parameter-count text box into the state; a message naming the field when it is not a count."""
    if state["model"] != PARAMS_ONLY:
        return []
    text = st.session_state.get("params_text", str(state["params"]))
    field = next(f for f in FIELDS if f.name == "params")
    try:
        value = parse_count(text)
        if not field.lo <= value <= field.hi:
            raise ValueError(f"{value:,} is out of range")
    except ValueError as exc:
        return [f"Parameters: {exc}; allowed: a count from 1 to 10^18 such as 7B, 1.5T or 124439808. "
                f"Showing the last valid count, {state['params']:,}."]
    state["params"] = st.session_state["params"] = value   # the last valid count, kept for a later typo
    return []


def sync_url(state: dict) -> dict:
    """Write the state's link parameters to the address bar (only when they changed); return them."""
    params = to_query(canonical(state))
    if _query() != {k: [v] for k, v in params.items()}:
        st.query_params.from_dict(params)
    return params


def share_link(params: dict) -> str:
    try:
        base = st.context.url or ""
    except Exception:  # noqa: BLE001 - outside a browser session (AppTest) there is no page URL
        base = ""
    scheme, netloc, path, _, _ = urlsplit(base)
    query = urlencode(params)
    return urlunsplit((scheme, netloc, path or "/", query, "")) if netloc else f"?{query}"
