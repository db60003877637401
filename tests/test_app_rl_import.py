"""Loading an RL framework's config in the app (ui/imports/rl.py): the RL section's uploader reads verl's run script,
TRL's GRPOConfig and OpenRLHF's flags as the CLI's --verl-config / --trl-config / --openrlhf-args do (zerocalc/rl/
configs): the plan's settings become the RL fields, the policy's flags the page's fields, and the RL view then
shows the very report `python -m zerocalc rl` gives for that file; a refusal names the key and changes nothing."""

import json
from pathlib import Path

from tests.app_helpers import alerts, run_app
from tests.test_app_imports import uploader
from tests.test_app_rl import core
from zerocalc.cli.main import _inputs, build_parser
from zerocalc.cli.rl import run as rl_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rl"


def upload(at, name, data):
    uploader(at, "verl / TRL / OpenRLHF config").upload(name, data, "application/octet-stream")
    at.run()
    assert not at.exception, at.exception
    return at


def test_a_verl_script_sets_the_rl_plan_and_the_policy_as_the_cli_reads_it():
    at = run_app({"model": "llama-3-8b"}, sections=["sec_rl"])
    upload(at, "verl_run_qwen2-7b.sh", (FIXTURES / "verl_run_qwen2-7b.sh").read_bytes())
    success = " ".join(alerts(at, "success"))
    assert "Imported verl_run_qwen2-7b.sh (verl (YAML or run script))" in success
    assert "Ignored data.train_files" in " ".join(alerts(at, "info"))          # the details, as text
    query = {**dict(at.query_params), "view": "rl"}
    assert query["model"] == "qwen2.5-7b" and "rl.response_length" not in query          # 1,024: the default
    assert query["rl.group_size"] == "5" and query["rl.gpu_memory_utilization"] == "0.6"
    page = core(query)
    cli = json.loads(rl_cli(["--verl-config", str(FIXTURES / "verl_run_qwen2-7b.sh"), "--json"],
                            lambda rest: _inputs(build_parser().parse_args(rest))))     # as `zerocalc rl` runs
    assert [p["total_bytes"] for p in page["phases"]] == [p["total_bytes"] for p in cli["phases"]]


def test_each_format_is_guessed_and_read():
    for name, model in (("openr1_qwen2.5-1.5b_grpo_config_demo.yaml", None),
                        ("openrlhf_train_grpo_ray_hybrid_engine.sh", None)):
        at = run_app({"model": "llama-3-8b"}, sections=["sec_rl"])
        upload(at, name, (FIXTURES / name).read_bytes())
        assert f"Imported {name}" in " ".join(alerts(at, "success")), alerts(at, "error")


def test_a_refused_file_names_its_key_and_changes_nothing():
    at = run_app({"model": "llama-3-8b"}, sections=["sec_rl"])
    before = dict(at.query_params)
    upload(at, "bad.sh", b"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=nonsense")
    error = " ".join(alerts(at, "error"))
    assert "bad.sh refused" in error and "algorithm.adv_estimator" in error and "still showing llama-3-8b" in error
    assert dict(at.query_params) == before


def test_markup_in_the_file_name_and_its_keys_stays_text():
    from tests.test_app_payloads import PAYLOADS, assert_text_only
    for payload in (PAYLOADS[0], PAYLOADS[7], PAYLOADS[12]):
        at = run_app({"model": "llama-3-8b"}, sections=["sec_rl"])
        key = "actor_rollout_ref.x" + "".join(c if c.isalnum() else "_" for c in payload)[:20]
        text = f"python3 -m verl.trainer.main_ppo {key}=1 trainer.project_name='{payload}'"
        upload(at, payload[:40].replace("/", "_") + ".sh", text.encode())
        assert_text_only(at, "evil") if "evil" in payload else assert_text_only(at, payload[:12])
