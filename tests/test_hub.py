"""zerocalc.model.hub against a real HTTP server on 127.0.0.1 that answers the Hub's file endpoints from local fixtures.

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

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple, Optional
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerocalc.model import hub as zhub
from zerocalc.model.hf_config import architecture_from_config
from zerocalc.model.hub import (GATED, HubConfig, HubError, fetch_config, validate_repo_id, validate_revision,
                                validate_token)
from zerocalc.scenario import FieldError

try:
    import huggingface_hub
    from huggingface_hub import constants as hf_constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id as hf_validate_repo_id
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
        # imported it, and telemetry would send GET https://huggingface.co/api/agent-harnesses (the guard would refuse it)
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


# ---------------------------------------------------------------------------------------------- answers

def test_config_and_published_size_of_a_sharded_model(server, cache):
    mark = server.mark()
    result = fetch(server, "zc-test/ok", cache)
    assert isinstance(result, HubConfig)
    assert result.config == json.loads(LLAMA_CONFIG)
    assert (result.repo_id, result.revision, result.commit) == ("zc-test/ok", "main", COMMIT)
    assert result.safetensors_total_size == LLAMA_TOTAL_SIZE and result.safetensors_file_size is None
    assert "bfloat16" in result.published_dtype_note and "8,030,261,248 parameters" in result.published_dtype_note
    assert any("16,060,522,496 bytes" in note for note in result.notes)
    assert architecture_from_config(result.config).layers == 32  # the core reads it as any config.json
    seen = server.since(mark)
    assert {(r.method, r.filename) for r in seen} <= {("HEAD", "config.json"), ("GET", "config.json"),
                                                      ("HEAD", "model.safetensors.index.json"),
                                                      ("GET", "model.safetensors.index.json")}
    assert [r.filename for r in seen if r.method == "GET"] == ["config.json", "model.safetensors.index.json"]

    mark = server.mark()  # again: config.json checked by HEADs, the index (cached at its commit) not asked for
    again = fetch(server, "zc-test/ok", cache)
    assert again.config == result.config and again.safetensors_total_size == LLAMA_TOTAL_SIZE
    assert {(r.method, r.filename) for r in server.since(mark)} == {("HEAD", "config.json")}


@pytest.mark.parametrize("revision,commit", [("refs/pr/1", PR_COMMIT), ("v1.0", COMMIT), (PR_COMMIT, PR_COMMIT)])
def test_revisions(server, cache, revision, commit):
    mark = server.mark()
    result = fetch(server, "zc-test/ok", cache, revision=revision)
    assert (result.revision, result.commit) == (revision, commit)
    seen = server.since(mark)
    assert {r.revision for r in seen if r.filename == "config.json"} == {revision}  # quoted in the URL, intact
    assert {r.revision for r in seen if r.filename != "config.json"} == {commit}  # the index: at the same commit


def test_single_safetensors_file_is_sized_by_a_head_and_never_downloaded(server, cache):
    mark = server.mark()
    result = fetch(server, "zc-test/single-file", cache)
    assert result.config == json.loads(QWEN_CONFIG)
    assert result.safetensors_total_size is None and result.safetensors_file_size == QWEN_SINGLE_FILE
    assert any("1,503,300,328 bytes" in n and "not downloaded" in n for n in result.notes)
    seen = server.since(mark)
    assert ("HEAD", "model.safetensors") in {(r.method, r.filename) for r in seen}
    assert not [r for r in seen if r.method == "GET" and r.filename not in ("config.json",
                                                                            "model.safetensors.index.json")]
    assert not [r for r in seen if r.path.startswith("/storage/")]  # the redirect to storage is not followed


def test_no_index_and_no_single_file_is_a_note(server, cache):
    result = fetch(server, "zc-test/no-weights", cache)
    assert result.safetensors_total_size is None and result.safetensors_file_size is None
    assert any("unknown without downloading weights" in n for n in result.notes)
    assert result.published_dtype_note.startswith("published in bfloat16")


def test_malformed_index_is_a_note_and_the_config_still_counts(server, cache):
    result = fetch(server, "zc-test/bad-index", cache)
    assert result.config == json.loads(LLAMA_CONFIG) and result.safetensors_total_size is None
    assert any("not valid JSON" in n for n in result.notes)


def test_a_token_opens_a_gated_model_from_the_field_or_hf_token(server, cache, monkeypatch):
    assert fetch(server, "zc-test/gated", cache, token=f"  {GOOD_TOKEN}\n").config == json.loads(LLAMA_CONFIG)
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    mark = server.mark()
    assert fetch(server, "zc-test/gated", cache / "2").safetensors_total_size == LLAMA_TOTAL_SIZE
    assert {r.authorization for r in server.since(mark)} == {f"Bearer {GOOD_TOKEN}"}


FAILURES = [  # (repo, extra arguments, field, words the message must hold)
    ("zc-test/gated", {}, "hub", [GATED, "HF_TOKEN"]),
    ("zc-test/gated", {"token": SECRET}, "hub", [GATED, "the token given has no access"]),
    ("zc-test/private", {}, "hub", ["shows no model 'zc-test/private'", GATED]),
    ("zc-test/missing", {}, "hub", ["has no model 'zc-test/missing'"]),
    ("zc-test/no-config", {}, "hub", ["zc-test/no-config has none at main"]),
    ("zc-test/ok", {"revision": "no-such-branch"}, "revision", ["has no revision 'no-such-branch'"]),
    ("zc-test/stalled", {"timeout_s": TIMEOUT}, "hub", ["no answer from {url} within 0.5 s"]),
    ("zc-test/malformed", {}, "hub", ["config.json is malformed JSON", "JSONDecodeError"]),
    ("zc-test/huge", {}, "hub", ["announces 50,000,000 bytes", "refused before reading it"]),
    ("zc-test/huge-unannounced", {}, "hub", ["sent more than 1,000,000 bytes", "partial file deleted"]),
    ("zc-test/not-a-hub", {}, "hub", ["without the X-Repo-Commit"]),
    ("zc-test/unavailable", {}, "hub", ["answered HTTP 503"]),
    ("zc-test/ok", {"token": BAD_TOKEN}, "token", ["refused the token sent as invalid or expired"]),
]


@pytest.mark.parametrize("repo,extra,field,words", FAILURES, ids=[f"{f[0]}-{f[2]}-{i}" for i, f in enumerate(FAILURES)])
def test_failures_get_a_clear_message(server, cache, repo, extra, field, words):
    started = time.monotonic()
    error = fetch_error(server, repo, cache, **extra)
    elapsed = time.monotonic() - started
    assert isinstance(error, FieldError) and error.field == field
    for word in words:
        assert word.format(url=server.url) in str(error)
    if field == "token":
        assert error.value == "(hidden)"
    if "timeout_s" in extra:
        assert elapsed < STALL_S, "the timeout did not cut the stalled answer short"
    assert elapsed < 10


def test_a_50_mb_answer_is_never_read_whole(server, cache):
    sent_before = server.sent.get("zc-test/huge-unannounced", 0)
    mark = server.mark()
    fetch_error(server, "zc-test/huge", cache)  # announced: refused after the HEAD, no GET at all
    assert [r.method for r in server.since(mark)] == ["HEAD"]
    fetch_error(server, "zc-test/huge-unannounced", cache)  # not announced: the stream is cut
    deadline = time.monotonic() + 10
    while server.sent.get("zc-test/huge-unannounced", 0) == sent_before and time.monotonic() < deadline:
        time.sleep(0.01)  # the server counts once its write fails on the closed connection
    assert 0 < server.sent["zc-test/huge-unannounced"] - sent_before < 0.8 * HUGE
    leftovers = [p for p in cache.rglob("*") if p.is_file() and "blobs" in p.parts]
    assert leftovers == []  # neither the partial download nor a blob stays in the cache


def test_a_download_that_stalls_past_the_timeout(server, cache):
    started = time.monotonic()
    error = fetch_error(server, "zc-test/stalled-body", cache, timeout_s=TIMEOUT)
    assert time.monotonic() - started < 1.9  # the GET stalls 2 s; the caller is answered at the deadline
    assert f"no answer from {server.url} within 0.5 s for config.json" in str(error)
    wait_for_abandoned_downloads()  # the abandoned worker ends on its own (here: once the stall ends)


def test_no_server_listening(blocked, cache):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(HubError) as caught:
        fetch_config("zc-test/ok", endpoint=f"http://127.0.0.1:{port}", cache_dir=cache, timeout_s=2)
    assert f"cannot connect to http://127.0.0.1:{port}" in str(caught.value)


# ---------------------------------------------------------------------------------------------- offline

def test_offline_serves_the_cache_and_refuses_what_it_lacks(server, cache, monkeypatch):
    fetch(server, "zc-test/ok", cache)
    fetch(server, "zc-test/single-file", cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mark = server.mark()
    cached = fetch(server, "zc-test/ok", cache)
    assert cached.config == json.loads(LLAMA_CONFIG) and cached.safetensors_total_size == LLAMA_TOTAL_SIZE
    assert cached.commit == COMMIT and any("HF_HUB_OFFLINE is set" in n for n in cached.notes)
    single = fetch(server, "zc-test/single-file", cache)
    assert single.safetensors_file_size is None and any("(as cached)" in n for n in single.notes)
    error = fetch_error(server, "zc-test/no-weights", cache)
    assert "HF_HUB_OFFLINE is set" in str(error) and "not in the cache" in str(error)
    assert fetch_error(server, "zc-test/ok", cache, revision="v1.0").field == "hub"  # never fetched at v1.0
    assert server.since(mark) == []


SUBPROCESS_SCRIPT = GUARD_SOURCE + '''
import json, sys
from zerocalc.model.hub import HubError, fetch_config
out = []
for repo in sys.argv[1:]:
    try:
        r = fetch_config(repo, timeout_s=5)
        out.append({"repo": repo, "total": r.safetensors_total_size, "commit": r.commit, "notes": r.notes})
    except HubError as exc:
        out.append({"repo": repo, "error": str(exc)})
print(json.dumps(out))
'''


def run_with_env(repos, **env):
    full = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY") and not k.startswith("HF_")
            and k not in ("HUGGING_FACE_HUB_TOKEN", "TRANSFORMERS_OFFLINE")}
    full.pop("HF_HUB_DISABLE_TELEMETRY", None)  # zerocalc.model.hub's own default is under test
    full.pop("DISABLE_TELEMETRY", None)
    full.update(env, NO_PROXY="127.0.0.1,localhost", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", SUBPROCESS_SCRIPT, *repos], env=full, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return {entry["repo"]: entry for entry in json.loads(done.stdout.strip().splitlines()[-1])}


def test_hf_endpoint_hf_home_and_hf_hub_offline_as_a_user_sets_them(server, tmp_path):
    home = str(tmp_path / "hf-home")
    mark = server.mark()
    online = run_with_env(["zc-test/ok"], HF_ENDPOINT=server.url, HF_HOME=home)
    assert online["zc-test/ok"]["total"] == LLAMA_TOTAL_SIZE and online["zc-test/ok"]["commit"] == COMMIT
    seen = server.since(mark)
    assert any(r.repo == "zc-test/ok" for r in seen)
    assert not [r for r in seen if r.repo is None]  # no telemetry (GET /api/agent-harnesses) to HF_ENDPOINT
    assert list(Path(home, "hub").glob("models--zc-test--ok/snapshots/*/config.json"))  # HF_HOME's cache

    mark = server.mark()
    offline = run_with_env(["zc-test/ok", "zc-test/no-weights"], HF_ENDPOINT=server.url, HF_HOME=home,
                           HF_HUB_OFFLINE="1")
    assert offline["zc-test/ok"]["total"] == LLAMA_TOTAL_SIZE
    assert "HF_HUB_OFFLINE is set" in offline["zc-test/no-weights"]["error"]
    assert server.since(mark) == []


# ---------------------------------------------------------------------------------------------- the token

def leak_places(error: BaseException) -> list:
    return [str(error), repr(error), repr(error.args), repr(getattr(error, "value", None)),
            str(getattr(error, "allowed", ""))]


def test_the_token_is_in_no_message_repr_or_log_line(server, tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    for name in ("huggingface_hub", "zerocalc", "httpx2", "httpcore2"):
        caplog.set_level(logging.DEBUG, logger=name)
    mark = server.mark()
    errors = []
    cases = [(repo, {**extra, "token": SECRET}) for repo, extra, field, _ in FAILURES if field != "token"
             and "token" not in extra]
    cases += [("zc-test/ok", {"token": BAD_TOKEN}), ("zc-test/stalled-body", {"token": SECRET, "timeout_s": TIMEOUT}),
              ("bad id/" + SECRET, {"token": SECRET}), ("zc-test/ok", {"token": SECRET, "revision": "a b"}),
              ("zc-test/ok", {"token": SECRET + "\n" + SECRET}), ("zc-test/ok", {"token": SECRET, "timeout_s": -1})]
    for n, (repo, kwargs) in enumerate(cases):
        with pytest.raises(FieldError) as caught:
            fetch_config(repo, endpoint=server.url, cache_dir=tmp_path / str(n), **kwargs)
        errors.append(caught.value)
    wait_for_abandoned_downloads()
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(HubError) as caught:
        fetch_config("zc-test/ok", token=SECRET, endpoint=closed, cache_dir=tmp_path / "closed", timeout_s=2)
    errors.append(caught.value)
    with monkeypatch.context() as mp:  # a surprise inside the adapter, its text holding the token
        mp.setattr(zhub._Fetch, "run", lambda self: (_ for _ in ()).throw(RuntimeError(f"boom {SECRET}")))
        errors.append(fetch_error(server, "zc-test/ok", tmp_path / "surprise", token=SECRET))
        assert "unexpected RuntimeError" in str(errors[-1])
    monkeypatch.setenv("HF_TOKEN", SECRET)  # the environment's token: the same rules
    for n, repo in enumerate(["zc-test/gated", "zc-test/malformed", "zc-test/huge", "zc-test/unavailable"]):
        errors.append(fetch_error(server, repo, tmp_path / f"env{n}"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    errors.append(fetch_error(server, "zc-test/ok", tmp_path / "offline", token=SECRET))

    assert {r.authorization for r in server.since(mark) if r.authorization} >= {f"Bearer {SECRET}"}  # it was sent
    for error in errors:
        for place in leak_places(error):
            assert SECRET not in place and BAD_TOKEN not in place, place
        assert error.__context__ is None and error.__cause__ is None  # no chain back to a request and its headers
    logged = "\n".join(caplog.text.splitlines() + [r.getMessage() for r in caplog.records])
    assert logged and SECRET not in logged and BAD_TOKEN not in logged
    monkeypatch.delenv("HF_HUB_OFFLINE")
    result = fetch(server, "zc-test/gated", tmp_path / "good", token=GOOD_TOKEN)
    assert GOOD_TOKEN not in repr(result) and GOOD_TOKEN not in json.dumps(dataclasses.asdict(result))


# ---------------------------------------------------------------------------------------------- validation

ID_CHARS = "abcXYZ019_.-"
NASTY_IDS = ["", " ", "org/name ", " org/name", "org /name", "org/na me", "org\n/name", "org/name\n", "org\t/x",
             "https://huggingface.co/org/name", "huggingface.co/org/name", "hf.co/org/name", "org/name?rev=x",
             "org/name#x", "org/name/extra", "datasets/org/name", "/org/name", "org/name/", "org//name", "../name",
             "org/..", "org/../name", "org/-name", "org/name-", ".org/name", "org./name", "org/name.git", "org--x/y",
             "org/x..y", "org", "name", "a" * 97 + "/b", "a/" + "b" * 97, "org/na%2Fme", "org\\name", "C:\\org\\name",
             "org/café", "org/名前", "org/\u202ename", "org/\x00name", "~/org/name", "org/name:main",
             "org/name@main", "org/na*me", "hf_abcdefgh12345/x/y"]
VALID_IDS = ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-0.6B", "a/b", "_/_", "0/0", "a" * 96 + "/" + "b" * 96,
             "deepseek-ai/DeepSeek-V3", "mistralai/Mixtral-8x7B-v0.1", "org/name.gitx", "o-r.g_/n.a-m_e"]


def hf_accepts(text: str) -> bool:
    try:
        hf_validate_repo_id(text)
    except HFValidationError:
        return False
    return True


@pytest.mark.parametrize("text", NASTY_IDS)
def test_nasty_ids_are_refused_before_any_request(server, cache, text):
    mark = server.mark()
    error = fetch_error(server, text, cache)
    assert error.field == "hub" and "ORG/NAME" in error.allowed
    assert server.since(mark) == []


@pytest.mark.parametrize("text", VALID_IDS)
def test_valid_ids(text):
    assert validate_repo_id(text) == text and hf_accepts(text)


def test_a_link_gets_a_hint_and_a_token_typed_as_an_id_is_not_echoed():
    with pytest.raises(HubError) as caught:
        validate_repo_id("https://huggingface.co/meta-llama/Llama-3.1-8B")
    assert "give ORG/NAME" in str(caught.value)
    with pytest.raises(HubError) as caught:
        validate_repo_id(SECRET)
    assert SECRET not in str(caught.value)


ids = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=ID_CHARS + "/ ?#:%\\\n\t~@é", max_size=30),
    st.builds(lambda a, b: f"{a}/{b}", st.text(alphabet=ID_CHARS, max_size=100), st.text(alphabet=ID_CHARS,
                                                                                            max_size=100)),
)
PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@PROPERTY
@given(ids)
def test_id_rules_mirror_huggingface_hub(text):
    try:
        validate_repo_id(text)
        ours = True
    except HubError as exc:
        assert exc.field == "hub"
        ours = False
    assert ours == (hf_accepts(text) and text.count("/") == 1), text  # the Hub's rules, with ORG/ required


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.text(max_size=40), st.text(alphabet=ID_CHARS + "/ ?#:%\\\n", max_size=30)))
def test_random_ids_reach_the_network_only_when_valid(server, tmp_path, text):
    mark = server.mark()
    try:
        validate_repo_id(text)
        valid = True
    except HubError:
        valid = False
    try:
        fetch_config(text, endpoint=server.url, cache_dir=tmp_path, timeout_s=5)
    except HubError as exc:
        assert exc.field == "hub"
    seen = server.since(mark)
    if valid:
        assert seen and {r.repo for r in seen} == {text}
    else:
        assert seen == []


NASTY_REVISIONS = ["../main", "/main", "main/", "a//b", "a b", " main", "main\n", "ma\x00in", "a\\b", "a?b", "a#b",
                   "%2e%2e", "a:b", "@{-1}", "a..b", ".hidden", "-x", "x.lock", "x.", "refs/pr/../1", "a~1", "a^",
                   "a*", "[a]", "x" * 256, "é"]
VALID_REVISIONS = ["main", "v1.0", "refs/pr/1", COMMIT, "release-2024.1", "feature/x_y", "v2+build", "_x"]


@pytest.mark.parametrize("text", NASTY_REVISIONS)
def test_nasty_revisions_are_refused_before_any_request(server, cache, text):
    mark = server.mark()
    error = fetch_error(server, "zc-test/ok", cache, revision=text)
    assert error.field == "revision" and "branch, tag" in error.allowed
    assert server.since(mark) == []


def test_valid_revisions():
    assert [validate_revision(r) for r in VALID_REVISIONS] == VALID_REVISIONS
    assert validate_revision(None) == validate_revision("") == "main"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.text(alphabet="ab/._-+ \\?#%:~^\n", max_size=20)))
def test_valid_revisions_are_never_path_like(text):
    try:
        value = validate_revision(text)
    except HubError as exc:
        assert exc.field == "revision"
        return
    assert value == (text or "main")
    assert ".." not in value and not value.startswith(("/", ".", "-")) and not value.endswith("/")
    assert "//" not in value and value.isascii() and value.isprintable() and " " not in value
    assert not set(value) & set("\\?#%:~^@{}[]*")


def test_token_validation_never_echoes_the_token():
    assert validate_token(None) is None and validate_token("  ") is None
    assert validate_token(f" {GOOD_TOKEN}\n") == GOOD_TOKEN
    for bad in [f"{SECRET} {SECRET}", SECRET + "\x00", SECRET + "é", "x" * 1025, 12345]:
        with pytest.raises(HubError) as caught:
            validate_token(bad)
        assert caught.value.field == "token" and caught.value.value == "(hidden)"
        assert SECRET not in str(caught.value)


# ---------------------------------------------------------------------------------------------- the module itself

def test_the_guard_refuses_the_internet(blocked):
    before = len(blocked)
    with pytest.raises(OSError):
        socket.create_connection(("192.0.2.1", 443), timeout=0.5)  # TEST-NET-1: refused by the guard, not sent
    with pytest.raises(OSError):
        socket.getaddrinfo("huggingface.co", 443)
    del blocked[before:]  # these two were the guard's own test


def test_without_huggingface_hub_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes `import huggingface_hub` raise ImportError
    with pytest.raises(HubError) as caught:
        fetch_config("meta-llama/Llama-3.1-8B")
    assert caught.value.field == "hub" and "pip install huggingface_hub" in str(caught.value)
    assert validate_repo_id("meta-llama/Llama-3.1-8B")  # validation needs only the standard library


def test_importing_zerocalc_hub_does_not_import_huggingface_hub():
    code = "import sys, zerocalc.model.hub; assert 'huggingface_hub' not in sys.modules and 'httpx2' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_source_never_trusts_remote_code_nor_imports_transformers():
    tree = ast.parse(Path(zhub.__file__).read_text())
    keywords = {k.arg for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords}
    assert "trust_remote_code" not in keywords
    top_level = {a.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for a in node.names}
    top_level |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    everywhere = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    everywhere |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert not top_level & {"huggingface_hub", "httpx2"}  # only inside functions
    assert "transformers" not in everywhere
    assert everywhere - set(sys.stdlib_module_names) - {"huggingface_hub", "httpx2"} == set()
    downloads = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in
                 ("snapshot_download", "hf_hub_download")]
    assert {d.attr for d in downloads} == {"hf_hub_download"}  # one file at a time, never a snapshot


# ---------------------------------------------------------------------------------------------- the CLI

def run_cli(args, **env):
    full = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY") and not k.startswith("HF_")
            and k not in ("HUGGING_FACE_HUB_TOKEN", "TRANSFORMERS_OFFLINE")}
    full.update(env, NO_PROXY="127.0.0.1,localhost", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "zerocalc", *args], env=full, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_the_cli_counts_a_hub_model_and_shows_its_published_size(server, tmp_path):
    done = run_cli(["--hub", "zc-test/ok", "--json"], HF_ENDPOINT=server.url, HF_HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["architecture"]["params"] == 8_030_261_248 and out["hub"]["repo_id"] == "zc-test/ok"
    assert out["hub"]["safetensors_total_size"] == LLAMA_TOTAL_SIZE == 2 * out["architecture"]["params"]
    text = run_cli(["--hub", "zc-test/ok"], HF_ENDPOINT=server.url, HF_HOME=str(tmp_path)).stdout
    assert "From the Hub: zc-test/ok" in text and "safetensors index" in text


@pytest.mark.parametrize("args, words", [
    (["--hub", "https://huggingface.co/meta-llama/Llama-3.1-8B"], "--hub: got"),
    (["--hub", "zc-test/gated"], "gated"),
    (["--hub", "zc-test/ok", "--model", "gpt2"], "each name a model"),
    (["--revision", "main", "--model", "gpt2"], "--revision needs --hub"),
])
def test_the_cli_refuses_hub_problems_in_one_line(server, tmp_path, args, words):
    done = run_cli(args, HF_ENDPOINT=server.url, HF_HOME=str(tmp_path))
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr
