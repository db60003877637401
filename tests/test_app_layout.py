"""The app under a parallel layout (AppTest): controls, the per-rank chart and table against the core, the layouts
that fit, the layout in the link, and refusals that reset only the field at fault."""

import pytest

from ui.state.convert import from_query, resolve
from zerocalc.output.report import full_report
from tests.app_helpers import (
    all_tables,
    captions,
    core_report,
    dataframe_with,
    figure,
    open_sections,
    open_tab,
    run_app,
    text_of,
    traces,
    warnings_shown,
)

LAYOUT_LINK = {"model": "llama-3-70b", "workers": "4", "tp": "8", "pp": "2", "sequence_parallel": "true",
               "micro_batches": "8", "seq_len": "4096", "convention": "megatron"}


def test_a_layout_link_restores_the_controls_and_the_per_rank_view():
    at = run_app(LAYOUT_LINK)
    assert not warnings_shown(at), warnings_shown(at)
    open_sections(at, "sec_parallel")
    assert at.number_input(key="tp").value == 8 and at.number_input(key="pp").value == 2
    assert at.checkbox(key="sequence_parallel").value is True
    # 8 micro-batches is what pp 2 implies (zerocalc/defaults.py: 4 x pp), so the canonical link leaves it out
    assert dict(at.query_params) == {k: v for k, v in LAYOUT_LINK.items() if k != "micro_batches"}
    report = core_report(LAYOUT_LINK)
    assert report["layout"]["micro_batches"] == 8
    stage = at.button_group(key="stage").value
    caption = captions(at)
    assert "world 64 GPUs = dp 4 x tp 8 x pp 2 x cp 1" in caption
    assert f"Worst rank: {report['peak'][stage]['rank']}" in text_of(at)
    open_tab(at, "Layouts and ranks")
    ranks = traces(figure(at, "fig_ranks"))
    for i, r in enumerate(report["ranks"]):
        p = r["peak"][stage]
        assert sum(t["customdata"][i] for t in ranks.values()) == p["peak_bytes"]
    names = figure(at, "fig_ranks")["data"][0]["x"]
    assert any("(worst)" in n and report["peak"][stage]["rank"] in n for n in names)
    table = dataframe_with(at, "rank class")
    assert table["rank class"].tolist() == [r["name"] for r in report["ranks"]]


def test_the_layout_controls_change_the_link_and_the_numbers():
    at = run_app({"model": "llama-3-8b"}, sections=["sec_parallel", "sec_step"])
    at.number_input(key="tp").set_value(4).run()
    at.checkbox(key="sequence_parallel").check().run()
    at.number_input(key="pp").set_value(4).run()
    at.selectbox(key="schedule").set_value("interleaved").run()
    assert at.number_input(key="vpp").value == 2                      # the interleaved schedule needs vpp >= 2
    at.number_input(key="micro_batches").set_value(8).run()
    query = {"model": "llama-3-8b", "tp": "4", "pp": "4", "schedule": "interleaved", "vpp": "2",
             "sequence_parallel": "true", "micro_batches": "8"}
    assert dict(at.query_params) == query
    assert not at.exception and not warnings_shown(at)
    report = core_report(query)
    assert report["layout"]["world_size"] == 8 * 4 * 4
    open_tab(at, "Layouts and ranks")
    assert [r["name"] for r in report["ranks"]] == [r for r in dataframe_with(at, "rank class")["rank class"]]


def test_layouts_that_fit_are_searched_on_request_and_download_as_csv():
    query = {"model": "llama-3-70b", "workers": "64", "micro_batch": "2", "seq_len": "4096", "micro_batches": "8"}
    at = run_app(query, tab="Layouts and ranks")
    assert not any("dp x tp x pp x cp" in df.columns for df in all_tables(at))   # not computed until asked
    at.toggle(key="show_layouts").set_value(True).run()
    table = dataframe_with(at, "dp x tp x pp x cp")
    report = core_report(query)
    assert report["solve"]["max_micro_batch"] == {"0": 0, "1": 0, "2": 0, "3": 0}  # pure DP: nothing fits
    assert len(table) > 0
    assert "CSV: layouts" in [b.proto.label for b in at.get("download_button")]


@pytest.mark.parametrize("field, value, allowed", [
    ("tp", "3", "a divisor of heads, kv_heads and ffn"),
    ("pp", "81", "at most the layers"),
    ("cp", "3", "2 x cp dividing the sequence length"),
    ("vpp", "2", "1 unless the schedule is interleaved"),
])
def test_a_layout_the_model_refuses_resets_only_that_field(field, value, allowed):
    at = run_app({"model": "llama-3-70b", "workers": "16", field: value, "micro_batch": "2"})
    text = warnings_shown(at)
    assert field in text and allowed in text
    assert dict(at.query_params) == {"model": "llama-3-70b", "workers": "16", "micro_batch": "2"}


def test_the_interleaved_schedule_without_virtual_stages_falls_back_to_1f1b():
    at = run_app({"model": "llama-3-8b", "pp": "4", "schedule": "interleaved"})
    assert "schedule" in warnings_shown(at)
    assert dict(at.query_params) == {"model": "llama-3-8b", "pp": "4"}


def test_params_only_ignores_layout_fields_in_the_link():
    at = run_app({"model": "params-only", "tp": "8"})
    assert "tp" not in dict(at.query_params)


def test_the_layers_of_each_stage_are_typed_and_a_wrong_count_is_named_not_taken():
    """Uneven stages (issue 20): the counts travel in the link; a sum that is not the model's layers, or text that
    is not counts, gets a message naming the field and the last valid split stays."""
    at = open_sections(run_app({"model": "llama-3-8b", "pp": "2", "micro_batches": "4", "workers": "4"}),
                       "sec_parallel")
    assert at.text_input(key="stage_layers_text").value == ""                # the even split
    at.text_input(key="stage_layers_text").set_value("20, 12").run()
    assert dict(at.query_params)["stage_layers"] == "20,12"
    assert core_report(dict(at.query_params))["layout"]["stage_layers"] == [20, 12]
    at.text_input(key="stage_layers_text").set_value("20,x").run()
    assert not at.exception and "Layers of each stage (schedule order): stage_layers" in text_of(at)
    assert dict(at.query_params)["stage_layers"] == "20,12"
    at.text_input(key="stage_layers_text").set_value("20,13").run()          # 33 layers: refused, named
    assert not at.exception and "stage_layers" in text_of(at) and "stage_layers" not in dict(at.query_params)
    linked = open_sections(run_app({"model": "llama-3-8b", "pp": "2", "micro_batches": "4", "workers": "4",
                                    "stage_layers": "10,22"}), "sec_parallel")
    assert linked.text_input(key="stage_layers_text").value == "10,22"


def test_total_gpus_sets_the_data_parallel_workers():
    # "data-parallel workers 64 with tp 8 and pp 2 became 1,024 GPUs": the world size is an input of its own
    at = run_app({"model": "llama-3-70b", "workers": "4", "tp": "8", "pp": "2", "micro_batches": "8"})
    total = at.number_input(key="total_gpus")
    assert total.value == 64
    total.set_value(128).run()
    assert not at.exception
    assert at.number_input(key="workers").value == 8 and "workers" not in dict(at.query_params)   # the default
    assert at.number_input(key="total_gpus").value == 128
    at.number_input(key="total_gpus").set_value(100).run()          # 100 is no multiple of tp x pp = 16
    assert at.number_input(key="workers").value == 8
    shown = captions(at)
    assert "100 GPUs do not split into workers of tp x pp x cp = 16 GPUs" in shown and "multiple of 16" in shown
    assert at.number_input(key="total_gpus").value == 128


def test_a_layout_row_applies_and_the_page_then_shows_its_peak():
    # a 5 % reserve: every fitting plan is listed (under the allocator's model only the cheapest few, re-checked,
    # and the plan as set is not among them)
    link = {"model": "llama-3-70b", "workers": "8", "tp": "8", "sequence_parallel": "true",
            "fragmentation_percent": "5"}
    at = run_app(link, tab="Layouts and ranks")
    at.toggle(key="show_layouts").set_value(True).run()
    rows = dataframe_with(at, "as set")
    marked = rows.index[rows["as set"] == "◀ this plan"].tolist()
    assert len(marked) == 1 and rows.loc[marked[0], "stage"] == "ZeRO-3"
    at.selectbox(key="layout_pick").set_value(3).run()
    at.button(key="layout_apply").click().run()
    assert not at.exception
    applied = core_report({k: v for k, v in dict(at.query_params).items() if k != "view"})
    r = resolve(from_query(link)[0])
    plan = full_report(r.scenario, r.workload, layouts=True)["solve"]["layouts"][3]
    assert applied["peak"][plan["stage"]]["peak_bytes"] == plan["peak_bytes"]
    assert applied["layout"]["dp"] == plan["dp"] and applied["layout"]["cp"] == plan["cp"]
    assert dataframe_with(at, "as set")["as set"].tolist()[3] == "◀ this plan"
    assert applied["layout"]["world_size"] == 64


def test_without_model_parallelism_the_total_sits_in_the_parallelism_section():
    at = run_app({"model": "llama-3-8b", "workers": "8"})
    assert not [n for n in at.number_input if n.key == "total_gpus"]       # it would only repeat dp here
    open_sections(at, "sec_parallel")
    at.number_input(key="total_gpus").set_value(16).run()
    assert at.number_input(key="workers").value == 16


def test_a_world_beyond_the_browsers_integers_is_shown_not_edited():
    # tests/e2e/test_hostile.py's link: 1,048,576 workers x tp 1024 x pp 4096 x cp 4096 is 1.8e16 GPUs, past the
    # 2^53 - 1 a browser's number box holds (Streamlit refuses such a bound)
    at = run_app({"model": "custom", "layers": "4096", "hidden": "65536", "heads": "1024", "kv_heads": "1024",
                  "ffn": "65536", "workers": "1048576", "tp": "1024", "pp": "4096", "cp": "4096", "seq_len": "8192"},
                 tab="Peak and step")
    assert not [n for n in at.number_input if n.key == "total_gpus"]
    assert "Total GPUs: 18,014,398,509,481,984 = dp x tp x pp x cp" in captions(at)
