"""The GPU catalogue (zerocalc/gpus.py): what nvidia-smi shows and what PyTorch can use, each published, and the
verdict against the second. Figures: docs/research/gpu_capacities.md quotes every source line."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerocalc import Scenario
from zerocalc.gpus import ESTIMATE_GAP, GIB, GPU_CATALOG, MIB
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload
from zerocalc.units import capacity_text, parse_capacity


def gib(text: str) -> int:
    return int(Decimal(text) * GIB)


def test_pytorch_figures_as_published():
    usable = {k: g.usable_bytes for k, g in GPU_CATALOG.items()}
    assert usable["H100-SXM-80GB"] == gib("79.11")          # vllm-project/vllm#12756: "total capacity of 79.11 GiB"
    assert usable["A100-40GB"] == 42_298_834_944             # bottlerocket-os/bottlerocket#3873: deviceQuery bytes
    assert usable["H100-NVL-94GB"] == 99_961_274_368         # fastfetch-cli/fastfetch#1658
    assert usable["B200-180GB"] == gib("178.35")             # pytorch/ao#4002
    assert usable["RTX-5090-32GB"] == 33_677_180_928         # aikitoria/open-gpu-kernel-modules#1
    assert usable["H200-141GB"] == 143_156 * MIB             # total_memory=143156MB
    assert usable["L40S-48GB"] == gib("44.39") and usable["RTX-6000-Ada-48GB"] == gib("44.43")
    assert usable["T4-16GB"] == gib("14.56")                 # the lowest of 14.56 / 14.75 GiB


def test_every_card_has_both_figures_sourced_and_pytorch_gets_less():
    assert len(GPU_CATALOG) >= 25
    for key, g in GPU_CATALOG.items():
        assert 0 < g.usable_bytes <= g.smi_bytes, key
        assert g.smi_source and g.usable_source, key
        if g.estimated:
            assert g.usable_bytes == g.smi_bytes - ESTIMATE_GAP and g.usable_source.startswith("estimated"), key
        else:
            assert g.smi_bytes - g.usable_bytes < ESTIMATE_GAP, key    # the estimate is below every published gap
    # the cards people fine-tune on (issue 20) are there
    for key in ("L40S-48GB", "RTX-A6000-48GB", "RTX-6000-Ada-48GB", "A40-48GB", "T4-16GB", "A10G-24GB",
                "RTX-3090-24GB", "RTX-5090-32GB", "H100-NVL-94GB", "H20-96GB", "GH200-96GB", "B300-288GB",
                "MI325X-256GB", "MI355X-288GB"):
        assert key in GPU_CATALOG, key


def test_a_plan_between_pytorchs_capacity_and_nvidia_smis_is_red():
    """The issue's case: 85.08 GB on an H100 80GB is under nvidia-smi's 85.52 GB and over PyTorch's 84.94 GB."""
    arch = MODEL_PRESETS["llama-2-7b"][0]
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
    work = Workload(arch, micro_batch=1, seq_len=4096)
    peak = layout_report(scenario, work).peaks[3].peak_bytes
    between = GPU_CATALOG["H100-SXM-80GB"]
    room = between.usable_bytes - peak
    # the same job with the CUDA context moved so that its peak lands between the two figures
    shifted = Workload(arch, micro_batch=1, seq_len=4096, cuda_context_bytes=work.cuda_context_bytes + room + 10**8)
    p = layout_report(scenario, shifted).peaks[3]
    assert between.usable_bytes < p.peak_bytes < between.smi_bytes and not p.fits


@pytest.mark.parametrize("text, nbytes", [
    ("48 GB", 48 * 10**9), ("48GB", 48 * 10**9), ("44.4 GiB", 47_674_136_985), ("46068 MiB", 46_068 * MIB),
    ("85520809984", 85_520_809_984), ("1 TiB", 2**40), ("79.11gib", gib("79.11")),
])
def test_capacities_are_typed_with_their_unit(text, nbytes):
    assert parse_capacity(text) == nbytes


@pytest.mark.parametrize("text", ["48", "1000000000", "48 G", "0.5 GiB", "-3 GB", "2 PiB", "GB", "", "x" * 50])
def test_a_bare_number_below_1_gib_and_other_mistakes_are_refused(text):
    with pytest.raises(ValueError):
        parse_capacity(text)


def test_the_core_refuses_a_capacity_below_1_gib_naming_the_unit():
    with pytest.raises(FieldError, match="gpu_memory.*missing unit"):
        Workload(MODEL_PRESETS["gpt2"][0], gpu_memory=48)


@given(st.integers(min_value=2**30, max_value=2**50))
def test_capacity_text_reads_back_exactly(nbytes):
    assert parse_capacity(capacity_text(nbytes)) == nbytes
