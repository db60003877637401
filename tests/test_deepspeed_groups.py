"""The communicators a DeepSpeed step uses, against the installed DeepSpeed 0.19.8 (tests/measure/deepspeed_groups.py,
two gloo processes on the CPU). DeepSpeed makes two groups of every rank: its data-parallel group is a clone of the
world group (deepspeed/utils/groups.py _clone_world_group), and zero.Init partitions on torch's WORLD itself
(runtime/zero/partition_parameters.py:1094). Measured: one of them carries all of a step's collectives (WORLD at
ZeRO-3 under zero.Init, the clone at ZeRO-2), so step/nccl.py's single data-parallel row is the step's buffers."""

import pytest

from tests.measure.deepspeed_run import run_measurement
from zerocalc import Scenario
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.step.nccl import nccl_dict
from zerocalc.step.workload import Workload


@pytest.fixture(scope="module")
def measured():
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    return {m["stage"]: m for m in run_measurement("deepspeed_groups", "2", port="29545")}


def test_zero3_under_zero_init_runs_its_step_on_the_world_group_alone(measured):
    step = measured[3]["step"]
    assert [(g["world"], g["ranks"]) for g in step] == [(True, 2)]
    assert {"all_gather_into_tensor", "reduce_scatter_tensor"} <= set(step[0]["ops"])
    assert measured[3]["dp_group_is_world"] is False       # the clone exists, and carries nothing in the step


def test_zero2_runs_its_step_on_the_clone_alone(measured):
    assert [(g["world"], g["ranks"]) for g in measured[2]["step"]] == [(False, 2)]


def test_a_deepspeed_plan_counts_one_data_parallel_communicator():
    sc = Scenario.from_convention("deepspeed", params=8_030_261_248, workers=8, param_dtype="bf16")
    rows = nccl_dict(sc, Workload(MODEL_PRESETS["llama-3-8b"][0], comm_buffers="deepspeed"))["rows"]
    assert [(r["group"], r["ranks"]) for r in rows] == [("dp", 8)]
