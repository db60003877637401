"""Sweeps (zerocalc.answers.sweep): every point is the plan the page shows once that value is typed in (the link's
state with the value set, resolved as the page resolves it), and the edge is the solver's exact answer: the value
fits, the next one allowed does not (for workers: the value fits, one fewer does not). The page draws it (AppTest)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app_helpers import core_report, dataframe_with, figure, run_app
from ui.state.convert import from_query, resolve
from zerocalc.answers.sweep import AXES, MAX_POINTS, axes_for, sweep, sweep_sentence
from zerocalc.scenario import FieldError

QUERY_NAMES = {"seq_len": "seq_len", "micro_batch": "micro_batch", "workers": "workers", "lora_rank": "lora_rank"}
PLANS = st.sampled_from([
    {"model": "llama-3-8b", "workers": "8"},
    {"model": "qwen2.5-0.5b", "gpu": "L4-24GB", "seq_len": "4096"},
    {"model": "llama-3-70b", "workers": "8", "tp": "8", "pp": "2", "micro_batches": "8"},
    {"model": "llama-3-8b", "tp": "2", "cp": "2", "sequence_parallel": "true", "attention": "flash",
     "seq_len": "8192"},
    {"model": "llama-3-8b", "finetune": "lora", "workers": "1", "gpu": "L4-24GB"},
    {"model": "mistral-7b", "finetune": "qlora", "workers": "1", "gpu": "L4-24GB", "lora_rank": "64"},
])


def _sweep(query, field):
    r = resolve(from_query(query)[0])
    return r, sweep(r.scenario, r.workload, field, r.state["stage"])


def _peaks(query, field, value):
    return core_report(dict(query, **{QUERY_NAMES[field]: str(value)}))["peak"]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(PLANS, st.sampled_from(list(AXES)))
def test_each_point_is_the_plan_with_that_value_and_the_edge_is_exact(query, field):
    r = resolve(from_query(query)[0])
    if field not in axes_for(r.workload):
        with pytest.raises(FieldError):
            sweep(r.scenario, r.workload, field, 3)
        return
    r, result = _sweep(query, field)
    values = [p["value"] for p in result["points"]]
    assert values == sorted(set(values)) and result["current"] in values
    assert all(v % result["step"] == 0 for v in values)
    assert len(values) <= MAX_POINTS + 1 + 2 * 4          # the doubling grid, the plan's value, each edge and beyond
    for point in result["points"][:: max(1, len(values) // 4)]:        # a spread of points, each the whole plan
        page = _peaks(query, field, point["value"])
        assert point["peak_bytes"] == [p["peak_bytes"] for p in page]
        assert point["fits"] == [p["fits"] for p in page]
    for stage in range(4):
        edge = result["edge"][str(stage)]
        if edge is None:
            continue
        assert _peaks(query, field, edge)[stage]["fits"]
        beyond = edge + result["step"] if AXES[field].grows else edge - 1
        if 1 <= beyond <= AXES[field].limit:
            assert not _peaks(query, field, beyond)[stage]["fits"]
            assert beyond in values                   # the chart crosses the capacity where the solver says


def test_the_layout_decides_the_sequence_step():
    # cp 2 with tp 2 and sequence parallelism: 2 x cp divides the sequence, and tp the sequence per context rank
    _, result = _sweep({"model": "llama-3-8b", "tp": "2", "cp": "2", "sequence_parallel": "true",
                        "attention": "flash", "seq_len": "8192"}, "seq_len")
    assert result["step"] == 4


def test_the_lora_rank_is_swept_only_where_adapters_train():
    full = resolve(from_query({"model": "gpt2"})[0])
    assert "lora_rank" not in axes_for(full.workload)
    lora = resolve(from_query({"model": "gpt2", "finetune": "lora"})[0])
    assert axes_for(lora.workload) == ("seq_len", "micro_batch", "lora_rank", "workers")
    with pytest.raises(FieldError):
        sweep(lora.scenario, lora.workload, "heads", 3)
    with pytest.raises(FieldError):
        sweep(lora.scenario, lora.workload, "seq_len", 4)


def test_sentences_say_where_it_stops():
    base = {"field": "seq_len", "label": "sequence length (tokens)", "stage": 3, "step": 1,
            "edge_kind": "last that fits"}
    assert sweep_sentence(dict(base, edge={"3": 7444})) == \
        "ZeRO-3 fits up to sequence length 7,444; at 7,445 it does not."
    assert "does not fit even at the smallest sequence length (1)" in sweep_sentence(dict(base, edge={"3": None}))
    workers = dict(base, field="workers", label="data-parallel workers", edge_kind="first that fits")
    assert sweep_sentence(dict(workers, edge={"3": 13})) == \
        "ZeRO-3 fits from 13 data-parallel workers on (fewer do not)."


def test_the_page_draws_the_sweep_and_the_terms_of_the_peak():
    query = {"model": "llama-3-8b", "workers": "8", "seq_len": "8192"}
    at = run_app(query, tab="Peak and step")
    fig = figure(at, "fig_sweep")
    _, result = _sweep(query, "seq_len")
    checked = fig["data"][3]
    assert checked["name"] == "ZeRO-3 (checked)" and checked["customdata"] == [p["peak_bytes"][3]
                                                                               for p in result["points"]]
    assert fig["layout"]["annotations"][0]["x"] == result["edge"]["3"]
    assert fig["layout"]["shapes"][0]["y0"] * 1e9 == pytest.approx(result["capacity_bytes"])
    assert any(f"fits up to sequence length {result['edge']['3']:,}" in c.value.replace("\\", "")
               for c in at.caption)
    assert any(f"longest sequence that fits: {result['edge']['3']:,} tokens" in m.value for m in at.markdown)
    terms = dataframe_with(at, "peak term")
    peak = core_report(query)["peak"][3]
    names = terms["peak term"].tolist()
    total = names.index("total: what nvidia-smi reads (the verdict's number)")
    assert names[total + 1:] == ["of which max_memory_reserved reads", "of which max_memory_allocated reads"]
    assert terms.iloc[total, -1] == f"{peak['peak_bytes']:,}"
    figures = peak["phase_figures"][peak["peak_phase"]]
    assert terms.iloc[total + 1, -1] == f"{figures['reserved_bytes']:,}"
    assert terms.iloc[total + 2, -1] == f"{figures['allocated_bytes']:,}"
    assert set(terms["peak term"][:total]) <= set(peak["phases"][peak["peak_phase"]]) | {
        n for ph in peak["phases"].values() for n in ph}
    at.segmented_control(key="sweep_axis").set_value("workers").run()
    assert not at.exception
    workers = figure(at, "fig_sweep")
    assert workers["layout"]["xaxis"]["title"]["text"] == "data-parallel workers"
    assert any("fits from" in c.value for c in at.caption)


def test_the_sweep_keeps_to_the_inputs_the_plan_has():
    at = run_app({"model": "gpt2", "finetune": "lora"}, tab="Peak and step", sections=["sec_finetune"])
    at.segmented_control(key="sweep_axis").set_value("lora_rank").run()
    assert figure(at, "fig_sweep")["layout"]["xaxis"]["title"]["text"] == "LoRA rank"
    at.selectbox(key="finetune").set_value("full").run()
    assert not at.exception
    assert at.session_state["sweep_axis"] == "seq_len"


def test_the_cli_sweeps_too():
    import json

    from zerocalc.cli.main import main, run
    query = {"model": "llama-3-8b", "workers": "8"}
    _, result = _sweep(query, "seq_len")
    out = json.loads(run(["--model", "llama-3-8b", "--workers", "8", "--sweep", "seq_len", "--json"]))
    assert out["sweep"] == result and out["solve"]["max_seq_len"]["3"] == result["edge"]["3"]
    text = run(["--model", "llama-3-8b", "--workers", "8", "--sweep", "seq_len"])
    assert sweep_sentence(result) in text and "(as set)" in text
    assert main(["--model", "gpt2", "--sweep", "lora_rank"]) == 2          # no adapters: named, one line
