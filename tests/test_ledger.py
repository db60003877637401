"""The ledger: dtypes, optimizers and named conventions, each against its source."""

from fractions import Fraction

import pytest

from zerocalc import Scenario, build_ledger, bytes_per_param
from zerocalc.states.zero import model_states
from zerocalc.tables import CONVENTIONS, DTYPE_BITS


def bpp(**fields):
    return bytes_per_param(build_ledger(Scenario(params=1, **fields)))


@pytest.mark.parametrize("convention, expected", [
    ("zero-paper", 16),  # ZeRO paper section 3.1: 2 + 2 + K, K = 12
    ("deepspeed", 20),   # DeepSpeed stage_1_and_2.py estimator comment: 2 params_16bit + 18 (2+4+4+8)
    ("megatron", 18),    # Megatron-LM theoretical_memory_usage.py: num_bytes_per_parameter = 18
    ("fsdp2", 16),       # FSDP2: fp32 sharded param 4 + fp32 grad 4 + AdamW exp_avg/exp_avg_sq 8
    ("pure-bf16", 8),    # bf16 param 2 + bf16 grad 2 + two bf16 moments 4, no master copy
])
def test_convention_bytes_per_parameter(convention, expected):
    s = Scenario.from_convention(convention, params=10**9)
    assert bytes_per_param(build_ledger(s)) == expected


def test_megatron_distributed_optimizer_is_6_plus_12_over_d():
    # Megatron-LM theoretical_memory_usage.py: 6 + 12 / data_parallel_size with the distributed optimizer (ZeRO-1).
    d = 8
    s = Scenario.from_convention("megatron", params=8 * 10**9, workers=d)
    assert model_states(s).stage(1).per_worker_total == 8 * 10**9 * 6 + 8 * 10**9 * 12 // d


def test_deepspeed_convention_at_stage_2_equals_deepspeed_zero2_gpu_estimate():
    # DeepSpeed stage_1_and_2.py: gpu_mem = 2 * total_params + int(18 * total_params / total_gpus).
    p, n = 7 * 10**9, 64
    s = Scenario.from_convention("deepspeed", params=p, workers=n)
    assert model_states(s).stage(2).per_worker_total == 2 * p + 18 * p // n


@pytest.mark.parametrize("optimizer, state_bytes", [
    # Transformer Math 101 (EleutherAI): AdamW 8 bytes of moments in fp32, SGD momentum 4, plain SGD 0.
    ("adam", 8), ("adamw", 8), ("sgd", 0), ("sgd-momentum", 4),
    ("lion", 4),                                   # Lion (Chen et al. 2023): a single momentum
    ("adafactor", Fraction(2 * 4, 4096)),          # Shazeer & Stern 2018: rows + cols of a 4096 x 4096 matrix
    # bitsandbytes Optimizer8bit.init_state: two uint8 states + one fp32 absmax per 256 elements each
    ("adam-8bit", 2 + Fraction(2 * 4, 256)),
])
def test_optimizer_state_bytes_on_top_of_params_grads_master(optimizer, state_bytes):
    assert bpp(optimizer=optimizer) == 2 + 2 + 4 + state_bytes


def test_optimizer_state_dtype_is_choosable():
    assert bpp(optimizer="adam", optimizer_dtype="bf16") == 2 + 2 + 4 + 4
    assert bpp(optimizer="adam", optimizer_dtype="fp8_e4m3") == 2 + 2 + 4 + 2


def test_no_master_copy_drops_exactly_its_bytes():
    assert bpp(master_dtype=None) == 12
    assert bpp(master_dtype="bf16") == 14


def test_four_bit_widths_are_exact_half_bytes_rounded_up_to_whole_bytes():
    assert DTYPE_BITS["int4"] == 4
    ledger = build_ledger(Scenario(params=3, param_dtype="int4"))
    assert ledger[0].bytes_per_param == Fraction(1, 2)
    # 3 four-bit parameters occupy 12 bits: 2 whole bytes.
    assert model_states(Scenario(params=3, param_dtype="int4")).unique_by_entry[0] == 2


def test_every_entry_names_the_field_that_sets_its_dtype():
    ledger = build_ledger(Scenario.from_convention("deepspeed", params=1))
    assert [(e.name, e.category, e.dtype, e.source) for e in ledger] == [
        ("parameters", "parameters", "fp16", "param_dtype"),
        ("gradients", "gradients", "fp16", "grad_dtype"),
        ("gradient accumulation buffer", "gradients", "fp32", "grad_accum_dtype"),
        ("master parameters", "optimizer", "fp32", "master_dtype"),
        ("exp_avg", "optimizer", "fp32", "optimizer_dtype"),
        ("exp_avg_sq", "optimizer", "fp32", "optimizer_dtype"),
    ]


def test_every_convention_has_a_summary_and_valid_fields():
    for name in CONVENTIONS:
        Scenario.from_convention(name, params=1)  # validates every field
        assert CONVENTIONS[name]["summary"]
