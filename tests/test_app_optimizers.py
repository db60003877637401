"""The shaped optimizers in the app (issue 23): the Precision section shows the options the chosen optimizer reads,
they reach the link and the core, and the ledger says which tensors keep each state."""

from tests.app_helpers import core_report, run_app, table, warnings_shown
from ui.state.convert import from_query, to_query


def test_precision_shows_muons_options_and_they_reach_the_link_and_the_core():
    at = run_app({"optimizer": "muon"}, sections=["sec_precision"])
    keys = {w.key for w in at.selectbox}
    assert {"fallback_optimizer", "ns_dtype", "muon_tp"} <= keys and "optimizer_rank" not in {
        w.key for w in at.number_input}
    at.selectbox(key="ns_dtype").set_value("fp32").run()
    at.selectbox(key="fallback_optimizer").set_value("lion").run()
    assert dict(at.query_params) == {"optimizer": "muon", "ns_dtype": "fp32", "fallback_optimizer": "lion"}
    report = core_report(dict(at.query_params))
    assert report["scenario"]["ns_dtype"] == "fp32" and report["scenario"]["fallback_optimizer"] == "lion"
    step = report["peak"][0]["phases"]["optimizer_step"]
    assert any(k.startswith("Newton-Schulz") and k.endswith("(fp32)") for k in step)


def test_galore_shows_its_rank_and_adam_shows_no_option():
    at = run_app({"optimizer": "galore-adamw", "optimizer_rank": "64"}, sections=["sec_precision"])
    assert at.number_input(key="optimizer_rank").value == 64
    plain = run_app(sections=["sec_precision"])
    assert not {"fallback_optimizer", "ns_dtype", "muon_tp"} & {w.key for w in plain.selectbox}


def test_the_ledger_view_says_which_tensors_keep_each_state():
    at = run_app({"optimizer": "muon"}, tab="Model states")
    ledger = table(at, "ledger_table")
    kept = dict(zip(ledger["entry"], ledger["kept by"]))
    assert kept["momentum_buffer"].startswith("Muon's matrices") and kept["exp_avg"].startswith("the fallback")
    assert kept["parameters"] == "every tensor"
    assert kept["total"] == ""                  # the total row has no holders (not a "None" cell)


def test_a_link_with_optimizer_options_round_trips():
    state, warnings = from_query({"optimizer": "muon", "muon_tp": "local", "optimizer_rank": "7"})
    assert warnings == [] and state["muon_tp"] == "local" and state["optimizer_rank"] == 7
    assert from_query(to_query(state))[0] == state
    bad, warnings = from_query({"muon_tp": "half"})
    assert bad["muon_tp"] == "full" and any("muon_tp" in w for w in warnings)


def test_an_optimizer_that_cannot_step_the_model_falls_back_with_a_warning():
    # adam-mini 1.1.1 raises on fused 3-D experts (tests/test_optimizers_measured.py): the link's optimizer is
    # refused by name and the default used, the rest of the view kept.
    at = run_app({"model": "mixtral-8x7b", "optimizer": "adam-mini"})
    shown = warnings_shown(at)
    assert "optimizer: 'adam-mini' is not allowed here" in shown and "experts.gate_up_proj" in shown
    assert core_report({"model": "mixtral-8x7b"})["scenario"]["optimizer"] == "adam"


def test_adams_step_implementation_is_a_page_field_that_reaches_the_link_and_the_core():
    """Issue 31: Adam / AdamW show "Adam step implementation"; its link key is optimizer_impl and the core names
    the term it sets (a for-loop's denom of the largest tensor)."""
    at = run_app({"optimizer": "adamw"}, sections=["sec_precision"])
    assert at.selectbox(key="optimizer_impl").value == "auto"
    at.selectbox(key="optimizer_impl").set_value("for-loop").run()
    assert dict(at.query_params) == {"optimizer": "adamw", "optimizer_impl": "for-loop"}
    report = core_report(dict(at.query_params))
    assert report["optimizer_impl"]["implementation"] == "for-loop"
    assert any(k.startswith("AdamW for-loop") for k in report["peak"][0]["phases"]["optimizer_step"])
    bad, warnings = from_query({"optimizer_impl": "cuda"})
    assert bad["optimizer_impl"] == "auto" and any("optimizer_impl" in w for w in warnings)
