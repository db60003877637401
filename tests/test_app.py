"""The Streamlit app through AppTest: the verdict first, every control, every tab, the figures' numbers against the
core, the fixes, the link."""

import html as html_lib
import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ui.state import FIELD, PARAMS_ONLY, from_query, resolve
from ui.widgets import SECTIONS as SECTION_ROWS
from zerocalc.answers.fixes import apply as apply_fix
from zerocalc.answers.fixes import fixes as core_fixes
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.output.report import full_report
from zerocalc.units import UNIT_BYTES, format_bytes

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TABS = ("Overview", "Model states", "Peak and step", "Layouts and ranks", "Compare", "Calibrate",
        "Framework configs", "How to read it")
SECTIONS = ("sec_load", "sec_arch", "sec_precision", "sec_cluster", "sec_parallel", "sec_step", "sec_assumptions",
            "sec_display")


def set_sections(at, opened=(), closed=()):
    """Open and close sidebar sections as their pills do (widgets.OPEN_SECTIONS holds the open sections' keys)."""
    now = set(at.session_state["sections"] or ()) if "sections" in at.session_state else set()
    at.session_state["sections"] = [k for k, *_ in SECTION_ROWS if k in (now | set(opened)) - set(closed)]
ISSUE_13 = {"model": "llama-3-8b", "gpu": "A100-40GB", "micro_batch": "4", "seq_len": "4096", "stage": "2"}


def run_app(query=None, tab=None, sections=()):
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    if tab or sections:
        if sections:
            set_sections(at, sections)
        if tab:
            at.session_state["tab"] = tab
        at.run()
        assert not at.exception, at.exception
    return at


def open_tab(at, name):
    at.session_state["tab"] = name
    at.run()
    assert not at.exception, at.exception
    return at


def open_sections(at, *names):
    set_sections(at, names)
    at.run()
    assert not at.exception, at.exception
    return at


def warnings_shown(at) -> str:
    """The warnings as the page renders them (markdown escapes removed)."""
    return " ".join(re.sub(r"\\(.)", r"\1", w.value) for w in at.warning)


def header_text(at) -> str:
    """The page's title and its line of what is being checked (one HTML block)."""
    body = next(h.proto.body for h in at.get("html") if 'data-testid="zc-header"' in h.proto.body)
    return html_lib.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", " ", body, flags=re.S))


def captions(at) -> str:
    """The header's line and every caption."""
    return " ".join([header_text(at)] + [c.value for c in at.caption])


def answer_text(at) -> str:
    """The verdict's sentence ("Does it fit on ...? ... Checking ZeRO-2: ..."), '' without a peak."""
    body = next((h.proto.body for h in at.get("html") if 'data-testid="zc-answer"' in h.proto.body), "")
    match = re.search(r'<p class="zc-answer"[^>]*>(.*?)</p>', body, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", "", match.group(1))) if match else ""


def text_of(at) -> str:
    """The verdict's sentence and every markdown, as read."""
    markdown = re.sub(r"\\(.)", r"\1", " ".join(m.value for m in at.markdown)).replace("**", "")
    return f"{answer_text(at)} {markdown}"


def core_report(query):
    """What the core says for the state a link describes: the oracle for the app's numbers."""
    resolved = resolve(from_query(query)[0])
    return full_report(resolved.scenario, resolved.workload, resolved.state["buffer_factor"])


def figure(at, key):
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith(key) or key in chart.proto.id:
            return json.loads(chart.proto.spec)
    raise AssertionError(f"no chart {key}")


def has_figure(at, key) -> bool:
    return any(key in chart.proto.id for chart in at.get("plotly_chart"))


TABLE_COLUMN = {"stage_table": "redundancy", "verdict_table": "fits", "fits_on_table": "GPU",
                "deepspeed_table": "estimator", "ledger_table": "bytes/param", "activation_table": "term"}


def table(at, key):
    """A dataframe by a column only it has (AppTest keeps no key on plain dataframes)."""
    return dataframe_with(at, TABLE_COLUMN.get(key, key))


def dataframe_with(at, column):
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no table with column {column!r}")


def traces(fig):
    return {t["name"]: t for t in fig["data"]}


def states(at) -> list:
    """The model-state bars of the overview (its left bars; the whole chart without a peak)."""
    if has_figure(at, "fig_overview"):
        return [t for t in figure(at, "fig_overview")["data"] if t.get("offsetgroup") == "states"]
    return figure(at, "fig_per_worker")["data"]


def peak_bars(at) -> list:
    return [t for t in figure(at, "fig_overview")["data"] if t.get("offsetgroup") == "peak"]


def verdict_cards(at) -> list:
    """The verdict cards: (stage, fits, text) from the page's HTML."""
    body = next(h.proto.body for h in at.get("html") if 'data-testid="zc-verdict"' in h.proto.body)
    cards = []
    for m in re.finditer(r'data-stage="(\d)" data-fits="(true|false)">(.*?)</div></div>', body):
        cards.append((int(m.group(1)), m.group(2) == "true", html_lib.unescape(re.sub(r"<[^>]+>", " ", m.group(3)))))
    return cards


def subtotals(at) -> list:
    """The model-state subtotal per worker at each stage as the page shows it: the last line of each verdict card,
    or a metric per stage when there is no peak (params-only)."""
    if any('data-testid="zc-verdict"' in h.proto.body for h in at.get("html")):
        return [re.search(r"model states (.+?) per worker", text).group(1) for _, _, text in verdict_cards(at)]
    return [m.value for m in at.metric][:4]


def assert_overview_matches_core(at, report, unit="GB"):
    per_worker = {t["name"]: t for t in states(at)}
    for category in ("parameters", "gradients", "optimizer"):
        assert per_worker[category]["customdata"] == [s["per_worker_bytes"][category] for s in report["stages"]]
        assert per_worker[category]["y"] == pytest.approx(
            [s["per_worker_bytes"][category] / UNIT_BYTES[unit] for s in report["stages"]])
    assert subtotals(at) == [format_bytes(s["per_worker_total_bytes"], unit) for s in report["stages"]]
    if "peak" in report:
        bars = {t["name"]: t for t in peak_bars(at)}
        for p in report["peak"]:
            parts = p["phases"][p["peak_phase"]]
            assert sum(t["customdata"][p["stage"]] for t in bars.values()) == sum(parts.values()) == p["peak_bytes"]
        cards = verdict_cards(at)
        assert [(s, f) for s, f, _ in cards] == [(p["stage"], p["fits"]) for p in report["peak"]]
        for (_, _, text), p in zip(cards, report["peak"]):
            assert format_bytes(p["peak_bytes"], unit) in text
            assert format_bytes(abs(p["headroom_bytes"]), unit) in text
            assert ("headroom" in text) == p["fits"] and ("over" in text) == (not p["fits"])


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
    line = next(m.value for m in at.markdown if "Full recompute" in m.value)
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
        again.button(key=f"fix_apply_{i}").click().run()
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
    assert report["gpu"]["capacity_bytes"] == 23_034 * 2**20
    assert [f for _, f, _ in verdict_cards(at)] == [p["fits"] for p in report["peak"]]
    at.selectbox(key="gpu").set_value("custom").run()
    at.number_input(key="gpu_memory").set_value(10**12).run()
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
    assert len(fits) == 11 and "NVIDIA H200 141GB" in fits["GPU"].tolist()


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


def test_every_sidebar_control_reaches_the_link_without_an_exception():
    at = run_app(sections=SECTIONS)
    at.toggle(key="edit_variants").set_value(True).run()
    changes = {  # field -> a valid non-default value
        "layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 8, "ffn": 5632, "vocab": 32768, "context": 2048,
        "head_dim": 128, "tied_embeddings": True, "gated_mlp": False, "norm": "layernorm", "bias": True,
        "qkv_bias": True, "positions": "learned", "fused_qkv": True, "fused_gate_up": True, "activation": "gelu",
        "softmax_fp32": False, "attn_dropout": 0.1, "resid_dropout": 0.2, "embd_dropout": 0.05,
        "qk_norm": "head", "sandwich_norm": True,
        "param_dtype": "bf16", "master_dtype": "none", "grad_accum_dtype": "fp32", "optimizer": "adam-8bit",
        "optimizer_dtype": "bf16", "comm_dtype": "bf16", "shard_group": 4, "gpus_per_node": 4,
        "offload_optimizer": "cpu", "offload_params": "nvme", "activation_dtype": "fp32",
        "implementation": "megatron", "reduce_bucket_size": 2 * 10**8, "allgather_bucket_size": 10**8,
        "prefetch_bucket_size": 10**7, "max_live_parameters": 10**8, "param_persistence_threshold": 10**4,
        "overlap_comm": "on", "cuda_context_bytes": 2 * 2**30, "fragmentation_percent": 10, "buffer_factor": 2.0,
        "breakdown": "entry", "stage": 1, "micro_batches": 4,
    }
    for name, value in changes.items():
        kind = FIELD[name].kind
        if kind == "bool":
            at.checkbox(key=name).check().run() if value else at.checkbox(key=name).uncheck().run()
        elif name in ("breakdown", "stage", "attention", "units"):
            at.button_group(key=name).set_value(value).run()
        elif kind == "prob":
            at.slider(key=name).set_value(value).run()
        elif kind == "choice":
            at.selectbox(key=name).set_value(value).run()
        else:
            at.number_input(key=name).set_value(value).run()
        assert not at.exception, (name, at.exception)
        assert name in dict(at.query_params), name
    assert not at.warning, [w.value for w in at.warning]
    report = core_report(dict(at.query_params))
    assert report["architecture"]["layers"] == 16 and report["scenario"]["optimizer"] == "adam-8bit"
    entries = {t["name"] for t in states(at)}
    assert entries == {e["name"] for e in report["ledger"]}             # bars by ledger entry


def test_closed_sections_keep_their_values():
    at = run_app(sections=["sec_cluster"])
    at.number_input(key="gpus_per_node").set_value(4).run()
    set_sections(at, closed=["sec_cluster"])
    at.run()
    at.number_input(key="workers").set_value(16).run()
    assert dict(at.query_params) == {"workers": "16", "gpus_per_node": "4"}
    open_sections(at, "sec_cluster")
    assert at.number_input(key="gpus_per_node").value == 4


def test_every_jargon_control_has_help_text():
    at = run_app(sections=SECTIONS)
    at.toggle(key="edit_variants").set_value(True).run()
    plain = {"layers", "hidden", "heads", "vocab", "bias", "qkv_bias", "attn_dropout", "resid_dropout",
             "embd_dropout", "attn_bias", "mlp_bias", "attn_softcap", "final_softcap", "sliding_pattern",
             "local_rope", "q_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim", "expert_ffn",
             "shared_expert_gate", "router", "norm_topk", "router_bias", "route_weights_fp32", "expert_bias"}
    missing = []
    for w in list(at.selectbox) + list(at.number_input) + list(at.radio) + list(at.checkbox):
        key = w.key
        if key in FIELD and key not in plain and not w.help:
            missing.append(key)
    assert missing == []


def test_a_shared_link_restores_the_exact_view():
    query = {"model": "llama-3-8b", "workers": "64", "param_dtype": "bf16", "grad_dtype": "bf16",
             "micro_batch": "2", "gpu": "H200-141GB", "units": "GiB", "stage": "2"}
    at = run_app(query, sections=["sec_display"])
    assert not at.warning
    assert at.selectbox(key="model").value == "llama-3-8b" and at.number_input(key="workers").value == 64
    assert at.number_input(key="micro_batch").value == 2 and at.button_group(key="units").value == "GiB"
    assert dict(at.query_params) == query
    assert_overview_matches_core(at, core_report(query), unit="GiB")
    assert "Sizes in GiB (2^30 bytes;" in header_text(at)          # the unit in use, named once at the top


def test_the_core_answers_are_cached_per_plan_not_per_display_choice():
    from ui.compute import state_key
    from ui.state import defaults
    plan = defaults()
    key = state_key(plan)
    hash(key)                                                      # a dict key for the per-state caches
    assert state_key({**plan, "units": "GiB", "breakdown": "entry"}) == key          # display only
    assert state_key({**plan, "lora_targets": list(plan["lora_targets"])}) == key    # a list as its tuple
    assert state_key({**plan, "recompute_every": 3}) == key        # idle without full recompute: canonical
    assert state_key({**plan, "workers": plan["workers"] * 2}) != key
    assert state_key({**plan, "recompute": "full", "recompute_every": 3}) != \
        state_key({**plan, "recompute": "full"})


def test_the_share_link_sits_above_the_tabs_with_a_copy_button():
    at = run_app({"workers": "64"})
    share = next(h.proto.body for h in at.get("html") if "zc-share" in h.proto.body)
    assert "?workers=64" in share and "Copy link" in share and "navigator.clipboard.writeText" in share


def test_invalid_link_parameters_warn_by_name_and_fall_back():
    at = run_app({"workers": "lots", "micro_batch": "-1", "gpu": "TPU", "model": "gpt2", "bogus": "1",
                  "shard_group": "5"})
    text = warnings_shown(at)
    for name in ("workers", "micro_batch", "gpu", "bogus"):
        assert name in text
    assert at.number_input(key="workers").value == 8 and at.selectbox(key="model").value == "gpt2"
    assert "shard_group" in text                           # 5 does not divide the 8 workers
    assert_overview_matches_core(at, core_report({"model": "gpt2"}))


def test_params_only_mode_parses_counts_and_refuses_garbage():
    at = run_app({"model": PARAMS_ONLY})
    at.text_input(key="params_text").set_value("1B").run()
    at.number_input(key="workers").set_value(4).run()
    assert subtotals(at) == ["16.00 GB", "7.00 GB", "5.50 GB", "4.00 GB"]   # seed 000
    assert "architecture" in text_of(at)
    at.text_input(key="params_text").set_value("lots").run()
    assert "Parameters" in warnings_shown(at) and "allowed" in warnings_shown(at)
    assert subtotals(at)[0] == "16.00 GB"                   # the last valid count is kept


@pytest.mark.parametrize("model", list(MODEL_PRESETS))
def test_no_exception_for_any_preset(model):
    at = run_app({"model": model})
    assert not at.warning
    report = core_report({"model": model})
    shown = sum(t["customdata"][0] for t in states(at))
    assert shown == report["stages"][0]["per_worker_total_bytes"]
    assert subtotals(at) == [format_bytes(s["per_worker_total_bytes"], "GB") for s in report["stages"]]


def test_the_model_picker_names_total_and_active_parameters():
    at = run_app({"model": "mixtral-8x7b"})
    picker = at.selectbox(key="model")
    assert "mixtral-8x7b · 46.70B total, 12.88B active" in picker.options
    assert "llama-3-8b · 8.03B" in picker.options and len(picker.options) == len(MODEL_PRESETS) + 2
    caption = captions(at)
    assert "46,702,792,704 parameters (12,879,925,248 active per token, 45,097,156,608 in experts)" in caption


def test_moe_bars_split_dense_and_expert_bytes():
    query = {"model": "mixtral-8x7b", "workers": "16"}
    at = run_app(query)
    report = core_report(query)
    bars = states(at)
    names = {t["name"] for t in bars}
    assert {"parameters", "experts: parameters", "experts: optimizer"} <= names
    for stage in range(4):
        assert sum(t["customdata"][stage] for t in bars) == report["stages"][stage]["per_worker_total_bytes"]
    hatched = {t["name"]: t["marker"].get("pattern", {}).get("shape") for t in bars}
    assert hatched["experts: parameters"] == "/" and not hatched["parameters"]


def test_expert_parallel_controls_reach_the_link_and_the_ranks():
    at = run_app({"model": "mixtral-8x7b", "workers": "8"}, sections=["sec_parallel", "sec_assumptions"])
    at.number_input(key="ep").set_value(8).run()
    at.number_input(key="moe_imbalance_percent").set_value(150).run()
    assert dict(at.query_params) == {"model": "mixtral-8x7b", "ep": "8", "moe_imbalance_percent": "150"}
    assert not at.warning
    report = core_report(dict(at.query_params))
    assert report["stages"][3]["per_worker_total_bytes"] == \
        sum(t["customdata"][3] for t in states(at))
    at.number_input(key="ep").set_value(3).run()
    assert "ep" in warnings_shown(at)                         # 3 does not divide 8 experts: reset, named


def test_downloads_are_stamped_with_version_and_convention():
    query = {"convention": "deepspeed"}
    labels = []
    for tab in ("Model states", "Peak and step", "How to read it"):
        at = run_app(query, tab=tab)
        labels += [b.proto.label for b in at.get("download_button")]
    assert "JSON: full report" in labels
    for table_name in ("stages", "ledger", "peak", "activations", "fits-on", "deepspeed", "ranges"):
        assert f"CSV: {table_name}" in labels
    report = core_report(query)
    assert report["convention"] == "deepspeed" and report["zerocalc_version"]


def test_deepspeed_estimator_and_how_to_read_it():
    at = run_app(tab="Model states")
    ds = table(at, "deepspeed_table")
    assert len(ds) == 8 and ds["estimator"].tolist().count("ZeRO-3") == 6
    at = open_tab(at, "How to read it")
    text = text_of(at)
    assert "Not modelled" in text and "GiB" in text
    colours = dataframe_with(at, "colour")
    from ui.figures import TERM_COLORS
    assert dict(zip(colours["term"], colours["colour"])) == TERM_COLORS
    at.selectbox(key="doc_page").set_value("peak-memory.md").run()
    assert "docs/peak-memory.md" in text_of(at) or len(text_of(at)) > 5000


def test_markdown_in_a_link_is_shown_literally():
    at = run_app({"[click](javascript:alert(1))": "1", "gpu": "**bold** <b>x</b>"})
    shown = " ".join(w.value for w in at.warning)
    assert "\\[click\\]\\(javascript:alert\\(1\\)\\)" in shown        # escaped: not a link
    assert "\\*\\*bold\\*\\*" in shown and "\\<b\\>" in shown
