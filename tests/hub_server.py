"""A fake Hub for the tests of zerocalc.model.hub: a real HTTP server on 127.0.0.1 that answers the Hub's file
endpoints from local fixtures.

The server (HubServer below) implements what huggingface_hub 2.4.0 asks of the Hub for hf_hub_download and
get_hf_file_metadata: HEAD and GET of /{org}/{name}/resolve/{revision}/{filename} (the revision URL-quoted, so
refs/pr/1 arrives as refs%2Fpr%2F1), answering with the headers the library reads: X-Repo-Commit (the commit the
revision resolved to), ETag, Content-Length; for a weights file a 302 to another origin with X-Linked-Size and
X-Linked-Etag, as the Hub does for LFS files; errors with the Hub's X-Error-Code (GatedRepo, RepoNotFound,
RevisionNotFound, EntryNotFound) and X-Error-Message. Scenarios are keyed by repository id (REPOS) and the server
records every request.

How the library is pointed at it: in this process every call passes endpoint=server.url (hf_hub_url,
get_hf_file_metadata and hf_hub_download take an endpoint argument), which keeps each case to milliseconds and lets
one process use many cache folders. HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE are read by huggingface_hub when it is
imported, so two tests run fetches in subprocesses with those set, the way a user sets them.

No test reaches the internet: a socket guard refuses (and records, failing the module) any connection to a
non-loopback address, in this process and in the subprocesses; proxy variables are unset; the server counts requests.
"""

import hashlib
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple, Optional
from urllib.parse import unquote

import pytest

from zerocalc.model.hub.fetch import fetch_config
from zerocalc.model.hub.ids import HubError

try:
    import huggingface_hub
    from huggingface_hub import constants as hf_constants
    from huggingface_hub.errors import HFValidationError  # noqa: F401  (for tests/test_hub_validation.py)
    from huggingface_hub.utils import validate_repo_id as hf_validate_repo_id  # noqa: F401
except ImportError:  # requirements.txt pins it; a bare core install skips this module, CI fails instead
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("huggingface_hub is not installed (pip install -r requirements.txt)", allow_module_level=True)


ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
HUB_FIXTURES = FIXTURES / "hub"
LLAMA_CONFIG = (FIXTURES / "model_configs" / "llama-3.1-8b.json").read_bytes()
QWEN_CONFIG = (FIXTURES / "model_configs" / "qwen3-0.6b.json").read_bytes()
LLAMA_INDEX = (HUB_FIXTURES / "llama-3.1-8b.model.safetensors.index.json").read_bytes()
LLAMA_TOTAL_SIZE = 16_060_522_496
QWEN_SINGLE_FILE = 1_503_300_328

COMMIT = hashlib.sha1(b"zc-test main").hexdigest()
PR_COMMIT = hashlib.sha1(b"zc-test refs/pr/1").hexdigest()
REVISIONS = {"main": COMMIT, "v1.0": COMMIT, "refs/pr/1": PR_COMMIT, COMMIT: COMMIT, PR_COMMIT: PR_COMMIT}
GOOD_TOKEN = "hf_zcGoodTokenAAAAAAAAAAAAAAAAAAAAAAAAA"      # the one account that accepted the gated licence
SECRET = "hf_zcSecretTokenZZZZZZZZZZZZZZZZZZZZZZZZZ"       # a valid token without access: the leak tests' marker
BAD_TOKEN = "hf_zcExpiredTokenXXXXXXXXXXXXXXXXXXXXXXXX"    # the server calls it invalid (401)
HUGE = 50_000_000
STALL_S = 3.0   # past the 0.5 s timeouts the stall tests use
TIMEOUT = 0.5


class Huge(NamedTuple):
    size: int
    announced: bool  # Content-Length on HEAD and GET; else none on HEAD and a GET body that ends at close


REPOS = {  # repo id -> what the server holds for it; unknown ids are 404 RepoNotFound
    "zc-test/ok": {"files": {"config.json": LLAMA_CONFIG, "model.safetensors.index.json": LLAMA_INDEX}},
    "zc-test/single-file": {"files": {"config.json": QWEN_CONFIG}, "lfs": {"model.safetensors": QWEN_SINGLE_FILE}},
    "zc-test/no-weights": {"files": {"config.json": QWEN_CONFIG}},
    "zc-test/gated": {"files": {"config.json": LLAMA_CONFIG, "model.safetensors.index.json": LLAMA_INDEX},
                      "gated": True},
    "zc-test/private": {"private": True},
    "zc-test/no-config": {"files": {}},
    "zc-test/stalled": {"files": {"config.json": LLAMA_CONFIG}, "stall": {"HEAD": STALL_S}},
    "zc-test/stalled-body": {"files": {"config.json": LLAMA_CONFIG}, "stall": {"GET": 2.0}},
    "zc-test/malformed": {"files": {"config.json": (HUB_FIXTURES / "malformed-config.json").read_bytes()}},
    "zc-test/huge": {"files": {"config.json": Huge(HUGE, announced=True)}},
    "zc-test/huge-unannounced": {"files": {"config.json": Huge(HUGE, announced=False)}},
    "zc-test/bad-index": {"files": {"config.json": LLAMA_CONFIG,
                                    "model.safetensors.index.json": (HUB_FIXTURES / "malformed-index.json")
                                    .read_bytes()}},
    "zc-test/not-a-hub": {"files": {"config.json": LLAMA_CONFIG}, "no_commit_header": True},
    "zc-test/unavailable": {"status": 503},
}


class Request(NamedTuple):
    method: str
    path: str
    repo: Optional[str]
    revision: Optional[str]
    filename: Optional[str]
    authorization: Optional[str]


class HubServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) answering like the Hub's /resolve/ endpoint."""

    def __init__(self):
        self.requests: list = []
        self.sent: dict = {}           # repo -> body bytes written for its GETs
        self.stop = threading.Event()  # ends stalls at shutdown
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                owner.handle(self, head=True)

            def do_GET(self):
                owner.handle(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="hub-fixture-server")
        self.thread.start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def since(self, mark: int) -> list:
        with self.lock:
            return self.requests[mark:]

    def mark(self) -> int:
        with self.lock:
            return len(self.requests)

    # -- one request --

    def handle(self, h, head: bool):
        path = h.path.split("?", 1)[0]
        parts = path.split("/")
        repo = revision = filename = None
        if len(parts) >= 6 and parts[0] == "" and parts[3] == "resolve":
            repo = f"{unquote(parts[1])}/{unquote(parts[2])}"
            revision, filename = unquote(parts[4]), unquote("/".join(parts[5:]))
        auth = h.headers.get("Authorization")
        with self.lock:
            self.requests.append(Request(h.command, path, repo, revision, filename, auth))
        try:
            self.answer(h, head, repo, revision, filename, auth)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeouts, size caps)
            h.close_connection = True

    def send(self, h, head, status, headers, body=b""):
        h.send_response(status)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def error(self, h, head, status, code=None, message=None, commit=None):
        headers = {"Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        if message:
            headers["X-Error-Message"] = message
        if commit:
            headers["X-Repo-Commit"] = commit
        self.send(h, head, status, headers, json.dumps({"error": message or code or "error"}).encode())

    def answer(self, h, head, repo, revision, filename, auth):
        if repo is None:  # e.g. the storage host a weights redirect points to: never to be followed
            return self.error(h, head, 404, "EntryNotFound", "no such path")
        if auth == f"Bearer {BAD_TOKEN}":
            return self.error(h, head, 401, message="Invalid credentials in Authorization header")
        spec = REPOS.get(repo)
        if spec is None:
            return self.error(h, head, 404, "RepoNotFound", "Repository not found")
        if spec.get("private"):  # the Hub answers 401 RepoNotFound when it will not say whether a repo exists
            return self.error(h, head, 401, "RepoNotFound", "Repository not found")
        if spec.get("gated") and auth != f"Bearer {GOOD_TOKEN}":
            return self.error(h, head, 403 if auth else 401, "GatedRepo",
                              f"Access to model {repo} is restricted. You must have access to it and be "
                              "authenticated to access it.")
        if revision not in REVISIONS:
            return self.error(h, head, 404, "RevisionNotFound", "Invalid rev id")
        commit = REVISIONS[revision]
        if spec.get("status"):
            return self.error(h, head, spec["status"], message="Service unavailable")
        stall = spec.get("stall", {}).get(h.command)
        if stall and self.stop.wait(stall):
            return
        if filename in spec.get("lfs", {}):  # weights: the Hub redirects to its storage host
            size = spec["lfs"][filename]
            sha = hashlib.sha256(filename.encode()).hexdigest()
            return self.send(h, head, 302, {"X-Repo-Commit": commit, "ETag": f'"{sha[:40]}"',
                                            "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(size),
                                            "Location": f"http://localhost:{self.port}/storage/{sha}"})
        body = spec["files"].get(filename)
        if body is None:
            return self.error(h, head, 404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"",
                              commit=commit)
        headers = {"X-Repo-Commit": commit, "Content-Type": "application/json"}
        if spec.get("no_commit_header"):
            del headers["X-Repo-Commit"]
        if isinstance(body, Huge):
            return self.stream_huge(h, head, repo, body, headers)
        headers["ETag"] = f'"{hashlib.sha1(body).hexdigest()}"'
        self.send(h, head, 200, headers, body)

    def stream_huge(self, h, head, repo, huge: Huge, headers):
        h.send_response(200)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("ETag", f'"{hashlib.sha1(repo.encode()).hexdigest()}"')
        if huge.announced:
            h.send_header("Content-Length", str(huge.size))
        elif not head:
            h.send_header("Connection", "close")  # the body ends when the connection closes
            h.close_connection = True
        h.end_headers()
        if head:
            return
        chunk, sent = b" " * 1_000_000, 0
        try:
            while sent < huge.size:
                h.wfile.write(chunk)
                sent += len(chunk)
        finally:
            with self.lock:
                self.sent[repo] = self.sent.get(repo, 0) + sent


# ---------------------------------------------------------------------------------------------- fixtures

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
GUARD_SOURCE = '''
import socket
_connect = socket.socket.connect
def _guarded(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
        raise ConnectionRefusedError("test guard: no connections beyond 127.0.0.1: %r" % (address,))
    return _connect(self, address)
socket.socket.connect = _guarded
_getaddrinfo = socket.getaddrinfo
def _resolve(host, *args, **kwargs):
    if host not in ("127.0.0.1", "::1", "localhost", None):
        raise socket.gaierror("test guard: no name lookups beyond localhost: %r" % (host,))
    return _getaddrinfo(host, *args, **kwargs)
socket.getaddrinfo = _resolve
'''


@pytest.fixture(scope="module")
def blocked():
    """Refuse and record every connection or name lookup beyond loopback; unset proxies and saved tokens."""
    attempts = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            attempts.append(address)
            raise ConnectionRefusedError(f"test guard: no connections beyond 127.0.0.1: {address!r}")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and host not in LOOPBACK:
            attempts.append(host)
            raise socket.gaierror(f"test guard: no name lookups beyond localhost: {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket, "getaddrinfo", getaddrinfo)
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                     "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            mp.delenv(name, raising=False)
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # another module may have imported it with offline set
        # zerocalc.model.hub sets HF_HUB_DISABLE_TELEMETRY when it imports huggingface_hub first; here this module
        # imported it, and telemetry would send GET https://huggingface.co/api/agent-harnesses (the guard would
        # refuse it)
        mp.setattr(hf_constants, "HF_HUB_DISABLE_TELEMETRY", True)
        mp.setattr(hf_constants, "HF_TOKEN_PATH", "/nonexistent/zerocalc-test/token")
        mp.setattr(hf_constants, "HF_STORED_TOKENS_PATH", "/nonexistent/zerocalc-test/stored_tokens")
        huggingface_hub.close_session()  # its shared client picks up the environment when created
        yield attempts
        huggingface_hub.close_session()
    assert attempts == [], f"a test tried to reach beyond 127.0.0.1: {attempts}"


@pytest.fixture(scope="module")
def server(blocked):
    hub = HubServer()
    yield hub
    hub.close()


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "hub-cache"


def fetch(server, repo, cache, **kwargs):
    return fetch_config(repo, endpoint=server.url, cache_dir=cache, **kwargs)


def fetch_error(server, repo, cache, **kwargs) -> HubError:
    with pytest.raises(HubError) as caught:
        fetch(server, repo, cache, **kwargs)
    return caught.value


def wait_for_abandoned_downloads():
    for thread in threading.enumerate():
        if thread.name == "zerocalc-hub-download":
            thread.join(15)
