"""NCCL's buffers per communicator (zerocalc/step/nccl.py) and the three numbers per phase (step/peak.py
phase_figures), issue 32. Sources: NVIDIA/nccl 5067397c src/init.cc (computeBuffSizes, DEFAULT_*_BUFFSIZE),
src/include/device.h (NCCL_STEPS, thread and line counts), src/transport/nvls.cc (NVLS sizes); NVIDIA/nccl#1685
(ALLOC log and measured all-to-all on 8 x H100), #892, #1189, #1706 (INIT logs' channel counts)."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from zerocalc.answers.ranges import ranges
from zerocalc.model.presets import MODEL_PRESETS as PRESETS
from zerocalc.parallel.ranks import report_for
from zerocalc.scenario import FieldError, Scenario
from zerocalc.step.nccl import (LL, LL128, SIMPLE, Group, connection_bytes, group_bytes, nccl_bytes, nccl_dict,
                                plan_groups)
from zerocalc.step.peak import OUTSIDE, RESERVE, phase_figures
from zerocalc.step.workload import Workload
from zerocalc.layout import Layout

MIB = 2**20


def _plan(workers=8, gpu="H100-SXM-80GB", layout=Layout(), **workload):
    arch, params, _ = PRESETS["llama-3-8b"]
    scenario = Scenario(params=params, workers=workers)
    return scenario, Workload(arch, gpu=gpu, layout=layout, **workload)


def test_protocol_buffers_are_nccls_defaults():
    # device.h: NCCL_LL_LINES_PER_THREAD 8, NCCL_LL_MAX_NTHREADS 512, NCCL_STEPS 8, sizeof(ncclLLFifoLine) 16;
    # NCCL_LL128_ELEMS_PER_THREAD 120, NCCL_LL128_MAX_NTHREADS 640, 8-byte elements; DEFAULT_BUFFSIZE 1 << 22
    assert LL == 8 * 512 * 8 * 16 and LL128 == 120 * 640 * 8 * 8 and SIMPLE == 1 << 22
    assert LL + LL128 + SIMPLE == 9_633_792


def test_a_connection_is_the_two_allocations_nccls_alloc_log_shows():
    # NVIDIA/nccl#1685: NCCL_DEBUG_SUBSYS=ALLOC shows allocations of 10485760 and 2097152 bytes per connection
    assert connection_bytes(SIMPLE) == 10_485_760 + 2_097_152
    assert connection_bytes(1 * MIB) == 8 * MIB + 2 * MIB        # NCCL_BUFFSIZE=1 MiB: 6.19 MiB in 2 MiB granules


def test_eight_h100s_data_parallel_ring_and_nvls():
    scenario, w = _plan()
    assert plan_groups(scenario, w.layout) == (Group("dp", 8, 1, "collective"),)
    ring = 16 * 12 * MIB                                            # #892: 16 coll channels on an 8-GPU NVSwitch node
    nvls = 2 * 16 * 2 * (128 * 1024 * 8) * 8                          # nvls.cc: uc + mc, 16 channels, 2 x 1 MiB, 8 heads
    assert nccl_bytes(scenario, w) == ring + nvls == 704 * MIB
    assert nccl_bytes(scenario, replace(w, nccl_nvls=False)) == ring


def test_all_to_all_on_eight_h100s_against_the_measured_figure():
    # NVIDIA/nccl#1685: NV memory 1.06 GB before and 4.34 GB after the first all_to_all_single on 8 x H100
    point = group_bytes(Group("ep", 8, 1, "all-to-all"), "H100-SXM-80GB", 8, SIMPLE, True)
    assert point == 7 * 32 * 12 * MIB
    measured = (4.34 - 1.06) * 2**30                                   # read as GiB: the larger, the safer check
    assert point <= measured <= point * 200 // 100                    # within the band (25 %-200 % of the point)


def test_groups_follow_the_layout_and_hybrid_sharding():
    scenario, w = _plan(workers=16, layout=Layout(tp=2, pp=4, cp=2, ep=2))
    names = [(g.name, g.size, g.stride) for g in plan_groups(scenario, w.layout)]
    assert names == [("tp", 2, 1), ("cp", 2, 2), ("ep", 2, 4), ("dp", 16, 4), ("pp", 4, 64)]
    hsdp = replace(scenario, shard_group=4)
    assert [(g.name, g.size) for g in plan_groups(hsdp, w.layout)][3:5] == [("dp shard", 4), ("dp replicate", 4)]


def test_groups_across_nodes_use_the_networks_channels():
    scenario, w = _plan(workers=16)
    row = nccl_dict(scenario, w)["rows"][0]
    assert row["link"] == "network" and row["channels"] == 8 and row["bytes"] == 8 * 12 * MIB   # #1189


def test_pcie_cards_and_a_single_gpu():
    scenario, w = _plan(workers=2, gpu="L40S-48GB")
    assert nccl_bytes(scenario, w) == 4 * 12 * MIB                   # #1706: 4 coll channels on two PCIe GPUs
    one, w1 = _plan(workers=1)
    assert nccl_bytes(one, w1) == 0
    assert "NCCL buffers" not in report_for(one, w1).peaks[0].phases["backward"]


def test_the_peak_holds_nccl_outside_the_allocator():
    scenario, w = _plan()
    report = report_for(scenario, w)
    for peak in report.peaks:
        parts = peak.phases[peak.peak_phase]
        f = phase_figures(parts)
        assert parts["NCCL buffers"] == 704 * MIB
        assert f["device_bytes"] == peak.peak_bytes
        assert f["reserved_bytes"] == f["device_bytes"] - parts["CUDA context"] - parts["NCCL buffers"]
        assert f["allocated_bytes"] == f["reserved_bytes"] - parts[RESERVE]
    half = report_for(scenario, replace(w, nccl_percent=50))
    assert [a.peak_bytes - b.peak_bytes for a, b in zip(report.peaks, half.peaks)] == [352 * MIB] * 4


def test_the_band_moves_nccl_from_a_quarter_to_twice():
    scenario, w = _plan()
    alone = ranges(scenario, w, vary=("nccl",))
    for band in alone.bands:
        assert band.high_bytes - band.point_bytes == 704 * MIB
        assert band.point_bytes - band.low_bytes == 704 * MIB - 176 * MIB


def test_bad_nccl_fields_are_refused_by_name():
    arch = PRESETS["llama-3-8b"][0]
    for field, value in (("nccl_percent", 1001), ("nccl_buffsize", 1000), ("nccl_nvls", "yes")):
        with pytest.raises(FieldError) as e:
            Workload(arch, **{field: value})
        assert field in str(e.value)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["model states", "activations", RESERVE, *OUTSIDE]),
                       st.integers(0, 2**40)))
def test_three_numbers_are_ordered_and_add_up(parts):
    f = phase_figures(parts)
    assert f["allocated_bytes"] <= f["reserved_bytes"] <= f["device_bytes"] == sum(parts.values())


def test_deepep_buffers_from_its_size_hints():
    """deepseek-ai/DeepEP dd758caf csrc/legacy/config.hpp get_nvl_buffer_size_hint with Buffer.num_sms 20 and the
    8-rank configs (nvl recv chunk 256 tokens for dispatch and combine); hidden bytes 7168 x 2 (Megatron's
    fused_a2a.py get_hidden_bytes): 10 channels x 8 peers x (5 counters x 4 bytes + 256 tokens x (14,336 + 8 +
    128 x 8 + 128 x 4 + 128 x 4)), rounded up to 128 bytes. No RDMA buffer within a node; past 8 ranks one."""
    from zerocalc.step.deepep import deepep_bytes, nvl_bytes

    arch, params, _ = PRESETS["deepseek-v3"]
    scenario = Scenario(params=params, workers=32)
    w = Workload(arch, layout=Layout(ep=8, pp=8, micro_batches=16), moe_dispatcher="deepep")
    expected = -(-(10 * 8 * 5 * 4 + 10 * 8 * 256 * (14_336 + 8 + 1024 + 512 + 512)) // 128) * 128
    assert nvl_bytes(14_336, 8, 256) == expected == 335_709_824 == deepep_bytes(w)
    assert deepep_bytes(replace(w, layout=Layout(ep=16, pp=4, micro_batches=16))) > nvl_bytes(14_336, 16, 288)
    assert deepep_bytes(replace(w, moe_dispatcher="alltoall")) == 0
    peak = report_for(scenario, w).peaks[1]
    parts = peak.phases[peak.peak_phase]
    assert parts["DeepEP buffers"] == expected
    assert phase_figures(parts)["reserved_bytes"] == peak.peak_bytes - sum(parts.get(k, 0) for k in OUTSIDE)
    # DeepEP dispatches the tokens: the expert group's NCCL communicator runs collectives only (ring channels)
    rows = {r["group"]: r for r in nccl_dict(scenario, w)["rows"]}
    assert rows["ep"]["pattern"] == "collective"
    assert {r["group"]: r for r in nccl_dict(scenario, replace(w, moe_dispatcher="alltoall"))["rows"]}["ep"][
        "pattern"] == "all-to-all"
