"""zerocalc web app (first cut): the per-stage model-state table from the core. The full UI is a later issue."""

import streamlit as st

from zerocalc import FieldError, Scenario, model_states, parse_count
from zerocalc.scenario import INT_LIMITS
from zerocalc.tables import CONVENTIONS, DEFAULT_CONVENTION
from ui.tables import stage_table

st.set_page_config(page_title="zerocalc: ZeRO memory per GPU", layout="wide")
st.title("zerocalc")
st.caption("Exact persistent model-state bytes per worker for ZeRO stages 0-3. GB = 10^9 bytes, GiB = 2^30 bytes.")

with st.sidebar:
    params_text = st.text_input("Parameters", "7B", key="params", help="1e9, 7B, 1.5T, 350M or 124439808")
    workers = st.number_input("Workers (data-parallel GPUs)", *INT_LIMITS["workers"], value=8, step=1, key="workers")
    convention = st.selectbox("Convention", list(CONVENTIONS), index=list(CONVENTIONS).index(DEFAULT_CONVENTION),
                              key="convention")
    unit = st.radio("Units", ["GB", "GiB"], horizontal=True, key="units")

try:
    scenario = Scenario.from_convention(convention, params=parse_count(params_text), workers=int(workers))
except (ValueError, FieldError) as exc:
    st.error(f"Parameters: {exc}" if not isinstance(exc, FieldError) else str(exc))
    st.stop()

st.write(CONVENTIONS[convention]["summary"])
st.dataframe(stage_table(model_states(scenario), unit), hide_index=True, key="stage_table")
