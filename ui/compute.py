"""The core's answers for one state, computed once per distinct state (a fragment's rerun, a tab switch and a
second session asking the same reuse them): the full report, the assumption ranges and what would make the checked
stage fit. Cached results are shared and never modified by the views."""

from __future__ import annotations

import json

import streamlit as st

from zerocalc.fixes import fixes
from zerocalc.ranges import ranges, ranges_dict
from zerocalc.report import full_report

from .state import DENSE_IDS, canonical

DISPLAY_ONLY = ("units", "breakdown")
LAYOUT_FIX_GPUS = 64          # beyond this world size, layouts join the fixes only once the search is asked for


def state_key(state: dict) -> str:
    core = {k: v for k, v in canonical(state).items() if k not in DISPLAY_ONLY}
    core[DENSE_IDS] = list(state.get(DENSE_IDS, ()))
    return json.dumps(core, sort_keys=True, default=str)


@st.cache_resource(max_entries=256, show_spinner=False)
def _view(key: str, layouts: bool, _resolved) -> dict:
    r = _resolved
    report = full_report(r.scenario, r.workload, r.state["buffer_factor"], layouts=layouts)
    if r.workload is None:
        return {"report": report, "ranges": None, "fixes": []}
    stage = r.state["stage"]
    world = report["layout"]["world_size"]
    found = [] if report["peak"][stage]["fits"] else \
        fixes(r.scenario, r.workload, stage, layouts=layouts or world <= LAYOUT_FIX_GPUS)
    return {"report": report, "ranges": ranges_dict(ranges(r.scenario, r.workload)), "fixes": found}


def view(resolved, layouts: bool = False) -> dict:
    return _view(state_key(resolved.state), layouts, resolved)


def report_of(resolved) -> dict:
    return view(resolved)["report"]
