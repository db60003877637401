"""The hosted entry point: app.py behind a thin ASGI front (Streamlit's own App, Starlette middleware) that adds
the response headers a public page needs and Streamlit's server options cannot set:

- Content-Security-Policy: frame-ancestors 'self' (and X-Frame-Options: SAMEORIGIN for older browsers): no other
  site can frame the page to trick a visitor into clicks (clickjacking). ZEROCALC_FRAME_ANCESTORS names the
  origins allowed to embed it instead, separated by spaces (for example "'self' https://wiki.example.com");
- X-Content-Type-Options: nosniff and Referrer-Policy: same-origin: uploads and downloads are never sniffed into
  another type, and a shared link's parameters never leave in a Referer header.

Run it like the app: `streamlit run serve.py` (the Docker image does; on Streamlit Community Cloud choose serve.py
as the main file). `streamlit run app.py` serves the same page without these headers.
"""

from starlette.middleware import Middleware
from streamlit.starlette import App

from ui.server.headers import SecurityHeaders

app = App("app.py", middleware=[Middleware(SecurityHeaders)])
