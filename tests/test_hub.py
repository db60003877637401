"""zerocalc.model.hub against the fake Hub of tests/hub_server.py: configs and published sizes, revisions,
gated models, failures and their messages, size caps and stalls, offline use and the environment a user sets, and
the token in no message, repr or log line.
"""

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hub_server import blocked, cache, server  # noqa: F401  (fixtures)
from tests.hub_server import (
    BAD_TOKEN,
    COMMIT,
    GOOD_TOKEN,
    GUARD_SOURCE,
    HUGE,
    LLAMA_CONFIG,
    LLAMA_TOTAL_SIZE,
    PR_COMMIT,
    QWEN_CONFIG,
    QWEN_SINGLE_FILE,
    ROOT,
    SECRET,
    STALL_S,
    TIMEOUT,
    fetch,
    fetch_error,
    wait_for_abandoned_downloads,
)
from zerocalc.model.hf_config import architecture_from_config
from zerocalc.model.hub import fetch as zhub
from zerocalc.model.hub.failures import GATED
from zerocalc.model.hub.fetch import fetch_config
from zerocalc.model.hub.ids import HubConfig, HubError
from zerocalc.scenario import FieldError

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
from zerocalc.model.hub.fetch import fetch_config
from zerocalc.model.hub.ids import HubError
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


# ------------------------------------------------------------------- a token typed as the revision (issue 38)

TOKEN_LIKE = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3"


@pytest.mark.parametrize("revision", [TOKEN_LIKE, "refs/pr/" + TOKEN_LIKE, "Xk9fQ2mZ7pL4sV8nR1tW6yB3cH5jD0gA"])
def test_a_revision_that_looks_like_a_token_is_never_sent_shown_or_stored(server, tmp_path, revision):
    mark = server.mark()
    error = fetch_error(server, "zc-test/ok", tmp_path, revision=revision)
    assert error.field == "revision" and "access token" in error.allowed
    assert revision not in str(error) and revision not in repr(error.value)
    assert server.since(mark) == []                          # refused before any request: not in a URL either
    stored = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")]
    assert not any(revision.split("/")[-1] in p for p in stored), stored    # no refs/<revision> cache file


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", COMMIT, "release_candidate_for_the_big_model"])
def test_revisions_written_in_words_or_as_a_commit_do_not_look_like_tokens(revision):
    from zerocalc.model.hub.ids import looks_like_token, validate_revision
    assert not looks_like_token(revision) and validate_revision(revision) == revision


@pytest.mark.parametrize("total, expected", [("16", 16), ("16.0", 16), ('"16"', None), ("true", None), ("NaN", None),
                                             ("1e300", None), ("-1", None), ("10000000000000001", None)])
def test_the_published_total_size_is_an_integer_read_by_the_typed_reader(total, expected):
    from zerocalc.model.hub.published import index_total
    assert index_total(f'{{"metadata": {{"total_size": {total}}}}}'.encode()) == expected


def test_a_published_total_size_of_5000_digits_is_said_in_words():
    from zerocalc.model.hub.published import index_total
    with pytest.raises(ValueError) as err:
        index_total(b'{"metadata": {"total_size": ' + b"9" * 5000 + b"}}")
    assert type(err.value) is ValueError and str(err.value) == "an integer of 5,000 digits"
