"""What a visitor may type for the Hub (ids, revisions, tokens) is checked as huggingface_hub checks it, before any
request; the module itself (no internet, no huggingface_hub at import, no remote code); and the CLI's --hub.
"""

import ast
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hub_server import blocked, cache, server  # noqa: F401  (fixtures)
from tests.hub_server import (
    COMMIT,
    GOOD_TOKEN,
    LLAMA_TOTAL_SIZE,
    ROOT,
    SECRET,
    HFValidationError,
    fetch_error,
    hf_validate_repo_id,
)
from zerocalc.model.hub import fetch as zhub
from zerocalc.model.hub.fetch import fetch_config
from zerocalc.model.hub.ids import HubError, validate_repo_id, validate_revision, validate_token

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
    code = ("import sys, zerocalc.model.hub.fetch; "
            "assert 'huggingface_hub' not in sys.modules and 'httpx2' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_source_never_trusts_remote_code_nor_imports_transformers():
    trees = [ast.parse(p.read_text()) for p in Path(zhub.__file__).parent.glob("*.py")]
    tree = ast.Module(body=[n for t in trees for n in t.body], type_ignores=[])
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
