"""Loading into the app (AppTest): a config.json upload (good, malformed, mistyped), a Hub model id against the
local Hub server of tests/hub_server.py (the token never leaves the session), and framework configs in and out."""

import json
import logging
import re
from pathlib import Path

import pytest

from tests.app_helpers import alerts, core_report, dataframe_with, open_tab, run_app, text_of
from zerocalc.frameworks import import_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}


def uploader(at, label_start):
    return next(u for u in at.get("file_uploader") if u.proto.label.startswith(label_start))


def messages(at, kind):
    return " ".join([re.sub(r"\\(.)", r"\1", e.value) for e in getattr(at, kind)] + alerts(at, kind))


def upload_config(at, name, data):
    uploader(at, "Hugging Face config.json").upload(name, data, "application/json")
    at.run()
    assert not at.exception, at.exception
    return at


def test_a_good_config_sets_the_architecture_and_says_what_was_loaded():
    at = run_app(sections=["sec_load"])
    upload_config(at, "config.json", json.dumps(GPT2).encode())
    assert at.selectbox(key="model").value == "custom"
    success = messages(at, "success")
    assert "Loaded config.json: gpt2, 124,439,808 parameters, 12 layers." in success
    assert dict(at.query_params)["model"] == "custom"
    assert core_report(dict(at.query_params))["params"] == 124_439_808


def test_a_moe_config_keeps_its_experts_in_the_view_and_the_link():
    config = (FIXTURES / "model_configs" / "qwen3-30b-a3b.json")
    if not config.exists():
        config = next((FIXTURES / "model_configs").glob("*mixtral*.json"), None) or \
            next((FIXTURES / "model_configs").glob("*moe*.json"))
    at = run_app(sections=["sec_load"])
    upload_config(at, config.name, config.read_bytes())
    query = dict(at.query_params)
    assert query["model"] == "custom" and int(query["experts"]) > 1
    report = core_report(query)
    assert report["architecture"]["expert_params"] > 0
    assert "active per token" in messages(at, "success")


def test_a_malformed_config_is_refused_names_the_model_still_shown_and_clears_the_file():
    at = run_app({"model": "llama-3-8b"}, sections=["sec_load"])
    upload_config(at, "bad.json", b"{not json")
    error = messages(at, "error")
    assert "bad.json refused: config:" in error and "valid JSON" in error
    assert "Still showing llama-3-8b (8,030,261,248 parameters, 32 layers)" in error
    assert at.selectbox(key="model").value == "llama-3-8b"
    assert dict(at.query_params) == {"model": "llama-3-8b"}
    assert uploader(at, "Hugging Face config.json").proto.id != ""           # a fresh, empty uploader
    assert at.session_state["config_upload_n"] == 1


def test_a_mistyped_config_says_what_type_was_given():
    bad = dict(GPT2, n_embd="768")
    at = run_app(sections=["sec_load"])
    upload_config(at, "typo.json", json.dumps(bad).encode())
    error = messages(at, "error")
    assert "n_embd: got the text '768' (a string in quotes: write it without quotes)" in error
    assert at.selectbox(key="model").value == "llama-2-7b"


# --- the Hub ----------------------------------------------------------------------------------------------------

hub = pytest.importorskip("tests.hub_server")
from tests.hub_server import BAD_TOKEN, GOOD_TOKEN, SECRET, blocked, server  # noqa: E402,F401  (fixtures)


@pytest.fixture
def hub_env(server, tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROCALC_HUB_ENDPOINT", server.url)
    monkeypatch.setenv("ZEROCALC_HUB_CACHE", str(tmp_path / "hub-cache"))
    return server


def fetch(at, repo, token=None, revision=None):
    at.text_input(key="hub_id").set_value(repo)
    if token is not None:
        at.text_input(key="hub_token").set_value(token)
    if revision is not None:
        at.text_input(key="hub_revision").set_value(revision)
    at.button(key="hub_fetch").click().run()
    assert not at.exception, at.exception
    return at


def test_a_hub_model_sets_the_architecture_and_shows_the_published_size(hub_env):
    at = run_app(sections=["sec_load"])
    fetch(at, "zc-test/ok")
    success = messages(at, "success")
    assert "Fetched zc-test/ok@main" in success and "8,030,261,248 parameters, 32 layers" in success
    assert at.selectbox(key="model").value == "custom"
    details = text_of(at)
    assert "Published safetensors: 16,060,522,496 bytes of tensors; ours: 8,030,261,248 parameters." in details
    assert core_report(dict(at.query_params))["params"] == 8_030_261_248


def test_a_hub_failure_keeps_the_last_good_state(hub_env):
    at = run_app({"model": "gpt2"}, sections=["sec_load"])
    for repo, words in (("zc-test/missing", "has no model"), ("zc-test/malformed", "config"),
                        ("not a valid id", "ORG/NAME")):
        fetch(at, repo)
        error = messages(at, "error")
        assert "Hub model refused" in error and "Still showing gpt2" in error, error
        assert words.lower() in error.lower(), (repo, error)
        assert dict(at.query_params) == {"model": "gpt2"}


def test_the_token_opens_a_gated_model_and_lives_only_in_the_session(hub_env, caplog):
    at = run_app({"model": "gpt2"}, sections=["sec_load"])
    caplog.set_level(logging.DEBUG)
    mark = hub_env.mark()
    fetch(at, "zc-test/gated", token=SECRET)            # a valid token without access: refused
    assert "Hub model refused" in messages(at, "error")
    fetch(at, "zc-test/gated", token=GOOD_TOKEN)
    assert "Fetched zc-test/gated@main" in messages(at, "success")
    assert any(r.authorization and GOOD_TOKEN in r.authorization for r in hub_env.since(mark))
    for token in (SECRET, GOOD_TOKEN):
        assert all(token not in str(v) for v in dict(at.query_params).values())
        assert all(token not in k for k in dict(at.query_params))
        shown = " ".join(str(e.value) for kind in ("markdown", "caption", "success", "error", "warning", "info")
                         for e in getattr(at, kind))
        assert token not in shown
        assert token not in " ".join(h.proto.body for h in at.get("html"))
        assert token not in " ".join(r.getMessage() for r in caplog.records)
        assert token not in json.dumps(core_report(dict(at.query_params)))      # the JSON report's content
    open_tab(at, "How to read it")
    for button in at.get("download_button"):
        assert GOOD_TOKEN not in str(button.proto)
    assert at.session_state["hub_token"] == GOOD_TOKEN   # kept for this session only
    fetch(at, "zc-test/gated", token=BAD_TOKEN)
    error = messages(at, "error")
    assert BAD_TOKEN not in error and "Still showing" in error


def test_the_servers_hf_token_never_serves_a_visitor_unless_the_operator_opts_in(hub_env, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)           # the host's own token, with access to the gated model
    at = run_app({"model": "gpt2"}, sections=["sec_load"])
    mark = hub_env.mark()
    fetch(at, "zc-test/gated")                          # the visitor typed no token
    assert "Hub model refused" in messages(at, "error") and "gated" in messages(at, "error")
    sent = hub_env.since(mark)
    assert sent and all(r.authorization is None for r in sent)      # no Bearer at all reached the Hub
    monkeypatch.setenv("ZEROCALC_HUB_SERVER_TOKEN", "1")             # the operator opts in, by name
    mark = hub_env.mark()
    fetch(at, "zc-test/gated")
    assert "Fetched zc-test/gated@main" in messages(at, "success")
    assert any(r.authorization == f"Bearer {GOOD_TOKEN}" for r in hub_env.since(mark))


def test_a_config_fetched_with_a_visitors_token_is_not_served_to_another_visitor(hub_env, monkeypatch):
    from tests.hub_server import COMMIT
    first = run_app({"model": "gpt2"}, sections=["sec_load"])
    fetch(first, "zc-test/gated", token=GOOD_TOKEN, revision=COMMIT)
    assert "Fetched zc-test/gated" in messages(first, "success")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")           # the cache alone answers now: no Hub to refuse a request
    for token in (None, SECRET):                         # another session without a token, or with another one
        other = run_app({"model": "gpt2"}, sections=["sec_load"])
        fetch(other, "zc-test/gated", token=token, revision=COMMIT)
        assert "Hub model refused" in messages(other, "error") and "not in the cache" in messages(other, "error")
        assert other.selectbox(key="model").value == "gpt2"
    again = run_app({"model": "gpt2"}, sections=["sec_load"])              # the same token: its own cache serves it
    fetch(again, "zc-test/gated", token=GOOD_TOKEN, revision=COMMIT)
    assert "Fetched zc-test/gated" in messages(again, "success")


# --- framework configs ------------------------------------------------------------------------------------------

def upload_framework(at, path):
    uploader(at, "Training config").upload(path.name, path.read_bytes(), "application/octet-stream")
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("name, stage", [("transformers_ds_config_zero2.json", 2),
                                         ("llamafactory_ds_z3_config.json", 3),
                                         ("accelerate_fsdp.yaml", 3), ("torchtitan_llama3_8b.toml", 3)])
def test_a_framework_config_sets_the_view_and_marks_its_stage(name, stage):
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, FIXTURES / "frameworks" / name)
    success = messages(at, "success")
    assert f"Imported {name}" in success and f"ZeRO-{stage} selected" in success
    assert at.button_group(key="stage").value == stage
    details = text_of(at)
    assert "Set:" in details
    imported = import_config({"json": "deepspeed", "yaml": "accelerate", "toml": "torchtitan"}[name.rsplit(".", 1)[1]],
                             (FIXTURES / "frameworks" / name).read_bytes(),
                             {"hidden_size": 4096, "micro_batch": 1, "workers": 8, "precision": "fp16"})
    for item in imported.ignored_keys[:3]:
        assert item["key"] in details
    open_tab(at, "Model states")
    plan = dataframe_with(at, "plan")
    assert plan["plan"].tolist()[stage] == f"◀ checked (from {name})"


def test_a_refused_framework_config_keeps_the_view_and_clears_the_file(tmp_path):
    at = run_app({"model": "llama-3-8b", "workers": "8", "micro_batch": "2"}, sections=["sec_load"])
    before = dict(at.query_params)
    bad = tmp_path / "ds_config.json"
    bad.write_text('{"zero_optimization": {"stage": 2,}\n}')
    upload_framework(at, bad)
    error = messages(at, "error")
    assert "ds_config.json refused" in error and "line 1, column" in error and "still showing llama-3-8b" in error
    assert dict(at.query_params) == before
    assert at.session_state["framework_upload_n"] == 1
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"fp16": {"enabled": True}, "bf16": {"enabled": True}}))
    upload_framework(at, both)
    assert "refused" in messages(at, "error") and dict(at.query_params) == before


def test_the_view_exports_as_each_framework_and_imports_back():
    query = {"model": "llama-3-8b", "workers": "16", "stage": "2", "micro_batch": "2", "offload_optimizer": "cpu"}
    at = run_app(query, tab="Framework configs")
    buttons = {b.proto.label: b for b in at.get("download_button")}
    assert {"Download ds_config.json", "Download accelerate_fsdp.yaml", "Download torchtitan.toml"} <= set(buttons)
    code = {c.language: c.value for c in at.code}
    ds = json.loads(code["json"])
    assert ds["zero_optimization"]["stage"] == 2 and ds["train_micro_batch_size_per_gpu"] == 2
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    back = import_config("deepspeed", code["json"], {"hidden_size": 4096, "workers": 16})
    assert back.selected_stage == 2 and back.scenario["offload_optimizer"] == "cpu"
    assert import_config("accelerate", code["yaml"]).selected_stage == 2


def test_a_torchtitan_layer_frequency_sets_one_block_in_n_and_a_full_mode_resets_it(tmp_path):
    # torchtitan activation_checkpoint.py _apply_layer_sac: selective_ac_option "2" checkpoints blocks 2, 4, ...;
    # mode "full" checkpoints every block, so a later import of it must not keep the earlier N.
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    layer = tmp_path / "layer_sac.toml"
    layer.write_text('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n')
    upload_framework(at, layer)
    values = at.session_state["_values"]                  # every field's value, drawn or not (widgets.VALUES)
    assert values["recompute"] == "full" and values["recompute_every"] == 2
    assert at.query_params["recompute_every"] == "2"
    full = tmp_path / "full.toml"
    full.write_text('[activation_checkpoint]\nmode = "full"\n')
    upload_framework(at, full)
    values = at.session_state["_values"]
    assert values["recompute"] == "full" and values["recompute_every"] == 1
    assert "recompute_every" not in at.query_params


def test_the_export_tab_writes_over_the_uploaded_file_as_the_cli_does(tmp_path):
    """Issue 35: "Keys an import read but zerocalc does not model pass through to the export unchanged", on the page
    as with the CLI's --export after --ds-config (frameworks/base_file.py serves both): the same text."""
    from zerocalc.cli.main import run

    source = FIXTURES / "frameworks" / "llamafactory_ds_z3_config.json"
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, source)
    open_tab(at, "Framework configs")                # its three configs are drawn while their section is open
    page = json.loads(next(c.value for c in at.code if c.language == "json"))
    stage = at.session_state["_values"]["stage"]
    cli = json.loads(run(["--model", "llama-3-8b", "--workers", "8", "--ds-config", str(source), "--export",
                          "deepspeed", "--export-stage", str(stage)]))
    assert page == cli
    original = json.loads(source.read_text())
    assert page["train_micro_batch_size_per_gpu"] == original["train_micro_batch_size_per_gpu"] == "auto"
    assert page["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] == \
        original["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]      # not modelled: passed
    assert any("written over the imported" in h.proto.body for h in at.get("html"))
