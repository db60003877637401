"""Full recompute of one block in N (torchtitan's layer SAC) through the core: activations, pipeline ranks, costs,
fixes, the layout search and the report. The rule is torchtitan's (torchtitan/distributed/activation_checkpoint.py
_apply_layer_sac: a module-level counter, incremented per transformer block a rank builds, wraps the block in
checkpoint_wrapper when `count % ac_freq == 0`); the bytes per block are measured against Hugging Face models in
tests/test_activation_validation.py (test_one_block_in_n_checkpointed_within_2_percent)."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from zerocalc import Scenario
from zerocalc.step.activations import activations
from zerocalc.parallel.costs import recompute_flops
from zerocalc.answers.fixes import fixes
from zerocalc.layout import Layout
from zerocalc.parallel.search import search_layouts
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.output.report import full_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

LLAMA8B = MODEL_PRESETS["llama-3-8b"][0]
SCENARIO = Scenario.from_convention("zero-paper", params=1, workers=8)


def scenario_for(arch, workers=8):
    from zerocalc.model.inventory import param_count
    return Scenario.from_convention("zero-paper", params=param_count(arch), workers=workers)


def test_every_block_is_todays_full_recompute_exactly():
    s = scenario_for(LLAMA8B)
    one = Workload(LLAMA8B, recompute="full", recompute_every=1)
    assert full_report(s, one) == full_report(s, Workload(LLAMA8B, recompute="full"))


def test_one_in_n_needs_full_recompute_and_says_so():
    with pytest.raises(FieldError) as err:
        Workload(LLAMA8B, recompute="none", recompute_every=2)
    assert err.value.field == "recompute_every" and "unless recompute is full" in err.value.allowed
    with pytest.raises(FieldError) as err:
        Workload(LLAMA8B, recompute="full", recompute_every=0)
    assert err.value.field == "recompute_every"


def test_kept_blocks_save_what_no_recompute_saves_and_checkpointed_ones_their_input():
    # Blocks 2, 4, ..., 32 of 32 checkpointed (count % 2 == 0): 16 keep everything, 16 keep the block input.
    none = activations(LLAMA8B, 1, 2048, 16, recompute="none")
    full = activations(LLAMA8B, 1, 2048, 16, recompute="full")
    half = activations(LLAMA8B, 1, 2048, 16, recompute="full", recompute_every=2)
    assert half.per_layer == none.per_layer and half.checkpointed == full.per_layer
    assert (half.layers, half.checkpointed_layers) == (16, 16)
    assert half.recompute_working == full.recompute_working                  # one block rebuilt in backward
    assert half.total == (16 * none.per_layer_total + 16 * full.per_layer_total + sum(full.embed.values())
                          + sum(full.stage.values()) + sum(full.head.values()))
    assert full.total < half.total < none.total


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8))
def test_the_checkpointed_count_is_floor_layers_over_n(layers, every):
    arch = replace(LLAMA8B, layers=layers)
    act = activations(arch, 1, 128, 16, recompute="full", recompute_every=every)
    if every == 1:
        assert act.checkpointed_layers == 0 and act.layers == layers          # every block: the plain full rule
    else:
        assert act.checkpointed_layers == layers // every
        assert act.layers + act.checkpointed_layers == layers


def test_pipeline_ranks_count_their_own_blocks_across_chunks():
    # 32 layers, pp 4, vpp 2: each rank holds two chunks of 4 blocks, built in order; the counter runs over the
    # rank's 8 blocks, so with N = 3 positions 3 and 6 are checkpointed: one in each chunk.
    layout = Layout(pp=4, vpp=2, schedule="interleaved", micro_batches=8)
    w = Workload(LLAMA8B, recompute="full", recompute_every=3, layout=layout)
    report = layout_report(scenario_for(LLAMA8B, 1), w)
    for view in report.ranks:
        assert view.shape.act.checkpointed_layers == 2
        assert view.shape.act.layers == 6
    none = layout_report(scenario_for(LLAMA8B, 1), replace(w, recompute="none", recompute_every=1))
    full = layout_report(scenario_for(LLAMA8B, 1), replace(w, recompute_every=1))
    for a, b, c in zip(full.ranks, report.ranks, none.ranks):
        assert a.shape.activation_bytes < b.shape.activation_bytes < c.shape.activation_bytes


def test_a_rank_with_no_checkpointed_block_rebuilds_nothing():
    # pp 8: 4 blocks per rank; N = 5 checkpoints none of them, so no block is rebuilt in backward either.
    w = Workload(LLAMA8B, recompute="full", recompute_every=5, layout=Layout(pp=8, micro_batches=8))
    report = layout_report(scenario_for(LLAMA8B, 1), w)
    none = layout_report(scenario_for(LLAMA8B, 1), replace(w, recompute="none", recompute_every=1))
    for a, b in zip(report.ranks, none.ranks):
        assert a.shape.act.checkpointed_layers == 0 and a.shape.act.recompute_working == 0
        assert a.shape.act.per_layer == b.shape.act.per_layer


def test_recomputed_forward_flops_scale_with_the_checkpointed_blocks():
    s = scenario_for(LLAMA8B)
    full = layout_report(s, Workload(LLAMA8B, recompute="full"))
    half = layout_report(s, Workload(LLAMA8B, recompute="full", recompute_every=2))
    quarter = layout_report(s, Workload(LLAMA8B, recompute="full", recompute_every=4))
    assert half.ranks[0].recompute_flops * 2 == full.ranks[0].recompute_flops
    assert quarter.ranks[0].recompute_flops * 4 == full.ranks[0].recompute_flops


def test_tensor_parallel_traffic_counts_only_the_rebuilt_forwards():
    # Megatron's TP all-gather / reduce-scatter: 8 T h w per layer, + 4 T h w per block whose forward runs again.
    s = scenario_for(LLAMA8B)
    lay = Layout(tp=2, sequence_parallel=True)

    def traffic(**work):
        return layout_report(s, Workload(LLAMA8B, layout=lay, **work)).ranks[0].communication[0]["tensor parallel"]

    none, full, half = traffic(), traffic(recompute="full"), traffic(recompute="full", recompute_every=2)
    assert none < half < full and full - half == half - none


def test_a_fix_offers_every_block_when_one_in_n_does_not_fit():
    s = replace(scenario_for(LLAMA8B), workers=8)
    # at a 5 % reserve: with the allocator model's (4.2 GB here) every block at micro-batch 1 is 0.1 GB over
    w = Workload(LLAMA8B, micro_batch=4, seq_len=8192, recompute="full", recompute_every=2, gpu="A100-40GB",
                 fragmentation_percent=5)
    found = [f for f in fixes(s, w, 3) if f.kind.startswith("recompute")]
    assert found and found[0].workload["recompute_every"] == 1
    from zerocalc.answers.fixes import apply, sentence
    s2, w2 = apply(found[0], s, w)
    assert w2.recompute_every == 1 and layout_report(s2, w2).peaks[3].fits
    assert "of every block" in sentence(found[0], s, w, "GB", 3)


def test_the_layout_search_keeps_one_in_n_for_full_and_drops_it_otherwise():
    s = scenario_for(MODEL_PRESETS["llama-3-70b"][0], 8)
    w = Workload(MODEL_PRESETS["llama-3-70b"][0], seq_len=4096, recompute="full", recompute_every=2)
    plans = search_layouts(replace(s, workers=64), w)
    assert plans                                              # runs: every variant is a valid workload


def test_the_report_names_the_checkpointed_block_terms():
    s = scenario_for(LLAMA8B)
    r = full_report(s, Workload(LLAMA8B, recompute="full", recompute_every=2))
    assert r["workload"]["recompute_every"] == 2
    assert r["activation_terms"]["checkpointed_block"] == {"block input (checkpoint)": 2 * 2048 * 4096}


def test_a_fix_that_turns_recompute_off_drops_one_in_n():
    # A layout found by the search may run without recompute: applying it must give a valid workload (the app
    # raised here before: recompute none with recompute_every 2).
    from zerocalc.answers.fixes import Fix, apply
    s = scenario_for(LLAMA8B)
    w = Workload(LLAMA8B, recompute="full", recompute_every=2)
    fix = Fix("layout", 3, {}, {"recompute": "none"}, {"tp": 2}, 0, 1, (), 6, "")
    _, w2 = apply(fix, s, w)
    assert (w2.recompute, w2.recompute_every, w2.layout.tp) == ("none", 1, 2)
    keep = Fix("micro_batch", 3, {}, {"micro_batch": 2}, {}, 0, 1, (), 2, "")
    assert apply(keep, s, w)[1].recompute_every == 2                     # untouched recompute keeps its N
