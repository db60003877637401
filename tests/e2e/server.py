"""Start and stop a real `streamlit run` on 127.0.0.1 (shared by the browser tests and the load benchmarks)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
READY = "[data-testid=stApp][data-test-script-state=notRunning][data-test-connection-state=CONNECTED]"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except Exception:  # noqa: BLE001 - not up yet
        return 0


def start(app: str = "app.py", cwd: Path = ROOT, timeout: float = 60) -> tuple:
    """(process, base URL) of a healthy server; RuntimeError when it does not come up in `timeout` seconds."""
    port = free_port()
    streamlit = shutil.which("streamlit", path=str(Path(sys.executable).parent)) or "streamlit"
    proc = subprocess.Popen([streamlit, "run", app, "--server.headless", "true", "--server.address", "127.0.0.1",
                             "--server.port", str(port), "--server.scriptHealthCheckEnabled", "true"],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if status(f"{base}/_stcore/script-health-check") == 200:
            return proc, base
        if proc.poll() is not None:
            raise RuntimeError("streamlit exited before it was healthy")
        time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"streamlit did not become healthy within {timeout:.0f} s")


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc), in seconds."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
