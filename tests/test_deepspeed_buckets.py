"""DeepSpeed's reduce (ipg) buckets against the installed DeepSpeed 0.19.8 (tests/measure/deepspeed_buckets.py, one
gloo process on the CPU): each bucket is reduce_bucket_size elements whatever the trained count, two with overlap_comm
at stages 1-2 and only through backward (stage_1_and_2.py setup_buckets / _release_ipg_buffers), one at stage 3 from
initialize on (stage3.py _setup_for_real_optimizer). zerocalc's "gradient buckets" per phase must read the same
count of buckets for a LoRA plan whose trained count is far below the bucket."""

import pytest

from tests.measure.deepspeed_run import run_measurement
from zerocalc import Scenario
from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.workload import Workload

BUCKET = 200_000_000          # elements: far above the LoRA plan's ~3.4M trained parameters


@pytest.fixture(scope="module")
def measured():
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    return run_measurement("deepspeed_buckets", port="29541")


def _zerocalc(stage: int, overlap: bool) -> dict:
    a = MODEL_PRESETS["llama-3-8b"][0]
    sc = Scenario.from_convention("deepspeed", params=param_count(a), workers=8, param_dtype="bf16")
    work = Workload(a, micro_batch=1, seq_len=1024, finetune=FineTune("lora", lora_rank=8, adapter_dtype="bf16"),
                    reduce_bucket_size=BUCKET, overlap_comm="on" if overlap else "off")
    phases = layout_report(sc, work).ranks[0].peaks[stage].phases
    return {phase: parts.get("gradient buckets", 0) for phase, parts in phases.items()}


def test_the_buckets_are_reduce_bucket_size_whatever_is_trained(measured):
    for plan in measured:
        assert plan["trained"] < plan["reduce_bucket_size"]
        for held in plan["buckets"].values():
            assert all(n == plan["reduce_bucket_size"] and size == 2 for n, size in held)


@pytest.mark.parametrize("i", range(5))
def test_zerocalc_counts_the_buckets_deepspeed_holds(measured, i):
    plan = measured[i]
    buckets = plan["buckets"]
    got = _zerocalc(plan["stage"], plan["overlap_comm"])
    one = 2 * BUCKET                     # bf16
    assert got["forward"] == len(buckets["forward"]) * one
    assert got["backward"] == len(buckets["backward"]) * one
    # the step runs on what is left after backward
    assert got["optimizer_step"] == len(buckets["after_backward"]) * one
