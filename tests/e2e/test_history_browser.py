"""Back and Forward in Chromium (issue 33: "Apply and imports push browser history, so Back undoes them"): an applied
fix, an upload and a plain edit are each one history entry; Back shows the plan before it (its verdict and its
fields), Forward the plan after; a view clicked while the previous link is still on its way is never undone (the
race that made the first attempt's revert, commit 60215d9). ui/history.py says how the page tells Back from a rerun.
"""

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import expect

from tests.e2e.conftest import wait_ready
from tests.e2e.test_browser import open_app, open_section, upload, view_button

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"
# Mistral-7B at ZeRO-2 on 8 x L40S, micro-batch 4 of 8,192 tokens: does not fit, so the page offers fixes.
TIGHT = "?model=mistral-7b&gpu=L40S-48GB&workers=8&seq_len=8192&micro_batch=4&stage=2"


def verdict(page) -> str:
    return page.locator("[data-testid=zc-answer]").first.inner_text()


def query(page) -> dict:
    return {k: v[-1] for k, v in parse_qs(urlsplit(page.url).query).items()}


def settle(page, url=None):
    """The address bar at `url` (when given) and the run it started finished."""
    if url is not None:
        expect(page).to_have_url(url, timeout=30_000)
    wait_ready(page)
    page.wait_for_timeout(300)            # a run the URL change starts begins after the frontend sees popstate
    wait_ready(page)


def test_back_undoes_an_applied_fix_and_forward_redoes_it(page, server):
    open_app(page, server, TIGHT, charts=False)
    before_url, before = page.url, verdict(page)
    assert "does not fit" in before.lower() or "no zero stage" in before.lower(), before
    page.get_by_role("button", name="Apply").first.click()
    expect(page).not_to_have_url(before_url, timeout=30_000)
    settle(page)
    after_url, after = page.url, verdict(page)
    assert after != before
    page.go_back()
    settle(page, before_url)
    assert verdict(page) == before
    micro = page.get_by_label("Micro-batch (sequences per GPU)", exact=True)
    seq = page.get_by_label("Sequence length (± steps by powers of two)", exact=True)
    assert (micro.input_value(), seq.input_value().replace(",", "")) == ("4", "8192")
    page.go_forward()
    settle(page, after_url)
    assert verdict(page) == after
    assert page.console_errors == []


def test_a_view_clicked_while_the_last_link_is_on_its_way_is_kept(page, server):
    """An edit sent with Enter and, without waiting for its run, a view clicked: both stay, and Back then undoes
    the view (its own entry) rather than reverting the edit behind the user's back."""
    open_app(page, server, "?model=qwen2.5-7b&gpu=A100-40GB", charts=False)
    workers = page.get_by_label("Data-parallel workers (dp)", exact=True)
    for n, view in ((16, "Compare"), (24, "Calibrate"), (40, "Model states")):
        workers.fill(str(n))
        workers.press("Enter")
        view_button(page, view).click()              # no wait: the edit's link may still be on its way
        settle(page)
        page.wait_for_timeout(1_000)
        settle(page)
        assert query(page).get("workers") == str(n), page.url
        assert query(page).get("view") == view.lower().replace(" ", "-"), page.url
        expect(workers).to_have_value(str(n))
        expect(view_button(page, view)).to_be_checked()
    page.go_back()                                   # one entry back: the view before the last click, same workers
    settle(page)
    assert query(page).get("workers") in ("40", "24"), page.url
    expect(workers).to_have_value(query(page)["workers"])
    assert page.console_errors == []


def test_back_after_an_upload_restores_the_model_before_it(page, server, tmp_path):
    open_app(page, server, "?model=mistral-7b&gpu=RTX-4090-24GB", charts=False)
    before_url, before = page.url, verdict(page)
    open_section(page, "Load a config")
    settle(page)
    opened_url = page.url                              # the section's pill is not in the link: the same entry
    config = tmp_path / "config.json"
    config.write_text((FIXTURES / "qwen3-1.7b.json").read_text())
    upload(page, config)
    expect(page).to_have_url(re.compile(r"model=custom"), timeout=30_000)
    settle(page)
    after_url, after = page.url, verdict(page)
    expect(page.get_by_text("Loaded config.json", exact=False)).to_be_visible()
    page.go_back()
    settle(page, opened_url)
    assert query(page).get("model") == "mistral-7b"
    assert verdict(page) == before
    expect(page.get_by_text("Loaded config.json", exact=False)).to_have_count(0)   # that entry had no import
    page.go_forward()
    settle(page, after_url)
    assert verdict(page) == after
    assert query(page).get("model") == "custom"
    expect(page.get_by_text("Loaded config.json", exact=False)).to_be_visible()    # the entry's import message
    assert before_url == opened_url
    assert page.console_errors == []
