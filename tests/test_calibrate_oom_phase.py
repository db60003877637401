"""An out-of-memory's phase, read from the traceback pasted with it, and its failed request matched to the
estimate's term of that phase (issue 33). The fixture carries the figures of hiyouga/LlamaFactory#1221 (a 7B full
fine-tune at ZeRO-2 on 8 x V100 32GB: "Tried to allocate 3.14 GiB ... 28.28 GiB already allocated" in Adam's
denom) with the frames torch prints for that path (torch/optim/adamw.py _single_tensor_adamw)."""

from pathlib import Path

import pytest

from ui.state.convert import from_query, resolve
from zerocalc.answers.calibrate.compare import calibration_dict
from zerocalc.answers.calibrate.parse import parse
from zerocalc.answers.calibrate.phase import failed_phase

OOM = (Path(__file__).parent / "fixtures" / "calibration" / "oom_optimizer_step_llamafactory_1221.txt").read_text()
PLAN = {"model": "llama-2-7b", "convention": "deepspeed", "workers": "8", "gpu": "V100-32GB", "seq_len": "1024",
        "recompute": "full", "stage": "2"}
MESSAGE = OOM.splitlines()[-1]


@pytest.mark.parametrize("frames, phase", [
    ('  File "x/torch/optim/adamw.py", line 417, in _single_tensor_adamw\n', "optimizer_step"),
    ('  File "train.py", line 9, in train\n    loss.backward()\n  File "torch/_tensor.py", line 626, in backward\n',
     "backward"),
    ('  File "torch/utils/checkpoint.py", line 1129, in unpack_hook\n', "backward"),
    ('  File "modeling_llama.py", line 1200, in forward\n    logits = logits.float()\n', "forward"),
    ("", None)])
def test_the_phase_is_read_from_the_traceback(frames, phase):
    found = failed_phase(frames + MESSAGE)
    assert (found[0] if found else None) == phase
    assert parse(frames + MESSAGE, gb="binary").failed_phase == phase


@pytest.mark.parametrize("impl, term", [("for-loop", "one of the 2 copies"), ("foreach", "a copy of DeepSpeed's flat")])
def test_the_failed_request_is_named_as_the_step_term_it_is(impl, term):
    r = resolve(from_query({**PLAN, "optimizer_impl": impl})[0])
    d = calibration_dict(OOM, "binary", r.scenario, r.workload, 2)
    assert d["measurement"]["failed_phase"] == "optimizer_step"
    first = d["sentences"][0]
    assert first.startswith("The run ran out of memory in the optimizer step") and "3.14 GiB =" in first, first
    assert term in first
    assert {x["phase"] for x in d["residuals"]} == {"optimizer_step"}      # compared where it failed


def test_without_a_traceback_the_largest_phase_is_compared_as_before():
    r = resolve(from_query(PLAN)[0])
    d = calibration_dict(MESSAGE, "binary", r.scenario, r.workload, 2)
    assert d["measurement"]["failed_phase"] is None
    assert not any(s.startswith("The run ran out of memory in") for s in d["sentences"])
