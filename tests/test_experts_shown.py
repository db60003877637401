"""Experts shown (issue 22): the report says how the experts are split (zerocalc.output.experts), its rule for
when ep moves the model states holds against the ledger itself, and the page says it: experts per GPU and ep in
the header line, why ep moves the states or does not at the checked stage, the MoE block's activations in the
caption, and no dense rows for a model whose every block is MoE."""

import pytest

from tests.app_helpers import core_report, dataframe_with, header_text, run_app

MOE = {"model": "qwen3-30b-a3b", "workers": "8"}           # 48 blocks, every one MoE: 128 experts, top-8


@pytest.mark.parametrize("ep", ["2", "8"])
def test_ep_moves_only_the_categories_the_stage_does_not_shard(ep):
    # Megatron-Core's folding: expert categories ZeRO shards are divided by ep x etp x edp = dp x tp x cp whatever
    # ep is; the others by ep x etp alone
    one, split = core_report(MOE), core_report(dict(MOE, ep=ep))
    e = split["experts"]
    assert (e["experts_per_gpu"], e["expert_data_parallel"]) == (128 // int(ep), 8 // int(ep))
    assert e["dense_layers"] == 0 and e["moe_layers"] == 48
    for stage in range(4):
        before, after = one["stages"][stage]["per_worker_bytes"], split["stages"][stage]["per_worker_bytes"]
        for cat in e["sharded"][str(stage)]:
            assert after[cat] == before[cat]
        for cat in e["split_by_ep_alone"][str(stage)]:
            assert after[cat] < before[cat]
    assert core_report({"model": "llama-3-8b"})["experts"] is None


def test_the_page_says_how_the_experts_are_split():
    at = run_app(dict(MOE, ep="8"), tab="Peak and step")
    assert "experts: ep 8 x etp 1, 16 of 128 routed experts per GPU, their ZeRO group edp 1" in header_text(at)
    why = [c.value for c in at.caption if c.value.startswith("Experts:")]
    assert len(why) == 1 and "So at ZeRO-3 ep does not move the model states" in why[0]
    acts = dataframe_with(at, "where")
    assert "each dense layer" not in set(acts["where"]) and "each MoE layer" in set(acts["where"])
    report = core_report(dict(MOE, ep="8"))
    from zerocalc.units import format_bytes
    per_moe = format_bytes(report["activation_bytes_per_moe_layer"], "decimal")
    assert any(f"{per_moe} per MoE layer," in m.value and "dense layer" not in m.value for m in at.markdown)
    at = run_app(dict(MOE, ep="8", stage="1"))
    why = [c.value for c in at.caption if c.value.startswith("Experts:")][0]
    assert "optimizer states are sharded over edp" in why and "parameters and gradients are divided by ep" in why


def test_a_model_with_dense_blocks_lists_both():
    at = run_app({"model": "deepseek-v2-lite", "workers": "8", "ep": "2"}, tab="Peak and step")
    acts = dataframe_with(at, "where")
    assert {"each dense layer", "each MoE layer"} <= set(acts["where"])
    assert any("per MoE layer" in m.value and "per dense layer" in m.value for m in at.markdown)
    dense = run_app({"model": "gpt2"}, tab="Peak and step")
    assert "each layer" in set(dataframe_with(dense, "where")["where"])
    assert not [c.value for c in dense.caption if c.value.startswith("Experts:")]
