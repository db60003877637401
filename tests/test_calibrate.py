"""Calibration: every parser on samples of the real formats (each fixture's .source names where its format is
defined), garbage in, the probe's line round trip, and compare()'s arithmetic on a worked example."""

import ast
import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.answers.calibrate import (FORMATS, CalibrationError, Measurement, compare, compare_stage, parse,
                                        parse_deepspeed, parse_memory_stats, parse_memory_summary, parse_nvidia_smi,
                                        parse_plain, parse_probe, parse_torch_oom)
from zerocalc.gpus import GPU_CATALOG
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.step.peak import StagePeak
from zerocalc.parallel.ranks import layout_report
from zerocalc.output.report import full_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "calibration"
PROBE_PATH = ROOT / "tools" / "zerocalc_probe.py"
MIB, GIB = 2**20, 2**30


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def load_probe():
    spec = importlib.util.spec_from_file_location("zerocalc_probe", PROBE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe_module = load_probe()

# The counters behind the torch-generated fixtures (memory_stats*.json/txt, memory_summary.txt): one H100 rank.
STATS_ALLOC_PEAK, STATS_RESERVED_PEAK = 71_468_469_760, 76_336_381_952


def test_every_fixture_names_where_its_format_comes_from():
    samples = [p for p in FIXTURES.iterdir() if p.suffix != ".source"]
    assert len(samples) >= 15
    for sample in samples:
        note = sample.with_name(sample.name + ".source")
        assert note.is_file(), f"{sample.name} has no .source note"
        text = note.read_text()
        assert "format:" in text and "defined in:" in text and "produced by:" in text, note.name


# ------------------------------------------------------------------------------------ torch.cuda.memory_stats

@pytest.mark.parametrize("name", ["memory_stats.json", "memory_stats_nested.json", "memory_stats_print.txt"])
def test_memory_stats_in_each_printed_form(name):
    m = parse(fixture(name))
    assert m.source_format == "memory_stats"
    assert (m.allocated_peak_bytes, m.reserved_peak_bytes) == (STATS_ALLOC_PEAK, STATS_RESERVED_PEAK)
    assert m.tolerance_bytes == {} and m.nvidia_smi_used_bytes is None
    assert parse_memory_stats(fixture(name)) == m


def test_memory_stats_keys_are_torchs_own():
    # The flat keys torch.cuda.memory_stats documents (torch/cuda/memory.py) and max_memory_allocated reads.
    stats = json.loads(fixture("memory_stats.json"))
    assert stats["allocated_bytes.all.peak"] == STATS_ALLOC_PEAK
    assert stats["reserved_bytes.all.peak"] == STATS_RESERVED_PEAK
    assert {"allocated_bytes.all.current", "requested_bytes.all.peak", "num_alloc_retries"} <= set(stats)
    notes = " ".join(parse(fixture("memory_stats.json")).notes)
    assert "27,921,639,424" in notes     # allocated_bytes.all.current, reported as a note


def test_memory_stats_from_a_minimal_json_and_a_python_dict():
    assert parse('{"allocated_bytes.all.peak": 123, "reserved_bytes.all.peak": 456}').reserved_peak_bytes == 456
    m = parse("{'reserved_bytes.all.peak': 2097152, 'allocated_bytes.all.peak': 1536}")
    assert (m.allocated_peak_bytes, m.reserved_peak_bytes) == (1536, 2 * MIB)


def test_torch_own_functions_print_what_the_parsers_read(monkeypatch):
    # With torch installed (CI installs the CPU build), its own memory_stats / memory_summary format the counters
    # of memory_stats_nested.json; the stored fixtures must be what they print today.
    memory = pytest.importorskip("torch.cuda.memory")
    nested = json.loads(fixture("memory_stats_nested.json"))
    monkeypatch.setattr(memory, "memory_stats_as_nested_dict", lambda device=None: nested)
    flat = memory.memory_stats(0)
    assert json.dumps(flat, indent=2) + "\n" == fixture("memory_stats.json")
    summary = memory.memory_summary(0)
    assert summary == fixture("memory_summary.txt")
    for text in (json.dumps(flat), str(flat), summary):
        m = parse(text)
        assert abs(m.allocated_peak_bytes - STATS_ALLOC_PEAK) <= m.tolerance_bytes.get("allocated_peak_bytes", 0)


# ---------------------------------------------------------------------------------- torch.cuda.memory_summary

def test_memory_summary_reads_the_peak_usage_column_floored():
    m = parse(fixture("memory_summary.txt"))
    assert m.source_format == "memory_summary"
    # "| Allocated memory      |  26628 MiB |  68157 MiB | ..."
    # "| GPU reserved memory   |  72800 MiB |  72800 MiB | ..."
    assert m.allocated_peak_bytes == 68157 * MIB and m.reserved_peak_bytes == 72800 * MIB
    # _format_size floors (sz //= 1024): the true peaks lie within one MiB above.
    assert 0 <= STATS_ALLOC_PEAK - m.allocated_peak_bytes <= m.tolerance_bytes["allocated_peak_bytes"]
    assert 0 <= STATS_RESERVED_PEAK - m.reserved_peak_bytes <= m.tolerance_bytes["reserved_peak_bytes"]
    assert m.readings[0].label == "device 0"
    assert parse_memory_summary(fixture("memory_summary.txt")) == m


def test_memory_summary_sizes_in_every_unit_it_prints():
    table = fixture("memory_summary.txt")
    small = table.replace("|  68157 MiB |", "|   1023 KiB |").replace("|  72800 MiB |  72800 MiB |",
                                                                     "|      2 GiB |      2 GiB |")
    m = parse(small)
    assert m.allocated_peak_bytes == 1023 * 1024 and m.reserved_peak_bytes == 2 * GIB
    assert m.tolerance_bytes == {"allocated_peak_bytes": 1023, "reserved_peak_bytes": GIB - 1}


# -------------------------------------------------------------------------------------- DeepSpeed see_memory_usage

def test_deepspeed_log_reads_gib_labelled_gb():
    m = parse(fixture("deepspeed_see_memory_usage.log"))
    assert m.source_format == "deepspeed"
    # Largest Max_MA "66.46 GB" = 66.46 * 2^30 bytes (see_memory_usage divides by 1024 * 1024 * 1024).
    assert m.allocated_peak_bytes == int(Decimal("66.46") * GIB)
    # Reserved: the largest of Max_CA "70 GB", CA "69.97 GB" and Max_MA on that line.
    assert m.reserved_peak_bytes == 70 * GIB
    # The byte counts the lines were printed from: within the printed rounding.
    assert abs(71_362_215_424 - m.allocated_peak_bytes) <= m.tolerance_bytes["allocated_peak_bytes"]
    assert abs(75_128_422_400 - m.reserved_peak_bytes) <= m.tolerance_bytes["reserved_peak_bytes"] == GIB // 2
    assert [r.label for r in m.readings] == ["Before initializing optimizer states",
                                             "After initializing optimizer states",
                                             "After initializing ZeRO optimizer", "end of step 1"]
    assert any("GiB" in n for n in m.notes)


def test_deepspeed_see_memory_usage_itself(monkeypatch, capsys):
    # With DeepSpeed installed (CI installs it for the framework tests), its own see_memory_usage prints the line.
    utils = pytest.importorskip("deepspeed.runtime.utils")
    accelerator = utils.get_accelerator()
    counters = {"memory_allocated": 27_822_874_112, "max_memory_allocated": 71_362_215_424}
    for name, value in counters.items():
        monkeypatch.setattr(accelerator, name, lambda *a, _v=value, **k: _v)
    monkeypatch.setattr(accelerator, "reset_peak_memory_stats", lambda *a, **k: None)
    monkeypatch.setattr(utils, "torch_memory_reserved", lambda *a, **k: 75_128_422_400)
    monkeypatch.setattr(utils, "torch_max_memory_reserved", lambda *a, **k: 75_128_422_400)
    utils.see_memory_usage("end of step 1", force=True)
    printed = capsys.readouterr().out
    assert "GB         Max_MA" in printed
    m = parse(printed)
    assert m.source_format == "deepspeed" and m.readings[0].label == "end of step 1"
    assert abs(m.allocated_peak_bytes - 71_362_215_424) <= m.tolerance_bytes["allocated_peak_bytes"]
    assert abs(m.reserved_peak_bytes - 75_128_422_400) <= m.tolerance_bytes["reserved_peak_bytes"]
    ma_line = next(line for line in printed.splitlines() if "Max_MA" in line)
    assert ma_line == fixture("deepspeed_see_memory_usage.log").splitlines()[10].split("see_memory_usage] ")[1]


def test_deepspeed_print_form_and_a_max_ca_rounded_below_ca():
    m = parse_deepspeed(fixture("deepspeed_see_memory_usage_print.txt"))
    # "MA 4.81 GB  Max_MA 4.94 GB  CA 5.2 GB  Max_CA 5 GB": Max_CA is round()ed to a whole GiB, so CA wins.
    assert m.allocated_peak_bytes == round(Decimal("4.94") * GIB)
    assert m.reserved_peak_bytes == round(Decimal("5.2") * GIB)
    assert [r.label for r in m.readings] == ["Stage 3 initialize beginning", "DeepSpeedZeRoOffload initialize [begin]"]


def test_deepspeed_real_log_line_with_max_ca_zero():
    # Published DeepSpeed logs show "CA 0.32 GB  Max_CA 0 GB": the reserved peak cannot be below CA.
    line = ("[2024-07-10 14:14:51,014] [INFO] [utils.py:801:see_memory_usage] MA 0.32 GB         Max_MA 0.32 GB"
            "         CA 0.32 GB         Max_CA 0 GB ")
    m = parse(line)
    assert m.allocated_peak_bytes == m.reserved_peak_bytes == round(Decimal("0.32") * GIB)


def test_deepspeed_memory_status():
    m = parse(fixture("deepspeed_memory_status.txt"))
    assert m.allocated_peak_bytes == round(Decimal("66.4612") * GIB)
    assert m.reserved_peak_bytes == round(Decimal("69.9688") * GIB)
    assert abs(m.allocated_peak_bytes - 71_362_215_424) <= m.tolerance_bytes["allocated_peak_bytes"]


# ------------------------------------------------------------------------------------------- CUDA out of memory

def test_torch_oom_message():
    m = parse_torch_oom(fixture("torch_oom.txt"))
    assert parse(fixture("torch_oom.txt")).source_format == "torch_oom"
    # "74.89 GiB is allocated by PyTorch, and 2.57 GiB is reserved by PyTorch but unallocated"
    assert m.allocated_peak_bytes == round(Decimal("74.89") * GIB)
    assert m.reserved_peak_bytes == round(Decimal("74.89") * GIB) + round(Decimal("2.57") * GIB)
    assert m.nvidia_smi_used_bytes == round(Decimal("78.59") * GIB)     # "this process has 78.59 GiB memory in use"
    assert m.nvidia_smi_total_bytes == round(Decimal("79.65") * GIB)
    true = {"allocated_peak_bytes": 80_414_253_056, "reserved_peak_bytes": 83_178_602_496,
            "nvidia_smi_total_bytes": 85_520_809_984, "nvidia_smi_used_bytes": 85_520_809_984 - 1_131_413_504}
    for q, value in true.items():
        assert abs(getattr(m, q) - value) <= m.tolerance_bytes[q], q
    assert any("1.95 GiB" in n for n in m.notes)


def test_torch_oom_before_2_1():
    m = parse(fixture("torch_oom_before_2_1.txt"))
    assert m.allocated_peak_bytes == round(Decimal("74.89") * GIB)
    assert m.reserved_peak_bytes == round(Decimal("77.47") * GIB) and m.nvidia_smi_used_bytes is None


def test_torch_oom_with_other_processes_a_fraction_cap_and_private_pools():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity "
            "of 93.02 GiB of which 1.18 GiB is free. Process 2752205 has 91.82 GiB memory in use. 80.00 GiB "
            "allowed; Of the allocated memory 90.63 GiB is allocated by PyTorch, with 1.00 GiB allocated in "
            "private pools (e.g., CUDA Graphs), and 120.54 MiB is reserved by PyTorch but unallocated.")
    m = parse(text)
    alloc = round(Decimal("90.63") * GIB) + GIB
    assert m.allocated_peak_bytes == alloc
    assert m.reserved_peak_bytes == alloc + round(Decimal("120.54") * MIB)
    assert m.nvidia_smi_used_bytes == round(Decimal("93.02") * GIB) - round(Decimal("1.18") * GIB)


# ---------------------------------------------------------------------------------------------------- nvidia-smi

H100_TOTAL = GPU_CATALOG["H100-SXM-80GB"][1]


@pytest.mark.parametrize("name", ["nvidia_smi_csv.txt", "nvidia_smi_csv_noheader.txt", "nvidia_smi_csv_nounits.txt",
                                  "nvidia_smi_csv_noheader_nounits.txt", "nvidia_smi_table.txt"])
def test_nvidia_smi_each_form(name):
    m = parse(fixture(name))
    assert m.source_format == "nvidia_smi"
    assert m.nvidia_smi_used_bytes == 74321 * MIB        # MiB is 2^20 bytes
    assert m.nvidia_smi_total_bytes == 81559 * MIB == H100_TOTAL
    assert m.allocated_peak_bytes is None and m.reserved_peak_bytes is None
    assert parse_nvidia_smi(fixture(name)) == m


def test_nvidia_smi_several_gpus_reports_each_and_the_max():
    m = parse(fixture("nvidia_smi_csv_8gpu.txt"))
    assert len(m.readings) == 8
    assert [r.used_bytes for r in m.readings][:2] == [74321 * MIB, 74285 * MIB]
    assert m.nvidia_smi_used_bytes == 76018 * MIB == max(r.used_bytes for r in m.readings)
    assert m.readings[7].label.startswith("7 NVIDIA H100")
    assert m.gpu_name == "NVIDIA H100 80GB HBM3"
    table = parse(fixture("nvidia_smi_table.txt"))
    assert [r.used_bytes for r in table.readings] == [74321 * MIB, 74285 * MIB]   # process rows are not GPUs


def test_nvidia_smi_columns_found_by_header_and_na_values():
    text = "utilization.gpu [%], memory.total [MiB], memory.used [MiB]\n98 %, 81559 MiB, 70000 MiB\n"
    m = parse(text)
    assert (m.nvidia_smi_used_bytes, m.nvidia_smi_total_bytes) == (70000 * MIB, 81559 * MIB)
    with pytest.raises(CalibrationError) as err:
        parse(fixture("nvidia_smi_csv_na.txt"))
    assert err.value.field == "calibration" and "[N/A]" in str(err.value)


# ---------------------------------------------------------------------------------------------------------- plain

def test_plain_bytes_gib_and_gb():
    m = parse(fixture("plain.txt"))
    assert (m.allocated_peak_bytes, m.reserved_peak_bytes) == (STATS_ALLOC_PEAK, STATS_RESERVED_PEAK)
    assert m.source_format == "plain" and m.tolerance_bytes == {}
    gib = parse(fixture("plain_gib.txt"))
    assert gib.allocated_peak_bytes == round(Decimal("66.56") * GIB)
    assert gib.reserved_peak_bytes == round(Decimal("71.09") * GIB)
    gb = parse(fixture("plain_gb.txt"))
    assert gb.allocated_peak_bytes == 66_560_000_000          # GB is 10^9 bytes
    assert any("gb='binary'" in n for n in gb.notes)
    binary = parse(fixture("plain_gb.txt"), gb="binary")
    assert binary.allocated_peak_bytes == round(Decimal("66.56") * GIB)
    assert parse_plain(fixture("plain_gb.txt"), gb="binary") == binary


def test_plain_labels_and_exact_mib():
    m = parse("torch.cuda.max_memory_allocated() = 12345 MiB\nmax reserved 12.5 GiB\ndriver used: 70000 MiB")
    assert m.allocated_peak_bytes == 12345 * MIB
    assert m.reserved_peak_bytes == 12 * GIB + GIB // 2
    assert m.nvidia_smi_used_bytes == 70000 * MIB
    assert parse("max_memory_allocated: 1,234,567").allocated_peak_bytes == 1_234_567
    # A fraction without a unit cannot be bytes: skipped, and alone it is not a measurement.
    with pytest.raises(CalibrationError):
        parse("max_memory_allocated: 66.5")


# -------------------------------------------------------------------------------------------------------- probe

def test_probe_fixture_and_two_ranks():
    m = parse_probe(fixture("probe_fake.txt"))
    fake = probe_module.FAKE_PEAKS
    assert m.per_phase == {p: a for p, (a, _) in fake.items()}
    assert m.per_phase_reserved == {p: r for p, (_, r) in fake.items()}
    assert m.allocated_peak_bytes == max(a for a, _ in fake.values())
    assert m.nvidia_smi_total_bytes == probe_module.FAKE_TOTAL
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
    assert m.nvidia_smi_total_bytes == total


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


# ---------------------------------------------------------------------------------------------- mixed and garbage

def test_several_formats_pasted_together_are_merged():
    m = parse(fixture("memory_stats.json") + "\n" + fixture("nvidia_smi_csv.txt"))
    assert m.source_format == "memory_stats+nvidia_smi"
    assert (m.allocated_peak_bytes, m.reserved_peak_bytes) == (STATS_ALLOC_PEAK, STATS_RESERVED_PEAK)
    assert (m.nvidia_smi_used_bytes, m.nvidia_smi_total_bytes) == (74321 * MIB, H100_TOTAL)
    mixed = parse(fixture("deepspeed_see_memory_usage.log") + fixture("plain.txt"))
    assert mixed.allocated_peak_bytes == STATS_ALLOC_PEAK            # the exact figure wins over the rounded one
    assert any("kept" in n for n in mixed.notes)


@pytest.mark.parametrize("text", ["", "   \n", "hello world", "loss 2.31 step 100", "{}", "{\"a\": 1}",
                                  "MA GB Max_MA", "memory.used [MiB]\nabc, def", "zerocalc-probe v1",
                                  "zerocalc-probe v2 forward.alloc=1", "zerocalc-probe v1 forward.alloc=1.5"])
def test_garbage_gets_a_clear_message(text):
    with pytest.raises(CalibrationError) as err:
        parse(text)
    assert isinstance(err.value, FieldError) and isinstance(err.value, ValueError)
    assert err.value.field == "calibration"


def test_the_message_lists_every_format_understood():
    with pytest.raises(CalibrationError) as err:
        parse("hello world")
    message = str(err.value)
    assert message.startswith("calibration: got 'hello world'")
    for name in FORMATS:
        assert name in message
    with pytest.raises(CalibrationError) as one:
        parse_nvidia_smi("hello")
    assert "nvidia_smi" in str(one.value) and "deepspeed" not in str(one.value)


def test_inputs_that_are_not_text_or_too_long():
    with pytest.raises(CalibrationError):
        parse(12345)
    with pytest.raises(CalibrationError):
        parse("x" * 1_000_001)
    with pytest.raises(FieldError):
        parse("max_memory_allocated: 1", gb="metric")
    assert parse(b"max_memory_allocated: 7").allocated_peak_bytes == 7


FRAGMENTS = ["MA", "Max_MA", "CA", "Max_CA", "GB", "GiB", "MiB", "KiB", " ", "\n", ",", "|", ":", "=", "1.5", "7",
             "99999999999999999999999", "1e9", "-3", "[N/A]", "memory.used [MiB]", "memory.total [MiB]",
             "zerocalc-probe v1", "forward.alloc=", "total=", "rank=", "\"allocated_bytes.all.peak\": ",
             "'reserved_bytes.all.peak', ", "PyTorch CUDA memory summary", "| Allocated memory      | ",
             "Peak Usage", "CUDA out of memory. Tried to allocate ", "is reserved by PyTorch but unallocated",
             "max_memory_allocated", "peak reserved", "current alloc=", "GB (delta=", "{", "}", "[", "]", "\u0663"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)))
def test_fuzz_random_text_raises_only_the_calibration_error(text):
    try:
        m = parse(text)
    except CalibrationError:
        return
    assert isinstance(m, Measurement)
    assert any(getattr(m, q) is not None for q in ("allocated_peak_bytes", "reserved_peak_bytes",
                                                   "nvidia_smi_used_bytes", "nvidia_smi_total_bytes"))
    for q in ("allocated_peak_bytes", "reserved_peak_bytes", "nvidia_smi_used_bytes", "nvidia_smi_total_bytes"):
        value = getattr(m, q)
        assert value is None or (isinstance(value, int) and 0 <= value <= 2**60)


SAMPLES = sorted(p.name for p in FIXTURES.iterdir() if p.suffix != ".source")


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(SAMPLES), cut=st.integers(0, 10**6), width=st.integers(0, 50),
       insert=st.text(max_size=8))
def test_fuzz_damaged_real_samples_raise_only_the_calibration_error(name, cut, width, insert):
    text = fixture(name)
    at = cut % (len(text) + 1)
    damaged = text[:at] + insert + text[at + width:]
    try:
        parse(damaged)
    except CalibrationError:
        pass


# -------------------------------------------------------------------------------------------------- compare

def worked_peak() -> StagePeak:
    phases = {
        "forward": {"model states": 20 * GIB, "activations": 30 * GIB, "logits and loss": 2 * GIB,
                    "allocator reserve": -(-52 * GIB * 5 // 100), "CUDA context": GIB},
        "backward": {"model states": 20 * GIB, "activations": 30 * GIB, "logits and loss": 3 * GIB,
                     "gradient buckets": 1_000_000_000, "allocator reserve": -(-(53 * GIB + 10**9) * 5 // 100),
                     "CUDA context": GIB},
        "optimizer_step": {"model states": 20 * GIB, "all-gather bucket": 10**9, "allocator reserve": 1,
                           "CUDA context": GIB},
    }
    return StagePeak(2, phases, H100_TOTAL, {p: sum(c.values()) for p, c in phases.items()})


def test_compare_worked_example():
    peak = worked_peak()
    work = Workload(MODEL_PRESETS["llama-2-7b"][0])          # 1 GiB context, 5 % reserve, H100
    tensors = 53 * GIB + 10**9                                # backward: 20 + 30 + 3 GiB + 1 GB of buckets
    reserve = -(-tensors * 5 // 100)
    measured = Measurement(allocated_peak_bytes=58 * GIB, reserved_peak_bytes=63 * GIB,
                           nvidia_smi_used_bytes=64 * GIB + 512 * MIB, nvidia_smi_total_bytes=H100_TOTAL)
    cal = compare(measured, peak, work)
    assert cal.stage == 2
    alloc, res, used = cal.residual("allocated"), cal.residual("reserved"), cal.residual("nvidia-smi used")
    assert (alloc.estimated_bytes, alloc.phase) == (tensors, "backward")
    assert alloc.residual_bytes == 58 * GIB - tensors
    assert alloc.residual_percent == pytest.approx(100 * (58 * GIB - tensors) / tensors)
    assert res.estimated_bytes == tensors + reserve and res.residual_bytes == 63 * GIB - tensors - reserve
    assert used.estimated_bytes == peak.peak_bytes == tensors + reserve + GIB
    assert used.residual_bytes == 64 * GIB + 512 * MIB - peak.peak_bytes
    # Reserved - allocated = 5 GiB over 58 GiB of tensors: 8.62 %, rounded up to 9.
    frag = cal.suggestion("fragmentation_percent")
    assert (frag.current, frag.suggested) == (5, 9) and -(-100 * 5 // 58) == 9
    # Used - reserved = 1.5 GiB: the context and everything else outside PyTorch's allocator.
    ctx = cal.suggestion("cuda_context_bytes")
    assert (ctx.current, ctx.suggested) == (GIB, GIB + 512 * MIB)
    assert cal.suggestion("gpu_memory") is None                # the measured total is the catalog's
    assert any("Live tensors" in s and "more than estimated" in s for s in cal.sentences)
    applied = cal.suggested_workload(work)
    assert (applied.fragmentation_percent, applied.cuda_context_bytes) == (9, GIB + 512 * MIB)
    json.dumps(cal.to_dict())


def test_compare_without_allocated_uses_the_estimate_and_says_so():
    peak = worked_peak()
    work = Workload(MODEL_PRESETS["llama-2-7b"][0])
    tensors = 53 * GIB + 10**9
    cal = compare(Measurement(reserved_peak_bytes=tensors + tensors // 10, nvidia_smi_used_bytes=70 * GIB), peak, work)
    frag = cal.suggestion("fragmentation_percent")
    assert frag.suggested == 10 and "estimated" in frag.sentence
    assert cal.suggestion("cuda_context_bytes").suggested == 70 * GIB - (tensors + tensors // 10)
    nothing = compare(Measurement(nvidia_smi_total_bytes=40_960 * MIB), peak, work)
    assert nothing.residuals == () and nothing.suggestion("gpu_memory").suggested == 40_960 * MIB


def test_compare_against_a_stage_peak_a_report_row_and_compare_stage_agree():
    arch = MODEL_PRESETS["llama-2-7b"][0]
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
    work = Workload(arch, micro_batch=2)
    measured = parse(fixture("probe_two_ranks.txt"))
    by_peak = compare(measured, layout_report(scenario, work).peaks[2], work)
    by_row = compare(measured, full_report(scenario, work)["peak"][2], work)
    assert by_peak.to_dict() == by_row.to_dict() == compare_stage(measured, scenario, work, 2).to_dict()
    # The probe's phases are set against the estimate's phases of the same name.
    assert [p.phase for p in by_peak.phases] == ["forward", "backward", "optimizer_step"]
    back = next(p for p in by_peak.phases if p.phase == "backward")
    parts = layout_report(scenario, work).peaks[2].phases["backward"]
    assert back.estimated_tensor_bytes == sum(v for k, v in parts.items()
                                              if k not in ("allocator reserve", "CUDA context"))
    assert back.estimated_reserved_bytes == back.estimated_tensor_bytes + parts["allocator reserve"]
    assert back.measured_allocated_bytes == STATS_ALLOC_PEAK


@settings(max_examples=40, deadline=None)
@given(stage=st.integers(0, 3), micro=st.integers(1, 4), cached=st.integers(0, 20 * GIB),
       outside=st.integers(0, 3 * GIB))
def test_applied_suggestions_absorb_the_residuals(stage, micro, cached, outside):
    # A run whose tensors match the estimate exactly: the suggested reserve and context then cover it, the reserve
    # by less than one percent of the tensors too much (it is rounded up to a whole percent).
    arch = MODEL_PRESETS["llama-2-7b"][0]
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
    work = Workload(arch, micro_batch=micro)
    peak = layout_report(scenario, work).peaks[stage]
    t = max(sum(v for k, v in c.items() if k not in ("allocator reserve", "CUDA context"))
            for c in peak.phases.values())
    measured = Measurement(t, t + cached, t + cached + outside, work.capacity_bytes)
    cal = compare(measured, peak, work)
    assert cal.residual("allocated").residual_bytes == 0
    tuned = cal.suggested_workload(work)
    again = compare(measured, layout_report(scenario, tuned).peaks[stage], tuned)
    assert again.residual("allocated").residual_bytes == 0
    assert -(t // 100) - 1 <= again.residual("reserved").residual_bytes <= 0
    assert again.residual("nvidia-smi used").residual_bytes == again.residual("reserved").residual_bytes


def test_compare_refuses_what_it_cannot_read():
    work = Workload(MODEL_PRESETS["gpt2"][0])
    with pytest.raises(FieldError):
        compare({"allocated": 1}, worked_peak(), work)
    with pytest.raises(FieldError):
        compare(Measurement(allocated_peak_bytes=1), {"stage": 0}, work)
    assert replace(Measurement(), source_format="x").source_format == "x"
