"""Backward under recompute: the loss's gradient moment and the last block's re-run do not coexist (issue 31 item 4).

Source: a lifetime trace on the CPU (tests/measure/recompute_loss_overlap.py: transformers 5.24 LlamaForCausalLM
and its ForCausalLMLoss, peft 0.21.2 LoRA, gradient_checkpointing_enable(use_reentrant=False), live bytes through
a TorchDispatchMode): when torch.utils.checkpoint re-runs the last block, no T x V storage is alive (the fp32
log-softmax, the logits' gradient and its casts are freed with the output end's saves). So backward's peak is the
larger of the two moments (step/peak.py _loss_or_recompute).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.model.finetune import FineTune
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.output.report import full_report
from zerocalc.step.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
LLAMA8B = MODEL_PRESETS["llama-3-8b"][0]


def backward_parts(recompute: str, seq: int, mode: str = "lora"):
    s = Scenario.from_convention("zero-paper", params=param_count(LLAMA8B), workers=1)
    w = Workload(LLAMA8B, seq_len=seq, recompute=recompute, finetune=FineTune(mode=mode))
    d = full_report(s, w)
    return d["peak"][0]["phases"]["backward"], d["activation_terms"]


@pytest.mark.parametrize("seq", [2048, 16384])
def test_backward_is_the_larger_moment_not_their_sum(seq):
    parts, terms = backward_parts("full", seq)
    none, _ = backward_parts("none", seq)
    assert not ("logits and loss" in parts and "recompute (one block)" in parts)
    loss = 8 * seq * LLAMA8B.vocab                      # HF bf16: logits, fp32 gradient, cast back (LOSSES)
    head = sum(terms["output_end"].values())
    fixed = {k: v for k, v in parts.items() if k not in ("activations", "logits and loss", "recompute (one block)",
                                                         "allocator reserve")}
    saved = parts["activations"] + (head if "recompute (one block)" in parts else 0)
    loss_moment = saved + loss
    recompute_moment = saved - head + terms["recompute_working"]
    assert sum(fixed.values()) + max(loss_moment, recompute_moment) == \
        sum(v for k, v in parts.items() if k != "allocator reserve")
    assert "recompute (one block)" not in none and none["logits and loss"] == loss      # nothing to re-run


def test_short_sequences_peak_at_the_loss_long_ones_keep_it_too_for_a_big_vocabulary():
    # Llama-3's 128,256-column vocabulary: 8 bytes per T x V dwarf one rebuilt block at every length
    for seq in (2048, 16384):
        parts, _ = backward_parts("full", seq)
        assert "logits and loss" in parts and "recompute (one block)" not in parts


torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
pytest.importorskip("peft", reason="peft not installed: pip install -r requirements-validation.txt")


def zerocalc_backward(config: dict, tmp_path, mode: str):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    argv = ["--config", str(path), "--finetune", mode, "--recompute", "full", "--attention", "eager",
            "--seq-len", "256", "--micro-batch", "1", "--param-dtype", "bf16", "--json"]
    if mode == "lora":
        argv += ["--lora-targets", "q,k,v,o"]
    out = subprocess.run([sys.executable, "-m", "zerocalc", *argv], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    d = json.loads(out)
    return d["peak"][0]["phases"]["backward"], d["activation_terms"]


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_traced_backward_peak_is_the_loss_moment_and_the_model_matches_it(mode, tmp_path):
    from tests.measure.recompute_loss_overlap import llama, trace

    config = llama(seq=256)
    t = trace(config, dtype="bf16", mode=mode, seq=256)
    assert t["T x V storages live at backward start"] == t["T x V fp32 bytes"]     # the saved log-softmax
    assert t["T x V storages live at recompute"] == 0                               # all freed before the re-run
    assert t["recompute moment peak"] < t["loss-gradient moment peak"] == t["backward peak"]
    parts, terms = zerocalc_backward(config, tmp_path, mode)
    model = parts["activations"] + parts["logits and loss"]
    # zerocalc's saved activations + the loss's 8 bytes per T x V against the traced peak (above the parameters and
    # the inputs): 2,040 bytes apart in 12.9 MB under LoRA, 4,088 in full. nll_loss's backward releases the labels
    # it saved (2,048 bytes, counted as "labels") and its 8-byte total weight before log_softmax's backward
    # allocates; the trace holds the loss scalar and its gradient (16 bytes) that the model leaves out; and when
    # the embedding trains it saves the token ids (2,048 bytes, counted), made before the trace starts.
    explained = 2048 + 8 - 16 + (2048 if mode == "full" else 0)
    assert model - t["backward peak"] == explained
    assert "recompute (one block)" not in parts
    # Summing the rebuilt block on top, as before, read high by more than 15 %
    assert model + terms["recompute_working"] > 1.15 * t["backward peak"]
