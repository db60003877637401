"""Compare two plans: pin the current view as plan A, change anything, and see A and B (the current view) side by
side: the model-state bars and the peak per stage, and a table of the fields that differ with the bytes each one
moves when it alone changes (zerocalc.answers.fixes.change_effect, from whole reports). Both plans live in the link
(share.link_params: the view's fields plain, plan A's with an "a." prefix).
"""

from __future__ import annotations

import streamlit as st

from zerocalc.answers.verdict import stage_verdicts
from zerocalc.units import format_bytes, percent_text

from ..drawing import figures, plain, tables
from ..server import worker
from ..server.compute import _PerState, state_key
from ..drawing.figures import STAGE_LABELS
from ..share import PLAN_A
from ..state.fields import FIELDS
from ..state.convert import resolve
from ..server.tasks import COSTED_FIELDS, differences
from ..sidebar.widgets import set_fields


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


@_PerState
def _differences(key_a: tuple, key_b: tuple, pair: tuple) -> list:
    return worker.call("answer", differences, *pair, COSTED_FIELDS)


def differences_of(a: dict, b: dict) -> list:
    """compare_rows of plan A and B, computed once per pair (keyed by the two plans' canonical forms, shared by
    every session) in a worker process."""
    return _differences(state_key(a), state_key(b), (a, b))


def _line(label: str, report: dict, stage: int, unit: str, measured=None) -> str:
    """A plan's checked stage: the one verdict the headline and the cards give it (zerocalc/answers/verdict.py: the
    GPU, the host RAM, the assumptions' band, and a paste of this plan at this stage), and its peak."""
    if "peak" not in report:
        s = report["stages"][stage]
        return f"**{label}**: {STAGE_LABELS[stage]} model states {format_bytes(s['per_worker_total_bytes'], unit)}"
    p = report["peak"][stage]
    verdict = report["verdicts"][stage]["answer"]
    if measured is not None and measured["stage"] == stage:         # measured beats estimated, as on the card
        verdict = stage_verdicts([p], report.get("host_memory", ()), (), {stage: measured})[0]["answer"]
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
    from .calibration import measured_verdict          # a paste belongs to the plan it was pasted on: A, B or both
    st.markdown(_line("Plan A", a, ra.state["stage"], unit, measured_verdict(ra)[0]) + "  \n"
                + _line("Plan B (this view)", b, rb.state["stage"], unit, measured_verdict(rb)[0]))
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figures.compare_states(a, b, unit), key="fig_compare_states", config=figures.PLOTLY_CONFIG,
                        theme=None)
    with right:
        if "peak" in a and "peak" in b:
            st.plotly_chart(figures.compare_peak(a, b, unit), key="fig_compare_peak", config=figures.PLOTLY_CONFIG,
                            theme=None)
    try:
        rows = differences_of(ra.state, rb.state)
    except Exception as exc:  # noqa: BLE001 - a message here, the trace (if unexpected) in the server's log
        plain.alert("warning", worker.failure_text(exc, "the differences between plan A and B", verb="compute"))
        return
    if not rows:
        st.info("Plan B equals plan A: change any control in the sidebar.")
        return
    st.markdown(f"**{len(rows)} field(s) differ.** What each moves when it alone changes in plan A (the peak at "
                f"the stage each plan checks, and the model states per worker there); changes that interact do not "
                f"add up exactly.")
    from ..drawing.panels import table_with_csv
    table_with_csv(tables.difference_table(rows, unit), "compare", b)
    if len(rows) > COSTED_FIELDS:
        st.caption(f"What each field moves alone is computed for the first {COSTED_FIELDS} of them; the other "
                   f"{len(rows) - COSTED_FIELDS} are listed, not costed.")
