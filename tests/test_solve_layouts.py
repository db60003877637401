"""Solvers under a layout and the layout search: every answer, set back as the input, fits and one step further
does not; the CLI's layout flags, JSON keys and refusals."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.layout import Layout
from zerocalc.parallel.search import search_layouts
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report, peaks
from zerocalc.answers.solve import solve
from zerocalc.step.workload import Workload

ROOT = Path(__file__).resolve().parents[1]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "zerocalc", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def setup(model, dp, convention="zero-paper", **kw):
    arch = MODEL_PRESETS[model][0]
    layout_keys = {"tp", "pp", "vpp", "cp", "sequence_parallel", "micro_batches", "schedule"}
    layout = Layout(**{k: v for k, v in kw.items() if k in layout_keys})
    work = Workload(arch, layout=layout, **{k: v for k, v in kw.items() if k not in layout_keys})
    return Scenario.from_convention(convention, params=param_count(arch), workers=dp), work


def test_the_fewest_workers_answer_fits_when_set_back():
    # Issue 8's bug: llama-2-7b, s = 4096, flash, full recompute, H100, micro-batch 1 answered "fewest workers = 2"
    # for stage 1 from 64 workers, while --workers 2 reported 87.0 GB on an 85.5 GB GPU.
    scenario, work = setup("llama-2-7b", 64, seq_len=4096, attention="flash", recompute="full",
                           gpu="H100-SXM-80GB", micro_batch=1)
    fewest = solve(scenario, work).min_workers[1]
    assert fewest is not None
    assert peaks(replace(scenario, workers=fewest), work)[1].fits
    assert not peaks(replace(scenario, workers=fewest - 1), work)[1].fits


models = st.sampled_from(["gpt2-medium", "llama-2-7b", "llama-3-8b", "qwen2.5-7b", "llama-2-13b"])
layouts = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
                    st.booleans(), st.integers(1, 8))


@settings(max_examples=40, deadline=None)
@given(models, st.integers(1, 128), layouts, st.sampled_from(["none", "selective", "op", "full"]),
       st.sampled_from(["A100-40GB", "H100-SXM-80GB", "L4-24GB"]), st.integers(1, 8))
def test_every_solver_answer_fits_and_one_step_further_does_not(model, dp, lay, recompute, gpu, mb):
    tp, pp, cp, sp, m = lay
    arch = MODEL_PRESETS[model][0]
    assume(arch.heads % tp == 0 and arch.n_kv_heads % tp == 0 and arch.ffn % tp == 0)
    scenario, work = setup(model, dp, tp=tp, pp=pp, cp=cp, sequence_parallel=sp, micro_batches=m, seq_len=2048,
                           recompute=recompute, gpu=gpu, micro_batch=mb)
    solution = solve(scenario, work)
    for stage, best in solution.max_micro_batch.items():
        fits = lambda b: peaks(scenario, replace(work, micro_batch=b))[stage].fits  # noqa: E731
        assert (best == 0 or fits(best)) and not fits(best + 1)
    for stage, fewest in solution.min_workers.items():
        if fewest is not None:
            fits = lambda n: peaks(replace(scenario, workers=n, shard_group=None), work)[stage].fits  # noqa: E731
            assert fits(fewest) and (fewest == 1 or not fits(fewest - 1))
            assert solution.min_gpus[stage] == fewest * tp * pp * cp
    fitting = [p.stage for p in peaks(scenario, work) if p.fits]
    assert solution.lowest_stage == (min(fitting) if fitting else None)


def plan_view(scenario, work, plan):
    s = replace(scenario, workers=plan.dp, shard_group=None, offload_optimizer=plan.offload_optimizer,
                offload_params=plan.offload_params)
    layout = Layout(tp=plan.tp, pp=plan.pp, vpp=plan.vpp, cp=plan.cp, sequence_parallel=plan.sequence_parallel,
                    micro_batches=plan.micro_batches, schedule=plan.schedule, ep=plan.ep)
    return s, replace(work, layout=layout, recompute=plan.recompute)


def test_llama3_70b_on_64_h100s_gets_layouts_that_fit():
    # The example: pure data parallelism answers "not even a micro-batch of 1 fits" at every stage.
    scenario, work = setup("llama-3-70b", 64, micro_batch=2, seq_len=4096, micro_batches=8)
    assert solve(scenario, work).lowest_stage is None
    plans = search_layouts(scenario, work)
    assert plans and all(p.gpus == 64 and p.dp * p.tp * p.pp * p.cp == 64 for p in plans)
    assert all(p.dp * 2 * p.micro_batches == 64 * 2 * 8 for p in plans)    # the global batch is held
    assert all(p.tp in (1, 2, 4, 8) for p in plans)                 # within a node of 8, dividing 8 KV heads
    keys = [p.cost_key() for p in plans]
    assert keys == sorted(keys)                                      # cheapest first
    for plan in plans[:5] + plans[-3:]:                              # set back as the input, each fits exactly
        s, w = plan_view(scenario, work, plan)
        p = layout_report(s, w).peaks[plan.stage]
        assert p.fits and p.peak_bytes == plan.peak_bytes


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["llama-2-7b", "llama-3-8b", "qwen2.5-7b"]), st.sampled_from([8, 16, 32]),
       st.sampled_from(["A100-40GB", "H100-SXM-80GB"]), st.integers(1, 4), st.sampled_from([2048, 8192]))
def test_every_listed_layout_fits_and_each_is_the_cheapest_setting_for_its_layout(model, gpus, gpu, mb, seq):
    scenario, work = setup(model, gpus, micro_batch=mb, seq_len=seq, gpu=gpu, micro_batches=4)
    for plan in search_layouts(scenario, work):
        s, w = plan_view(scenario, work, plan)
        assert layout_report(s, w).peaks[plan.stage].peak_bytes == plan.peak_bytes <= plan.capacity_bytes
        if plan.recompute == "full" and plan.offload_level == 0:    # no cheaper recompute fits that layout
            assert not layout_report(s, replace(w, recompute="none")).peaks[plan.stage].fits


# --- the CLI ---------------------------------------------------------------------------------------------------

def test_cli_layout_json_describes_every_rank():
    done = cli("--model", "llama-3-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--sequence-parallel",
               "--micro-batches", "8", "--micro-batch", "1", "--seq-len", "4096", "--convention", "megatron",
               "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["layout"] == {**out["layout"], "dp": 4, "tp": 8, "pp": 2, "vpp": 1, "cp": 1,
                             "sequence_parallel": True, "micro_batches": 8, "schedule": "1f1b", "world_size": 64}
    assert out["workers"] == 4 and out["world_size"] == 64
    ranks = out["ranks"]
    assert [r["pp_stage"] for r in ranks] == [0, 1] and sum(r["count"] for r in ranks) == 64
    for r in ranks:
        assert [s["stage"] for s in r["stages"]] == [0, 1, 2, 3]
        assert set(r["stages"][0]["per_worker_bytes"]) == {"parameters", "gradients", "optimizer"}
        assert isinstance(r["activation_bytes"], int) and isinstance(r["activation_bytes_per_layer"], int)
        assert len(r["peak"]) == 4
    # top-level fields describe the worst rank, named
    for p, stage in zip(out["peak"], out["stages"]):
        worst = next(r for r in ranks if r["name"] == p["rank"])
        assert p["peak_bytes"] == worst["peak"][p["stage"]]["peak_bytes"]
        assert stage["per_worker_total_bytes"] == worst["stages"][p["stage"]]["per_worker_total_bytes"]
    assert out["solve"]["layouts"] and out["solve"]["layouts_gpus"] == 64
    assert out["solve"]["min_gpus"]["3"] == out["solve"]["min_workers"]["3"] * 16


@pytest.mark.parametrize("args, message", [
    (["--model", "llama-3-8b", "--tp", "3"], "--tp: got 3; allowed: a divisor of heads, kv_heads and ffn"),
    (["--model", "llama-3-8b", "--tp", "16"], "not of kv_heads (8)"),
    (["--model", "llama-3-8b", "--pp", "33"], "--pp: got 33; allowed: at most the layers (32)"),
    (["--model", "llama-3-8b", "--gpus", "60", "--tp", "8"], "--gpus: got 60; allowed: a multiple of tp x pp x cp (8)"),
    (["--model", "llama-3-8b", "--gpus", "64", "--tp", "8", "--workers", "4"], "gives 8 data-parallel workers"),
    (["--params", "7B", "--tp", "2"], "--tp needs a model"),
    (["--model", "llama-3-8b", "--cp", "2", "--attention", "eager"], "--cp: got 2; allowed: 1 with eager attention"),
    (["--model", "llama-3-8b", "--schedule", "interleaved"], "--vpp: got 1; allowed: at least 2"),
])
def test_cli_refuses_layouts_by_flag(args, message):
    done = cli(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_cli_vpp_implies_the_interleaved_schedule_and_gpus_alone_sets_the_workers():
    out = json.loads(cli("--model", "llama-3-8b", "--pp", "4", "--vpp", "2", "--micro-batches", "8",
                         "--json").stdout)
    assert out["layout"]["schedule"] == "interleaved" and out["layout"]["vpp"] == 2
    out = json.loads(cli("--params", "7B", "--gpus", "16", "--json").stdout)
    assert out["workers"] == 16
