"""The worst known paste against the hosted page (issue 38): 64,000 characters that the calibration parser once read
in quadratic time (about 110 s, holding the server's interpreter) go to a worker process with a deadline. Another
visitor's page loads meanwhile, and the paster's page ends in a message, never an error page."""

import time

from playwright.sync_api import expect

from benchmarks.attack import QUADRATIC_PASTE
from tests.e2e.conftest import wait_ready


def test_the_worst_paste_freezes_no_one_and_ends_in_a_message(page, browser, server):
    page.goto(f"{server}/?model=llama-3-8b&view=calibrate")
    wait_ready(page)
    box = page.get_by_role("textbox", name="Measured output")
    box.fill(QUADRATIC_PASTE)
    box.press("Control+Enter")
    page.wait_for_timeout(300)                       # the paste is being read
    other = browser.new_context().new_page()
    try:
        started = time.monotonic()
        other.goto(f"{server}/?model=gpt2&workers=24")
        wait_ready(other)
        other.locator("[data-testid=zc-verdict]").first.wait_for()
        assert time.monotonic() - started < 20
    finally:
        other.context.close()
    alert = page.locator("[data-testid^=zc-alert-error], [data-testid^=zc-alert-success]").first
    expect(alert).to_be_visible(timeout=30_000)
    assert page.locator("[data-testid=stException]").count() == 0
