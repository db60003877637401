"""The layout search's shortcuts (zerocalc/parallel/fit.py and search._search) against the search they stand for:
every candidate layout, every recompute / offload setting in cost order, layout_report's own peaks. The search
reads stage_peak_bytes instead of the report's phases, shares a layout's step shapes across its offload settings,
drops a stage whose model states alone are above the card at the most offloaded setting, and asks only the stages
still open; none of that may change a plan it lists or the count."""

from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.costs import bubble_fraction, time_overhead
from zerocalc.parallel.fit import layout_fit
from zerocalc.parallel.ranks import layout_report
from zerocalc.parallel.search import (OFFLOADS, LAYOUT_LIMITS, Plan, _layout_for, _recomputes, _search,
                                      bounded_candidates, recompute_variant)
from zerocalc.scenario import FieldError
from zerocalc.step.allocator import DEFAULT_PERCENT
from zerocalc.step.workload import Workload
from zerocalc.tables import STAGES


def _plan(model, gpus, convention="zero-paper", optimizer_in_backward=False, **kw):
    arch = MODEL_PRESETS[model][0]
    layout = Layout(micro_batches=kw.pop("micro_batches", 1))
    work = Workload(arch, layout=layout, fragmentation_percent=DEFAULT_PERCENT,
                    optimizer_in_backward=optimizer_in_backward, **kw)
    return Scenario.from_convention(convention, params=param_count(arch), workers=gpus), work


def _brute_force(scenario, workload, gpus):
    """Every (layout, stage) with its cheapest setting that fits, each setting's whole layout_report."""
    plans = []
    options = [(r, off) for off in OFFLOADS for r in _recomputes(workload)]
    global_batch = scenario.workers * workload.micro_batch * workload.layout.micro_batches
    for tp, pp, cp, ep, sp in bounded_candidates(workload, gpus, scenario.gpus_per_node):
        dp = gpus // (tp * pp * cp)
        if global_batch % (dp * workload.micro_batch):
            continue
        micro_batches = global_batch // (dp * workload.micro_batch)
        if micro_batches > LAYOUT_LIMITS["micro_batches"][1] or micro_batches > 1 and workload.optimizer_in_backward:
            continue
        layout = _layout_for(workload, tp, pp, cp, ep, sp, micro_batches)
        try:
            base = replace(workload, layout=layout)
        except FieldError:
            continue
        for stage in ({0, 1, 2, 3} if dp * cp > 1 else {0}):
            for recompute, offload in options:
                level = OFFLOADS.index(offload)
                if level and (stage == 0 or (level == 2 and stage != 3)):
                    continue
                s = replace(scenario, workers=dp, shard_group=None, offload_optimizer=offload[0],
                            offload_params=offload[1])
                w = replace(base, **recompute_variant(base, recompute))
                report = layout_report(s, w)
                p = report.peaks[stage]
                if p.fits:
                    plans.append(Plan(gpus, dp, tp, pp, cp, ep, layout.vpp, layout.schedule, sp, micro_batches,
                                      stage, recompute, offload[0], offload[1], p.peak_bytes, p.capacity_bytes,
                                      report.ranks[report.worst[stage]].rank.name,
                                      max(sum(v.communication[stage].values()) for v in report.ranks),
                                      max(v.recompute_flops for v in report.ranks), bubble_fraction(layout),
                                      max(time_overhead(w, v.rank, v.recompute_flops) for v in report.ranks)))
                    break
    return tuple(sorted(plans, key=Plan.cost_key))


CASES = {
    "a dense model, some layouts fit only with recompute or offload": (
        ("llama-3-8b", 16), dict(micro_batch=2, seq_len=8192, gpu="A100-40GB", micro_batches=4)),
    "a mixture of experts over expert parallelism": (
        ("mixtral-8x7b", 32), dict(micro_batch=1, seq_len=4096, gpu="H100-SXM-80GB")),
    "DeepSpeed's buffers (a stage-3 gathered window)": (
        ("qwen2.5-7b", 8, "deepspeed"), dict(micro_batch=4, seq_len=4096, gpu="A100-40GB")),
    "the optimizer in backward (no floor: its step drops the gradients)": (
        ("llama-3-8b", 8, "fsdp2", True), dict(micro_batch=1, seq_len=4096, gpu="A100-40GB")),
    "LoRA (frozen groups)": (
        ("llama-3-8b", 8), dict(micro_batch=2, seq_len=4096, gpu="A100-40GB", finetune=FineTune("lora", lora_rank=16))),
}


@pytest.mark.parametrize("name", CASES)
def test_the_search_lists_what_every_setting_s_whole_report_finds(name):
    args, kw = CASES[name]
    scenario, work = _plan(*args, **kw)
    assert _search(scenario, work, scenario.workers) == _brute_force(scenario, work, scenario.workers)


@pytest.mark.parametrize("name", CASES)
def test_a_layout_fit_reads_the_report_s_peaks_rank_by_rank(name):
    args, kw = CASES[name]
    scenario, work = _plan(*args, **kw)
    for tp, pp, cp, ep, sp in bounded_candidates(work, scenario.workers, scenario.gpus_per_node)[:12]:
        dp = scenario.workers // (tp * pp * cp)
        try:
            w = replace(work, layout=_layout_for(work, tp, pp, cp, ep, sp, work.layout.micro_batches))
            s = replace(scenario, workers=dp, shard_group=None)
            report = layout_report(s, w)
        except FieldError:
            continue
        fit = layout_fit(s, w).ask(STAGES)
        assert [fit.worst(st) for st in STAGES] == list(report.worst)
        assert [fit.peak(st) for st in STAGES] == [p.peak_bytes for p in report.peaks]
        assert fit.fitting() == tuple(st for st, p in enumerate(report.peaks) if p.fits)
