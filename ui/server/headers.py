"""The response headers of the hosted page (serve.py puts them on every HTTP response): frame-ancestors and
X-Frame-Options against clickjacking, nosniff, a same-origin referrer policy. An ASGI middleware, no Streamlit."""

import os
import re

_ORIGIN = re.compile(r"'self'|'none'|https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?")


def frame_ancestors(value: str = None) -> str:
    """The frame-ancestors sources: 'self' unless ZEROCALC_FRAME_ANCESTORS lists others (each a 'self', 'none'
    or an http(s) origin; anything else is dropped, so the header cannot be bent into something else)."""
    value = os.environ.get("ZEROCALC_FRAME_ANCESTORS", "") if value is None else value
    sources = [s for s in value.split() if _ORIGIN.fullmatch(s)]
    return " ".join(sources) or "'self'"


class SecurityHeaders:
    """ASGI middleware: the headers above on every HTTP response (the WebSocket passes untouched)."""

    def __init__(self, app):
        self.app = app
        ancestors = frame_ancestors()
        self.headers = [(b"content-security-policy", f"frame-ancestors {ancestors}".encode()),
                        (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin")]
        if ancestors in ("'self'", "'none'"):
            self.headers.append((b"x-frame-options", b"SAMEORIGIN" if ancestors == "'self'" else b"DENY"))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (name, value) for name, value in self.headers if name not in names]
            await send(message)

        return await self.app(scope, receive, with_headers)
