"""DeepSpeed's own estimators, against the tables its docs print (docs/code-docs/source/memory.rst).

The docs print bytes / 2**30 with two decimals. Every row the current code still produces matches; the ZeRO-2
offload_optimizer=none GPU figure (15.93) comes from the old formula 4P + 16P/N and is checked against that.
"""

import pytest

from zerocalc import Scenario, deepspeed_view
from zerocalc.states.zero import model_states
from zerocalc.states.deepspeed_estimator import zero2_estimate, zero3_estimate

GIB = 2**30


def printed(nbytes):
    return f"{nbytes / GIB:.2f}"


def test_zero2_cold_example_3b_on_one_node_of_8():
    # memory.rst: estimate_zero2_model_states_mem_needs_all_cold(total_params=2851e6, 8 GPUs, 1 node)
    view = deepspeed_view(2851 * 10**6, 32 * 10**6, 8, 1)
    cpu_off, none = view.zero2
    assert (printed(cpu_off.cpu_bytes), printed(cpu_off.gpu_bytes)) == ("127.45", "5.31")
    assert printed(none.cpu_bytes) == "127.45"
    # Current code: 2P + int(18P / N) (stage_1_and_2.py). The docs' 15.93 is the stale 4P + 16P/N.
    p = 2851 * 10**6
    assert none.gpu_bytes == 2 * p + int(18 * p / 8)
    assert printed(4 * p + 16 * p // 8) == "15.93"


def test_zero3_cold_example_every_row():
    # memory.rst: estimate_zero3_model_states_mem_needs_all_cold(2851e6, largest_layer_params=32e6, 8, 1)
    view = deepspeed_view(2851 * 10**6, 32 * 10**6, 8, 1)
    docs = [  # per CPU, per GPU, offload_param, offload_optimizer, zero_init
        ("71.69", "0.12", "cpu", "cpu", True),
        ("127.45", "0.12", "cpu", "cpu", False),
        ("63.72", "0.78", "none", "cpu", True),
        ("127.45", "0.78", "none", "cpu", False),
        ("1.43", "6.09", "none", "none", True),
        ("127.45", "6.09", "none", "none", False),
    ]
    got = [(printed(r.cpu_bytes), printed(r.gpu_bytes), r.offload_param, r.offload_optimizer, r.zero_init)
           for r in view.zero3]
    assert got == docs


def test_float_arithmetic_matches_deepspeed_truncation():
    # DeepSpeed multiplies by 1 / num_nodes in floats, then int(): we must truncate the same way.
    cpu, gpu, largest = zero3_estimate(10**9 + 7, 10**6, 8, 3, True, True, True, 1.5)
    assert cpu == int((10**9 + 7) * 18 * (1 / 3) * 1.5)
    assert gpu == largest == 4 * 10**6
    assert zero2_estimate(3, 1, 1, False, 1.5) == (int(3 * 4 * 1 * 1.5), 2 * 3 + int(18 * 3 / 1))


def test_differences_name_the_chosen_ledger_and_a_workers_mismatch():
    report = model_states(Scenario(params=10**9, workers=4))
    notes = deepspeed_view(10**9, 10**7, 8, 1, 1.5, report).differences
    assert any("zero-paper" in n and "16 bytes" in n for n in notes)
    assert any("8 GPUs" in n and "4 workers" in n for n in notes)
    assert any("GiB" in n for n in notes)


@pytest.mark.parametrize("nodes", [1, 2, 16])
def test_zero3_no_offload_gpu_is_largest_layer_plus_18_over_n(nodes):
    p, layer = 70 * 10**9, 10**9
    row = deepspeed_view(p, layer, 8, nodes).zero3[-1]
    assert row.gpu_bytes == 4 * layer + int(18 * p / (8 * nodes))
