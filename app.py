"""zerocalc web app: exact ZeRO training memory per GPU, explained and shareable. A table of contents; the
widgets, figures, tables and URL handling live in ui/, every byte in zerocalc/."""

import streamlit as st

from ui import panels, share, widgets
from ui.state import resolve
from zerocalc.report import full_report

st.set_page_config(page_title="zerocalc: ZeRO memory per GPU", page_icon="🧮", layout="wide")
st.title("zerocalc")
st.caption("Exact training memory per GPU for ZeRO stages 0-3: every byte traced to a dtype, a category and an "
           "ownership rule. GB = 10^9 bytes, GiB = 2^30 bytes.")

link_warnings = share.start_session()
widgets.sidebar()
state = widgets.read_state()
problems = share.params_from_text(state)
resolved = resolve(state)
panels.warnings(link_warnings + problems + resolved.warnings + [st.session_state.get("config_error")])

report = full_report(resolved.scenario, resolved.workload, resolved.state["buffer_factor"],
                     layouts=st.session_state.get("show_layouts", False))
unit = resolved.state["units"]

panels.summary(report, unit)
panels.model_states(report, unit)
panels.peak(report, unit)
panels.ranks(report, unit)
panels.layouts(report, unit)
panels.scaling(report, unit)
panels.deepspeed(report, unit)
panels.assumptions()
panels.share_and_download(report, share.share_link(share.sync_url(resolved.state)))
