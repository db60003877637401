"""--measured FILE (issue 33: the plan holds the measured runs, each tied to a stage): the CLI reads a run's paste as
the page's Calibrate does, and it decides the checked stage's verdict in the text and the JSON; a file it cannot use
is refused in one line naming the flag. The message has PyTorch's form (c10/cuda/CUDACachingAllocator.cpp), as in
tests/fixtures/calibration/torch_oom.txt."""

import json

import pytest

from zerocalc.cli.main import run
from zerocalc.cli.types import UsageError

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 "
       "GiB of which 1.00 MiB is free. Including non-PyTorch memory, this process has 79.10 GiB memory in use. Of the "
       "allocated memory 76.50 GiB is allocated by PyTorch, and 0.40 GiB is reserved by PyTorch but unallocated.")
PLAN = ["--model", "llama-3-8b", "--workers", "8", "--check-stage", "3"]


def test_an_oom_at_the_checked_stage_turns_its_green_verdict_red(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text(OOM)
    before = json.loads(run(PLAN + ["--json"]))["verdicts"][3]
    after = json.loads(run(PLAN + ["--measured", str(path), "--json"]))
    assert before["fits"] and not after["verdicts"][3]["fits"] and after["verdicts"][3]["measured"]
    assert after["measured"]["stage"] == 3 and after["measured"]["out_of_memory"]
    assert [v["fits"] for v in after["verdicts"][:3]] == [v["fits"] for v in json.loads(run(PLAN + ["--json"]))[
        "verdicts"][:3]]                                   # the paste belongs to its stage alone
    text = run(PLAN + ["--measured", str(path)])
    assert "Measured run (--measured), at ZeRO-3: it decides the verdict." in text


@pytest.mark.parametrize("flags, message", [
    (["--model", "llama-3-8b", "--measured", "/nonexistent/run.txt"], "--measured: cannot read"),
    (["--params", "7B", "--measured", "README.md"], "--measured: a measured run is compared with the peak estimate"),
    (["--model", "llama-3-8b", "--measured", "pytest.ini"], "--measured: calibration: got"),
])
def test_a_file_it_cannot_use_is_refused_naming_the_flag(flags, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        run(flags)
