"""The Streamlit app through AppTest: every control, every panel, the figures' numbers against the core, the link."""

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ui.state import FIELD, PARAMS_ONLY, from_query, resolve
from zerocalc.model_presets import MODEL_PRESETS
from zerocalc.report import full_report
from zerocalc.units import UNIT_BYTES

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def run_app(query=None):
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def warnings_shown(at) -> str:
    """The warnings as the page renders them (markdown escapes removed)."""
    return " ".join(re.sub(r"\\(.)", r"\1", w.value) for w in at.warning)


def core_report(query):
    """What the core says for the state a link describes: the oracle for the app's numbers."""
    resolved = resolve(from_query(query)[0])
    return full_report(resolved.scenario, resolved.workload, resolved.state["buffer_factor"])


def figure(at, key):
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith(key) or key in chart.proto.id:
            return json.loads(chart.proto.spec)
    raise AssertionError(f"no chart {key}")


TABLE_COLUMN = {"stage_table": "redundancy", "verdict_table": "fits", "fits_on_table": "GPU",
                "deepspeed_table": "estimator", "ledger_table": "bytes/param", "activation_table": "term"}


def table(at, key):
    """A dataframe by a column only it has (AppTest keeps no key on plain dataframes)."""
    for df in at.dataframe:
        if TABLE_COLUMN[key] in df.value.columns:
            return df.value
    raise AssertionError(f"no table {key}")


def traces(fig):
    return {t["name"]: t for t in fig["data"]}


def assert_figures_match_core(at, report, unit="GB"):
    per_worker = traces(figure(at, "fig_per_worker"))
    for category in ("parameters", "gradients", "optimizer"):
        assert per_worker[category]["customdata"] == [s["per_worker_bytes"][category] for s in report["stages"]]
        assert per_worker[category]["y"] == pytest.approx(
            [s["per_worker_bytes"][category] / UNIT_BYTES[unit] for s in report["stages"]])
    cluster = traces(figure(at, "fig_cluster"))
    assert cluster["redundant"]["customdata"] == [s["cluster_redundant_bytes"] for s in report["stages"]]
    assert cluster["one copy"]["customdata"] == [s["cluster_unique_bytes"] for s in report["stages"]]
    scaling = traces(figure(at, "fig_scaling"))
    assert scaling["ZeRO-3"]["customdata"] == report["scaling"]["stage_3"]
    if "peak" in report:
        peak = traces(figure(at, "fig_peak"))
        for p in report["peak"]:
            parts = p["phases"][p["peak_phase"]]
            assert sum(t["customdata"][p["stage"]] for t in peak.values()) == sum(parts.values()) == p["peak_bytes"]
        timeline = traces(figure(at, "fig_timeline"))
        chosen = report["peak"][at.radio(key="stage").value]
        totals = [sum(t["customdata"][i] for t in timeline.values()) for i in range(3)]
        assert totals == list(chosen["phase_totals"].values())


def test_default_view_matches_the_core_everywhere():
    at = run_app()
    report = core_report({})
    assert_figures_match_core(at, report)
    assert [m.value for m in at.metric][:4] == ["107.81 GB", "37.06 GB", "25.27 GB", "13.48 GB"]
    assert len(at.get("plotly_chart")) == 5
    assert table(at, "stage_table")["per worker (GB)"].tolist() == ["107.81", "37.06", "25.27", "13.48"]
    assert at.query_params.to_dict() == {} if hasattr(at.query_params, "to_dict") else dict(at.query_params) == {}


def test_workers_change_the_sharded_numbers_and_the_link():
    at = run_app()
    at.number_input(key="workers").set_value(64).run()
    assert dict(at.query_params) == {"workers": "64"}
    report = core_report({"workers": "64"})
    assert_figures_match_core(at, report)
    assert at.metric[0].value == "107.81 GB"           # stage 0 is not sharded
    assert at.metric[3].value != "13.48 GB"


def test_a_dtype_change_moves_exactly_the_category_that_uses_it():
    at = run_app()
    before = traces(figure(at, "fig_per_worker"))
    at.selectbox(key="grad_dtype").set_value("fp32").run()
    after = traces(figure(at, "fig_per_worker"))
    assert after["gradients"]["customdata"] == [2 * v for v in before["gradients"]["customdata"]]
    assert after["parameters"]["customdata"] == before["parameters"]["customdata"]
    assert after["optimizer"]["customdata"] == before["optimizer"]["customdata"]
    assert dict(at.query_params) == {"grad_dtype": "fp32"}


def test_convention_resets_the_dtypes_and_units_relabel():
    at = run_app()
    at.selectbox(key="convention").set_value("megatron").run()
    assert at.selectbox(key="param_dtype").value == "bf16" and at.selectbox(key="grad_dtype").value == "fp32"
    at.radio(key="units").set_value("GiB").run()
    assert "per worker (GiB)" in table(at, "stage_table").columns
    assert_figures_match_core(at, core_report({"convention": "megatron", "units": "GiB"}), unit="GiB")


def test_step_controls_change_activations_but_not_model_states():
    at = run_app()
    states_before = traces(figure(at, "fig_per_worker"))["optimizer"]["customdata"]
    peak_before = [p for p in core_report({})["peak"]]
    at.slider(key="micro_batch").set_value(4).run()
    at.number_input(key="seq_len").set_value(4096).run()
    at.radio(key="attention").set_value("eager").run()
    at.selectbox(key="recompute").set_value("full").run()
    query = {"micro_batch": "4", "seq_len": "4096", "attention": "eager", "recompute": "full"}
    assert dict(at.query_params) == query
    assert traces(figure(at, "fig_per_worker"))["optimizer"]["customdata"] == states_before
    report = core_report(query)
    assert report["peak"][3]["peak_bytes"] != peak_before[3]["peak_bytes"]
    assert_figures_match_core(at, report)


def test_gpu_choice_moves_the_capacity_and_the_verdicts():
    at = run_app()
    at.selectbox(key="gpu").set_value("L4-24GB").run()
    report = core_report({"gpu": "L4-24GB"})
    assert report["gpu"]["capacity_bytes"] == 23_034 * 2**20
    verdict = table(at, "verdict_table")
    assert verdict["fits"].tolist() == ["yes" if p["fits"] else "no" for p in report["peak"]]
    at.selectbox(key="gpu").set_value("custom").run()
    at.number_input(key="gpu_memory").set_value(10**12).run()
    assert dict(at.query_params) == {"gpu": "custom", "gpu_memory": str(10**12)}
    assert all(v == "yes" for v in table(at, "verdict_table")["fits"])


def test_solver_sentences_and_fits_on_table():
    at = run_app()
    text = " ".join(m.value for m in at.markdown)
    assert "largest micro-batch that fits on NVIDIA H100 80GB HBM3 (SXM) at stage 2" in text
    assert "Lowest stage that fits: 1." in text
    fits = table(at, "fits_on_table")
    assert len(fits) == 11 and "NVIDIA H200 141GB" in fits["GPU"].tolist()


def test_every_sidebar_control_reaches_the_link_without_an_exception():
    at = run_app()
    at.toggle(key="edit_arch").set_value(True).run()
    at.toggle(key="edit_assumptions").set_value(True).run()
    changes = {  # field -> a valid non-default value
        "layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 8, "ffn": 5632, "vocab": 32768, "context": 2048,
        "head_dim": 128, "tied_embeddings": True, "gated_mlp": False, "norm": "layernorm", "bias": True,
        "qkv_bias": True, "positions": "learned", "fused_qkv": True, "fused_gate_up": True, "activation": "gelu",
        "softmax_fp32": False, "attn_dropout": 0.1, "resid_dropout": 0.2, "embd_dropout": 0.05,
        "param_dtype": "bf16", "master_dtype": "none", "grad_accum_dtype": "fp32", "optimizer": "adam-8bit",
        "optimizer_dtype": "bf16", "comm_dtype": "bf16", "shard_group": 4, "gpus_per_node": 4,
        "offload_optimizer": "cpu", "offload_params": "nvme", "activation_dtype": "fp32",
        "implementation": "megatron", "reduce_bucket_size": 2 * 10**8, "allgather_bucket_size": 10**8,
        "prefetch_bucket_size": 10**7, "max_live_parameters": 10**8, "param_persistence_threshold": 10**4,
        "overlap_comm": "on", "cuda_context_bytes": 2 * 2**30, "fragmentation_percent": 10, "buffer_factor": 2.0,
        "breakdown": "entry", "stage": 1,
    }
    for name, value in changes.items():
        kind = FIELD[name].kind
        if kind == "bool":
            at.checkbox(key=name).check().run() if value else at.checkbox(key=name).uncheck().run()
        elif name in ("breakdown", "stage", "attention", "units"):
            at.radio(key=name).set_value(value).run()
        elif kind == "prob" or name in ("fragmentation_percent", "micro_batch"):
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
    entries = traces(figure(at, "fig_per_worker"))
    assert set(entries) == {e["name"] for e in report["ledger"]}       # bars by ledger entry


def test_a_shared_link_restores_the_exact_view():
    query = {"model": "llama-3-8b", "workers": "64", "param_dtype": "bf16", "grad_dtype": "bf16",
             "micro_batch": "2", "gpu": "H200-141GB", "units": "GiB", "stage": "2"}
    at = run_app(query)
    assert not at.warning
    assert at.selectbox(key="model").value == "llama-3-8b" and at.number_input(key="workers").value == 64
    assert at.slider(key="micro_batch").value == 2 and at.radio(key="units").value == "GiB"
    assert dict(at.query_params) == query
    assert_figures_match_core(at, core_report(query), unit="GiB")


def test_invalid_link_parameters_warn_by_name_and_fall_back():
    at = run_app({"workers": "lots", "micro_batch": "-1", "gpu": "TPU", "model": "gpt2", "bogus": "1",
                  "shard_group": "5"})
    text = warnings_shown(at)
    for name in ("workers", "micro_batch", "gpu", "bogus"):
        assert name in text
    assert at.number_input(key="workers").value == 8 and at.selectbox(key="model").value == "gpt2"
    assert "shard_group" in text                           # 5 does not divide the 8 workers
    assert_figures_match_core(at, core_report({"model": "gpt2"}))


def test_params_only_mode_parses_counts_and_refuses_garbage():
    at = run_app({"model": PARAMS_ONLY})
    at.text_input(key="params_text").set_value("1B").run()
    at.number_input(key="workers").set_value(4).run()
    assert [m.value for m in at.metric][:4] == ["16.00 GB", "7.00 GB", "5.50 GB", "4.00 GB"]   # seed 000
    assert "architecture" in " ".join(i.value for i in at.info)
    at.text_input(key="params_text").set_value("lots").run()
    assert "Parameters" in warnings_shown(at) and "allowed" in warnings_shown(at)
    assert at.metric[0].value == "16.00 GB"                 # the last valid count is kept


@pytest.mark.parametrize("model", list(MODEL_PRESETS))
def test_no_exception_for_any_preset(model):
    at = run_app({"model": model})
    assert not at.warning
    assert_figures_match_core(at, core_report({"model": model}))


def test_downloads_are_stamped_with_version_and_convention():
    at = run_app({"convention": "deepspeed"})
    buttons = at.get("download_button")
    labels = [b.proto.label for b in buttons]
    assert "JSON: full report" in labels
    for table_name in ("stages", "ledger", "peak", "activations", "fits-on", "deepspeed"):
        assert f"CSV: {table_name}" in labels
    report = core_report({"convention": "deepspeed"})
    assert report["convention"] == "deepspeed" and report["zerocalc_version"]


def test_deepspeed_panel_and_assumptions():
    at = run_app()
    ds = table(at, "deepspeed_table")
    assert len(ds) == 8 and ds["estimator"].tolist().count("ZeRO-3") == 6
    text = " ".join(m.value for m in at.markdown)
    assert "Not modelled" in text and "GiB" in text


def test_markdown_in_a_link_is_shown_literally():
    at = run_app({"[click](javascript:alert(1))": "1", "gpu": "**bold** <b>x</b>"})
    shown = " ".join(w.value for w in at.warning)
    assert "\\[click\\]\\(javascript:alert\\(1\\)\\)" in shown        # escaped: not a link
    assert "\\*\\*bold\\*\\*" in shown and "\\<b\\>" in shown
