"""Mixture of experts in the inventory and under expert parallelism: counts, placement over ep / etp, ZeRO over
the expert-data-parallel group (Megatron-Core's parallel folding), activations per routed pair, refusals."""

import pytest

from zerocalc import Scenario
from zerocalc.model.inventory import counts, param_count
from zerocalc.layout import Layout
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.model.placement import rank_classes
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

V3 = MODEL_PRESETS["deepseek-v3"][0]
MIXTRAL = MODEL_PRESETS["mixtral-8x7b"][0]


def report(arch, dp, **layout):
    work = Workload(arch, seq_len=4096, layout=Layout(**layout))
    return layout_report(Scenario.from_convention("megatron", params=param_count(arch), workers=dp), work)


def test_deepseek_v3_counts_dense_and_moe_blocks_and_routes_8_of_256():
    # 3 dense blocks then 58 MoE blocks (first_k_dense_replace); active = dense + shared + 8/256 of the experts.
    c = counts(V3)
    assert V3.moe_layers == 58 and c["params"] == 671_026_404_352
    routed_per_block = 256 * 3 * 7168 * 2048
    assert c["expert_params"] == 58 * routed_per_block
    assert c["active_params"] == c["params"] - c["expert_params"] + 58 * 8 * 3 * 7168 * 2048


def test_expert_parallel_splits_whole_experts_and_etp_their_ffn():
    (c,) = rank_classes(MIXTRAL, Layout(ep=8), 8, "huggingface")
    local = {h.tensor.name: h.local_elements for h in c.holdings}
    assert local["experts.gate_up_proj"] == 1 * 2 * 14336 * 4096           # 8 experts / ep 8 = 1 per rank
    (c2,) = rank_classes(MIXTRAL, Layout(ep=4, etp=2), 8, "huggingface")
    local2 = {h.tensor.name: h.local_elements for h in c2.holdings}
    assert local2["experts.gate_up_proj"] == 2 * 2 * 14336 // 2 * 4096 and local2["router.weight"] == 8 * 4096


def test_experts_shard_over_the_expert_data_parallel_group():
    # dp 16 x tp 4 = 64 ranks per stage fold into etp 1 x ep 8 x edp 8 for the experts.
    r = report(MIXTRAL, 16, tp=4, ep=8)
    (view,) = r.ranks
    shards = {g.name: g.shard for g in view.shape.groups}
    assert shards == {"": 16, "experts": 8}
    rows = {row.entry.name: row for row in view.rows}
    assert rows["experts: exp_avg"].divisor == 8 and rows["exp_avg"].divisor == 16
    experts = next(g for g in view.shape.groups if g.name == "experts")
    assert rows["experts: exp_avg"].elements == experts.params


def test_a_router_kept_in_fp32_is_stored_and_reduced_in_fp32():
    r = report(V3, 8, ep=8)
    first = r.ranks[0]
    rows = {row.entry.name: row.entry for row in first.rows}
    assert rows["fp32: parameters"].dtype == "fp32" and rows["parameters"].dtype == "bf16"


def test_one_copy_of_a_moe_model_counts_every_group_once():
    r = report(MIXTRAL, 8, ep=8)
    assert r.unique_total == 18 * param_count(MIXTRAL)                      # the megatron ledger: 18 bytes


@pytest.mark.parametrize("layout, dp, field, allowed", [
    (dict(ep=3), 6, "ep", "a divisor of the experts (8)"),
    (dict(ep=8), 4, "ep", "ep x etp dividing dp x tp x cp (4)"),
    (dict(etp=5), 8, "etp", "a divisor of the expert FFN width"),
])
def test_expert_layouts_a_model_cannot_take_are_named(layout, dp, field, allowed):
    with pytest.raises(FieldError) as err:
        report(MIXTRAL, dp, **layout)
    assert err.value.field == field and allowed in str(err.value)


def test_the_cli_names_an_expert_layout_the_stage_cannot_take(capsys):
    # 256 GPUs with pp 8 leave 32 ranks per stage: ep 64 cannot fold into them (a message, not a traceback).
    from zerocalc.cli.main import main
    assert main(["--model", "deepseek-v3", "--gpus", "256", "--pp", "8", "--ep", "64"]) == 2
    err = capsys.readouterr().err
    assert "--ep: got 64; allowed: ep x etp dividing dp x tp x cp (32)" in err and "Traceback" not in err


def test_a_dense_model_has_no_experts_to_split():
    with pytest.raises(FieldError) as err:
        report(MODEL_PRESETS["llama-3-8b"][0], 8, ep=2)
    assert err.value.field == "ep" and "without experts" in str(err.value)


def test_routing_imbalance_grows_only_the_expert_terms_and_only_under_ep():
    base = Workload(MIXTRAL, seq_len=4096, layout=Layout(ep=8))
    skewed = Workload(MIXTRAL, seq_len=4096, layout=Layout(ep=8), moe_imbalance_percent=150)
    s = Scenario.from_convention("megatron", params=param_count(MIXTRAL), workers=8)
    a, b = layout_report(s, base).ranks[0].shape.act, layout_report(s, skewed).ranks[0].shape.act
    assert b.per_moe_layer["experts: dispatched tokens"] * 2 == a.per_moe_layer["experts: dispatched tokens"] * 3
    assert b.per_moe_layer["router scores (fp32)"] == a.per_moe_layer["router scores (fp32)"]
    capped = Workload(MIXTRAL, seq_len=4096, layout=Layout(ep=8), moe_imbalance_percent=150, moe_capacity_percent=125)
    c = layout_report(s, capped).ranks[0].shape.act
    assert c.per_moe_layer["experts: dispatched tokens"] * 4 == a.per_moe_layer["experts: dispatched tokens"] * 5
    alone = Workload(MIXTRAL, seq_len=4096, moe_imbalance_percent=150)      # no ep: a rank routes its own tokens
    d = layout_report(s, alone).ranks[0].shape.act.per_moe_layer
    assert d["experts: dispatched tokens"] == a.per_moe_layer["experts: dispatched tokens"]


def test_expert_parallel_traffic_is_the_dispatch_and_combine_all_to_alls():
    r = report(MIXTRAL, 8, ep=8)
    comm = r.ranks[0].communication[1]
    T, k, h = 4096, 2, 4096
    assert comm["expert parallel"] == 32 * 4 * T * k * h * 2              # 32 MoE blocks, 4 all-to-alls, bf16
