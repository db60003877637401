"""The searches under the caching allocator's model (the default reserve, issue 32) replay only what they need and
answer what the whole report answers: one stage per candidate (parallel/ranks.py worst_peak_at), no replay for a
candidate whose peak without any reserve is already above the card (fitting_peak_at, stage_peaks' replay=False
floor), and a step's events bounded by the blocks replayed (step/timeline.py), not by the rank's layers."""

from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import fitting_peak_at, layout_report, worst_peak_at
from zerocalc.step.peak import stage_peaks
from zerocalc.step.timeline import plan_of, step_events
from zerocalc.step.workload import Workload

PLANS = [("llama-3-8b", 8, Layout(), "H100-SXM-80GB"),
         ("llama-3-70b", 16, Layout(tp=2, pp=4, micro_batches=8), "A100-80GB"),
         ("qwen3-30b-a3b", 8, Layout(ep=4), "H100-SXM-80GB")]


def _plan(model, workers, layout, gpu, **work):
    arch = MODEL_PRESETS[model][0]
    scenario = Scenario.from_convention("megatron", params=param_count(arch), workers=workers)
    return scenario, Workload(arch, layout=layout, gpu=gpu, seq_len=2048, **work)


@pytest.mark.parametrize("model, workers, layout, gpu", PLANS)
def test_one_stage_is_the_reports_own(model, workers, layout, gpu):
    scenario, work = _plan(model, workers, layout, gpu)
    report = layout_report(scenario, work)
    for stage in range(4):
        worst, peak = worst_peak_at(scenario, work, stage)
        assert peak == report.peaks[stage] and worst == report.worst[stage]
        found = fitting_peak_at(scenario, work, stage)
        assert (found is not None) == report.peaks[stage].fits
        for view in report.ranks:                 # the floor: the same parts with no reserve, never above
            floor = stage_peaks(scenario, work, (view.stages[stage],), view.shape, replay=False)[0]
            assert floor.peak_bytes <= view.peaks[stage].peak_bytes


def test_a_candidate_far_above_the_card_is_refused_without_a_replay(monkeypatch):
    from zerocalc.step import allocator
    scenario, work = _plan("llama-3-70b", 8, Layout(), "L4-24GB")
    calls = []
    real = allocator.simulated_reserve
    monkeypatch.setattr(allocator, "simulated_reserve", lambda *a, **k: calls.append(a) or real(*a, **k))
    import zerocalc.step.peak as peak_module
    monkeypatch.setattr(peak_module, "simulated_reserve", allocator.simulated_reserve)
    assert fitting_peak_at(scenario, work, 0) is None and not calls


def test_the_step_events_follow_the_blocks_replayed_not_the_layers():
    """The optimizer step's temporaries are one block's per replayed block (with every layer's, a 4,096-layer
    plan replayed its 96 blocks with 37,000 temporaries: the hardened page's worst link took a minute)."""
    counts = []
    for layers in (8, 64):
        arch = replace(MODEL_PRESETS["llama-3-8b"][0], layers=layers)
        scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=1,
                                            optimizer_impl="foreach")
        report = layout_report(scenario, Workload(arch, seq_len=512))
        view = report.ranks[0]
        plan = plan_of(view.peaks[0], view.shape, view.peaks[0].cycle_unit_bytes)
        assert plan.step_temps and plan.layers == layers
        counts.append(len(step_events(plan, 4)))
    assert counts[0] == counts[1]


def test_the_layout_search_lists_plans_that_fit_with_the_model_and_says_what_it_counted():
    from zerocalc.parallel.search import SHOWN_MODELLED, _layout_for, search_dict, search_layouts
    scenario, work = _plan("llama-3-8b", 8, Layout(), "H100-SXM-80GB", micro_batch=4)
    d = search_dict(scenario, work)
    assert 0 < len(d["layouts"]) <= SHOWN_MODELLED
    for p in d["layouts"]:                      # each listed plan fits by its own report with the model
        plan = next(q for q in search_layouts(scenario, work) if q.peak_bytes == p["peak_bytes"])
        layout = _layout_for(work, plan.tp, plan.pp, plan.cp, plan.ep, plan.sequence_parallel, plan.micro_batches)
        s = replace(scenario, workers=plan.dp, shard_group=None, offload_optimizer=plan.offload_optimizer,
                    offload_params=plan.offload_params)
        w = replace(work, layout=layout, recompute=plan.recompute)
        assert layout_report(s, w).peaks[plan.stage].peak_bytes == plan.peak_bytes
    flat = search_dict(scenario, replace(work, fragmentation_percent=5))
    # more plans fit at 5 % than are re-checked: the count is the 5 % search's, and says so
    assert flat["layouts_count"] > SHOWN_MODELLED and "layouts_count_at_percent" not in flat
    assert d["layouts_count"] == flat["layouts_count"] and d["layouts_count_at_percent"] == 5
