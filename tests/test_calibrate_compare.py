"""Calibration on mixed pastes and garbage (merged formats, clear messages, fuzzed text), and compare()'s
arithmetic on a worked example.
"""

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.test_calibrate import FIXTURES, GIB, H100_TOTAL, MIB, STATS_ALLOC_PEAK, STATS_RESERVED_PEAK, fixture
from zerocalc import Scenario
from zerocalc.gpus import ESTIMATE_GAP
from zerocalc.answers.calibrate.compare import compare, compare_stage
from zerocalc.answers.calibrate.measurement import FORMATS, CalibrationError, Measurement
from zerocalc.answers.calibrate.parse import parse, parse_nvidia_smi
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.output.report import full_report
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.peak import StagePeak
from zerocalc.step.workload import Workload
from zerocalc.step.peak import OUTSIDE, RESERVE

NOT_TENSORS = (RESERVE, *OUTSIDE)    # what max_memory_allocated does not count (peak.phase_figures)

# ---------------------------------------------------------------------------------------------- mixed and garbage

def test_several_formats_pasted_together_are_merged():
    m = parse(fixture("memory_stats.json") + "\n" + fixture("nvidia_smi_csv.txt"))
    assert m.source_format == "memory_stats+nvidia_smi"
    assert (m.allocated_peak_bytes, m.reserved_peak_bytes) == (STATS_ALLOC_PEAK, STATS_RESERVED_PEAK)
    assert (m.nvidia_smi_used_bytes, m.nvidia_smi_total_bytes) == (74321 * MIB, H100_TOTAL)
    mixed = parse(fixture("deepspeed_see_memory_usage.log") + fixture("plain.txt"))
    assert mixed.allocated_peak_bytes == STATS_ALLOC_PEAK            # the exact figure wins over the rounded one
    assert any("kept" in n for n in mixed.notes)


@pytest.mark.parametrize("text", ["", "   \n", "hello world", "loss 2.31 step 100", "{}", "{\"a\": 1}",
                                  "MA GB Max_MA", "memory.used [MiB]\nabc, def", "zerocalc-probe v1",
                                  "zerocalc-probe v2 forward.alloc=1", "zerocalc-probe v1 forward.alloc=1.5"])
def test_garbage_gets_a_clear_message(text):
    with pytest.raises(CalibrationError) as err:
        parse(text)
    assert isinstance(err.value, FieldError) and isinstance(err.value, ValueError)
    assert err.value.field == "calibration"


def test_the_message_lists_every_format_understood():
    with pytest.raises(CalibrationError) as err:
        parse("hello world")
    message = str(err.value)
    assert message.startswith("calibration: got 'hello world'")
    for name in FORMATS:
        assert name in message
    with pytest.raises(CalibrationError) as one:
        parse_nvidia_smi("hello")
    assert "nvidia_smi" in str(one.value) and "deepspeed" not in str(one.value)


def test_inputs_that_are_not_text_or_too_long():
    with pytest.raises(CalibrationError):
        parse(12345)
    with pytest.raises(CalibrationError):
        parse("x" * 1_000_001)
    with pytest.raises(FieldError):
        parse("max_memory_allocated: 1", gb="metric")
    assert parse(b"max_memory_allocated: 7").allocated_peak_bytes == 7


FRAGMENTS = ["MA", "Max_MA", "CA", "Max_CA", "GB", "GiB", "MiB", "KiB", " ", "\n", ",", "|", ":", "=", "1.5", "7",
             "99999999999999999999999", "1e9", "-3", "[N/A]", "memory.used [MiB]", "memory.total [MiB]",
             "zerocalc-probe v1", "forward.alloc=", "total=", "rank=", "\"allocated_bytes.all.peak\": ",
             "'reserved_bytes.all.peak', ", "PyTorch CUDA memory summary", "| Allocated memory      | ",
             "Peak Usage", "CUDA out of memory. Tried to allocate ", "is reserved by PyTorch but unallocated",
             "max_memory_allocated", "peak reserved", "current alloc=", "GB (delta=", "{", "}", "[", "]", "\u0663"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)))
def test_fuzz_random_text_raises_only_the_calibration_error(text):
    try:
        m = parse(text)
    except CalibrationError:
        return
    assert isinstance(m, Measurement)
    assert any(getattr(m, q) is not None for q in ("allocated_peak_bytes", "reserved_peak_bytes",
                                                   "nvidia_smi_used_bytes", "nvidia_smi_total_bytes"))
    for q in ("allocated_peak_bytes", "reserved_peak_bytes", "nvidia_smi_used_bytes", "nvidia_smi_total_bytes"):
        value = getattr(m, q)
        assert value is None or (isinstance(value, int) and 0 <= value <= 2**60)


SAMPLES = sorted(p.name for p in FIXTURES.iterdir() if p.suffix != ".source")


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(SAMPLES), cut=st.integers(0, 10**6), width=st.integers(0, 50),
       insert=st.text(max_size=8))
def test_fuzz_damaged_real_samples_raise_only_the_calibration_error(name, cut, width, insert):
    text = fixture(name)
    at = cut % (len(text) + 1)
    damaged = text[:at] + insert + text[at + width:]
    try:
        parse(damaged)
    except CalibrationError:
        pass


# -------------------------------------------------------------------------------------------------- compare

def worked_peak() -> StagePeak:
    phases = {
        "forward": {"model states": 20 * GIB, "activations": 30 * GIB, "logits and loss": 2 * GIB,
                    "allocator reserve": -(-52 * GIB * 5 // 100), "CUDA context": GIB},
        "backward": {"model states": 20 * GIB, "activations": 30 * GIB, "logits and loss": 3 * GIB,
                     "gradient buckets": 1_000_000_000, "allocator reserve": -(-(53 * GIB + 10**9) * 5 // 100),
                     "CUDA context": GIB},
        "optimizer_step": {"model states": 20 * GIB, "all-gather bucket": 10**9, "allocator reserve": 1,
                           "CUDA context": GIB},
    }
    return StagePeak(2, phases, H100_TOTAL, {p: sum(c.values()) for p, c in phases.items()})


def test_compare_worked_example():
    peak = worked_peak()
    # 1 GiB context, a 5 % reserve set (the worked peak's; the default is the allocator's model), H100
    work = Workload(MODEL_PRESETS["llama-2-7b"][0], fragmentation_percent=5, cuda_context_bytes=GIB)
    tensors = 53 * GIB + 10**9                                # backward: 20 + 30 + 3 GiB + 1 GB of buckets
    reserve = -(-tensors * 5 // 100)
    measured = Measurement(allocated_peak_bytes=58 * GIB, reserved_peak_bytes=63 * GIB,
                           nvidia_smi_used_bytes=64 * GIB + 512 * MIB, nvidia_smi_total_bytes=H100_TOTAL)
    cal = compare(measured, peak, work)
    assert cal.stage == 2
    alloc, res, used = cal.residual("allocated"), cal.residual("reserved"), cal.residual("nvidia-smi used")
    assert (alloc.estimated_bytes, alloc.phase) == (tensors, "backward")
    assert alloc.residual_bytes == 58 * GIB - tensors
    assert alloc.residual_percent == pytest.approx(100 * (58 * GIB - tensors) / tensors)
    assert res.estimated_bytes == tensors + reserve and res.residual_bytes == 63 * GIB - tensors - reserve
    assert used.estimated_bytes == peak.peak_bytes == tensors + reserve + GIB
    assert used.residual_bytes == 64 * GIB + 512 * MIB - peak.peak_bytes
    # Reserved - allocated = 5 GiB over 58 GiB of tensors: 8.62 %, rounded up to 9.
    frag = cal.suggestion("fragmentation_percent")
    assert (frag.current, frag.suggested) == (5, 9) and -(-100 * 5 // 58) == 9
    # Used - reserved = 1.5 GiB: the context and everything else outside PyTorch's allocator.
    ctx = cal.suggestion("cuda_context_bytes")
    assert (ctx.current, ctx.suggested) == (GIB, GIB + 512 * MIB)
    assert cal.suggestion("gpu_memory") is None                # the measured total is the catalog's
    assert any("Live tensors" in s and "more than estimated" in s for s in cal.sentences)
    applied = cal.suggested_workload(work)
    assert (applied.fragmentation_percent, applied.cuda_context_bytes) == (9, GIB + 512 * MIB)
    json.dumps(cal.to_dict())
    # Under the default (the allocator's model) "Set the reserve" still offers the same percent.
    frag = compare(measured, peak, replace(work, fragmentation_percent=None)).suggestion("fragmentation_percent")
    assert (frag.current, frag.suggested) == (None, 9) and "now the allocator model" in frag.sentence


def test_compare_without_allocated_uses_the_estimate_and_says_so():
    peak = worked_peak()
    work = Workload(MODEL_PRESETS["llama-2-7b"][0])
    tensors = 53 * GIB + 10**9
    cal = compare(Measurement(reserved_peak_bytes=tensors + tensors // 10, nvidia_smi_used_bytes=70 * GIB), peak, work)
    frag = cal.suggestion("fragmentation_percent")
    assert frag.suggested == 10 and "estimated" in frag.sentence
    assert cal.suggestion("cuda_context_bytes").suggested == 70 * GIB - (tensors + tensors // 10)
    # nvidia-smi's total is more than PyTorch can use: 1.25 GiB less is suggested (zerocalc.gpus.ESTIMATE_GAP) ...
    nothing = compare(Measurement(nvidia_smi_total_bytes=40_960 * MIB), peak, work)
    assert nothing.residuals == () and nothing.suggestion("gpu_memory").suggested == 40_960 * MIB - ESTIMATE_GAP
    # ... and none when it is the catalogued card's own nvidia-smi total (the H100's 81,559 MiB)
    assert compare(Measurement(nvidia_smi_total_bytes=81_559 * MIB), peak, work).suggestion("gpu_memory") is None


def test_the_oom_total_capacity_is_what_pytorch_can_use_and_is_taken_as_it_is():
    """An A100 40GB's OOM message says "total capacity of 39.39 GiB" (bottlerocket-os/bottlerocket#3873 prints
    totalGlobalMem 42,298,834,944 B): gpu_memory moves to it, down from the H100's 79.11 GiB, never up to
    nvidia-smi's 40,960 MiB. Within the printed rounding of the catalogued figure: no suggestion."""
    peak, work = worked_peak(), Workload(MODEL_PRESETS["llama-2-7b"][0])
    a100 = compare(Measurement(usable_total_bytes=42_298_834_944), peak, work).suggestion("gpu_memory")
    assert a100.suggested == 42_298_834_944 < 40_960 * MIB and "total capacity" in a100.sentence
    same = Measurement(usable_total_bytes=work.capacity_bytes + 2**20, tolerance_bytes={"usable_total_bytes": 2**23})
    assert compare(same, peak, work).suggestion("gpu_memory") is None


def test_compare_against_a_stage_peak_a_report_row_and_compare_stage_agree():
    arch = MODEL_PRESETS["llama-2-7b"][0]
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
    work = Workload(arch, micro_batch=2)
    measured = parse(fixture("probe_two_ranks.txt"))
    by_peak = compare(measured, layout_report(scenario, work).peaks[2], work)
    by_row = compare(measured, full_report(scenario, work)["peak"][2], work)
    assert by_peak.to_dict() == by_row.to_dict()
    staged = compare_stage(measured, scenario, work, 2).to_dict()
    # compare_stage adds whether the estimate with the suggestions set reproduces the run, in one more sentence
    assert {**staged, "sentences": staged["sentences"][:-1], "reproduced": None} == by_peak.to_dict()
    assert staged["reproduced"] is True and "reproduces the measurement" in staged["sentences"][-1]
    # The probe's phases are set against the estimate's phases of the same name.
    assert [p.phase for p in by_peak.phases] == ["forward", "backward", "optimizer_step"]
    back = next(p for p in by_peak.phases if p.phase == "backward")
    parts = layout_report(scenario, work).peaks[2].phases["backward"]
    assert back.estimated_tensor_bytes == sum(v for k, v in parts.items()
                                              if k not in NOT_TENSORS)
    assert back.estimated_reserved_bytes == back.estimated_tensor_bytes + parts["allocator reserve"]
    assert back.measured_allocated_bytes == STATS_ALLOC_PEAK


@settings(max_examples=40, deadline=None)
@given(stage=st.integers(0, 3), micro=st.integers(1, 4), cached=st.integers(0, 20 * GIB),
       outside=st.integers(0, 3 * GIB))
def test_applied_suggestions_absorb_the_residuals(stage, micro, cached, outside):
    # A run whose tensors match the estimate exactly: the suggested reserve and context then cover it, the reserve
    # by less than one percent of the tensors too much (it is rounded up to a whole percent).
    arch = MODEL_PRESETS["llama-2-7b"][0]
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
    work = Workload(arch, micro_batch=micro)
    peak = layout_report(scenario, work).peaks[stage]
    t = max(sum(v for k, v in c.items() if k not in NOT_TENSORS)
            for c in peak.phases.values())
    # a completed run used no more than the card holds (above it, the measurement says "does not fit" and no Set
    # may lower the estimate: tests/test_calibrate_verdict.py)
    # on the plan's own card: nvidia-smi's total is the catalogued one (a total equal to PyTorch's capacity would
    # say the card is ESTIMATE_GAP smaller, and a run up to the old capacity would then not fit)
    assume(t + cached + outside <= work.capacity_bytes)
    measured = Measurement(t, t + cached, t + cached + outside, work.nvidia_smi_bytes)
    cal = compare(measured, peak, work)
    assert cal.residual("allocated").residual_bytes == 0
    tuned = cal.suggested_workload(work)
    again = compare(measured, layout_report(scenario, tuned).peaks[stage], tuned)
    assert again.residual("allocated").residual_bytes == 0
    assert -(t // 100) - 1 <= again.residual("reserved").residual_bytes <= 0
    # the context and NCCL's share absorb what nvidia-smi saw beyond reserved; NCCL's share is a whole percent
    nccl = max(c.get("NCCL buffers", 0) for c in peak.phases.values())
    smi, res = again.residual("nvidia-smi used").residual_bytes, again.residual("reserved").residual_bytes
    assert res - nccl // 100 - 1 <= smi <= res


def test_compare_refuses_what_it_cannot_read():
    work = Workload(MODEL_PRESETS["gpt2"][0])
    with pytest.raises(FieldError):
        compare({"allocated": 1}, worked_peak(), work)
    with pytest.raises(FieldError):
        compare(Measurement(allocated_peak_bytes=1), {"stage": 0}, work)
