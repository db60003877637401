"""ZeRO-3's resident parameters against the installed DeepSpeed 0.19.8 (tests/measure/deepspeed_live.py, one gloo
process on the CPU, a 279,360-parameter Llama, every block checkpointed, reuse distance 0): with any prefetch the
coordinator keeps parameters resident until max_live_parameters is reached, whatever the bucket size, so the
resident elements sit between max_live and max_live plus the largest module; without prefetch only the running
module. zerocalc's zero3_live_params (step/buffers.py) is that upper end, and a plan's "gathered parameters" follow."""

import pytest

from tests.measure.deepspeed_run import run_measurement
from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.buffers import zero3_live_params
from zerocalc.step.workload import Workload


def _measure(*args, port: str) -> list:
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    return run_measurement("deepspeed_live", *args, port=port)


@pytest.fixture(scope="module")
def measured():
    return _measure(port="29543")


@pytest.fixture(scope="module")
def measured_two_ranks():
    return _measure("2", port="29544")


def test_the_resident_parameters_reach_max_live_and_stay_within_one_module(measured):
    _check(measured)


def test_the_same_on_two_ranks(measured_two_ranks, measured):
    """Two gloo processes, each holding half of every parameter: the coordinator's count is the same."""
    _check(measured_two_ranks)
    assert measured_two_ranks == measured[:2]


def _check(plans):
    for plan in plans:
        got = zero3_live_params(plan["params"], plan["largest_module"], plan["max_live"], plan["prefetch"], reuse=0)
        assert got >= plan["resident_peak"], plan                  # zerocalc's figure is never under
        assert got - plan["resident_peak"] < plan["largest_module"], plan
        if plan["prefetch"] and plan["max_live"] < plan["params"]:
            assert plan["resident_peak"] >= plan["max_live"]        # the prefetcher runs ahead to the cap


def test_a_plan_gathers_max_live_parameters_at_stage_3():
    """Llama-3-8B under DeepSpeed ZeRO-3: 1e9 resident elements plus the largest module (the 525M-parameter
    embedding) in bf16, beside the persistent small parameters; a smaller max_live gathers less."""
    a = MODEL_PRESETS["llama-3-8b"][0]
    sc = Scenario.from_convention("deepspeed", params=param_count(a), workers=8, param_dtype="bf16")

    def gathered(**work):
        report = layout_report(sc, Workload(a, micro_batch=1, seq_len=1024, comm_buffers="deepspeed", **work))
        return report.ranks[0].peaks[3].phases["forward"]["gathered parameters"]

    # each resident element is one bf16 parameter more; the embedding (the largest module) runs on top
    assert gathered() - gathered(max_live_parameters=10**8) == 2 * (10**9 - 10**8)
    assert gathered() >= 2 * (10**9 + 128256 * 4096)
