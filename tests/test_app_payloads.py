"""Text stays text: markup payloads (markdown links and images, autolinks, Streamlit's :icon: and :color[]
directives, maths, HTML, bidi and zero-width controls) through every sink a visitor reaches: link keys and values,
uploaded file names and config strings, pasted calibration text and a Hub answer. Each reaches the page only
inside st.html, HTML-escaped, so nothing of it is read as markdown; no element gains a link, an image, a script or
an event handler from it; bidi and zero-width controls are shown as marks."""

import json
import re
from html.parser import HTMLParser

import pytest

from tests.app_helpers import run_app
from tests.hub_server import blocked, server  # noqa: F401  (fixtures)
from ui.drawing.plain import clean, escaped

PAYLOADS = [
    "[Verify your account](https://evil.example.com/login)", "![](http://127.0.0.2/px.png)", "www.evil.example",
    "www\uff0eevil\uff0eexample", "http://2130706433/x", ":material/warning: :red[alarm] :smile:", "$x^2$ \\(y\\)",
    "<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "**bold** _it_ `code` ~~s~~ | a | b |",
    "<a href='https://evil.example.com'>x</a>", "&lt;b&gt; &#60;i&#62;", "\u202eevil\u202c a\u200bb\u2066c\u2069",
    "javascript:alert(1)", "# heading\n- item", "<style>*{display:none}</style>",
]
MARKDOWN_KINDS = ("markdown", "caption", "warning", "error", "success", "info", "title", "header", "subheader")


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def assert_text_only(at, marker: str):
    """No markdown element holds the payload, and the HTML elements hold no tag or attribute it could add."""
    for kind in MARKDOWN_KINDS:
        for element in getattr(at, kind):
            assert marker not in str(element.value), (kind, str(element.value)[:200])
    for h in at.get("html"):
        parser = _Tags()
        parser.feed(h.proto.body)
        ours = 'id="zc-copy"' in h.proto.body                    # the share link's block: its one script is ours
        for tag, attrs in parser.found:
            assert tag not in ("img", "iframe", "object", "embed", "form", "input"), (tag, attrs)
            assert tag != "script" or (ours and h.proto.body.count("<script") == 1), h.proto.body[:200]
            assert not any(name.startswith("on") for name in attrs), (tag, attrs)
            if tag == "a":                                          # only the share link, to this page
                assert attrs.get("class") == "zc-share-link" and attrs["href"].startswith("?"), attrs
            if tag == "style":
                assert "display:none" not in h.proto.body.split("</style>")[0][-200:]


def test_bidi_zero_width_and_control_characters_are_marked_and_long_text_cut():
    assert clean("\u202eexe.txt\u202c a\u200bb \u2066x\u2069 \x00\x1b") == \
        "[U+202E]exe.txt[U+202C] a[U+200B]b [U+2066]x[U+2069] [U+0000][U+001B]"
    assert clean("line one\nline two\ttab") == "line one\nline two\ttab"
    assert clean("x" * 5000) == "x" * 2000 + "... (5,000 characters)"
    assert escaped("<b>&") == "&lt;b&gt;&amp;"


def shown(at) -> str:
    return " ".join(h.proto.body for h in at.get("html"))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_payload_as_a_link_key_and_a_link_value(payload):
    at = run_app({payload: "1", "gpu": payload[:64], "a." + payload[:30]: "1"})
    assert_text_only(at, "evil") if "evil" in payload else assert_text_only(at, payload[:12])
    assert escaped(repr(payload[:40]))[:30] in shown(at)           # named, as text


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_payload_as_an_rl_link_key_and_value_on_the_rl_view(payload):
    at = run_app({"model": "llama-3-8b", "rl." + payload[:30]: "1", "rl.engine": payload[:64],
                  "rl.algorithm": payload[:64], "view": "rl"})
    assert not at.exception, at.exception
    assert_text_only(at, "evil") if "evil" in payload else assert_text_only(at, payload[:12])
    assert escaped(clean(payload[:30]))[:20] in shown(at)         # named, as text


@pytest.mark.parametrize("payload", PAYLOADS[:6] + PAYLOADS[7:9] + PAYLOADS[12:13])
def test_a_payload_in_an_uploaded_file_name_and_its_strings(payload):
    from tests.test_app_imports import upload_config
    at = run_app({"model": "gpt2"}, sections=["sec_load"])
    config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 100, "n_positions": 64,
              "architectures": [payload]}
    name = re.sub(r"[/\\]", "_", payload)[:60] + ".json"
    upload_config(at, name, json.dumps(config).encode())
    assert escaped(clean(payload[:60]))[:20] in shown(at)          # "Loaded <name>: gpt2 / <payload>, ..."
    upload_config(at, name, json.dumps({**config, "model_type": payload}).encode())   # refused, quoted
    assert_text_only(at, "evil") if "evil" in payload else assert_text_only(at, payload[:12])


@pytest.mark.parametrize("payload", PAYLOADS[:2] + PAYLOADS[7:9] + PAYLOADS[12:13])
def test_a_payload_in_a_pasted_measurement(payload):
    at = run_app({"model": "llama-3-8b"}, tab="Calibrate")
    one_line = payload.replace("\n", " ")
    for text in (f"zerocalc-probe v1 gpu={one_line} forward.alloc=1000 forward.reserved=2000",
                 f"[see_memory_usage] {one_line}\nMA 1.0 GB  Max_MA 2.0 GB  CA 3.0 GB  Max_CA 4 GB",
                 f"{payload}\nnot a measurement {payload}"):
        at.session_state["calib_text"] = text
        at.run()
        assert not at.exception, at.exception
        assert_text_only(at, "evil") if "evil" in payload else assert_text_only(at, payload[:12])


def test_a_payload_in_a_hub_answer(server, tmp_path, monkeypatch):
    from tests import hub_server
    from tests.test_app_imports import fetch
    config = json.loads(hub_server.LLAMA_CONFIG)
    config.update({"architectures": [PAYLOADS[0]], "torch_dtype": PAYLOADS[1], "auto_map": {"x": PAYLOADS[7]}})
    monkeypatch.setitem(hub_server.REPOS, "zc-test/payload", {"files": {"config.json": json.dumps(config).encode()}})
    monkeypatch.setenv("ZEROCALC_HUB_ENDPOINT", server.url)
    monkeypatch.setenv("ZEROCALC_HUB_CACHE", str(tmp_path / "hub"))
    at = run_app({"model": "gpt2"}, sections=["sec_load"])
    fetch(at, "zc-test/payload")
    assert "Fetched zc-test/payload" in shown(at)
    assert_text_only(at, "evil")
    assert "127.0.0.2" in shown(at)                                  # the dtype note quotes it, as text
