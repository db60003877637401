"""Compare two plans: pin the current view as plan A, change anything, and see A and B (the current view) side by
side: the model-state bars and the peak per stage, and a table of the fields that differ with the bytes each one
moves when it alone changes (zerocalc.answers.fixes.change_effect, from whole reports). Both plans live in the link
(share.link_params: the view's fields plain, plan A's with an "a." prefix).
"""

from __future__ import annotations

import streamlit as st

from zerocalc.answers.fixes import change_effect, effect_dict
from zerocalc.units import format_bytes, percent_text

from . import figures, tables
from .figures import STAGE_LABELS
from .labels import LABELS
from .share import PLAN_A
from .state import (DISPLAY_FIELDS, FIELD, FIELDS, canonical, default_for, format_value, from_query, resolve,
                    to_query)
from .widgets import set_fields



def _pin(state: dict) -> None:
    st.session_state[PLAN_A] = dict(state)


def _unpin() -> None:
    st.session_state.pop(PLAN_A, None)


def _swap(state: dict) -> None:
    plan = st.session_state.get(PLAN_A)
    if plan is None:
        return
    st.session_state[PLAN_A] = dict(state)
    set_fields({f.name: plan[f.name] for f in FIELDS if f.name in plan})


def _shown(name: str, query: dict, state: dict) -> str:
    if name in query:
        return query[name]
    return format_value(FIELD[name], default_for(name, state)) + " (default)"


def differences(a: dict, b: dict) -> list:
    """Each field whose link value differs between plan A and plan B, with what it moves changed alone in A."""
    qa, qb = to_query(canonical(a)), to_query(canonical(b))
    ra = resolve(a)
    before = (ra.scenario, ra.workload, ra.state["stage"])
    rows = []
    for f in FIELDS:
        name = f.name
        if name in DISPLAY_FIELDS or qa.get(name) == qb.get(name):
            continue
        alone = dict(qa)
        if name in qb:
            alone[name] = qb[name]
        else:
            alone.pop(name, None)
        state, warn = from_query(alone)
        r = resolve(state)
        effect = None
        if not warn and not r.warnings and (r.workload is None) == (ra.workload is None):
            effect = effect_dict(change_effect(before, (r.scenario, r.workload, r.state["stage"])))
        rows.append({"field": LABELS.get(name, name), "name": name, "a": _shown(name, qa, a),
                     "b": _shown(name, qb, b), "effect": effect})
    return rows


def _line(label: str, report: dict, stage: int, unit: str) -> str:
    if "peak" not in report:
        s = report["stages"][stage]
        return f"**{label}**: {STAGE_LABELS[stage]} model states {format_bytes(s['per_worker_total_bytes'], unit)}"
    p = report["peak"][stage]
    verdict = "fits" if p["fits"] else "does not fit"
    return (f"**{label}**: {STAGE_LABELS[stage]} {verdict} on {report['gpu']['name']}, peak "
            f"{format_bytes(p['peak_bytes'], unit)} ({percent_text(p['peak_bytes'], p['capacity_bytes'], 0)})")


def panel(state: dict, report_of, unit: str) -> None:
    """`report_of(state)` gives the (cached) full report of a state."""
    plan = st.session_state.get(PLAN_A)
    cols = st.columns(3)
    cols[0].button("Pin this view as plan A" if plan is None else "Pin this view as plan A instead",
                   key="pin_a", on_click=_pin, args=(state,),
                   help="Keep this plan; then change anything in the sidebar: the current view is plan B.")
    if plan is None:
        st.caption("Pin a plan, change any control, and compare. Both plans go into the link (a.* parameters are "
                   "plan A's), so a team can argue over one URL.")
        return
    cols[1].button("Swap A and B", key="swap_ab", on_click=_swap, args=(state,))
    cols[2].button("Unpin plan A", key="unpin_a", on_click=_unpin)
    ra, rb = resolve(plan), resolve(state)
    a, b = report_of(ra), report_of(rb)
    st.markdown(_line("Plan A", a, ra.state["stage"], unit) + "  \n" + _line("Plan B (this view)", b,
                                                                             rb.state["stage"], unit))
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figures.compare_states(a, b, unit), key="fig_compare_states", config=figures.PLOTLY_CONFIG,
                        theme=None)
    with right:
        if "peak" in a and "peak" in b:
            st.plotly_chart(figures.compare_peak(a, b, unit), key="fig_compare_peak", config=figures.PLOTLY_CONFIG,
                            theme=None)
    rows = differences(ra.state, rb.state)
    if not rows:
        st.info("Plan B equals plan A: change any control in the sidebar.")
        return
    st.markdown(f"**{len(rows)} field(s) differ.** What each moves when it alone changes in plan A (the peak at "
                f"the stage each plan checks, and the model states per worker there); changes that interact do not "
                f"add up exactly.")
    from .panels import table_with_csv
    table_with_csv(tables.difference_table(rows, unit), "compare", b)
