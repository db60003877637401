"""Issue 33's property, "same verdict on every surface", over random plans with offload, host RAM, a pasted
measurement (an out-of-memory message or a measured peak, read by Calibrate at the checked stage) and Compare: the
page's headline, its cards and Compare's lines, `python -m zerocalc` as text and as JSON (the paste given with
--measured) give the same verdict and peak per ZeRO stage. The one rule is zerocalc/answers/verdict.py; tests/test_app_rl.py holds the RL plans' property.
The out-of-memory message has PyTorch's form (c10/cuda/CUDACachingAllocator.cpp, torch >= 2.1), as in
tests/fixtures/calibration/torch_oom.txt."""

import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.app_helpers import answer_text, run_app, verdict_cards
from ui.state.convert import from_query, resolve
from zerocalc.answers.calibrate.parse import parse
from zerocalc.answers.calibrate.verdict import measured_fit
from zerocalc.answers.verdict import headline
from zerocalc.cli.main import run as cli_run
from zerocalc.units import format_bytes

GIB = 2**30
PLANS = st.fixed_dictionaries({
    "model": st.sampled_from(["qwen2.5-7b", "mistral-7b", "llama-3.2-1b", "qwen3-8b"]),
    "gpu": st.sampled_from(["A100-40GB", "L40S-48GB", "RTX-4090-24GB", "H100-SXM-80GB"]),
    "workers": st.sampled_from([1, 2, 8]),
    "stage": st.integers(0, 3),
    "micro_batch": st.sampled_from([1, 2]),
    "seq_len": st.sampled_from([1024, 4096]),
    "offload_optimizer": st.sampled_from(["none", "cpu"]),
    "offload_params": st.sampled_from(["none", "cpu"]),
    "host_ram_gb": st.sampled_from([0, 48, 256, 2000]),
    "paste": st.sampled_from(["none", "oom", "peak_low", "peak_high"]),
})

# The CLI text's peak table: stage, peak, phase, capacity, headroom, used, verdict (output/text.py peak_text)
ROW = re.compile(r"^(\d)\s+(\S+ GB)\s+(\S+)\s+\S+ GB\s+\S+ GB\s+[\d.]+%\s+(yes|NO(?: \(.+?\))?)(?=\s{2,})", re.M)


def flags(plan: dict) -> list:
    out = ["--model", plan["model"], "--gpu", plan["gpu"], "--workers", str(plan["workers"]),
           "--check-stage", str(plan["stage"]), "--micro-batch", str(plan["micro_batch"]),
           "--seq-len", str(plan["seq_len"]), "--offload-optimizer", plan["offload_optimizer"]]
    if plan["offload_params"] != "none" and plan["stage"] == 3:           # ZeRO-Offload of parameters: stage 3 only
        out += ["--offload-params", plan["offload_params"]]
    if plan["host_ram_gb"]:
        out += ["--host-ram", f"{plan['host_ram_gb']}GB"]
    return out


def query(plan: dict) -> dict:
    q = {"model": plan["model"], "gpu": plan["gpu"], "workers": str(plan["workers"]), "stage": str(plan["stage"]),
         "micro_batch": str(plan["micro_batch"]), "seq_len": str(plan["seq_len"]),
         "offload_optimizer": plan["offload_optimizer"]}
    if plan["offload_params"] != "none" and plan["stage"] == 3:
        q["offload_params"] = plan["offload_params"]
    if plan["host_ram_gb"]:
        q["host_ram_gb"] = str(plan["host_ram_gb"])                     # the page takes a node's RAM in GB
    return q


def paste_text(kind: str, capacity: int) -> str:
    """An out-of-memory on this plan's card, or a completed run's peak 2 GiB under or over its capacity."""
    if kind == "oom":
        total = capacity / GIB
        return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                f"capacity of {total:.2f} GiB of which 1.00 MiB is free. Including non-PyTorch memory, this process "
                f"has {total:.2f} GiB memory in use. Of the allocated memory {total - 2.5:.2f} GiB is allocated by "
                "PyTorch, and 0.40 GiB is reserved by PyTorch but unallocated.")
    return f"max_memory_reserved: {capacity + (2 if kind == 'peak_high' else -2) * GIB}"


def cli_text_rows(text: str) -> dict:
    return {int(m.group(1)): (m.group(2), m.group(4)) for m in ROW.finditer(text)}


def cell(v: dict) -> str:
    """The CLI text's verdict cell for a verdict row (output/text.py _verdict_cell)."""
    if v["fits"]:
        return "yes"
    if v["answer"] != "does not fit":
        return f"NO ({v['answer']})"
    return "NO" if v["deciding"].startswith("GPU memory") else f"NO ({v['deciding']})"


@settings(max_examples=16, deadline=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.reuse, Phase.generate))     # no shrinking: each example runs the page
@given(PLANS)
def test_every_surface_gives_the_plans_one_verdict_and_peak(plan):
    stage, q = plan["stage"], query(plan)
    capacity = resolve(from_query(q)[0]).workload.capacity_bytes
    pasted = "" if plan["paste"] == "none" else paste_text(plan["paste"], capacity)
    argv = flags(plan)
    with tempfile.TemporaryDirectory() as folder:          # the CLI reads the paste from a file (--measured)
        if pasted:
            (Path(folder) / "run.txt").write_text(pasted)
            argv += ["--measured", str(Path(folder) / "run.txt")]
        report = json.loads(cli_run(argv + ["--json"]))
        text = cli_run(argv)
    verdicts, peaks = report["verdicts"], {p["stage"]: p["peak_bytes"] for p in report["peak"]}

    # the CLI's text says what its JSON says, stage by stage
    rows = cli_text_rows(text)
    assert sorted(rows) == [0, 1, 2, 3], text
    for v in verdicts:
        assert rows[v["stage"]] == (format_bytes(peaks[v["stage"]], "GB"), cell(v)), (v, rows[v["stage"]])

    # the same paste, read by Calibrate at the checked stage, decides that stage's GPU term on the page as the
    # CLI's --measured does (measured beats estimated)
    at = run_app(q, tab="Calibrate")
    if pasted:
        at.text_area(key="calib_text").set_value(pasted).run()
        assert not at.exception, at.exception
        decides = measured_fit(parse(pasted), capacity, "decimal")["fits"] is not None
        assert verdicts[stage]["measured"] == decides == (report["measured"]["fits"] is not None)
        if plan["paste"] == "oom":
            assert not verdicts[stage]["fits"]                       # an OOM on this card never reads green

    # the page: the headline and the cards
    answer = answer_text(at)
    said = headline(verdicts)
    assert said[:1].upper() + said[1:] + "." in answer, (said, answer)
    assert f"peak {format_bytes(peaks[stage], 'GB')}" in answer
    assert f"({verdicts[stage]['answer']}" in answer
    cards = {s: (fits, body) for s, fits, body in verdict_cards(at)}
    for s, (fits, body) in cards.items():
        assert fits == verdicts[s]["fits"], (s, body, verdicts[s])
        assert format_bytes(peaks[s], "GB") in body, (s, body)
    assert stage in cards

    # Compare: plan A pinned as this plan, plan B this view: both lines give the checked stage's verdict and peak
    # (a paste belongs to the plan it was pasted on, so to both)
    at.session_state["tab"] = "Compare"
    at.run()
    at.button(key="pin_a").click().run()                             # as the page's "Pin this view as plan A"
    assert not at.exception, at.exception
    lines = " ".join(m.value for m in at.markdown)
    word = verdicts[stage]["answer"]
    b = re.search(r"\*\*Plan B \(this view\)\*\*: ZeRO-\d (.+?) on .+?, peak (\S+ GB)", lines)
    assert b and (b.group(1), b.group(2)) == (word, format_bytes(peaks[stage], "GB")), lines
    a = re.search(r"\*\*Plan A\*\*: ZeRO-\d (.+?) on .+?, peak (\S+ GB)", lines)
    assert a and (a.group(1), a.group(2)) == (word, format_bytes(peaks[stage], "GB")), lines   # the same plan
