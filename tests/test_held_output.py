"""A loop that keeps the model's output (Workload.holds_output, step/losses.py held_output_bytes).

Source: Answer.AI's fsdp_qlora train.py (AnswerDotAI/fsdp_qlora 02586ac7, the loop the validation ledger's AA cases
ran): `output = model(...); loss = output.loss; ... loss.backward(); ... optimizer.step()`, and only then `output =
None` ("Delete the output so more memory frees up before the next forward pass"). The HF Trainer's compute_loss
returns the loss alone; torchtune and torchtitan `del` the logits before backward. Measured here: a tiny transformers
Llama (+ peft LoRA), live bytes through a TorchDispatchMode (tests/measure/loss_peaks.py LiveTracker), the output
kept or dropped before backward.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


def zerocalc_phases(argv):
    out = subprocess.run([sys.executable, "-m", "zerocalc", *argv, "--json"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)["peak"][0]["phases"]


def test_the_held_logits_join_backward_and_the_step_at_the_models_width():
    base = ["--model", "llama-2-7b", "--finetune", "lora", "--recompute", "full", "--seq-len", "2048",
            "--micro-batch", "4"]
    dropped, held = zerocalc_phases(base), zerocalc_phases(base + ["--holds-output"])
    logits = 4 * 2048 * 32000
    for phase in ("backward", "optimizer_step"):
        assert held[phase]["model output held by the loop"] == 2 * logits                 # bf16, transformers 5
        assert sum(held[phase].values()) - sum(dropped[phase].values()) >= 2 * logits
    assert held["forward"] == dropped["forward"]           # forward's peak holds the logits either way
    # transformers < 4.46: LlamaForCausalLM.forward returns self.lm_head(...).float() (modeling_llama.py 4.45.2)
    old = zerocalc_phases(base + ["--holds-output", "--versions", "transformers=4.45"])
    assert old["backward"]["model output held by the loop"] == 4 * logits


def test_only_a_loss_that_returns_logits_can_be_held():
    arch = MODEL_PRESETS["llama-2-7b"][0]
    for bad in ({"implementation": "megatron"}, {"loss": "liger"}):
        with pytest.raises(FieldError, match="holds_output"):
            Workload(arch, holds_output=True, **bad)


torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
pytest.importorskip("peft", reason="peft not installed: pip install -r requirements-validation.txt")


def _trace(hold: bool, recompute: bool, mode: str, seq=128, vocab=4096):
    from tests.measure.loss_peaks import LiveTracker
    from tests.measure.recompute_loss_overlap import build, llama

    torch.set_num_threads(1)
    model = build(llama(seq=seq, vocab=vocab), "bf16", mode)
    if not recompute:
        model.gradient_checkpointing_disable()
    ids = torch.randint(1, vocab, (1, seq))
    tracker = LiveTracker()
    with tracker:
        output = model(input_ids=ids, labels=ids)
        loss = output.loss
        if not hold:
            del output
        tracker.reset_peak()
        loss.backward()
        return tracker.peak, tracker.live


@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("mode", ["lora", "full"])
def test_a_held_output_adds_the_bf16_logits_to_backward_and_after_it(recompute, mode):
    seq, vocab = 128, 4096
    dropped, held = _trace(False, recompute, mode, seq, vocab), _trace(True, recompute, mode, seq, vocab)
    assert held[0] - dropped[0] == 2 * seq * vocab          # backward's peak
    assert held[1] - dropped[1] == 2 * seq * vocab          # still alive when backward ends (until the step)
