"""Measured beats estimated (issue 22): a pasted measurement of the plan decides its verdict, the residual counts an
out-of-memory's failed request, no Set moves the estimate away from a failure, and after the Sets the estimate
reproduces the run. The message's form is PyTorch's (c10/cuda/CUDACachingAllocator.cpp, torch >= 2.1), as in
tests/fixtures/calibration/torch_oom.txt."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from zerocalc import Scenario
from zerocalc.answers.calibrate.compare import compare_stage
from zerocalc.answers.calibrate.measurement import Measurement
from zerocalc.answers.calibrate.parse import parse
from zerocalc.answers.calibrate.verdict import measured_fit
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.peak import tensor_bytes
from zerocalc.step.workload import Workload

GIB = 2**30
ARCH = MODEL_PRESETS["llama-3-8b"][0]
SCENARIO = Scenario.from_convention("deepspeed", params=param_count(ARCH), workers=8)
CAPACITY = round(79.11 * GIB)                    # an H100 80GB's total capacity as PyTorch reports it


def oom(allocated: float, request: float, unallocated: float, context: float = 1.0) -> str:
    """A consistent message: in use = allocated + reserved-unallocated + the context; less than the request free."""
    in_use = allocated + unallocated + context
    free = max(0.0, 79.11 - in_use)
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {max(request, free + 0.01):.2f} GiB. "
            f"GPU 0 has a total capacity of 79.11 GiB of which {free * 1024:.2f} MiB is free. Including non-PyTorch "
            f"memory, this process has {min(in_use, 79.11):.2f} GiB memory in use. Of the allocated memory "
            f"{allocated:.2f} GiB is allocated by PyTorch, and {unallocated:.2f} GiB is reserved by PyTorch but "
            "unallocated.")


def fitting_plan(stage: int, target_headroom: float = 4.0):
    """The largest micro-batch whose estimate fits the capacity at `stage`: the plan the page calls green."""
    best = None
    for micro in range(1, 33):
        work = Workload(ARCH, micro_batch=micro, seq_len=4096, gpu_memory=CAPACITY)
        peak = layout_report(SCENARIO, work).peaks[stage]
        if not peak.fits:
            break
        best = work, peak
    return best


def test_an_out_of_memory_of_the_plan_turns_its_green_verdict_red_and_stays_red_after_every_set():
    work, peak = fitting_plan(2)
    assert peak.fits                                     # the estimate alone says the plan fits
    tensors = tensor_bytes(peak) / GIB
    text = oom(allocated=tensors - 1.0, request=2.0, unallocated=0.4)
    m = parse(text)
    request = m.failed_request_bytes
    cal = compare_stage(m, SCENARIO, work, 2)
    assert cal.verdict["fits"] is False and "at least" in cal.verdict["sentence"]
    allocated = cal.residual("allocated")
    assert allocated.measured_bytes == m.allocated_peak_bytes + request       # the failed request counts
    for s in cal.suggestions:                            # nothing lowers the estimate of a plan that failed
        if s.field != "gpu_memory":                      # (a percent against the allocator model: by its bytes)
            set_alone = layout_report(SCENARIO, replace(work, **{s.field: s.suggested})).peaks[2]
            assert set_alone.peak_bytes >= peak.peak_bytes, s
    assert any(s.field == "measured_extra_bytes" for s in cal.suggestions)
    tuned = cal.suggested_workload(work)
    after = layout_report(SCENARIO, tuned).peaks[2]
    assert not after.fits and tensor_bytes(after) >= m.needed_at_least_bytes
    assert cal.reproduced is True and "holds the run's lower bound" in cal.sentences[-1]


@settings(max_examples=25, deadline=None)
@given(stage=st.integers(0, 3), short=st.floats(0.1, 6.0), request=st.floats(0.02, 8.0),
       unallocated=st.floats(0.0, 3.0))
def test_after_the_sets_an_out_of_memory_never_reads_as_fits(stage, short, request, unallocated):
    plan = fitting_plan(stage)
    if plan is None:
        return
    work, peak = plan
    allocated = max(0.1, tensor_bytes(peak) / GIB - short)
    cal = compare_stage(parse(oom(allocated, request, unallocated)), SCENARIO, work, stage)
    assert cal.verdict["fits"] is False
    assert not layout_report(SCENARIO, cal.suggested_workload(work)).peaks[stage].fits


def test_a_measured_peak_over_the_capacity_is_red_and_under_it_green_whatever_the_estimate():
    over = measured_fit(Measurement(allocated_peak_bytes=70 * GIB, reserved_peak_bytes=81 * GIB), CAPACITY)
    assert over["fits"] is False and "over" in over["sentence"]
    under = measured_fit(Measurement(allocated_peak_bytes=60 * GIB, reserved_peak_bytes=66 * GIB), CAPACITY)
    assert under["fits"] is True and under["bytes"] == 66 * GIB
    smi = measured_fit(Measurement(reserved_peak_bytes=66 * GIB, nvidia_smi_used_bytes=80 * GIB), CAPACITY)
    assert smi["fits"] is False                          # nvidia-smi's used, context included, is larger
    assert measured_fit(Measurement(), CAPACITY)["fits"] is None


def test_an_out_of_memory_on_a_smaller_card_decides_only_by_its_lower_bound():
    m = parse(oom(allocated=74.02, request=2.0, unallocated=3.0))
    assert measured_fit(m, CAPACITY)["fits"] is False
    bigger = measured_fit(m, 140 * GIB)                  # the same job checked on an H200
    assert bigger["fits"] is None and "the estimate decides" in bigger["sentence"]
    assert measured_fit(m, 70 * GIB)["fits"] is False    # a smaller card than the lower bound
