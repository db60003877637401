"""zerocalc web app: does a training job fit, and why. A table of contents; the widgets, figures, tables and URL
handling live in ui/, every byte in zerocalc/.

The page leads with the answer (which ZeRO stages fit on the chosen GPU, at what peak and headroom), then what
would make the checked stage fit and the share link; the details live in tabs that run only when open."""

import streamlit as st

from ui import calibration, compare, compute, imports, panels, share, widgets
from ui.state import CUSTOM, DENSE_IDS, PARAMS_ONLY, resolve

st.set_page_config(page_title="zerocalc: does it fit?", page_icon="🧮", layout="wide",
                   initial_sidebar_state="auto")

link_warnings = share.start_session()
state = widgets.read_state()          # the widgets' values are in the session before they are drawn
problems = share.params_from_text(state)
resolved = resolve(state)
stage, unit = resolved.state["stage"], resolved.state["units"]
layouts = st.session_state.get("show_layouts", False)
report = compute.report_of(resolved, layouts)
model = resolved.state["model"]
name = {CUSTOM: "custom architecture", PARAMS_ONLY: "parameter count"}.get(model, model)
top = st.container()                  # the answer: drawn into place after the overview chart is on its way

TABS = ("Overview", "Model states", "Peak and step", "Layouts and ranks", "Compare", "Calibrate",
        "Framework configs", "How to read it")
tabs = dict(zip(TABS, st.tabs(TABS, key="tab", on_change="rerun")))
imported = (st.session_state.get("framework_import") or {}).get("name")
with tabs["Overview"]:
    if tabs["Overview"].open:
        panels.overview(report, unit, stage)
with tabs["Model states"]:
    if tabs["Model states"].open:
        panels.model_states_tab(report, unit, stage, imported)
with tabs["Peak and step"]:
    if tabs["Peak and step"].open:
        panels.peak_tab(report, compute.ranges_of(resolved), unit, stage, compute.formulas_of(resolved))
with tabs["Layouts and ranks"]:
    if tabs["Layouts and ranks"].open:
        panels.ranks_tab(report, unit, stage)
with tabs["Compare"]:
    if tabs["Compare"].open:
        compare.panel(resolved.state, compute.report_of, unit)
with tabs["Calibrate"]:
    if tabs["Calibrate"].open:
        calibration.panel(resolved, unit)
with tabs["Framework configs"]:
    if tabs["Framework configs"].open:
        imports.exports_tab(resolved)
with tabs["How to read it"]:
    if tabs["How to read it"].open:
        panels.about_tab(report)

with top:
    panels.header(report, resolved.state, name)
    panels.warnings(link_warnings + problems + resolved.warnings)
    if state.get(DENSE_IDS) and model == CUSTOM:
        st.caption("This architecture's dense-MLP layer list (mlp_only_layers) is kept in this session only: the "
                   "link does not carry it.")
    panels.import_message()
    panels.verdict(report, compute.ranges_of(resolved), stage, unit)
    panels.fixes(compute.fixes_of(resolved, layouts), resolved, stage, unit)
    share.copy_link(share.share_link(share.sync_url(resolved.state)))
widgets.sidebar(imports.loaders)      # last: the sidebar's deltas follow the page's
