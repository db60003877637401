"""The Streamlit app through AppTest: the verdict first, every view, the figures' numbers against the core, the
fixes, the solvers and ranges.
"""

import re

import pytest

from tests.app_helpers import (
    ISSUE_13,
    TABS,
    answer_text,
    assert_overview_matches_core,
    captions,
    core_report,
    dataframe_with,
    figure,
    has_figure,
    header_text,
    open_tab,
    run_app,
    states,
    subtotals,
    table,
    text_of,
    traces,
    verdict_cards,
)
from ui.state.convert import from_query, resolve
from zerocalc.gpus import GPU_CATALOG
from zerocalc.answers.fixes import apply as apply_fix
from zerocalc.answers.fixes import fixes as core_fixes
from zerocalc.parallel.ranks import layout_report
from zerocalc.units import format_bytes


def test_default_view_leads_with_the_verdict_and_matches_the_core():
    at = run_app()
    report = core_report({})
    assert_overview_matches_core(at, report)
    assert subtotals(at) == ["107.81 GB", "37.06 GB", "25.27 GB", "13.48 GB"]
    assert "does it fit" in header_text(at) and "ZeRO-1, ZeRO-2 and ZeRO-3 fit; ZeRO-0 does not" in text_of(at)
    assert len(at.get("plotly_chart")) == 1                                # the overview: one chart
    assert dict(at.query_params) == {}
    cards = verdict_cards(at)
    assert all("of which model states" in text for _, _, text in cards)    # labelled as a part of the peak


def test_negative_headroom_reads_as_over_and_the_html_marks_it_red():
    at = run_app(ISSUE_13)
    cards = verdict_cards(at)
    assert [f for _, f, _ in cards] == [False] * 4
    body = next(h.proto.body for h in at.get("html") if "zc-verdict" in h.proto.body)
    assert body.count('class="zc-neg"') == 4 and 'class="zc-pos"' not in body
    assert ".zc-neg { color: #b91c1c" in body and "zc-nofit" in body and "zc-checked" in body


def test_what_would_make_it_fit_lists_full_recompute_under_the_capacity():
    at = run_app(ISSUE_13)
    text = text_of(at)
    assert "What would make ZeRO-2 fit" in text
    line = next(line for m in at.markdown for line in m.value.splitlines() if "Full recompute" in line)
    line = re.sub(r"\\(.)", r"\1", line)
    assert "micro-batch 1" in line and "Held: ZeRO-2, sequence 4,096, 8 data-parallel workers" in line
    peak = re.search(r"peak ([0-9.]+) GB, ([0-9.]+)% of ([0-9.]+) GB", line)
    assert float(peak.group(1)) < float(peak.group(3)) and float(peak.group(2)) < 100
    # every listed change, applied through the app's own button, fits
    resolved = resolve(from_query(ISSUE_13)[0])
    listed = core_fixes(resolved.scenario, resolved.workload, 2, layouts=True)
    assert listed
    for i, fix in enumerate(listed[:6]):
        s, w = apply_fix(fix, resolved.scenario, resolved.workload)
        assert layout_report(s, w).peaks[fix.stage].fits
        again = run_app(ISSUE_13)
        again.selectbox(key="fix_pick").set_value(i).run()        # one picker and one Apply (issue 36)
        again.button(key="fix_apply").click().run()
        assert not again.exception
        shown = core_report(dict(again.query_params))
        stage = int(dict(again.query_params).get("stage", 3))
        assert shown["peak"][stage]["fits"], (fix.kind, dict(again.query_params))
        assert shown["peak"][stage]["peak_bytes"] == fix.peak_bytes


@pytest.mark.parametrize("tab", TABS)
def test_every_tab_renders_without_an_exception(tab):
    at = run_app({"model": "llama-3-8b", "workers": "16"}, tab=tab)
    if tab != "Overview":
        assert not has_figure(at, "fig_overview")            # lazy: the overview does not run in another tab
    at2 = run_app({"model": "params-only", "params": "7B"}, tab=tab)
    assert not at2.exception


def test_tabs_draw_their_charts_and_tables_against_the_core():
    query = {"model": "llama-3-8b", "workers": "16", "stage": "2"}
    report = core_report(query)
    at = run_app(query, tab="Model states")
    cluster = traces(figure(at, "fig_cluster"))
    assert cluster["redundant"]["customdata"] == [s["cluster_redundant_bytes"] for s in report["stages"]]
    assert cluster["one copy"]["customdata"] == [s["cluster_unique_bytes"] for s in report["stages"]]
    stages = table(at, "stage_table")
    assert stages["plan"].tolist()[2].startswith("◀ checked")
    assert stages["redundant share"].tolist()[0] == "94%"            # 16 copies: 15 of 16 redundant
    assert traces(figure(at, "fig_scaling"))["ZeRO-3"]["customdata"] == report["scaling"]["stage_3"]
    open_tab(at, "Peak and step")
    timeline = traces(figure(at, "fig_timeline"))
    assert at.radio(key="timeline_stage").value == 2                  # defaults to the stage being checked
    totals = [sum(t["customdata"][i] for t in timeline.values()) for i in range(3)]
    assert totals == list(report["peak"][2]["phase_totals"].values())
    at.radio(key="timeline_stage").set_value(0).run()
    timeline = traces(figure(at, "fig_timeline"))
    assert [sum(t["customdata"][i] for t in timeline.values()) for i in range(3)] == \
        list(report["peak"][0]["phase_totals"].values())


def test_the_ledger_has_a_total_row_and_its_own_stage_picker():
    query = {"stage": "1", "master_dtype": "none"}
    at = run_app(query, tab="Model states")
    report = core_report(query)
    ledger = table(at, "ledger_table")
    assert ledger["entry"].tolist()[-1] == "total"
    assert ledger["bytes/param"].tolist()[-1] == f"{report['bytes_per_param']:g}" == "12"
    assert ledger.iloc[-1]["ZeRO-1 per worker"] == f"{format_bytes(report['stages'][1]['per_worker_total_bytes'], 'GB')}"
    at.radio(key="ledger_stage").set_value(3).run()
    assert table(at, "ledger_table").iloc[-1]["ZeRO-3 per worker"] == \
        format_bytes(report["stages"][3]["per_worker_total_bytes"], "GB")


def test_the_caption_follows_the_ledger_not_the_convention():
    at = run_app({"master_dtype": "none"})
    caption = captions(at)
    assert "convention zero-paper, modified" in caption and "= 12 bytes per parameter" in caption
    assert "16 bytes per parameter" not in caption
    at = run_app()
    caption = captions(at)
    assert "convention zero-paper:" in caption and "= 16 bytes per parameter" in caption


def test_workers_change_the_sharded_numbers_and_the_link():
    at = run_app()
    at.number_input(key="workers").set_value(64).run()
    assert dict(at.query_params) == {"workers": "64"}
    report = core_report({"workers": "64"})
    assert_overview_matches_core(at, report)
    assert subtotals(at)[0] == "107.81 GB"             # stage 0 is not sharded
    assert subtotals(at)[3] != "13.48 GB"


def test_a_dtype_change_moves_exactly_the_category_that_uses_it():
    at = run_app(sections=["sec_precision"])
    before = {t["name"]: t for t in states(at)}
    at.selectbox(key="grad_dtype").set_value("fp32").run()
    after = {t["name"]: t for t in states(at)}
    assert after["gradients"]["customdata"] == [2 * v for v in before["gradients"]["customdata"]]
    assert after["parameters"]["customdata"] == before["parameters"]["customdata"]
    assert after["optimizer"]["customdata"] == before["optimizer"]["customdata"]
    assert dict(at.query_params) == {"grad_dtype": "fp32"}


def test_convention_resets_the_dtypes_and_units_relabel():
    at = run_app(sections=["sec_precision", "sec_display"])
    at.selectbox(key="convention").set_value("megatron").run()
    assert at.selectbox(key="param_dtype").value == "bf16" and at.selectbox(key="grad_dtype").value == "fp32"
    at.button_group(key="units").set_value("GiB").run()
    assert_overview_matches_core(at, core_report({"convention": "megatron", "units": "GiB"}), unit="GiB")
    open_tab(at, "Model states")
    assert "per worker (GiB)" in table(at, "stage_table").columns


def test_micro_batch_is_a_number_input_and_sequence_steps_through_powers_of_two():
    at = run_app()
    assert at.number_input(key="micro_batch").value == 1
    at.number_input(key="micro_batch").set_value(4).run()
    seq = at.number_input(key="seq_len")
    assert seq.value == 2048
    seq.increment().run()
    assert at.number_input(key="seq_len").value == 4096
    at.number_input(key="seq_len").increment().run()
    assert at.number_input(key="seq_len").value == 8192
    at.number_input(key="seq_len").decrement().run()
    at.number_input(key="seq_len").decrement().run()
    assert at.number_input(key="seq_len").value == 2048
    at.number_input(key="seq_len").set_value(3000).run()            # any value can be typed
    assert at.number_input(key="seq_len").value == 3000
    at.number_input(key="seq_len").decrement().run()
    assert at.number_input(key="seq_len").value == 2048
    assert dict(at.query_params) == {"micro_batch": "4"}


def test_step_controls_change_activations_but_not_model_states():
    at = run_app(sections=["sec_step"])
    states_before = {t["name"]: t for t in states(at)}["optimizer"]["customdata"]
    at.number_input(key="micro_batch").set_value(4).run()
    at.number_input(key="seq_len").set_value(4096).run()
    at.button_group(key="attention").set_value("eager").run()
    at.button_group(key="recompute").set_value("full").run()
    query = {"micro_batch": "4", "seq_len": "4096", "attention": "eager", "recompute": "full"}
    assert dict(at.query_params) == query
    assert {t["name"]: t for t in states(at)}["optimizer"]["customdata"] == states_before
    report = core_report(query)
    assert report["peak"][3]["peak_bytes"] != core_report({})["peak"][3]["peak_bytes"]
    assert_overview_matches_core(at, report)


def test_one_block_in_n_recompute_sits_under_full_recompute_and_reaches_the_link():
    at = run_app({"model": "llama-3-8b"}, sections=["sec_step"])
    assert "recompute_every" not in [w.key for w in at.number_input]          # only with full recompute
    at.button_group(key="recompute").set_value("full").run()
    at.number_input(key="recompute_every").set_value(2).run()
    query = {"model": "llama-3-8b", "recompute": "full", "recompute_every": "2"}
    assert dict(at.query_params) == query
    report = core_report(query)
    # torchtitan's layer SAC with "2": blocks 2, 4, ..., 32 keep only their input (activation_checkpoint.py)
    assert report["ranks"][0]["activation_bytes"] < core_report({"model": "llama-3-8b"})["ranks"][0][
        "activation_bytes"]
    assert_overview_matches_core(at, report)
    at.button_group(key="recompute").set_value("none").run()
    assert dict(at.query_params) == {"model": "llama-3-8b"}                  # idle without full recompute


def test_gpu_choice_moves_the_capacity_and_the_verdicts():
    at = run_app()
    at.selectbox(key="gpu").set_value("L4-24GB").run()
    report = core_report({"gpu": "L4-24GB"})
    assert report["gpu"]["capacity_bytes"] == int(22.03 * 2**30)       # what PyTorch can use on an L4
    assert [f for _, f, _ in verdict_cards(at)] == [p["fits"] for p in report["peak"]]
    at.selectbox(key="gpu").set_value("custom").run()
    at.text_input(key="gpu_memory_text").set_value("1 TB").run()          # typed with its unit
    assert dict(at.query_params) == {"gpu": "custom", "gpu_memory": str(10**12)}
    assert all(f for _, f, _ in verdict_cards(at))
    open_tab(at, "Peak and step")
    assert all(v == "yes" for v in table(at, "verdict_table")["fits"])


def test_solver_sentences_name_what_they_hold_and_the_fits_on_table():
    at = run_app(tab="Peak and step")
    text = text_of(at)
    assert "ZeRO-2 on NVIDIA H100 80GB HBM3 (SXM): largest micro-batch that fits:" in text
    assert "(at sequence 2,048, no recompute, 8 workers)" in text          # what the micro-batch answer holds
    assert "fewest workers that fit: " in text and "(at micro-batch 1, sequence 2,048, no recompute)" in text
    assert "Lowest stage that fits as set: ZeRO-1." in text
    fits = table(at, "fits_on_table")
    assert len(fits) == len(GPU_CATALOG) and "NVIDIA H200 141GB" in fits["GPU"].tolist()
    h100 = fits[fits["GPU"] == "NVIDIA H100 80GB HBM3 (SXM)"].iloc[0]           # both figures, PyTorch's first
    assert h100["PyTorch can use (GB)"] == "84.94" and h100["nvidia-smi (GB)"] == "85.52"
    assert fits[fits["GPU"] == "NVIDIA RTX A6000 48GB (ECC on)"].iloc[0]["PyTorch can use (GB)"].endswith(
        "(estimated)")                                                            # no published PyTorch figure yet
    assert not fits[fits["GPU"] == "NVIDIA H100 PCIe 80GB"].iloc[0]["PyTorch can use (GB)"].endswith("(estimated)")


def test_a_custom_capacity_needs_its_unit_and_a_bare_48_is_refused_with_a_message():
    """Issue 20: "48GB" once became 48 bytes. Typed with a unit it is 48 * 10^9; a bare 48 is refused, named."""
    at = run_app({"gpu": "custom", "gpu_memory": "48GB"})
    assert dict(at.query_params)["gpu_memory"] == str(48 * 10**9)
    assert at.text_input(key="gpu_memory_text").value == "48 GB"
    at.text_input(key="gpu_memory_text").set_value("48").run()
    assert not at.exception
    shown = text_of(at)
    assert "Custom capacity: '48' has no unit" in shown and "Showing the last valid value, 48 GB" in shown
    assert dict(at.query_params)["gpu_memory"] == str(48 * 10**9)           # the last valid capacity stays
    bare = run_app({"gpu": "custom", "gpu_memory": "48"})                    # from a link: refused, warned
    assert "gpu_memory" not in dict(bare.query_params) and "gpu_memory" in text_of(bare)


def test_the_how_to_read_view_states_the_capacity_and_the_validation_ledger():
    at = run_app(tab="How to read it")
    text = text_of(at)
    assert "that PyTorch can use on NVIDIA H100 80GB HBM3 (SXM)" in text and "nvidia-smi shows 79.65 GiB" in text
    assert "Checked against" in text and "published GPU runs" in text and "median error" in text
    assert "of the 84.94 GB PyTorch can use" in answer_text(at)               # the verdict names its capacity
    catalog = dataframe_with(at, "nvidia-smi's figure")                          # every card, both figures, sourced
    assert len(catalog) == len(GPU_CATALOG) and catalog["PyTorch's figure"].str.len().min() > 10
    row = catalog[catalog["key"] == "L40S-48GB"].iloc[0]
    assert row["PyTorch can use (GB)"] == "47.66" and row["nvidia-smi (GB)"] == "48.31"


def test_ranges_show_a_band_and_the_low_end_verdict():
    query = {"model": "llama-2-7b", "gpu": "A100-80GB", "stage": "3", "micro_batch": "3", "seq_len": "4096"}
    resolved = resolve(from_query(query)[0])
    from zerocalc.answers.ranges import ranges
    bands = ranges(resolved.scenario, resolved.workload).bands
    at = run_app(query, tab="Peak and step")
    verdicts = table(at, "verdict_table")
    assert verdicts["with the assumptions' range"].tolist() == [b.verdict for b in bands]
    assert "ranges" in " ".join(b.proto.label for b in at.get("download_button")).replace("CSV: ", "")
    peak = figure(at, "fig_timeline")
    assert peak
    band = traces(figure(at, "fig_peak"))["assumption range"]
    assert [v for v in band["customdata"] if v is not None] == [x for b in bands for x in (b.low_bytes, b.high_bytes)]


def test_activation_terms_have_a_formula_and_never_round_to_zero():
    at = run_app(tab="Peak and step")
    acts = table(at, "activation_table")
    assert not any(size.startswith("0.00 ") for size in acts["size"])
    assert (acts["formula (bits)"] != "").all()
    assert acts.loc[acts["term"] == "token ids", "size"].tolist() == ["16.38 KB"]
    # Hugging Face's SwiGLU saves act(gate) and up for their product: 2 tensors of the FFN width (w·b·s·f each).
    assert acts.loc[acts["term"] == "mlp gate product", "formula (bits)"].tolist() == ["2·w·b·s·f"]
    assert acts.loc[acts["term"] == "token ids", "values (bits)"].tolist() == ["64·1·2,048"]
