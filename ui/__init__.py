"""The Streamlit shell, one folder per part of the page: state, sidebar, views, imports, drawing, and the server behind
it; page.py (the page, a table of contents) and share.py (its link). No byte is computed here."""
