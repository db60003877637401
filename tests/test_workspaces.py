"""Library workspaces (zerocalc/step/workspaces.py): PyTorch's cuBLAS and Transformer Engine's GEMM workspaces,
held in PyTorch's allocator in every phase, by compute capability, and checked against Megatron-LM's CI."""

import json
from pathlib import Path

from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.cli.main import main
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import peaks
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload
from zerocalc.step.workspaces import WORKSPACES, workspace_bytes, workspace_parts
from zerocalc.step.peak import OUTSIDE, RESERVE

NOT_TENSORS = (RESERVE, *OUTSIDE)    # what max_memory_allocated does not count (peak.phase_figures)

MIB = 2**20
ROOT = Path(__file__).resolve().parent.parent
PART = "library workspaces"
TORCH_SM90, TORCH_OTHER = 4096 * 8 * 1024, 4096 * 1024 * 2 + 16 * 1024 * 8      # CublasHandlePool.cpp at 26a39059
TE_SM90, TE_OTHER = 32 * MIB + 1024, 4_194_304                                  # TE gemm.py at d0067d0d


def setup(model="llama-2-7b", **work):
    arch = MODEL_PRESETS[model][0]
    return Scenario.from_convention("megatron", params=param_count(arch), workers=8), Workload(arch, **work)


@pytest.mark.parametrize("gpu, implementation, expected", [
    ("H100-SXM-80GB", "huggingface", 2 * TORCH_SM90),              # 67,108,864
    ("H200-141GB", "megatron", 2 * TORCH_SM90 + TE_SM90),          # 100,664,320
    ("A100-80GB", "huggingface", 2 * TORCH_OTHER),                 # 17,039,360
    ("A100-80GB", "megatron", 2 * TORCH_OTHER + TE_OTHER),         # 21,233,664
    ("B200-180GB", "megatron", 2 * TORCH_OTHER + TE_SM90),         # torch's 32 MiB is sm90 only at 26a39059
    ("T4-16GB", "huggingface", 2 * TORCH_OTHER),
    ("MI300X-192GB", "huggingface", 2 * TORCH_SM90),               # no CUDA capability: the largest (H100's)
])
def test_the_table_by_compute_capability_and_implementation(gpu, implementation, expected):
    _, work = setup(gpu=gpu, implementation=implementation)
    assert workspace_bytes(work) == expected
    assert sum(b for _, b in workspace_parts(work)) == expected


def test_a_custom_capacity_takes_the_largest_default():
    _, work = setup(gpu="A100-80GB", gpu_memory=40 * 2**30, implementation="megatron")
    assert workspace_bytes(work) == 2 * TORCH_SM90 + TE_SM90


def test_every_phase_holds_them_as_tensors():
    scenario, work = setup(implementation="megatron", gpu="H100-SXM-80GB")
    for peak in peaks(scenario, work):
        for parts in peak.phases.values():
            assert parts[PART] == 2 * TORCH_SM90 + TE_SM90


def test_the_override_replaces_the_sum_and_zero_removes_the_part():
    scenario, work = setup(gpu="H100-SXM-80GB")
    table = peaks(scenario, work)
    none = peaks(scenario, Workload(work.arch, gpu="H100-SXM-80GB", workspace_bytes=0))
    own = peaks(scenario, Workload(work.arch, gpu="H100-SXM-80GB", workspace_bytes=12_345))
    for t, n, o in zip(table, none, own):
        for phase in t.phases:
            assert PART not in n.phases[phase] and o.phases[phase][PART] == 12_345
            tensors = sum(v for k, v in t.phases[phase].items() if k not in NOT_TENSORS)
            bare = sum(v for k, v in n.phases[phase].items() if k not in NOT_TENSORS)
            assert tensors - bare == 2 * TORCH_SM90


@pytest.mark.parametrize("value", [-1, 2**40 + 1, 1.5, True])
def test_the_field_is_checked(value):
    with pytest.raises(FieldError):
        setup(workspace_bytes=value)


def test_the_cli_flag(capsys):
    main(["--model", "llama-2-7b", "--workers", "8", "--workspace-bytes", "4096", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert all(parts[PART] == 4096 for peak in report["peak"] for parts in peak["phases"].values())


def test_the_ui_state_maps_minus_one_to_the_table():
    from ui.state import convert, fields
    values = fields.defaults()
    arch = MODEL_PRESETS["llama-2-7b"][0]
    assert convert.workload(values, arch).workspace_bytes is None
    assert convert.workload({**values, "workspace_bytes": 0}, arch).workspace_bytes == 0


def test_rows_cite_their_code():
    assert [r.library for r in WORKSPACES] == ["cuBLAS (PyTorch)", "Transformer Engine"]
    assert all(" " in r.source and len(r.source.split()[1]) == 40 for r in WORKSPACES)     # repo, full commit, path


def test_megatron_ci_keeps_exactly_these_between_steps():
    """gpt3_mcore_te_tp1_pp1_dist_optimizer on H100 (CUBLAS_WORKSPACE_CONFIG=:4096:8 = the sm90 default): what
    stays allocated between steps beyond zerocalc's model states is 2 x 32 MiB + TE's 32 MiB + 1,024, and 3,584
    bytes of small tensors (7 blocks of 512)."""
    cases = {c["id"]: c for c in json.loads((ROOT / "validation" / "cases.json").read_text())["cases"]}
    case = cases["MLM-12"]
    assert "gpt3_mcore_te_tp1_pp1_dist_optimizer" in case["source"]["path"]
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    from validation_ledger import zerocalc_report
    _, workload, report = zerocalc_report(case["argv"])
    parts = report["peak"][case["stage"]]["phases"]["optimizer_step"]
    assert parts[PART] == 2 * TORCH_SM90 + TE_SM90 == workspace_bytes(workload)
    assert case["steady_bytes"] - parts["model states"] - parts[PART] == 3_584


@pytest.mark.parametrize("implementation", ["huggingface", "megatron"])
def test_another_card_moves_the_peak_by_its_workspaces_only(implementation):
    """fits_on and the bigger-GPU fix read a card's peak without recomputing the step (step/peak.py peak_on_gpu):
    it equals the peak computed on that card at a percent reserve. Under the allocator's model (the default) the
    card's workspaces also move the replayed reserve: each verdict is still the card's own (a card near a peak
    gets its own report), and the bytes are within 64 MiB."""
    from zerocalc.answers.explore import fits_on
    from zerocalc.parallel.ranks import report_for
    for percent in (5, None):
        scenario, work = setup(implementation=implementation, gpu="H100-SXM-80GB", micro_batch=2,
                               fragmentation_percent=percent)
        rows = {r["gpu"]: r for r in fits_on(report_for(scenario, work))}
        for gpu in ("A100-80GB", "B200-180GB", "T4-16GB", "H200-141GB", "A100-40GB", "L40S-48GB"):
            on = peaks(scenario, replace(work, gpu=gpu))
            exact = {str(p.stage): p.peak_bytes for p in on}
            assert rows[gpu]["fits"] == {str(p.stage): p.fits for p in on}
            if percent is not None:
                assert rows[gpu]["peak_bytes"] == exact
            else:
                assert all(abs(rows[gpu]["peak_bytes"][s] - b) < 64 * 2**20 for s, b in exact.items())
