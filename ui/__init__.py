"""The Streamlit shell's helpers: widgets, figures, tables, URL state. No byte is computed here."""
