"""Build, run and remove the Docker image through the docker CLI (shared by tests/e2e/test_container.py and
`benchmarks/load.py --image`). Every container publishes 8501 on a free port of 127.0.0.1 only."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
import uuid

from tests.e2e.server import ROOT, status

BASE_ENV = "ZEROCALC_BASE_IMAGE"      # .ci/run exports the stand-in base's name (.ci/base-image.sh)
PORT = 8501


def docker(*args: str, timeout: float = 60, check: bool = True) -> str:
    """stdout of `docker ARGS`; RuntimeError with docker's own message when it fails and `check` is set."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        output = (done.stdout.strip()[-3000:] + "\n" + done.stderr.strip()[-2000:]).strip()   # a build's log is stdout
        raise RuntimeError(f"docker {' '.join(args[:2])} failed ({done.returncode}):\n{output}")
    return done.stdout.strip()


def engine_missing() -> str:
    """Why no Docker engine can be used here ('' when one answers)."""
    if not shutil.which("docker"):
        return "no docker client on PATH (apt-get install docker.io)"
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info did not answer within 30 s"
    if done.returncode != 0 or not done.stdout.strip():
        return f"no Docker engine answers (start dockerd): {done.stderr.strip()[:200]}"
    return ""


def build(tag: str, base: str = "", timeout: float = 1500) -> float:
    """Build the repository's image as `tag` (on `base` when given, else the Dockerfile's default); seconds taken."""
    args = ["build", "--network", "host", "--force-rm", "-t", tag]
    if base:
        args += ["--build-arg", f"BASE_IMAGE={base}"]
    start = time.monotonic()
    docker(*args, str(ROOT), timeout=timeout)
    return time.monotonic() - start


def run(image: str, env: dict | None = None, read_only: bool = False) -> str:
    """Start a detached container of `image` with `env` (read-only with a small /tmp, as compose.yaml runs it, when
    `read_only`); its id."""
    name = f"zerocalc-test-{uuid.uuid4().hex[:8]}"
    flags = [x for k, v in (env or {}).items() for x in ("-e", f"{k}={v}")]
    flags += ["--read-only", "--tmpfs", "/tmp:size=64m"] if read_only else []
    return docker("run", "-d", "--name", name, "-p", f"127.0.0.1::{PORT}", *flags, image, timeout=600)


def base_url(container: str, path: str = "") -> str:
    """http://127.0.0.1:PORT[/path] where the container's 8501 is published."""
    port = docker("port", container, f"{PORT}/tcp").splitlines()[0].rsplit(":", 1)[1]
    return f"http://127.0.0.1:{port}" + (f"/{path.strip('/')}" if path.strip("/") else "")


def wait_healthy(container: str, base: str, timeout: float = 120) -> float:
    """Seconds until script-health-check answers 200; RuntimeError with the container's log if it never does."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if status(f"{base}/_stcore/script-health-check") == 200:
            return time.monotonic() - start
        if inspect(container, "{{.State.Running}}") != "true":
            break
        time.sleep(0.2)
    raise RuntimeError(f"container not healthy after {time.monotonic() - start:.0f} s; log:\n{logs(container)}")


def host_interfaces() -> str:
    """The host's network interfaces and their addresses, as the kernel lists them."""
    names = " ".join(sorted(os.listdir("/sys/class/net"))) if os.path.isdir("/sys/class/net") else ""
    try:
        with open("/proc/net/if_inet6") as f:
            return names + "\n" + "".join(sorted(f.readlines()))
    except OSError:
        return names


def wait_network_settled(quiet: float = 3.0, timeout: float = 30.0) -> float:
    """Seconds until the host's interfaces stay unchanged for `quiet` seconds. Each `docker run` adds a veth whose
    IPv6 address arrives a moment after the container answers; Chromium's network-change watcher then cancels the
    page's requests in flight (net::ERR_NETWORK_CHANGED, seen in CI), so pages open only once this settles."""
    start = last_change = time.monotonic()
    seen = host_interfaces()
    while time.monotonic() - start < timeout and time.monotonic() - last_change < quiet:
        time.sleep(0.25)
        now = host_interfaces()
        if now != seen:
            seen, last_change = now, time.monotonic()
    return time.monotonic() - start


def inspect(container: str, template: str) -> str:
    return docker("inspect", "--format", template, container)


def logs(container: str) -> str:
    done = subprocess.run(["docker", "logs", "--tail", "50", container], capture_output=True, text=True, timeout=30)
    return (done.stdout + done.stderr)[-4000:]


def host_pid(container: str) -> int:
    """The container's main process (streamlit itself: the ENTRYPOINT is exec form) as the host sees it."""
    return int(inspect(container, "{{.State.Pid}}"))


def remove(*names: str, image: bool = False) -> None:
    """Remove containers (or an image, and the untagged images the builder left of the Dockerfile's files stage)
    whatever state they are in; never raises (runs in teardown). With the vfs storage driver each layer is a whole
    copy of the file system, so removing one can take a while."""
    commands = [["docker", "rmi" if image else "rm", "-f", *names]] if names else []
    if image:
        commands.append(["docker", "image", "prune", "-f", "--filter", "label=zerocalc.stage=files"])
    for command in commands:
        try:
            subprocess.run(command, capture_output=True, timeout=900)
        except subprocess.TimeoutExpired:
            pass


def websocket_status(base: str, host: str, path: str = "") -> int:
    """The HTTP status the server answers a WebSocket upgrade on /_stcore/stream with this Host header (and the
    same Origin, as a browser at that name sends): 101 accepted, 403 refused."""
    port = int(base.rsplit(":", 1)[1].split("/")[0])
    key = base64.b64encode(os.urandom(16)).decode()
    prefix = f"/{path.strip('/')}" if path.strip("/") else ""
    request = (f"GET {prefix}/_stcore/stream HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
               f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: streamlit\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        head = s.recv(4096).decode("latin-1")
    return int(head.split()[1]) if head.startswith("HTTP/") else 0
