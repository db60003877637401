"""huggingface_hub imported on demand (telemetry off), and the guards around its downloads: a byte cap that stops a
stream and a deadline that abandons a slow one.
"""

from __future__ import annotations

import os
import sys
import threading

from .ids import HubError

INSTALL_HINT = "pip install huggingface_hub==2.4.0 (or pip install -r requirements.txt)"


def import_hub(repo_id: str):
    """(huggingface_hub, its constants and errors modules, httpx2), or a HubError saying how to install them.

    When zerocalc is the first to import huggingface_hub, HF_HUB_DISABLE_TELEMETRY defaults to 1 (set it to 0 to opt
    back in): huggingface_hub 2.4.0 reads it at import, and without it the first request of a process also sends a
    GET {HF_ENDPOINT}/api/agent-harnesses (to huggingface.co even when an endpoint argument names another Hub) and
    puts the torch version in the User-Agent.
    """
    if "huggingface_hub" not in sys.modules:
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import httpx2
        import huggingface_hub
        from huggingface_hub import constants, errors
    except ImportError:
        raise HubError("hub", repo_id, f"huggingface_hub installed: reading a model from the Hub needs it "
                                       f"({INSTALL_HINT})") from None
    return huggingface_hub, constants, errors, httpx2


class TooLarge(Exception):
    def __init__(self, size: int, announced: bool):
        super().__init__(size)
        self.size, self.announced = size, announced


class Deadline(Exception):
    pass


def byte_cap(limit: int):
    """A progress-bar class for hf_hub_download(tqdm_class=...) that stops a download past `limit` bytes: it is
    created with the announced total and told of every chunk read, before the chunk is written."""

    class ByteCap:
        def __init__(self, *args, total=None, initial=0, **kwargs):
            self.n = initial or 0
            if total is not None and total > limit:
                raise TooLarge(total, announced=True)

        def update(self, n=1):
            self.n += n
            if self.n > limit:
                raise TooLarge(self.n, announced=False)

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    return ByteCap


def with_deadline(work, seconds: float):
    """work() in a daemon thread, or Deadline after `seconds` (the thread is left to finish on its own)."""
    box = {}

    def run():
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name="zerocalc-hub-download", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise Deadline()
    if "error" in box:
        raise box.pop("error")
    return box["value"]


def truthy(value) -> bool:
    return isinstance(value, str) and value.strip().upper() in ("1", "ON", "YES", "TRUE")
