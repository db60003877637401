"""The probe's line (tools/zerocalc_probe.py): its fixture, its round trip through parse, its dry run and that
the core never imports it.
"""

import ast
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_calibrate import PROBE_PATH, ROOT, STATS_ALLOC_PEAK, STATS_RESERVED_PEAK, fixture, probe_module
from zerocalc.answers.calibrate.parse import parse, parse_probe

# -------------------------------------------------------------------------------------------------------- probe

def test_probe_fixture_and_two_ranks():
    m = parse_probe(fixture("probe_fake.txt"))
    fake = probe_module.FAKE_PEAKS
    assert m.per_phase == {p: a for p, (a, _) in fake.items()}
    assert m.per_phase_reserved == {p: r for p, (_, r) in fake.items()}
    assert m.allocated_peak_bytes == max(a for a, _ in fake.values())
    assert m.usable_total_bytes == probe_module.FAKE_TOTAL       # mem_get_info: what PyTorch can use
    two = parse(fixture("probe_two_ranks.txt"))
    assert two.source_format == "probe" and two.gpu_name == "NVIDIA H100 80GB HBM3"
    assert two.allocated_peak_bytes == STATS_ALLOC_PEAK and two.reserved_peak_bytes == STATS_RESERVED_PEAK
    assert two.per_phase["backward"] == STATS_ALLOC_PEAK               # the larger rank's
    assert {r.label for r in two.readings} >= {"rank 0 forward", "rank 1 optimizer_step"}


phase_names = st.from_regex(r"[A-Za-z0-9_\-]{1,20}", fullmatch=True)
sizes = st.integers(min_value=0, max_value=2**50)


@settings(max_examples=60, deadline=None)
@given(phases=st.dictionaries(phase_names, st.tuples(sizes, sizes, sizes), min_size=1, max_size=4),
       total=sizes, rank=st.none() | st.integers(0, 4096), gpu=st.text(min_size=0, max_size=40))
def test_probe_line_round_trips_through_parse(phases, total, rank, gpu):
    recorded = {n: {"alloc": a, "reserved": r, "driver_used": u} for n, (a, r, u) in phases.items()}
    line = probe_module.format_line(gpu, total, recorded, rank=rank, steps=3)
    assert "\n" not in line and line.startswith("zerocalc-probe v1 ")
    m = parse(line)
    assert m.source_format == "probe"
    assert m.per_phase == {n: a for n, (a, _, _) in phases.items()}
    assert m.per_phase_reserved == {n: r for n, (_, r, _) in phases.items()}
    assert m.allocated_peak_bytes == max(a for a, _, _ in phases.values())
    assert m.reserved_peak_bytes == max(r for _, r, _ in phases.values())
    assert m.nvidia_smi_used_bytes == max(u for _, _, u in phases.values())
    assert m.usable_total_bytes == total


def test_probe_dry_run_records_phases_and_round_trips():
    probe = probe_module.Probe(fake=True, rank=3, quiet=True)
    for _ in range(3):
        for name in ("forward", "backward", "optimizer_step"):
            with probe.phase(name):
                pass
    line = probe.line()
    assert "rank=3" in line and "steps=3" in line
    m = parse(line)
    assert m.per_phase["backward"] == probe_module.FAKE_PEAKS["backward"][0]
    assert m.nvidia_smi_used_bytes == probe_module.FAKE_PEAKS["backward"][1] + probe_module.FAKE_CONTEXT
    with pytest.raises(ValueError):
        with probe.phase("bad name"):
            pass


def test_probe_records_the_peak_reached_before_an_error():
    probe = probe_module.Probe(fake=True, quiet=True)
    with pytest.raises(RuntimeError):
        with probe.phase("backward"):
            raise RuntimeError("CUDA out of memory")
    assert parse(probe.line()).per_phase == {"backward": probe_module.FAKE_PEAKS["backward"][0]}


def test_probe_without_cuda_records_nothing_and_says_so(capsys):
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present: the no-CUDA path does not apply")
    except ImportError:
        pass
    probe = probe_module.Probe()
    with probe.phase("forward"):
        x = 1 + 1
    assert x == 2 and not probe.active and probe.line() is None and probe.report() is None
    assert "nothing is recorded" in capsys.readouterr().err


def test_probe_script_dry_run_prints_one_parseable_line():
    out = subprocess.run([sys.executable, str(PROBE_PATH), "--fake"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and parse(lines[0]).per_phase.keys() == probe_module.FAKE_PEAKS.keys()


def test_probe_is_stand_alone_and_never_imported_by_the_core():
    tree = ast.parse(PROBE_PATH.read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names} | \
            {n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom)}
    assert "torch" not in names and "zerocalc" not in names
    assert names <= set(sys.stdlib_module_names) | {"__future__"}
    for path in (ROOT / "zerocalc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] in ("zerocalc_probe", "tools") for a in node.names), path
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] not in ("zerocalc_probe", "tools"), path
