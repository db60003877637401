"""The hosted page against a hostile visitor, in Chromium behind serve.py: a link whose keys and values carry
markup renders them as text (no link, image, script or request to another host appears), a pasted measurement
likewise, the page refuses to be framed by another origin, and a link beyond the layout search's bounds gets a
sentence, not a blank page."""

import http.server
import threading
from urllib.parse import quote

from playwright.sync_api import expect

from tests.e2e.conftest import wait_ready

PAYLOADS = {
    "[Verify your account](https://evil.example.com/login)": "1",
    "![](http://127.0.0.2/px.png)": "1",
    "gpu": "<img src=x onerror=alert(1)>",
    "workers": "www.evil.example",
    "a.:material/warning::red[alarm]": "1",
    "seq_len": "\u202egnp.exe",
}


def guard(page):
    """Record every request that leaves the server, and every dialog (an alert() that ran)."""
    seen = {"outside": [], "dialogs": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))

    def route(r):
        if r.request.url.startswith(("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:")):
            return r.continue_()
        seen["outside"].append(r.request.url)
        return r.abort()
    page.route("**/*", route)
    return seen


def test_markup_in_a_link_renders_as_text_and_fetches_nothing(page, server):
    seen = guard(page)
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in PAYLOADS.items())
    page.goto(f"{server}/?model=llama-3-8b&{query}")
    wait_ready(page)
    page.locator("[data-testid=zc-verdict]").first.wait_for()
    main = page.locator("[data-testid=stMain]")
    expect(main.get_by_text("'[Verify your account](https://evil.examp'", exact=False)).to_be_visible()   # cut at 40
    expect(main.get_by_text("gpu='<img src=x onerror=alert(1)>'", exact=False)).to_be_visible()
    expect(main.get_by_text("seq_len='\\u202egnp.exe'", exact=False)).to_be_visible()   # the override, escaped
    assert page.locator("a[href*='evil'], a[href^='javascript'], a[href*='2130706433']").count() == 0
    assert page.locator("img[src='x'], img[src*='127.0.0.2']").count() == 0
    icons, chevrons = "[data-testid=stIconMaterial]", "[data-testid=stExpander] summary [data-testid=stIconMaterial]"
    assert main.locator(icons).count() == main.locator(chevrons).count()     # a section's own chevron: no payload
    page.wait_for_timeout(500)
    assert seen["outside"] == [] and seen["dialogs"] == [], seen
    assert page.console_errors == []


def test_a_pasted_measurement_with_markup_stays_text(page, server):
    seen = guard(page)
    page.goto(f"{server}/?model=llama-3-8b")
    wait_ready(page)
    page.locator("[data-testid=stMain]").get_by_role("radio", name="Calibrate", exact=True).click()
    wait_ready(page)
    box = page.get_by_role("textbox", name="Measured output")
    box.fill("zerocalc-probe v1 gpu=[Verify](https://evil.example.com) forward.alloc=1000\n"
             "![](http://127.0.0.2/px.png) max_memory_allocated: 61290913792")
    box.press("Control+Enter")
    wait_ready(page)
    expect(page.get_by_text("[Verify](https://evil.example.com)", exact=False).first).to_be_visible(timeout=30_000)
    assert page.locator("a[href*='evil'], img[src*='127.0.0.2']").count() == 0
    assert seen["outside"] == [] and seen["dialogs"] == [], seen


def test_another_origin_cannot_frame_the_page(page, server):
    port = server.rsplit(":", 1)[1]
    html = f'<iframe id="f" src="http://127.0.0.1:{port}/" width="800" height="600"></iframe>'.encode()

    class Host(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args):
            pass

    framing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Host)
    threading.Thread(target=framing.serve_forever, daemon=True).start()
    try:
        # localhost and 127.0.0.1 are different origins: frame-ancestors 'self' refuses the embedding one
        page.goto(f"http://localhost:{framing.server_address[1]}/")
        page.wait_for_timeout(3000)
        frame = page.frame_locator("#f")
        assert frame.locator("[data-testid=stApp]").count() == 0
    finally:
        framing.shutdown()


def test_a_link_beyond_the_search_bounds_gets_a_sentence_not_a_blank_page(page, server):
    page.goto(f"{server}/?model=custom&layers=4096&hidden=65536&heads=1024&kv_heads=1024&ffn=65536"
              "&workers=1048576&tp=1024&pp=4096&cp=4096&seq_len=8192")
    wait_ready(page)
    page.locator("[data-testid=stMain]").get_by_role("radio", name="Layouts and ranks", exact=True).click()
    wait_ready(page)
    page.get_by_text("Search every tp x pp x cp x dp layout", exact=False).click()
    wait_ready(page)
    expect(page.get_by_text("Not searched: layout search", exact=False)).to_be_visible(timeout=30_000)
    expect(page.locator("[data-testid=zc-verdict]").first).to_be_visible()
    assert page.locator("[data-testid=stException]").count() == 0
