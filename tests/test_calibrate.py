"""Calibration parsers: each format on samples of the real thing (each fixture's .source names where its format
is defined): memory_stats, memory_summary, DeepSpeed's lines, the OOM message, nvidia-smi and plain labels.
"""

import importlib.util
import json
from decimal import Decimal
from pathlib import Path

import pytest

from zerocalc.answers.calibrate.measurement import CalibrationError
from zerocalc.answers.calibrate.parse import (
    parse,
    parse_deepspeed,
    parse_memory_stats,
    parse_memory_summary,
    parse_nvidia_smi,
    parse_plain,
    parse_torch_oom,
)
from zerocalc.gpus import GPU_CATALOG

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
    # "a total capacity of 79.11 GiB": cudaMemGetInfo's total, what PyTorch can use, not nvidia-smi's 81,559 MiB
    assert m.usable_total_bytes == round(Decimal("79.11") * GIB) and m.nvidia_smi_total_bytes is None
    true = {"allocated_peak_bytes": 80_414_253_056, "reserved_peak_bytes": 83_178_602_496,
            "usable_total_bytes": 84_943_257_600, "nvidia_smi_used_bytes": 85_520_809_984 - 1_131_413_504}
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
