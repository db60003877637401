"""The fixes list (issue 33): changes that keep the job come first and those that change it (another GPU, shorter
sequences, more GPUs and so a larger global batch) are labelled; recompute is offered as each framework can set it
(Megatron's modules and block method under Megatron only; full recompute beside torchtitan's op-level policy); a
layout fix knows when its tensor-parallel group talks over PCIe (the catalogue's INTERCONNECT, vendor datasheets)."""

import json

from zerocalc.answers.combined import advice
from zerocalc.answers.fixes import JOB_CHANGES, fixes, sentence
from zerocalc.cli.main import run
from zerocalc.gpus import GPU_CATALOG, INTERCONNECT, fast_links
from ui.state.convert import from_query, resolve


def plan(**query):
    r = resolve(from_query({k: str(v) for k, v in query.items()})[0])
    return r.scenario, r.workload


def test_fixes_that_keep_the_job_come_first_and_the_others_say_what_they_change():
    report = json.loads(run(["--model", "gemma-3-27b", "--gpu", "H100-SXM-80GB", "--workers", "8", "--json"]))
    flags = [f["changes_job"] for f in report["fixes"]]
    assert any(flags) and not all(flags)
    assert flags == sorted(flags, key=bool), flags                 # every job-keeping fix before the first other
    for f in report["fixes"]:
        kinds = {f["kind"], *f["parts"]}
        assert bool(f["changes_job"]) == bool(kinds & set(JOB_CHANGES))
        assert ("Changes the job" in f["sentence"]) == bool(f["changes_job"])


def test_full_recompute_is_offered_beside_op_level_outside_megatron():
    # 16 workers: on 8 the allocator model's reserve (the default, issue 32) leaves full recompute alone too big
    s, w = plan(model="gemma-3-27b", gpu="H100-SXM-80GB", workers=16)
    kinds = [f.kind for f in fixes(s, w, 3)]
    assert "recompute_full" in kinds and "recompute_block" not in kinds and "recompute_modules" not in kinds
    # 12 workers: on 8 DeepSpeed's resident parameters (1e9 beside the running module) leave no recompute enough
    s, w = plan(model="gemma-3-27b", gpu="H100-SXM-80GB", workers=12, implementation="megatron")
    assert {"recompute_block", "recompute_modules"} & {f.kind for f in fixes(s, w, 3)}


def test_a_layout_fix_over_pcie_says_so_and_costs_more():
    assert set(INTERCONNECT) == set(GPU_CATALOG)
    assert not fast_links("RTX-4090-24GB", 2) and fast_links("RTX-3090-24GB", 2) and not fast_links("RTX-3090-24GB", 4)
    assert fast_links("H100-SXM-80GB", 8) and fast_links("RTX-4090-24GB", 1)
    for gpu, slow in (("RTX-4090-24GB", True), ("H100-SXM-80GB", False)):
        s, w = plan(model="llama-3-70b", gpu=gpu, workers=8, seq_len=4096)
        layout = [f for f in fixes(s, w, 3, layouts=True) if f.kind == "layout"]
        for f in layout:
            group = f.layout.get("tp", 1) * f.layout.get("cp", 1)
            assert ("over PCIe" in f.cost_note) == (slow and group > 1), (gpu, f.layout, f.cost_note)
            assert ("over PCIe" in sentence(f, s, w)) == (slow and group > 1), sentence(f, s, w)   # the page's line


def test_advice_orders_combined_changes_the_same_way():
    s, w = plan(model="llama-3-70b", gpu="L4-24GB", workers=2)
    found = advice(s, w, 3)
    assert found and [bool(f.job_change) for f in found] == sorted(bool(f.job_change) for f in found)
