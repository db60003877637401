"""The "pack the batch" fix (issue 37, zerocalc/answers/pack_fix.py): a padded batch whose worst step does not fit,
with the samples' lengths given, is offered one packed row of the typical padded micro-batch's tokens; applied as
the core's change, as CLI flags and as the page's fields, it gives the verdict it promised (the pattern of
tests/test_fixes.py), and it keeps the job. Packing bounds the worst step by the budget: step/batches.py."""

from __future__ import annotations

import json

from tests.test_fixes import check
from zerocalc.answers.fixes import fixes
from zerocalc.answers.pack_fix import pack_budget
from zerocalc.cli.main import run
from zerocalc.step.batches import median_longest

LENGTHS = "p50=512,p90=1024,p99=2048,max=8192"
BASE = ["--model", "llama-3.1-8b", "--finetune", "lora", "--recompute", "full", "--gpu", "H100-SXM-80GB",
        "--workers", "1", "--micro-batch", "8", "--seq-len", "8192"]


def plan():
    from ui.state.convert import from_query, resolve
    r = resolve(from_query({"model": "llama-3.1-8b", "finetune": "lora", "recompute": "full", "gpu": "H100-SXM-80GB",
                            "workers": "1", "micro_batch": "8", "seq_len": "8192", "batch_mode": "padded",
                            "batch_lengths": LENGTHS})[0])
    return r.scenario, r.workload


def test_a_padded_batch_that_does_not_fit_is_offered_packing_with_the_typical_budget():
    s, w = plan()
    assert w.batch_mode == "padded" and not fixes(s, w, 0)[0].job_change
    found = check(s, w, 0)                                   # applied, each fix fits at the peak it shows
    pack = next(f for f in found if f.kind == "pack")
    budget = 8 * median_longest(w.batch_lengths, 8)          # 8 x the median longest of 8 samples: 8 x 1,218
    assert budget == pack_budget(w) == pack.workload["seq_len"] == 9_744
    assert pack.workload == {"batch_mode": "packed", "micro_batch": 1, "seq_len": 9_744}
    assert not pack.job_change and found.index(pack) == 0     # keeps the job; the cheapest here


def test_applied_as_flags_it_gives_the_verdict_it_promised():
    d = json.loads(run(BASE + ["--lengths", LENGTHS, "--json"]))
    assert not d["verdicts"][0]["fits"]
    pack = next(f for f in d["fixes"] if f["kind"] == "pack")
    assert pack["sentence"].startswith("Pack the batch (token budget 9,744): ZeRO-0 peak")
    assert pack["flags"][:6] == ["--batch-mode", "packed", "--micro-batch", "1", "--seq-len", "9744"]
    after = json.loads(run(BASE + ["--lengths", LENGTHS, *pack["flags"], "--json"]))
    assert after["verdicts"][0]["fits"] and after["peak"][0]["peak_bytes"] == pack["peak_bytes"]


def test_applied_on_the_page_it_gives_the_verdict_it_promised():
    from ui.drawing.panels import fix_fields
    from ui.state.convert import from_query, resolve, to_query
    s, w = plan()
    pack = next(f for f in fixes(s, w, 0) if f.kind == "pack")
    state = from_query({"model": "llama-3.1-8b", "finetune": "lora", "recompute": "full", "gpu": "H100-SXM-80GB",
                        "workers": "1", "micro_batch": "8", "seq_len": "8192", "batch_mode": "padded",
                        "batch_lengths": LENGTHS})[0]
    state.update(fix_fields(pack))
    r = resolve(from_query(to_query(state))[0])             # through the link, as the page keeps it
    from zerocalc.parallel.ranks import layout_report
    peak = layout_report(r.scenario, r.workload).peaks[0]
    assert r.workload.batch_mode == "packed" and peak.fits and peak.peak_bytes == pack.peak_bytes


def test_nothing_to_gain_without_lengths_or_when_not_padded():
    s, w = plan()
    from dataclasses import replace
    assert pack_budget(replace(w, batch_lengths=())) is None        # typical = worst: packing bounds nothing
    assert pack_budget(replace(w, batch_mode="packed")) is None
