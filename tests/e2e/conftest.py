"""A real `streamlit run` server on 127.0.0.1 and Debian's Chromium driven by Playwright.

Without Chromium or Playwright the browser tests skip with the reason, except under CI=true, where they fail:
CI installs both (.ci/run) and must never pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
READY = "[data-testid=stApp][data-test-script-state=notRunning][data-test-connection-state=CONNECTED]"


def _missing() -> str:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} not found (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright not installed (pip install -r requirements-dev.txt)"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except Exception:  # noqa: BLE001 - not up yet
        return 0


@pytest.fixture(scope="session")
def server():
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests cannot run under CI: {missing}")
        pytest.skip(f"browser tests need a browser: {missing}")
    port = _free_port()
    streamlit = shutil.which("streamlit", path=str(Path(sys.executable).parent)) or "streamlit"
    proc = subprocess.Popen([streamlit, "run", "app.py", "--server.headless", "true", "--server.address",
                             "127.0.0.1", "--server.port", str(port), "--server.scriptHealthCheckEnabled", "true"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _get(f"{base}/_stcore/script-health-check") != 200:
        if proc.poll() is not None:
            pytest.fail("streamlit exited before it was healthy")
        time.sleep(0.2)
    else:
        if _get(f"{base}/_stcore/script-health-check") != 200:
            proc.kill()
            pytest.fail("streamlit did not become healthy within 60 s")
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


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
