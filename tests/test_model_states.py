"""Ownership rules, rounding, hybrid sharding, offload and communication."""

import pytest

from zerocalc import FieldError, Scenario
from zerocalc.states.zero import model_states

GB = 10**9


def test_partitions_round_up_to_whole_elements_per_worker():
    # 10 parameters over 4 workers: each worker owns ceil(10 / 4) = 3 elements of every sharded entry.
    r = model_states(Scenario(params=10, workers=4))
    assert r.stage(3).per_worker_by_entry == (3 * 2, 3 * 2, 3 * 4, 3 * 4, 3 * 4)
    # 4 x 3 = 12 elements held for 10: the 2 padding elements of every entry are redundant, never negative.
    assert r.stage(3).redundant_bytes == 4 * 48 - 160 == 32


def test_hybrid_shard_group_divides_by_the_group_and_replicates_across_groups():
    # FSDP HYBRID_SHARD / ZeRO++ hpZ: state split across 8 workers, replicated across the 64 / 8 = 8 groups.
    r = model_states(Scenario(params=8 * GB, workers=64, shard_group=8))
    assert r.stage(3).per_worker_total == 16 * 8 * GB // 8
    assert r.stage(3).cluster_total == 8 * r.unique_total          # one copy per group
    assert r.stage(3).redundancy_factor == 8


def test_shard_group_must_divide_workers():
    with pytest.raises(FieldError) as err:
        Scenario(params=GB, workers=12, shard_group=5)
    assert err.value.field == "shard_group" and "divisor of workers (12)" in str(err.value)


def test_offload_optimizer_moves_only_the_partitioned_shard():
    # ZeRO-Offload: the optimizer partition (and, from stage 2, the gradient partition) lives on the host.
    s = Scenario(params=GB, workers=4, offload_optimizer="cpu", gpus_per_node=4)
    r = model_states(s)
    assert (r.stage(0).gpu_bytes, r.stage(0).cpu_bytes) == (16 * GB, 0)      # nothing partitioned, nothing moves
    assert (r.stage(1).gpu_bytes, r.stage(1).cpu_bytes) == (4 * GB, 3 * GB)
    assert (r.stage(2).gpu_bytes, r.stage(2).cpu_bytes) == (2 * GB, 3_500_000_000)
    assert r.stage(2).gpu_bytes == 2 * GB  # DeepSpeed estimate_zero2 with offload_optimizer=cpu: 2 * params on GPU
    assert (r.stage(3).gpu_bytes, r.stage(3).cpu_bytes) == (GB // 2, 3_500_000_000)


def test_offload_params_applies_at_stage_3_only_and_nvme_is_reported_apart():
    s = Scenario(params=GB, workers=4, offload_optimizer="nvme", offload_params="cpu")
    r = model_states(s)
    assert r.stage(2).cpu_bytes == 0 and r.stage(2).nvme_bytes == 3_500_000_000
    assert r.stage(3).gpu_bytes == 0
    assert (r.stage(3).cpu_bytes, r.stage(3).nvme_bytes) == (GB // 2, 3_500_000_000)
    # the total a worker holds is unchanged by where it is held
    assert [x.per_worker_total for x in r.stages] == [16 * GB, 7 * GB, 5_500_000_000, 4 * GB]


def test_communication_volume_is_2_psi_then_3_psi_in_the_communicated_dtype():
    # ZeRO paper section 7: 2 Psi (stages 0-2), 3 Psi (stage 3); fp16 elements are 2 bytes.
    r = model_states(Scenario(params=GB, workers=4))
    assert [x.communication_bytes for x in r.stages] == [4 * GB, 4 * GB, 4 * GB, 6 * GB]
    # FSDP2 gathers bf16 copies of fp32 parameters: the communicated dtype, not the stored one, counts.
    fsdp = model_states(Scenario.from_convention("fsdp2", params=GB, workers=4))
    assert fsdp.stage(3).communication_bytes == 6 * GB
    # Megatron reduces fp32 main grads and gathers bf16 params: Psi x 4 + Psi x 2.
    meg = model_states(Scenario.from_convention("megatron", params=GB, workers=4))
    assert meg.stage(1).communication_bytes == 6 * GB


def test_a_single_worker_communicates_nothing_and_holds_no_redundancy():
    r = model_states(Scenario(params=GB))
    assert all(x.communication_bytes == 0 and x.redundant_bytes == 0 for x in r.stages)


@pytest.mark.parametrize("field, value, allowed", [
    ("params", 0, "an integer from 1 to"),
    ("workers", -1, "an integer from 1 to"),
    ("workers", 2.5, "an integer from 1 to"),
    ("workers", 2.5, "not a number with a fraction"),       # issue 13: a type error says what type was given
    ("workers", "4", "not a string"),
    ("workers", True, "not a boolean"),
    ("param_dtype", "fp12", "one of fp64, fp32"),
    ("master_dtype", "x", "none"),
    ("optimizer", "adamax", "one of adam, adamw"),
    ("offload_params", "disk", "one of none, cpu, nvme"),
    ("gpus_per_node", 0, "an integer from 1 to 1,024"),
])
def test_bad_fields_name_the_field_value_and_range(field, value, allowed):
    with pytest.raises(FieldError) as err:
        Scenario(params=GB, **{field: value}) if field != "params" else Scenario(params=value)
    assert err.value.field == field
    assert repr(value) in str(err.value) and allowed in str(err.value)
