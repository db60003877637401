"""The page, top to bottom: a table of contents; the widgets, figures, tables and URL handling live in the other
ui/ modules, every byte in zerocalc/.

The page leads with the answer (which ZeRO stages fit on the chosen GPU, at what peak and headroom) and the share
link, then what would make the checked stage fit; the details live in views chosen from one switcher, only the
open one running. It is a function of its own module rather than app.py's body because Streamlit compiles the
entry script (AppTest on every run) while an imported module is compiled once."""

import streamlit as st

from zerocalc.model.presets import MODEL_PRESETS

from .views import calibration, compare, rl as rl_view, details
from .server import compute, worker
from .drawing import finetune, panels, plain
from .imports import configs, rl as rl_import
from .sidebar import rl as rl_section, widgets
from . import share
from .share import PLAN_A, TABS
from .state.fields import CUSTOM, DENSE_IDS, PARAMS_ONLY
from .state.convert import resolve

# The views that read the report's answers (solvers, fits-on, scaling, DeepSpeed: zerocalc.output.report.ANSWER_KEYS);
# with another view open the page asks the core for the bytes, peaks and fit alone.
ANSWER_TABS = {"Model states", "Peak and step", "Layouts and ranks", "How to read it"}
# A view whose answers are read only in sections drawn when opened (ui/drawing/panels.py lazy): asked for while one is
# open.
LAZY_ANSWERS = {"Model states": (panels.SCALING, panels.DEEPSPEED)}


def render() -> None:
    worker.warm()                        # the worker processes start now, in the background, not on a first paste
    try:
        link_warnings = share.start_session()
    except Exception as exc:  # noqa: BLE001 - a link the reader chokes on opens the default page, with a message
        st.query_params.clear()
        link_warnings = [worker.failure_text(exc, "the link", "its parameters") + " Opened the default page."]
        link_warnings += share.start_session()
    state = widgets.read_state()          # the widgets' values are in the session before they are drawn
    problems = share.texts_into_state(state)
    resolved = resolve(state)
    stage, unit = resolved.state["stage"], resolved.state["units"]
    layouts = st.session_state.get("show_layouts", False)
    tab = st.session_state.get("tab", TABS[0])
    lazy_answers = LAZY_ANSWERS.get(tab)
    answers = tab in ANSWER_TABS and (lazy_answers is None or any(st.session_state.get(k) for k in lazy_answers))
    stopped = []
    # the costly answers start in a worker before the report: the fixes where the plan may not fit, else (the worker
    # free) the Peak view's longest sequence; the RL view's plan has its own answers
    if tab != "RL" and not compute.fixes_early(resolved, layouts) and tab == "Peak and step":
        compute.longest_early(resolved)
    try:
        report = compute.report_of(resolved, layouts, answers)
    except worker.WorkerError as exc:   # the layout search (in a worker) ran past its deadline: the page without it
        stopped.append(worker.failure_text(exc, "the layout search", verb="finish"))
        st.session_state["show_layouts"] = layouts = False         # its toggle is drawn later in this run
        report = compute.report_of(resolved, layouts, answers)
    model = resolved.state["model"]
    name = {CUSTOM: "custom architecture", PARAMS_ONLY: "parameter count"}.get(model, model)
    if model in MODEL_PRESETS:
        name = f"{model} ({MODEL_PRESETS[model][2]})"          # the preset's source: published count, repo
    # The answer first: the title line and the verdict as one block of plain HTML (no script); then the share link,
    # the one block with a script (its copy button).
    measured, measured_note = calibration.measured_verdict(resolved)      # measured beats estimated
    panels.warnings(link_warnings + problems + resolved.warnings)   # above the verdict they change (issue 33)
    # With the RL view open the page's plan is the RL plan (issue 33): its verdict is the answer, its solvers the fixes
    rl_plan = rl_view.report_of(resolved, rl_section.values())[0] if tab == "RL" else None
    st.html(panels.header_html(report, resolved.state, name)
            + (rl_view.verdict_html(rl_plan, unit) if rl_plan is not None else
               panels.verdict_html(report, compute.ranges_of(resolved), stage, unit, measured)))
    st.html(share.link_html(share.share_link(share.sync_url(resolved.state))), unsafe_allow_javascript=True)
    if measured_note:
        st.caption(measured_note)
    panels.host_line(report, stage, unit)
    panels.experts_line(report, stage)
    panels.no_peak(report, unit, stage)
    panels.caveats(report)
    if state.get(DENSE_IDS) and model == CUSTOM:
        st.caption("This architecture's dense-MLP layer list (mlp_only_layers) is kept in this session only: "
                   "the link does not carry it.")
    panels.import_message()
    finetune.qlora_line(report, stage, unit)
    for text in stopped:
        plain.alert("warning", text)
    if rl_plan is not None:                                 # the RL plan's own answers, not a ZeRO stage's fixes
        rl_view.fixes(rl_plan)
    fixes = compute.fixes_later(resolved, report, layouts) if rl_plan is None else (lambda: None)
    fixes_slot = st.empty()

    view = st.segmented_control("View", TABS, key="tab", default=TABS[0], required=True, width="stretch",
                                label_visibility="collapsed")
    if st.session_state.get(PLAN_A) is not None and view != "Compare":
        st.caption("Plan A is pinned (Compare shows it beside this view; the link carries both).")
    imported = (st.session_state.get("framework_import") or {}).get("name")
    if view == "Overview":
        panels.overview(report, unit, stage, resolved.state["breakdown"])
    elif view == "Model states":
        details.model_states_tab(report, unit, stage, imported)
    elif view == "Peak and step":
        details.peak_tab(report, compute.ranges_of(resolved), unit, stage, lambda: compute.formulas_of(resolved),
                       resolved, compute.sweep_of, compute.longest_of(resolved))
    elif view == "Layouts and ranks":
        details.ranks_tab(report, unit, stage, resolved)
    elif view == "Compare":
        compare.panel(resolved.state, compute.report_of, unit)
    elif view == "Calibrate":
        calibration.panel(resolved, unit)
    elif view == "Framework configs":
        configs.exports_tab(resolved)
    elif view == "RL":
        rl_view.panel(resolved, unit)
    elif view == "How to read it":
        details.about_tab(report, unit)

    widgets.sidebar(configs.loaders, rl_import.loader)      # the sidebar's deltas follow the page's
    if rl_plan is not None:
        return
    with fixes_slot.container():                            # last: the one answer this run may wait for
        try:
            found = fixes()
        except worker.WorkerError as exc:
            found = []
            plain.alert("warning", worker.failure_text(exc, "what would make it fit", verb="search"))
        panels.fixes(found, resolved, stage, unit)
