"""The Streamlit app's controls through AppTest: every sidebar control reaches the link, closed sections keep their
values, help texts, shared links, bad link values, presets, experts, downloads.
"""

import pytest

from tests.app_helpers import (
    SECTIONS,
    assert_overview_matches_core,
    captions,
    core_report,
    dataframe_with,
    header_text,
    open_sections,
    open_tab,
    run_app,
    set_sections,
    states,
    subtotals,
    table,
    text_of,
    warnings_shown,
)
from ui.state.fields import FIELD, PARAMS_ONLY
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.units import format_bytes


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
    assert not warnings_shown(at), warnings_shown(at)
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
    assert not warnings_shown(at)
    assert at.selectbox(key="model").value == "llama-3-8b" and at.number_input(key="workers").value == 64
    assert at.number_input(key="micro_batch").value == 2 and at.button_group(key="units").value == "GiB"
    assert dict(at.query_params) == query
    assert_overview_matches_core(at, core_report(query), unit="GiB")
    assert "Sizes in GiB (2^30 bytes;" in header_text(at)          # the unit in use, named once at the top


def test_the_core_answers_are_cached_per_plan_not_per_display_choice():
    from ui.server.compute import state_key
    from ui.state.fields import defaults
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
    assert not warnings_shown(at)
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
    assert not warnings_shown(at)
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
    from ui.drawing.figures import TERM_COLORS
    assert dict(zip(colours["term"], colours["colour"])) == TERM_COLORS
    at.selectbox(key="doc_page").set_value("peak-memory.md").run()
    assert "docs/peak-memory.md" in text_of(at) or len(text_of(at)) > 5000


def test_markdown_in_a_link_is_shown_literally():
    at = run_app({"[click](javascript:alert(1))": "1", "gpu": "**bold** <b>x</b>"})
    shown = warnings_shown(at)
    assert "'[click](javascript:alert(1))'" in shown and "'**bold** <b>x</b>'" in shown     # the text as typed
    bodies = " ".join(h.proto.body for h in at.get("html") if "zc-alert-warning" in h.proto.body)
    assert "&lt;b&gt;x&lt;/b&gt;" in bodies and "<b>" not in bodies and "<a " not in bodies   # as text, not markup
    assert not at.warning                   # nothing of the link reaches Streamlit's markdown
