"""What would make it fit (zerocalc.answers.fixes): every listed change, applied, fits at the peak shown; the list is
cheapest first, empty when the stage already fits, and each sentence names what it holds fixed."""

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.answers.fixes import COSTS, apply, fix_dict, fixes, held_settings, sentence
from zerocalc.layout import Layout
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload


def setup(model, dp, convention="zero-paper", **kw):
    arch = MODEL_PRESETS[model][0]
    layout_keys = {"tp", "pp", "vpp", "cp", "sequence_parallel", "micro_batches", "schedule", "ep"}
    layout = Layout(**{k: v for k, v in kw.items() if k in layout_keys})
    work = Workload(arch, layout=layout, **{k: v for k, v in kw.items() if k not in layout_keys})
    return Scenario.from_convention(convention, params=param_count(arch), workers=dp), work


def check(scenario, work, stage, layouts=False):
    found = fixes(scenario, work, stage, layouts=layouts)
    for fix in found:
        s, w = apply(fix, scenario, work)
        peak = layout_report(s, w).peaks[fix.stage]
        assert peak.fits, fix
        assert peak.peak_bytes == fix.peak_bytes and peak.capacity_bytes == fix.capacity_bytes
        text = sentence(fix, scenario, work)
        held = held_settings(scenario, work, fix.stage)
        for name in fix.held:
            if name != "micro_batches" or work.layout.micro_batches > 1:
                assert held[name] in text, (name, text)
        assert "Held:" in text
    # fixes that keep the job first (issue 33), then the cheapest, then the most headroom
    assert [f.order for f in found] == sorted(f.order for f in found)
    return found


def test_issue_13_case_lists_full_recompute_under_the_capacity():
    # Llama-3-8B on 8 GPUs of 44 GB, ZeRO-2, micro-batch 4, sequence 4096: nothing fits; full recompute at
    # micro-batch 1 does, with the global batch held by 4 micro-batches per step. (Issue 13 filed it on
    # 8 x A100 40GB: PyTorch can use 42.30 GB of that card, and full recompute, 42.5 GB, does not fit it; with
    # NCCL's buffers of the 8-GPU data-parallel group (step/nccl.py, issue 32: 0.74 GB on a custom card, taken as
    # an NVSwitch Hopper node) it needs 43.2 GB, so the card here is 44 GB.)
    scenario, work = setup("llama-3-8b", 8, gpu_memory=44 * 10**9, micro_batch=4, seq_len=4096)
    assert not layout_report(scenario, work).peaks[2].fits
    found = check(scenario, work, 2, layouts=True)
    full = [f for f in found if f.workload.get("recompute") == "full"]
    assert full and full[0].peak_bytes < full[0].capacity_bytes
    assert full[0].workload == {"recompute": "full", "micro_batch": 1} and full[0].layout == {"micro_batches": 4}
    text = sentence(full[0], scenario, work)
    assert text.startswith("Full recompute with micro-batch 1") and "global batch of 32 held" in text
    assert "Held: ZeRO-2, sequence 4,096, 8 data-parallel workers" in text
    kinds = [f.kind for f in found]
    assert "gpu" in kinds and "seq_len" in kinds and "layout" in kinds


def test_a_stage_that_fits_needs_no_fix_and_a_bad_stage_is_named():
    scenario, work = setup("llama-2-7b", 8)
    assert layout_report(scenario, work).peaks[3].fits
    assert fixes(scenario, work, 3) == []
    with pytest.raises(FieldError, match="stage"):
        fixes(scenario, work, 4)


def test_a_higher_stage_offload_more_workers_and_a_bigger_gpu():
    scenario, work = setup("llama-2-7b", 8)                 # the default view: ZeRO-0 does not fit, ZeRO-1 does
    kinds = {f.kind: f for f in check(scenario, work, 0)}
    higher = kinds["stage"]
    assert higher.stage == 1 and higher.scenario == {} and higher.workload == {}
    assert sentence(higher, scenario, work, stage=0).startswith("ZeRO-1 instead of ZeRO-0: ZeRO-1 peak")
    scenario, work = setup("llama-2-7b", 2, gpu="A100-40GB", micro_batch=1, seq_len=1024, recompute="full")
    kinds = {f.kind: f for f in check(scenario, work, 3)}
    assert kinds["offload"].scenario == {"offload_optimizer": "cpu"}
    assert kinds["workers"].scenario == {"workers": 5, "shard_group": None}   # ZeRO-3 keeps 1e9 parameters resident
    assert [f.kind for f in fixes(scenario, work, 3)] == ["offload", "workers", "gpu"]      # cheapest first
    # the smallest card PyTorch can use more of than the A100 40GB's 39.39 GiB: the H100 PCIe (79.11 GiB)
    assert kinds["gpu"].workload == {"gpu": "H100-PCIe-80GB", "gpu_memory": None}


def test_the_bigger_gpu_is_the_smallest_catalogued_one_that_holds_the_peak():
    scenario, work = setup("llama-2-7b", 8, gpu="L4-24GB", micro_batch=2)
    found = {f.kind: f for f in check(scenario, work, 3)}
    gpu = found["gpu"]
    from zerocalc.gpus import GPU_CATALOG

    def peak_on(key):          # each card's own context and workspaces (step/context.py, step/workspaces.py)
        return layout_report(scenario, replace(work, gpu=key)).peaks[3].peak_bytes
    smaller = [k for k, g in GPU_CATALOG.items() if g.usable_bytes < gpu.capacity_bytes and
               peak_on(k) <= g.usable_bytes]
    assert smaller == [] and gpu.peak_bytes == peak_on(gpu.workload["gpu"])


def test_fix_dict_is_plain_data():
    scenario, work = setup("llama-3-8b", 8, gpu="A100-40GB", micro_batch=4, seq_len=4096)
    rows = [fix_dict(f, scenario, work) for f in fixes(scenario, work, 2)]
    assert rows and all(isinstance(r["peak_bytes"], int) and r["sentence"] for r in rows)
    assert {r["kind"] for r in rows} <= set(COSTS)


models = st.sampled_from(["gpt2-medium", "llama-2-7b", "llama-3-8b", "qwen2.5-7b", "llama-2-13b", "mixtral-8x7b"])


@settings(max_examples=80, deadline=None)
@given(models, st.integers(1, 64), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]),
       st.sampled_from(["none", "selective", "op", "full"]), st.sampled_from(["flash", "eager"]),
       st.sampled_from(["A100-40GB", "H100-SXM-80GB", "L4-24GB", "V100-16GB"]), st.integers(1, 8),
       st.sampled_from([512, 1024, 2048, 4096, 3000]), st.integers(0, 3), st.integers(1, 4),
       st.sampled_from(["zero-paper", "megatron", "pure-bf16"]))
def test_every_listed_change_applied_fits(model, dp, tp, pp, recompute, attention, gpu, mb, seq, stage, m,
                                          convention):
    arch = MODEL_PRESETS[model][0]
    assume(arch.heads % tp == 0 and arch.n_kv_heads % tp == 0 and arch.ffn % tp == 0 and arch.layers >= pp)
    try:
        scenario, work = setup(model, dp, convention, tp=tp, pp=pp, micro_batches=m, seq_len=seq,
                               recompute=recompute, attention=attention, gpu=gpu, micro_batch=mb,
                               sequence_parallel=tp > 1 and seq % tp == 0)
        layout_report(scenario, work)
    except FieldError:
        assume(False)
    found = check(scenario, work, stage, layouts=dp * tp * pp <= 64)
    if layout_report(scenario, work).peaks[stage].fits:
        assert found == []


def test_a_fix_never_holds_what_it_changes():
    scenario, work = setup("llama-3-8b", 8, gpu="A100-40GB", micro_batch=4, seq_len=4096)
    for fix in fixes(scenario, work, 2, layouts=True):
        s, w = apply(fix, scenario, work)
        before, after = held_settings(scenario, work, 2), held_settings(s, w, fix.stage)
        assert all(before[n] == after[n] for n in fix.held)
        assert any(before[n] != after[n] for n in before)
        assert replace(work) == work


def test_change_effect_is_the_difference_of_two_whole_reports():
    from zerocalc.answers.fixes import change_effect, effect_dict
    a, wa = setup("llama-3-8b", 8)
    b, wb = setup("llama-3-8b", 32, micro_batch=2)
    effect = change_effect((a, wa, 3), (b, wb, 2))
    ra, rb = layout_report(a, wa), layout_report(b, wb)
    assert effect.moved_peak_bytes == rb.peaks[2].peak_bytes - ra.peaks[3].peak_bytes
    assert effect.moved_state_bytes == rb.stages[2].gpu_bytes - ra.stages[3].gpu_bytes
    plain = change_effect((a, None, 3), (b, None, 3))        # a parameter count alone: no peak
    assert plain.moved_peak_bytes is None and effect_dict(plain)["moved_state_bytes"] < 0
