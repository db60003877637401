"""Megatron's --recompute-modules and --recompute-method / --recompute-num-layers through the core (zerocalc/step/
megatron_recompute.py): validation as Megatron accepts them, the Transformer Engine spec's fused norms under the
megatron implementation, chunk-by-chunk counts under pipeline and virtual stages, the group backward rebuilds, and
the recompute FLOPs. Source: megatron-core 0.16.1 (transformer_config.py, transformer_layer.py,
transformer_block.py _checkpointed_forward, models/gpt/gpt_layer_specs.py). The bytes per module are measured in
tests/test_megatron_recompute.py."""

import pytest
from hypothesis import given, settings, strategies as st

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.output.report import full_report
from zerocalc.parallel.costs import recompute_flops
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.activations import activations
from zerocalc.step.megatron_recompute import RECOMPUTE_MODULES, full_groups, parse_modules
from zerocalc.step.workload import Workload

LLAMA = MODEL_PRESETS["llama-3-8b"][0]
DSV2 = MODEL_PRESETS["deepseek-v2-lite"][0]
QWEN_MOE = MODEL_PRESETS["qwen3-30b-a3b"][0]


def scenario_for(arch, workers=8):
    return Scenario.from_convention("megatron", params=param_count(arch), workers=workers)


def test_core_attn_alone_is_todays_selective_exactly():
    s = scenario_for(DSV2)
    for attention in ("eager", "flash"):
        today = Workload(DSV2, recompute="selective", attention=attention)
        same = Workload(DSV2, recompute="selective", attention=attention, recompute_modules="core_attn")
        assert full_report(s, same) == full_report(s, today)


def test_modules_are_stored_in_megatrons_order_and_bad_ones_named():
    assert Workload(LLAMA, recompute="selective", recompute_modules="mlp, layernorm,core_attn").recompute_modules \
        == "core_attn,layernorm,mlp"
    assert parse_modules("moe,moe_act") == ("moe_act", "moe")
    for bad, words in (("attn", "attn in"), ("mlp,mlp", "repeated"), ("", "empty")):
        with pytest.raises(FieldError) as err:
            Workload(LLAMA, recompute="selective", recompute_modules=bad)
        assert err.value.field == "recompute_modules" and words in err.value.allowed
    refused = [("mla_up_proj", LLAMA, {}, "latent attention"),                 # transformer_config.py refuses it
               ("mlp", LLAMA, {"recompute": "none"}, "unless recompute is selective"),
               ("mlp", LLAMA, {"compile": True}, "without compile")]
    for mods, arch, extra, words in refused:
        with pytest.raises(FieldError) as err:
            Workload(arch, **{"recompute": "selective", **extra}, recompute_modules=mods)
        assert err.value.field == "recompute_modules" and words in err.value.allowed


def test_huggingface_blocks_drop_what_each_checkpoint_rebuilds():
    none = activations(DSV2, 1, 4096, 16).per_moe_layer
    kept = lambda mods: activations(DSV2, 1, 4096, 16, recompute="selective",       # noqa: E731
                                    recompute_modules=mods).per_moe_layer
    assert set(none) - set(kept("moe_act")) == {"experts: activation and product"}
    assert not any(k.startswith(("router", "experts:", "shared expert")) for k in kept("moe"))
    assert kept("moe")["moe input (checkpoint)"] == 2 * 4096 * DSV2.hidden
    assert "shared expert fc2 input" in none and not any(k.startswith("shared") for k in kept("shared_experts"))
    mla = kept("mla_up_proj")
    assert "q, k (with rotary part)" not in mla and "kv up-projection output (v)" not in mla
    assert mla["kv down-projection output (k_pos_emb view)"] == 2 * 4096 * (DSV2.kv_lora_rank + DSV2.qk_rope_dim)


def test_megatron_implementation_follows_the_transformer_engine_spec():
    # gpt_layer_specs.py: linear_qkv / a dense linear_fc1 are LayerNormLinear (the norm fused), so "layernorm"
    # changes nothing in a dense GQA block, and "mlp" checkpoints the pre-MLP norm with the MLP.
    kw = dict(implementation="megatron", recompute="selective")
    none = activations(LLAMA, 1, 4096, 16, implementation="megatron")
    assert activations(LLAMA, 1, 4096, 16, recompute_modules="layernorm", **kw).per_layer == none.per_layer
    mlp = activations(LLAMA, 1, 4096, 16, recompute_modules="mlp", **kw).per_layer
    assert set(none.per_layer) - set(mlp) == {"post-attention norm", "mlp input", "mlp fc1 output", "mlp fc2 input"}
    assert mlp["pre-MLP norm input (checkpoint)"] == 2 * 4096 * LLAMA.hidden
    moe = activations(QWEN_MOE, 1, 4096, 16, recompute_modules="layernorm", **kw).per_moe_layer
    assert "post-attention norm" not in moe and "moe input" not in moe and "input norm" in moe   # TENorm only there


def test_uniform_needs_n_dividing_every_chunk_and_block_takes_the_first_n():
    with pytest.raises(FieldError) as err:
        Workload(LLAMA, recompute="full", recompute_num_layers=5)             # 32 layers in one chunk
    assert err.value.field == "recompute_num_layers" and "not of 32" in err.value.allowed
    Workload(LLAMA, recompute="full", recompute_num_layers=4, layout=Layout(pp=2, micro_batches=4))
    with pytest.raises(FieldError):
        Workload(LLAMA, recompute="full", recompute_num_layers=16, layout=Layout(pp=4, micro_batches=4))
    for field, extra in (("recompute_method", {"recompute_method": "block"}), ("recompute_num_layers",
                                                                              {"recompute_num_layers": 2})):
        with pytest.raises(FieldError) as err:
            Workload(LLAMA, recompute="selective", **extra)
        assert err.value.field == field
    assert full_groups(8, "uniform", 4) == (2, 0, 4) and full_groups(8, "block", 3) == (3, 5, 1)
    assert full_groups(8, "block", 20) == (8, 0, 1)


def test_block_counts_each_virtual_stage_and_uniform_rebuilds_its_group():
    # 32 layers, pp 2 x vpp 2: chunks of 8 layers; "block" 3 checkpoints layers 0-2 of each chunk
    # (transformer_block.py: num_layers_per_pipeline_rank = len(self.layers), one TransformerBlock per chunk).
    s = scenario_for(LLAMA, workers=4)
    layout = Layout(pp=2, vpp=2, schedule="interleaved", micro_batches=8)
    w = Workload(LLAMA, recompute="full", recompute_method="block", recompute_num_layers=3, layout=layout)
    for view in layout_report(s, w).ranks:
        act = view.shape.act
        assert (act.checkpointed_layers, act.layers) == (6, 10)
    one = activations(LLAMA, 1, 2048, 16, recompute="full")
    four = activations(LLAMA, 1, 2048, 16, recompute="full", recompute_num_layers=4)
    assert four.recompute_working == 4 * one.recompute_working                # the group rebuilt at once
    assert four.checkpointed_layers == 8 and four.layers == 0
    # DeepSeek-V2-Lite: block 0 is dense, the others MoE: the largest group of 3 is three MoE blocks
    grp = activations(DSV2, 1, 2048, 16, recompute="full", recompute_num_layers=3)
    assert grp.recompute_working == 3 * grp.full_blocks["moe"] > 2 * grp.full_blocks["moe"] + grp.full_blocks["dense"]


def test_recompute_flops_price_the_rebuilt_matmuls():
    s = scenario_for(LLAMA)
    rank = layout_report(s, Workload(LLAMA)).ranks[0].rank
    mlp = Workload(LLAMA, recompute="selective", recompute_modules="mlp", seq_len=4096)
    assert recompute_flops(mlp, rank) == 2 * 4096 * 3 * LLAMA.hidden * LLAMA.ffn * 32
    assert recompute_flops(Workload(LLAMA, recompute="selective", recompute_modules="layernorm"), rank) == 0
    block = Workload(LLAMA, recompute="full", recompute_method="block", recompute_num_layers=8)
    full = Workload(LLAMA, recompute="full")
    assert recompute_flops(block, rank) * 4 == recompute_flops(full, rank)


@settings(max_examples=30, deadline=None)
@given(mods=st.sets(st.sampled_from([m for m in RECOMPUTE_MODULES if m != "mla_up_proj"]), min_size=1),
       arch=st.sampled_from([LLAMA, QWEN_MOE, DSV2]), impl=st.sampled_from(["huggingface", "megatron"]))
def test_more_modules_never_keep_more(mods, arch, impl):
    # Each module only frees (its checkpoint's inputs were kept already, or replace what they free): adding one
    # never raises the bytes a block keeps; every module set keeps no more than no recompute.
    base = activations(arch, 1, 2048, 16, implementation=impl)
    text = ",".join(mods)
    act = activations(arch, 1, 2048, 16, implementation=impl, recompute="selective", recompute_modules=text)
    assert act.total <= base.total
    for extra in set(RECOMPUTE_MODULES) - mods - {"mla_up_proj"}:
        more = activations(arch, 1, 2048, 16, implementation=impl, recompute="selective",
                           recompute_modules=text + "," + extra)
        assert more.total <= act.total


def test_fixes_offer_modules_and_the_fewest_blocks_with_their_compute_share():
    from dataclasses import replace
    from zerocalc.answers.fixes import apply, fixes
    s = scenario_for(DSV2)
    w = Workload(DSV2, seq_len=8192, implementation="megatron")    # Megatron's own flags: offered under Megatron
    found = {f.kind: f for f in fixes(s, w, 3)}
    mods, block = found["recompute_modules"], found["recompute_block"]
    # the cheapest modules first (recompute_fixes.MODULE_COST_ORDER), as few as fit
    order = ("moe_act", "layernorm", "mla_up_proj", "shared_experts", "mlp", "moe")
    k = len(mods.workload["recompute_modules"].split(","))
    assert set(mods.workload["recompute_modules"].split(",")) == set(order[:k])
    short = replace(w, recompute="selective", recompute_modules=",".join(order[:k - 1]))
    assert k == 1 or not layout_report(s, short).peaks[3].fits
    assert "more compute here" in mods.cost_note and "more compute here" in block.cost_note
    for fix in (mods, block):
        s2, w2 = apply(fix, s, w)
        assert layout_report(s2, w2).peaks[3].peak_bytes == fix.peak_bytes <= w2.capacity_bytes
    n = block.workload["recompute_num_layers"]
    fewer = replace(w, recompute="full", recompute_method="block", recompute_num_layers=n - 1)
    assert not layout_report(s, fewer).peaks[3].fits                     # the fewest blocks that fit
