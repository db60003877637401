"""The RL view and its sidebar section (ui/views/rl.py, ui/sidebar/rl.py, ui/state/rl.py) with AppTest: the page's plan
is the policy, the chart and tables draw the core's RL report (zerocalc/rl/report.py) for the same link, the link
carries the RL settings, and a bad one falls back with a warning naming it."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app_helpers import (answer_text, dataframe_with, figure, open_sections, run_app, traces, verdict_html,
                               warnings_shown)
from ui.state.rl import from_query, settings_of
from ui.state.convert import from_query as state_from_query, resolve
from zerocalc.rl.build import build_plan
from zerocalc.rl.report import rl_report

QUERY = {"model": "qwen2.5-0.5b", "workers": "8", "view": "rl", "rl.reference": "same", "rl.critic": "same",
         "rl.algorithm": "ppo", "rl.gpu_memory_utilization": "0.6", "rl.rollout_tp": "2"}


def core(query: dict) -> dict:
    page = {k: [v] for k, v in query.items() if not k.startswith("rl.") and k != "view"}
    state, _ = state_from_query(page)
    resolved = resolve(state)
    values, _ = from_query({k[3:]: [v] for k, v in query.items() if k.startswith("rl.")})
    return rl_report(build_plan(resolved.scenario, resolved.workload, settings_of(values, resolved.state["stage"])))


def test_the_view_draws_the_cores_rl_report():
    at = run_app(QUERY)
    report = core(QUERY)
    fig = figure(at, "fig_rl_timeline")
    bars = traces(fig)
    assert fig["layout"]["shapes"][0]["y0"] == pytest.approx(report["capacity_bytes"] / 1e9)   # the dashed line, GB
    for i, phase in enumerate(report["phases"]):
        total = sum(t["customdata"][i] for t in bars.values())
        assert total == phase["total_bytes"], phase["name"]
    phases = dataframe_with(at, "largest resident")
    assert phases["phase"].tolist() == [p["name"] for p in report["phases"]]
    text = " ".join(m.value for m in at.markdown)
    assert f"{report['engine']['kv_tokens']:,} tokens" in text
    assert f"{report['solve']['max_response_length']:,} tokens" in text


def test_the_link_carries_the_rl_settings_and_refuses_bad_ones():
    at = run_app({**QUERY, "rl.group_size": "lots", "rl.nonsense": "1"})
    shown = warnings_shown(at)
    assert "rl.group_size='lots'" in shown and "rl.nonsense is not an RL setting" in shown
    params = dict(at.query_params)
    assert params["rl.algorithm"] == "ppo" and params["rl.critic"] == "same" and "rl.group_size" not in params
    assert params["rl.gpu_memory_utilization"] == "0.6"


def test_the_sidebar_section_changes_the_plan():
    at = run_app(QUERY)
    open_sections(at, "sec_rl")
    at.number_input(key="rl_group_size").set_value(4).run()
    at.selectbox(key="rl_engine").set_value("sglang").run()
    assert not at.exception
    params = dict(at.query_params)
    assert params["rl.group_size"] == "4" and params["rl.engine"] == "sglang"
    report = core(params)
    assert report["engine"]["engine"] == "SGLang" and report["group_size"] == 4
    assert dataframe_with(at, "largest resident")["peak"].tolist()[-1].split()[0] == \
        f"{report['phases'][-1]['total_bytes'] / 1e9:.2f}"


def test_a_refused_plan_says_which_setting():
    at = run_app({"model": "qwen2.5-0.5b", "view": "rl", "rl.algorithm": "ppo"})      # PPO without a critic
    assert any("Critic" in i.value or "critic" in i.value for i in at.info)
    at = run_app({"model": "params-only", "params": "7B", "view": "rl"})
    assert any("architecture" in i.value for i in at.info)


def test_the_timeline_is_valid_plotly_in_both_unit_systems():
    import plotly.graph_objects as go
    from ui.views.rl import timeline
    report = core(QUERY)
    for unit in ("GB", "GiB"):
        go.Figure(timeline(report, unit).to_dict())       # full validation: raises on any ill-typed property


def test_the_link_carries_the_batching_and_the_band():
    query = {**QUERY, "rl.packing": "no", "rl.logprob_micro_batch": "4", "rl.typical_response_length": "300",
             "rl.typical_prompt_length": "100", "rl.logprobs": "verl-eager-entropy", "rl.mini_batch": "16",
             "rl.fsdp_version": "1"}
    at = run_app(query)
    assert not at.exception and not warnings_shown(at)
    report = core(query)
    policy = next(m for m in report["models"] if m["role"] == "policy")
    assert policy["scoring_pass"]["micro_batch"] == 4 and policy["scoring_pass"]["scoring_end"] == \
        "verl, entropy (eager)"
    assert report["verdict"]["band"]["typical"]["length_tokens"] == 400
    text = " ".join(m.value for m in at.markdown)
    assert report["verdict"]["decided_by"] in answer_text(at) and "With typical sequences (400 tokens)" in text
    params = dict(at.query_params)
    assert params["rl.packing"] == "no" and params["rl.logprob_micro_batch"] == "4"
    assert params["rl.mini_batch"] == "16" and params["rl.fsdp_version"] == "1"


def test_engine_fields_left_at_zero_say_the_values_in_use():
    """Issue 33: the RL fields showed gpu_memory_utilization 0.00 and engine TP 0 while verl used 0.5 and TP 2."""
    from tests.app_helpers import captions, run_app
    at = run_app({"model": "qwen2.5-7b"}, sections=["sec_rl"])
    assert "In use: gpu_memory_utilization 0.5 (verl's), engine TP 2 (verl's)." in captions(at)
    at.selectbox(key="rl_framework").set_value("trl").run()
    assert "In use: gpu_memory_utilization 0.3 (TRL's), engine TP 1 (TRL's)." in captions(at)
    at.number_input(key="rl_gpu_memory_utilization").set_value(0.6).run()
    assert "gpu_memory_utilization 0.6," in captions(at)


def test_with_the_rl_view_open_the_pages_answer_is_the_rl_plan():
    """Issue 33: "RL on the page is one plan. With RL on, the cards are the RL phases and the fixes are RL fixes."
    The verdict block reads the core's RL verdict (one card per GPU class at its worst phase), and the ZeRO
    stages' fixes give way to the RL solvers' answers; another view shows the stages again."""
    import re

    at = run_app(QUERY)
    report = core(QUERY)
    body = verdict_html(at)
    cards = re.findall(r'data-gpu="([^"]+)" data-fits="(true|false)"', body)
    assert cards == [(c["gpu"], str(c["fits"] and not report["verdict"]["engine_refused"]).lower())
                     for c in report["verdict"]["gpu_classes"]]
    said = answer_text(at)
    assert ("the rl plan fits" in said.lower()) == report["verdict"]["fits"] and "PPO" in said
    for c in report["verdict"]["gpu_classes"]:
        assert c["worst_phase"] in body
    assert not [b for b in at.button if b.key and b.key.startswith("fix_apply")]     # no ZeRO-stage fixes
    tight = {**QUERY, "gpu": "L4-24GB", "model": "qwen2.5-7b"}
    assert not core(tight)["verdict"]["fits"]
    red = run_app(tight)
    assert "What would make the RL plan fit" in " ".join(m.value for m in red.markdown)
    at.session_state["tab"] = "Overview"
    at.run()
    assert 'data-stage="' in verdict_html(at)                   # another view: the ZeRO stages' cards again


RL_PLANS = st.fixed_dictionaries({
    "model": st.sampled_from(["qwen2.5-0.5b", "qwen2.5-7b", "llama-3.2-1b"]),
    "gpu": st.sampled_from(["H100-SXM-80GB", "L4-24GB", "A100-40GB"]),
    "algorithm": st.sampled_from(["grpo", "ppo"]),
    "reference": st.sampled_from(["none", "same"]),
    "response_length": st.sampled_from(["512", "4096"]),
})


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(RL_PLANS)
def test_the_rl_cli_and_the_pages_rl_cards_give_one_verdict(plan):
    """Issue 33's property over RL plans: `python -m zerocalc rl --json` and the page's cards with the RL view open
    give the same verdict and the same peak per GPU class."""
    import json

    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.cli.rl import run as rl_run

    critic = ["--critic", "same"] if plan["algorithm"] == "ppo" else []
    argv = ["--model", plan["model"], "--gpus", "8", "--gpu", plan["gpu"], "--algorithm", plan["algorithm"],
            "--reference", plan["reference"], "--response-length", plan["response_length"], *critic, "--json"]
    cli = json.loads(rl_run(argv, lambda rest: _inputs(build_parser().parse_args(rest))))["verdict"]
    query = {"model": plan["model"], "workers": "8", "gpu": plan["gpu"], "view": "rl",
             "rl.algorithm": plan["algorithm"], "rl.reference": plan["reference"],
             "rl.response_length": plan["response_length"], **({"rl.critic": "same"} if critic else {})}
    at = run_app(query)
    import re
    cards = re.findall(r'data-gpu="([^"]+)" data-fits="(true|false)"', verdict_html(at))
    assert cards == [(c["gpu"], str(c["fits"] and not cli["engine_refused"]).lower()) for c in cli["gpu_classes"]]
    assert core(query)["verdict"] == cli
