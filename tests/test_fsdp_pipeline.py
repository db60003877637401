"""FSDP2 under pipeline parallelism (zerocalc.step.fsdp_pipeline) and FSDP's CPU-offload copies
(zerocalc.step.fsdp_offload) as rules of the peak: when they apply, in which phases, what they replace, and their
bytes from the rank's parameter groups. The CPU measurement is tests/test_fsdp_pipeline_validation.py."""

from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import param_count
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.fsdp_offload import OFFLOAD_COPIES
from zerocalc.step.fsdp_pipeline import (
    ACCUMULATED,
    UNIT_GRADIENT,
    UNSHARDED,
    unsharded_elements,
)
from zerocalc.step.workload import Workload

ARCH = Architecture(layers=8, hidden=512, heads=8, kv_heads=4, ffn=1376, vocab=32001, seq_len=4096)


def report(pp=2, schedule="1f1b", reshard="auto", convention="fsdp2", workers=4, reduce="fp32", **scenario):
    s = Scenario.from_convention(convention, params=param_count(ARCH), workers=workers, **scenario)
    lay = Layout(pp=pp, schedule=schedule, micro_batches=8 if pp > 1 else 1)
    return layout_report(s, Workload(ARCH, micro_batch=1, seq_len=256, layout=lay, reshard_after_forward=reshard,
                                     reduce_dtype=reduce))


def test_torchtitans_default_under_pp_keeps_the_stage_unsharded_and_accumulates_fp32_gradients():
    r = report()
    for view in r.ranks:
        phases = view.peaks[3].phases
        params, grads = unsharded_elements(view.shape)
        assert params >= view.shape.params                          # padded shards x the group
        for phase in ("forward", "backward"):
            assert phases[phase][UNSHARDED] == 2 * params           # bf16 (the compute dtype)
            assert phases[phase][ACCUMULATED] == 4 * grads          # reduce_dtype fp32, unpadded
            assert "gathered parameters" not in phases[phase]       # all gathered already
        assert "gradient buckets" not in phases["backward"]         # nothing reduced before the last micro-batch
        assert phases["backward"][UNIT_GRADIENT] > 0
        assert not {UNSHARDED, ACCUMULATED} & set(phases["optimizer_step"])


def test_reduce_dtype_none_accumulates_in_the_compute_dtype_with_no_separate_unit_gradient():
    phases = report(reduce=None).ranks[0].peaks[3].phases
    _, grads = unsharded_elements(report(reduce=None).ranks[0].shape)
    assert phases["backward"][ACCUMULATED] == 2 * grads and UNIT_GRADIENT not in phases["backward"]


def test_resharding_under_pp_still_leaves_each_backward_unsharded():
    phases = report(reshard="yes").ranks[0].peaks[3].phases
    assert UNSHARDED not in phases["forward"] and "gathered parameters" in phases["forward"]
    assert UNSHARDED in phases["backward"] and ACCUMULATED in phases["forward"]


def test_gpipe_runs_every_forward_before_the_first_gradient():
    phases = report(schedule="gpipe").ranks[0].peaks[3].phases
    assert ACCUMULATED not in phases["forward"] and ACCUMULATED in phases["backward"]


def test_without_pp_auto_reshards_and_no_keeps_the_units_without_accumulating():
    auto, yes, no = report(pp=1), report(pp=1, reshard="yes"), report(pp=1, reshard="no")
    assert [p.peak_bytes for p in auto.peaks] == [p.peak_bytes for p in yes.peaks]
    phases = no.peaks[3].phases
    assert UNSHARDED in phases["forward"] and UNSHARDED in phases["backward"]
    assert ACCUMULATED not in phases["backward"] and "gradient buckets" in phases["backward"]


@pytest.mark.parametrize("changes", [{"convention": "zero-paper"}, {"convention": "megatron"}, {"workers": 1}])
def test_other_frameworks_and_one_rank_are_unchanged(changes):
    r = report(**changes)
    names = {n for v in r.ranks for p in v.peaks for phase in p.phases.values() for n in phase}
    assert not {UNSHARDED, ACCUMULATED, UNIT_GRADIENT} & names


def test_stage_2_accumulates_under_pp_only_and_keeps_the_ledgers_whole_parameters():
    under, without = report().ranks[0].peaks[2].phases, report(pp=1, reshard="no").ranks[0].peaks[2].phases
    assert all(UNSHARDED not in phase for phase in (*under.values(), *without.values()))
    assert ACCUMULATED in under["backward"] and "gradient buckets" not in under["backward"]
    assert ACCUMULATED not in without["backward"] and "gradient buckets" in without["backward"]


def test_bad_values_are_field_errors():
    for field, value in (("reshard_after_forward", "always"), ("reduce_dtype", "float32")):
        with pytest.raises(FieldError) as e:
            replace(Workload(ARCH), **{field: value})
        assert e.value.field == field


def test_offloaded_units_copy_their_shards_through_the_gpu():
    on = report(pp=1, offload_params="cpu", offload_optimizer="cpu")
    off = report(pp=1)
    shape = on.ranks[0].shape
    unit, n = shape.fsdp.block, 4
    want = -(-(-(-unit.params // n) * (32 + 16) + -(-unit.reduce // n) * 32) // 8)
    assert on.peaks[3].phases["backward"][OFFLOAD_COPIES] == want
    assert all(OFFLOAD_COPIES not in phase for phase in off.peaks[3].phases.values())
    assert all(OFFLOAD_COPIES not in phase for phase in on.peaks[2].phases.values())
