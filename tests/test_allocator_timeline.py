"""The step's allocation sequence (zerocalc/step/timeline.py) and the simulated reserve (step/allocator.py
simulated_reserve) on real plans, and the model against the validation ledger's reserved and device cases
(tools/allocator_compare.py; the cases and their sources: validation/cases.json)."""

import time

import pytest

from tools import allocator_compare
from tools.validation_ledger import load_cases
from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.allocator import simulated_reserve
from zerocalc.step.caching_allocator import FREE, MALLOC
from zerocalc.step.peak import tensor_bytes
from zerocalc.step.replay_pieces import pieces_of
from zerocalc.step.timeline import ALL_GATHER, REDUCE_SCATTER, events, plan_of, replay
from zerocalc.step.workload import Workload

GIB = 2**30


@pytest.fixture(scope="module")
def report():
    arch = MODEL_PRESETS["llama-2-7b"][0]
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
    return layout_report(scenario, Workload(arch, micro_batch=2))


def test_every_step_tensor_is_freed_and_the_states_stay(report):
    peak, shape = report.peaks[0], report.ranks[0].shape
    plan = plan_of(peak, shape)
    ev = events(plan, plan.layers)
    alive = {e[1] for e in ev if e[0] == MALLOC} - {e[1] for e in ev if e[0] == FREE}
    persistent = len(plan.layer_states) * plan.layers + len(plan.other_states) + 2 + (plan.extra > 0)
    assert len(alive) == persistent
    assert sum(e[2] for e in ev if e[0] == MALLOC and e[1] in alive) == \
        sum(plan.layer_states) * plan.layers + sum(plan.other_states) + plan.workspaces + plan.extra


def test_the_replayed_peak_is_the_reports_tensors(report):
    # ZeRO-0 and ZeRO-3 peak where every part is in the sequence: the replay's allocated peak is the report's
    # tensors to within rounding (512 B per tensor, whole blocks handed out in the large pool)
    for stage in (0, 3):
        peak = report.peaks[stage]
        shape = report.ranks[0].shape
        pieces = pieces_of(report.scenario, report.workload, shape, stage)
        r = replay(plan_of(peak, shape, peak.cycle_unit_bytes, pieces), peak_layers(report))
        assert abs(r.peak_allocated / tensor_bytes(peak) - 1) < 0.02, stage


def peak_layers(report):
    return report.ranks[0].shape.act.layers


def test_zero3_units_go_to_their_own_streams(report):
    peak = report.peaks[3]
    plan = plan_of(peak, report.ranks[0].shape, peak.cycle_unit_bytes)
    streams = {e[3] for e in events(plan, 4) if e[0] == MALLOC}
    assert streams == {0, ALL_GATHER, REDUCE_SCATTER}
    assert {e[3] for e in events(plan_of(report.peaks[2], report.ranks[0].shape), 4) if e[0] == MALLOC} == {0}


def test_the_simulated_reserve(report):
    shape = report.ranks[0].shape
    for peak in report.peaks:
        start = time.perf_counter()
        low, point = simulated_reserve(peak, shape)
        assert time.perf_counter() - start < 1.0
        assert 0 <= low <= point < tensor_bytes(peak) // 5
        assert point > 2**30                   # a 7B step at 2 x 4096 tokens reserves GiBs beyond its tensors
        expandable = simulated_reserve(peak, shape, "expandable")[1]
        assert expandable < point              # one growing segment per stream: no slivers
    assert simulated_reserve(report.peaks[0], shape, "flat") == (0, 0)


def test_the_model_against_the_ledgers_reserved_cases():
    """Before (5 % of the tensors) and with the model, on every expressed max_memory_reserved / device case
    (tools/allocator_compare.py), the cases at the library releases they ran (validation/cases.json --versions):
    the median error goes from -4.4 % to +2.7 %, the cases under by more than 5 % from 14 of 28 to 3 (PEFT-01
    -7.2 %, VLM-02 -12.9 %, AA-03 -6.0 %), those within 10 % stay 22. The loss's transients replayed as their
    tensors, forward's freed before backward's, take TT-11 from -7.0 % to -2.5 %; FSDP1's wrapping residue
    (fsdp1_wrap.py) takes Answer.AI's 512-token runs from -16 / -8 % to -6 / -1 %; their larger batches read
    +10.8..+15.9 % over, the loss moment and the rebuilt block summed (step/peak.py _phase_items: with the larger
    moment alone AA-10, AA-11 and the PEFT cases would read 8-20 % under). bitsandbytes' quantization state kept
    whole on every rank under ZeRO-3 and FSDP1 (step/buffers.py SHARDS_QUANT_STATE) took PEFT-02 from -8.6 % to
    -2.8 % and AA-03 from -7.9 % to -6.0 %, and AA-04 and AA-07 from +9.2 / +10.0 % to +11.0 / +10.8 % (the safe
    side): 24 within 10 % before it, 22 after.
    The FSDP1 CPU-offload runs (2026-12-07: AA-13, AA-14, AA-16 to AA-19, PEFT-03) make 35 cases, 16 under by more
    than 5 % before and 4 after (PEFT-03 -23.6 % from -30.1 %, unexplained), 24 within 10 % before and 25 after;
    Answer.AI's QLoRA rows at their largest batch read +16..+18 % (AA-17 to AA-19), the sum again. torchtitan's
    rows with the K, V copies its attention made then (step/repeated_kv.py, in the block each recompute rebuilds):
    14 under by more than 5 % before (TT-11 -4.6 % from -5.3 %, TT-19 -4.9 % from -5.3 %), 4 after; and the
    grouped-query rows of Answer.AI's, whose transformers 4.40 SDPA repeated K and V too: 25 within 10 % before,
    AA-14 -1.8 % from -3.6 %, AA-18 +19.6 % from +18.3 % after (the sum's side)."""
    rows = [allocator_compare.compare(c) for c in load_cases()
            if c.get("argv") and c["kind"] in ("max_memory_reserved", "device")]
    assert len(rows) == 35
    before = sorted(r["before"] / r["measured"] - 1 for r in rows)
    after = sorted(r["after"] / r["measured"] - 1 for r in rows)
    assert sum(e < -0.05 for e in before) == 14 and sum(e < -0.05 for e in after) <= 4
    assert sum(abs(e) <= 0.10 for e in after) >= 25 and sum(abs(e) <= 0.10 for e in before) == 25
    assert sum(e > 0.10 for e in after) <= 8 and sum(e < -0.10 for e in after) <= 2    # the misses: over, bar two
    assert abs(after[17]) < 0.035 and after[0] > -0.24 and after[-1] < 0.20


# A real step recorded on the CPU by tests/measure/allocation_sequence.py (recorded_events(RECORDED_CONFIG, 512):
# Hugging Face Llama, bf16, sdpa, two steps of AdamW foreach, torch 2.13.0 / transformers 5.24.0) and replayed
# through the allocator model: its peak allocated and its reserve (peak reserved - peak allocated), in bytes.
RECORDED_CONFIG = dict(hidden_size=512, intermediate_size=1376, num_attention_heads=8, num_key_value_heads=8,
                       num_hidden_layers=3, vocab_size=4000)
RECORDED = {"peak_allocated": 144_641_024, "reserve": 27_325_440}


def test_the_timeline_against_a_recorded_step():
    """zerocalc's tensors for the same plan (without the GEMM workspaces, which the CPU does not take) are the
    recorded peak to 1 %, and the timeline's simulated reserve is the recorded sequence's to 20 % (24.0 against
    27.3 MB: the timeline lumps what the real step splits into more, smaller transients)."""
    from zerocalc.model.hf_config import architecture_from_config

    arch = architecture_from_config(dict(model_type="llama", max_position_embeddings=2048,
                                         tie_word_embeddings=False, **RECORDED_CONFIG))
    scenario = Scenario.from_convention("pure-bf16", params=param_count(arch), workers=1, optimizer_impl="foreach")
    work = Workload(arch, micro_batch=1, seq_len=512, attention="flash", implementation="huggingface")
    peak = layout_report(scenario, work).peaks[0]
    workspaces = peak.phases[peak.peak_phase]["library workspaces"]
    assert abs((tensor_bytes(peak) - workspaces) / RECORDED["peak_allocated"] - 1) < 0.01
    shape = layout_report(scenario, work).ranks[0].shape
    plan = plan_of(peak, shape, 0, pieces_of(scenario, work, shape, 0))
    r = replay(plan, plan.layers)
    assert abs((r.peak_reserved - r.peak_allocated) / RECORDED["reserve"] - 1) < 0.20


def test_the_command_line_opts_into_the_allocators_model():
    """--fragmentation-percent model: the reserve is the replayed step's (Workload fragmentation_percent None)."""
    import json
    from dataclasses import replace

    from zerocalc.cli.main import run
    from zerocalc.model.presets import MODEL_PRESETS
    from zerocalc.parallel.ranks import report_for
    from zerocalc.scenario import Scenario
    from zerocalc.step.workload import Workload

    shown = json.loads(run(["--model", "gpt2", "--workers", "2", "--fragmentation-percent", "model", "--json"]))
    arch, params, _ = MODEL_PRESETS["gpt2"]
    core = report_for(Scenario(params=params, workers=2), replace(Workload(arch), fragmentation_percent=None))
    assert [p["peak_bytes"] for p in shown["peak"]] == [p.peak_bytes for p in core.peaks]
    assert all(p.simulated_reserve is not None for p in core.peaks)
    assert shown["workload"]["fragmentation_percent"] is None
