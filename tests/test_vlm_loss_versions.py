"""Vision-language models that kept their own loss after transformers 4.46 (zerocalc/versions.py, issue 31 item 3).

Sources: transformers 4.51.3 models/qwen2_5_vl/modeling_qwen2_5_vl.py Qwen2_5_VLForConditionalGeneration.forward
(logits.float(), shift_logits[..., :-1, :].contiguous(); 4.52.4 calls self.loss_function) and 5.16.1
models/gemma3/modeling_gemma3.py Gemma3ForConditionalGeneration.forward (logits.float(), the shifted slice indexed
by the attention mask; 5.17.0 calls self.loss_function). Measured on the CPU by tests/measure/vlm_loss_versions.py:
under this venv's transformers here, and under the older releases where an interpreter path holds them
(ZEROCALC_VLM_TRANSFORMERS_PATHS, comma-separated `pip install --target` folders; skipped without them).
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from tools.validation_ledger import zerocalc_report
from zerocalc.step.losses import loss_row, loss_transients, returned_logits_bytes
from zerocalc.versions import applies, family_of, parse, rows_in_effect

ROOT = Path(__file__).resolve().parent.parent
PLANS = {"gemma3": ["--model", "gemma-3-4b", "--images-per-sample", "1"],
         "qwen2.5-vl": ["--model", "qwen2.5-vl-7b", "--images-per-sample", "1"]}
OLD = {"qwen2.5-vl": "4.51.3", "gemma3": "5.16.1"}
VOCAB, SEQ = 4096, 128


def _workload(family, versions="", batch=1):
    _s, w, _r = zerocalc_report(PLANS[family] + ["--finetune", "lora", "--vocab", str(VOCAB)])
    return replace(w, micro_batch=batch, finetune=replace(w.finetune, versions=parse(versions)))


def _model(family, versions, batch):
    w = _workload(family, versions, batch)
    shape = SimpleNamespace(logits_elements=batch * SEQ * VOCAB, act_bits=16)
    return loss_transients(w, shape), loss_row(w), returned_logits_bytes(w, shape)


def test_the_rows_hold_for_their_family_and_releases_only():
    gemma, qwen = _workload("gemma3"), _workload("qwen2.5-vl")
    assert (family_of(gemma.arch), family_of(qwen.arch)) == ("gemma3", "qwen2.5-vl")
    assert applies(parse("transformers=5.16.1"), "Gemma 3 logits upcast and masked copy", "gemma3")
    assert not applies(parse("transformers=5.17"), "Gemma 3 logits upcast and masked copy", "gemma3")
    assert not applies(parse("transformers=5.16.1"), "Gemma 3 logits upcast and masked copy", None)
    assert applies(parse("transformers=4.51.3"), "Qwen-VL logits upcast in the model", "qwen2.5-vl")
    assert not applies(parse("transformers=4.52"), "Qwen-VL logits upcast in the model", "qwen2.5-vl")
    assert not applies(parse("transformers=4.51.3"), "Qwen-VL logits upcast in the model", "gemma3")
    # a language model at those releases names neither row; the report lists only its family's (and the rows of
    # every model: 4.51.3 is also below 5, 5.16 and 4.54, whose SDPA repeat repeat_kv counts)
    language_model = [r.key for r in rows_in_effect(parse("transformers=4.51.3"))]
    assert language_model == ["experts as linears", "router loss one-hot", "SDPA repeats k, v"]
    assert "Qwen-VL logits upcast in the model" in [r.key for r in rows_in_effect(parse("transformers=4.51"),
                                                                                "qwen2.5-vl")]


@pytest.mark.parametrize("family", ["gemma3", "qwen2.5-vl"])
def test_older_releases_return_fp32_logits_and_gemma_copies_at_batch_one(family):
    new, _row, held = _model(family, "", 1)
    old, row, held_old = _model(family, f"transformers={OLD[family]}", 1)
    assert held_old == 2 * held                   # the model returns its fp32 upcast
    tv = SEQ * VOCAB
    # the narrow logits die at the upcast (-2); Gemma 3's mask index copies even one sequence (+4)
    assert old["forward"] - new["forward"] == (2 if family == "gemma3" else -2) * tv
    assert old["backward"] == new["backward"]
    assert row.source.startswith("transformers 4.45.2")


@pytest.mark.parametrize("family", ["gemma3", "qwen2.5-vl"])
@pytest.mark.parametrize("batch", [2, 1])
def test_the_default_release_against_this_venvs_transformers(family, batch):
    pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
    from tests.measure.vlm_loss_versions import measure

    got = measure(family, batch, SEQ)
    model, _row, _held = _model(family, "", batch)
    assert got["transformers"] == "5.24.0"
    assert 0 <= got["forward_transients"] - model["forward"] <= 8 * batch * (SEQ + 1)     # + the padded labels
    assert abs(model["backward"] - got["backward_transients"]) <= 0.01 * model["backward"]


def _old_paths():
    return [p for p in os.environ.get("ZEROCALC_VLM_TRANSFORMERS_PATHS", "/tmp/tf4513,/tmp/tf5161").split(",")
            if p and os.path.isdir(os.path.join(p, "transformers"))]


@pytest.mark.parametrize("family", ["gemma3", "qwen2.5-vl"])
@pytest.mark.parametrize("batch", [2, 1])
def test_the_older_release_rows_against_those_releases_on_the_cpu(family, batch):
    runs = {}
    for path in _old_paths():
        out = subprocess.run([sys.executable, "-m", "tests.measure.vlm_loss_versions", family, str(batch), str(SEQ)],
                             cwd=ROOT, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": f"{path}{os.pathsep}{ROOT}"})
        got = json.loads(out.stdout.strip().splitlines()[-1])
        runs[got["transformers"]] = got
    if OLD[family] not in runs:
        pytest.skip(f"no transformers {OLD[family]} folder in ZEROCALC_VLM_TRANSFORMERS_PATHS")
    got = runs[OLD[family]]
    model, _row, _held = _model(family, f"transformers={OLD[family]}", batch)
    # the shifted copy has T - b rows (one per sequence dropped): the model counts T x V
    copy = family == "gemma3" or batch > 1
    # (and Qwen's forward makes a few T-sized tensors of its own, positions and labels: within 1.5 %)
    slack = 0.015 * model["forward"]
    assert -slack <= model["forward"] - got["forward_transients"] <= (4 * batch * VOCAB if copy else 0) + slack
    assert abs(model["backward"] - got["backward_transients"]) <= 0.01 * model["backward"]
