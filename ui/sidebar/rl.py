"""The sidebar's RL section and the RL fields' values (a live widget's, else the stored one): kept apart from the
RL view so that the sidebar's module needs no view or figure."""

from __future__ import annotations

import streamlit as st

from ..state.rl import RL_FIELDS, RL_VALUES, defaults


def values() -> dict:
    """The RL fields now: a live widget's value, else the stored one."""
    store = st.session_state.setdefault(RL_VALUES, defaults())
    return {f.name: st.session_state.get(f"rl_{f.name}", store.get(f.name, f.default)) for f in RL_FIELDS}


def seed(vals: dict) -> None:
    st.session_state[RL_VALUES] = {**defaults(), **vals}


def section(box) -> None:
    """The sidebar's RL section: each field's widget, its value kept in the store while the section is closed."""
    store = st.session_state.setdefault(RL_VALUES, defaults())
    for f in RL_FIELDS:
        key = f"rl_{f.name}"
        st.session_state[key] = store.get(f.name, f.default) if key not in st.session_state else st.session_state[key]
        if f.kind == "choice":
            box.selectbox(f.label, f.choices, key=key, help=f.help or None)
        elif f.kind == "bool":
            box.toggle(f.label, key=key, help=f.help or None)
        elif f.kind == "fraction":
            box.number_input(f.label, min_value=0.0, max_value=1.0, step=0.05, format="%.2f", key=key,
                             help=f.help or None)
        else:
            box.number_input(f.label, min_value=int(f.lo), max_value=int(f.hi), step=1, key=key, help=f.help or None)
        store[f.name] = st.session_state[key]
        if f.name == "rollout_tp":
            box.caption(framework_values(store))


def framework_values(store: dict) -> str:
    """What the engine fields left at 0 use: the framework's own values (zerocalc.rl.plan.FRAMEWORKS), so the page
    never shows 0.00 where 0.5 is used (issue 33)."""
    from zerocalc.rl.plan import FRAMEWORKS
    framework = FRAMEWORKS.get(store.get("framework", "verl"))
    if framework is None:
        return ""
    own = framework.rollout_defaults
    used = [f"gpu_memory_utilization {store['gpu_memory_utilization'] or own.get('gpu_memory_utilization', 0.5):g}"
            + ("" if store["gpu_memory_utilization"] else f" ({framework.name}'s)"),
            f"engine TP {store['rollout_tp'] or own.get('tp', 1)}" + ("" if store["rollout_tp"] else
                                                                      f" ({framework.name}'s)")]
    return "In use: " + ", ".join(used) + "."
