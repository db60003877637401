"""Uploads through the page (AppTest), issue 38: the hostile inputs that replaced the page with Streamlit's error
("This app has encountered an error") are refused by name in a message and the view stays; an uploaded file's
name reaches every surface (messages, the stage table, its CSV) through ui/drawing/plain.py's filter, bidi overrides
marked; and a token typed into the Hub revision field is never sent, echoed or written to the cache."""

from pathlib import Path

import pytest

from tests.app_helpers import alerts, core_report, dataframe_with, open_tab, run_app
from tests.test_app_imports import fetch, hub_env, uploader  # noqa: F401  (hub_env: a fixture)
from tests.hub_server import blocked, server  # noqa: F401  (fixtures)
from ui.drawing import panels, tables

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HUGE = "9" * 5000
NAME = "\u202egpj.<b>x</b>[link](http://example.com).json"      # U+202E: RIGHT-TO-LEFT OVERRIDE

UPLOADS = [   # (uploader label, file name, bytes, the key the refusal names)
    ("verl / TRL", "run.sh", b"python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=x trainer.nnodes=1000000000\n",
     "trainer.n_gpus_per_node"),
    ("verl / TRL", "verl.yaml", b"actor_rollout_ref:\n  rollout:\n    n: 4\ntrainer:\n  n_gpus_per_node: 8.5\n",
     "trainer.n_gpus_per_node"),
    ("verl / TRL", "verl.yaml", b"actor_rollout_ref:\n  rollout:\n    dtype: [bfloat16]\n", "rollout.dtype"),
    ("verl / TRL", "openrlhf.sh", b"python3 -m openrlhf.cli.train_ppo_ray --zero_stage 2.0\n", "zero_stage"),
    ("verl / TRL", "grpo.yaml", f"num_generations: {HUGE}\n".encode(), "config"),
    ("Training config", "accelerate.yaml", f"distributed_type: MULTI_GPU\nnum_processes: {HUGE}\n".encode(),
     "config"),
    ("Training config", "train.toml", f"[training]\nlocal_batch_size = {HUGE}\n".encode(), "config"),
    ("Hugging Face config.json", "config.json", f'{{"model_type": "llama", "hidden_size": {HUGE}}}'.encode(),
     "config"),
]


@pytest.mark.parametrize("label, name, data, key", UPLOADS, ids=[f"{n}-{k}" for _, n, _, k in UPLOADS])
def test_hostile_uploads_are_refused_by_name_and_the_page_stays(label, name, data, key):
    at = run_app({"model": "gpt2"}, sections=["sec_load", "sec_rl"])
    uploader(at, label).upload(name, data, "application/octet-stream")
    at.run()
    assert not at.exception, at.exception                   # no error page
    error = " ".join(alerts(at, "error"))
    assert f"{key}" in error and "got " in error, error
    assert "4300" not in error and "Exceeds the limit" not in error
    if key == "config":                                      # said in words, never as if it were the file's text
        assert "got an integer of 5,000 digits" in error and "a string in quotes" not in error, error
    assert dict(at.query_params) == {"model": "gpt2"}       # the view is unchanged


def test_an_uploaded_file_name_is_marked_in_the_message_the_stage_table_and_its_csv():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    data = (FIXTURES / "frameworks" / "transformers_ds_config_zero2.json").read_bytes()
    uploader(at, "Training config").upload(NAME, data, "application/json")
    at.run()
    assert not at.exception, at.exception
    success = " ".join(alerts(at, "success"))
    assert "[U+202E]gpj." in success and "\u202e" not in success
    # alerts() strips tags before unescaping: markup that survives was escaped, so it is shown as the text it is
    assert "<b>x</b>[link](http://example.com)" in success
    open_tab(at, "Model states")
    plan = dataframe_with(at, "plan")
    cell = plan["plan"].tolist()[2]
    assert cell.startswith("◀ checked (from [U+202E]gpj.<b>x</b>") and "\u202e" not in cell
    assert "\u202e" not in panels._csv(plan).decode("utf-8")


def test_the_stage_table_marks_a_name_however_it_reached_the_session():
    # a session holding an unmarked name (from before the filter) still gets a marked cell and CSV
    report = core_report({"model": "gpt2"})
    df = tables.stage_table(report, "GB", 2, NAME)
    assert "[U+202E]" in df["plan"].tolist()[2] and "\u202e" not in panels._csv(df).decode("utf-8")


def test_a_refused_rl_upload_names_the_file_marked():
    at = run_app({"model": "gpt2"}, sections=["sec_rl"])
    uploader(at, "verl / TRL").upload(NAME, b"--zero_stage 2.0\n", "application/octet-stream")
    at.run()
    error = " ".join(alerts(at, "error"))
    assert "[U+202E]gpj." in error and "\u202e" not in error


TOKEN_LIKE = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3"


def test_a_token_typed_as_the_revision_is_not_echoed_or_stored(hub_env, tmp_path):  # noqa: F811
    at = run_app({"model": "gpt2"}, sections=["sec_load"])
    mark = hub_env.mark()
    fetch(at, "zc-test/ok", revision=TOKEN_LIKE)
    shown = " ".join(alerts(at, "error") + alerts(at, "success"))
    assert "revision" in shown and "access token" in shown and TOKEN_LIKE not in shown
    assert hub_env.since(mark) == []                         # never sent to the Hub
    cache = tmp_path / "hub-cache"
    assert not any(TOKEN_LIKE in str(p) for p in cache.rglob("*")) if cache.exists() else True
    assert dict(at.query_params) == {"model": "gpt2"}
