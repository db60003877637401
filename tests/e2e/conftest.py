"""A real `streamlit run` server on 127.0.0.1 and Debian's Chromium driven by Playwright.

Without Chromium or Playwright the browser tests skip with the reason, except under CI=true, where they fail:
CI installs both (.ci/run) and must never pass by skipping them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.server import CHROMIUM, CHROMIUM_ARGS, READY, start, stop

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def _missing() -> str:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} not found (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright not installed (pip install -r requirements-dev.txt)"
    return ""


@pytest.fixture(scope="session")
def server():
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests cannot run under CI: {missing}")
        pytest.skip(f"browser tests need a browser: {missing}")
    try:
        proc, base = start("serve.py")     # the page as hosted: behind serve.py's headers (the Docker entry point)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield base
    stop(proc)


@pytest.fixture(scope="session")
def chromium():
    """One Playwright for the whole session: a second sync_playwright() in the same process is refused ("Sync API
    inside the asyncio loop"), so the container test's pages come from this one too."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def browser(server, chromium):
    return chromium


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 1800}, accept_downloads=True)
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda m: page.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    yield page
    context.close()


def wait_ready(page, timeout=60_000):
    page.wait_for_selector(READY, timeout=timeout)


def screenshot(page, name: str, height: int = 1800):
    """The page at a given height: Streamlit scrolls an inner container, so a full-page shot stops at the first
    screen; a taller viewport shows more."""
    ARTIFACTS.mkdir(exist_ok=True)
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": height})
    wait_ready(page)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    page.set_viewport_size(size)
