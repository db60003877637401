"""The Docker image as a visitor and an operator meet it (issue 34): built from this checkout, run, and driven by
Debian's Chromium. Health, the verdict, a shared link, serve.py's headers, the Host allow-list, a non-root process,
the page under a path (behind a reverse proxy), the image's own HEALTHCHECK and a clean stop.

Needs a Docker engine. Without one the module skips with the reason, except under CI=true, where it fails: CI
starts dockerd and builds a stand-in base (.ci/run, .ci/base-image.sh) and must never pass by skipping this.
The base is $ZEROCALC_BASE_IMAGE when set, else the Dockerfile's default (python:3.11-slim). Everything the module
starts (containers, the image it built) is removed at the end, also when a test fails; the base is kept.
"""

from __future__ import annotations

import os
import time
import urllib.request
import uuid

import pytest
from playwright.sync_api import expect

from tests.e2e import container as c
from tests.e2e.conftest import _missing
from tests.e2e.server import READY
from tests.e2e.test_browser import core_report, query_dict, subtotals
from zerocalc.units import format_bytes

SHARED = "?model=llama-3-8b&workers=64&gpu=H200-141GB"
UNDER = "zerocalc"                     # the path of the second container (STREAMLIT_SERVER_BASE_URL_PATH)
HEADERS = {"Content-Security-Policy": "frame-ancestors 'self'", "X-Frame-Options": "SAMEORIGIN",
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}     # ui/server/headers.py
TIMES = {}                             # seconds, reported at the end of the module


def note(config, line: str) -> None:
    """A line in pytest's own output, so CI's log says what the container test did and how long it took."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\ncontainer: {line}", flush=True)


@pytest.fixture(scope="module")
def image(pytestconfig):
    missing = c.engine_missing() or _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the container test cannot run under CI: {missing}")
        pytest.skip(f"the container test needs a Docker engine and a browser: {missing}")
    base = os.environ.get(c.BASE_ENV, "")
    if not base and os.environ.get("CI") == "true":
        pytest.fail(f"${c.BASE_ENV} is not set: CI has no registry, so .ci/run builds a base (.ci/base-image.sh); "
                    "see its messages in the log")
    tag = f"zerocalc-test:{uuid.uuid4().hex[:8]}"
    try:
        TIMES["build"] = c.build(tag, base)
        size = int(c.docker("image", "inspect", "--format", "{{.Size}}", tag))
        note(pytestconfig, f"built {tag} on {base or 'the default base'} in {TIMES['build']:.0f} s, "
                           f"{size / 1e6:.0f} MB ({size / 2**20:.0f} MiB)")
        yield tag
    finally:
        start = time.monotonic()
        c.remove(tag, image=True)
        TIMES["image removal"] = time.monotonic() - start
        note(pytestconfig, ", ".join(f"{k} {v:.1f} s" for k, v in TIMES.items()) + f"; removed {tag}")


@pytest.fixture(scope="module")
def containers(image):
    """Two containers of the image: the default one, and one as compose.yaml runs it (read-only, a small /tmp) under
    a path with its own Host allow-list."""
    started = []
    try:
        start = time.monotonic()
        started.append(c.run(image))
        TIMES["docker run"] = time.monotonic() - start
        started.append(c.run(image, {"STREAMLIT_SERVER_BASE_URL_PATH": UNDER,
                                     "STREAMLIT_SERVER_ALLOWED_HOSTS": "127.0.0.1 calc.example.com"}, read_only=True))
        plain, under = started
        bases = c.base_url(plain), c.base_url(under, UNDER)
        c.wait_healthy(plain, bases[0])
        TIMES["docker run to healthy"] = time.monotonic() - start
        c.wait_healthy(under, bases[1])
        TIMES["network settled"] = c.wait_network_settled()
        yield {"plain": (plain, bases[0]), "under": (under, bases[1])}
    finally:
        c.remove(*started)


@pytest.fixture(scope="module")
def served(containers):
    return containers["plain"]


@pytest.fixture(scope="module")
def browser(containers, chromium):       # the session's one Playwright; conftest's `page` opens on it
    return chromium


NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"   # the host's interfaces changed under Chromium: not the page's error


def open_page(page, url):
    """Load `url` to its verdict. A load whose only errors are the host's network changing (a container's veth
    settling) is loaded once more, so that error never hides nor fakes one of the page's own."""
    for attempt in range(2):
        page.console_errors.clear()
        page.goto(url)
        page.wait_for_selector(READY, timeout=90_000)
        page.locator("[data-testid=zc-verdict]").first.wait_for(timeout=90_000)
        errors = page.console_errors
        if attempt or not errors or not all(NETWORK_CHANGED in e for e in errors):
            return


def test_health_and_security_headers(served):
    _, base = served
    for path in ("/_stcore/health", "/_stcore/script-health-check", "/", "/" + SHARED):
        with urllib.request.urlopen(base + path, timeout=10) as response:
            assert response.status == 200, path
            for name, value in HEADERS.items():
                assert response.headers[name] == value, (path, name, response.headers[name])


def test_the_default_plan_shows_its_verdict(page, served):
    """The first load from the container, timed from navigation to the verdict and the overview's table drawn (its
    chart waits for a click: issue 36)."""
    _, base = served
    start = time.monotonic()
    open_page(page, base + "/")
    page.locator("[data-testid=zc-table]").first.wait_for(timeout=90_000)
    TIMES["first page load to the overview"] = time.monotonic() - start
    report = core_report({})
    assert subtotals(page)[:4] == [format_bytes(s["per_worker_total_bytes"], "GB") for s in report["stages"]]
    expect(page.get_by_text("ZeRO-1, ZeRO-2 and ZeRO-3 fit; ZeRO-0 does not", exact=False)).to_be_visible()
    assert page.console_errors == []


def test_a_shared_link_reproduces_its_view(page, served):
    _, base = served
    open_page(page, base + "/" + SHARED)
    report = core_report(query_dict(SHARED))
    assert subtotals(page)[:4] == [format_bytes(s["per_worker_total_bytes"], "GB") for s in report["stages"]]
    expect(page.get_by_test_id("zc-answer")).to_contain_text("64 x NVIDIA H200")
    link = page.locator(".zc-share-link").inner_text()
    assert "model=llama-3-8b" in link and "workers=64" in link and "gpu=H200-141GB" in link
    assert page.console_errors == []


def test_the_process_runs_as_the_images_unprivileged_user(served):
    container, _ = served
    assert c.docker("exec", container, "id", "-u") == "10001"
    with open(f"/proc/{c.host_pid(container)}/status") as status:     # streamlit itself, as the host sees it
        uids = next(line for line in status if line.startswith("Uid:")).split()[1:]
    assert uids == ["10001"] * 4


def test_the_server_asks_nothing_of_the_outside_world(served):
    """Streamlit's welcome message on 0.0.0.0 looks up the public address at checkip.amazonaws.com; the image hides
    it. Where that lookup is tried the log says "External URL" or "Did not auto detect external IP"."""
    container, _ = served
    log = c.logs(container)
    assert "external" not in log.lower(), log


def test_the_websocket_refuses_a_host_outside_the_allow_list(containers):
    """server.allowedHosts (issue 38, DNS rebinding): the image defaults to the local names; the environment
    variable replaces the list (the second container allows 127.0.0.1 and calc.example.com only)."""
    _, base = containers["plain"]
    assert c.websocket_status(base, "localhost") == 101
    assert c.websocket_status(base, f"127.0.0.1:{base.rsplit(':', 1)[1]}") == 101
    assert c.websocket_status(base, "rebound.example.com") == 403
    _, under = containers["under"]
    assert c.websocket_status(under, "calc.example.com", UNDER) == 101
    assert c.websocket_status(under, "localhost", UNDER) == 403


def test_the_page_under_a_path_as_behind_a_reverse_proxy(page, containers):
    container, base = containers["under"]
    assert base.endswith("/" + UNDER)
    for path in ("/_stcore/health", "/_stcore/script-health-check", "/" + SHARED):
        with urllib.request.urlopen(base + path, timeout=10) as response:
            assert response.status == 200, path
    open_page(page, base + "/" + SHARED)
    report = core_report(query_dict(SHARED))
    assert subtotals(page)[:4] == [format_bytes(s["per_worker_total_bytes"], "GB") for s in report["stages"]]
    assert page.url.startswith(base + "/")
    assert page.console_errors == []


def test_the_images_healthcheck_turns_healthy(containers):
    """The image's HEALTHCHECK (every 30 s, on the script health endpoint, under the path when there is one): run
    after the checks above so that most of its first interval has passed."""
    for name, (container, _) in containers.items():
        deadline = time.monotonic() + 150
        while (health := c.inspect(container, "{{.State.Health.Status}}")) == "starting":
            assert time.monotonic() < deadline, f"{name}: still starting"
            time.sleep(1)
        assert health == "healthy", (name, health, c.inspect(container, "{{json .State.Health.Log}}"))


def test_docker_stop_ends_it_promptly(containers):
    """Streamlit, PID 1 in the container, exits on SIGTERM with status 0: no SIGKILL at the end of the grace period
    (status 137)."""
    for name, (container, _) in containers.items():
        start = time.monotonic()
        c.docker("stop", "--time", "20", container, timeout=60)
        took = time.monotonic() - start
        TIMES[f"docker stop ({name})"] = took
        code = c.inspect(container, "{{.State.ExitCode}}")
        assert code == "0" and took < 20, (name, code, took, c.logs(container))
