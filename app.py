"""zerocalc web app: does a training job fit, and why. The page is ui/page.py (a table of contents); the widgets,
figures, tables and URL handling live in ui/, every byte in zerocalc/."""

import streamlit as st

from ui import page

st.set_page_config(page_title="zerocalc: does it fit?", page_icon="🧮", layout="wide",
                   initial_sidebar_state="auto")
page.render()
