"""Megatron's vocab-parallel cross entropy: zerocalc's loss terms (step/peak.py LOSSES) against megatron-core's own
code, measured allocation by allocation on the CPU (tests/measure/megatron_loss.py).

Derivation (Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553), T tokens, V vocabulary columns per rank, w the
logits' width:
- forward: GPTModel._postprocess (models/gpt/gpt_model.py) holds the output layer's logits (w) in a local while
  compute_language_model_loss runs; _VocabParallelCrossEntropy.forward (tensor_parallel/cross_entropy.py) upcasts
  them once (calculate_logits_max: .float(), 32 bits), then subtracts the max, exponentiates (out=) and divides in
  place, and saves that fp32 softmax, the target mask and the masked target. Peak: w + 32 bits per T x V.
- when forward returns nothing references the logits (ColumnParallelLinear saves its input and weight, the loss
  only what it names): the fp32 softmax is left, zerocalc's activation "loss log-softmax (fp32)".
- backward: the softmax becomes the gradient in place (prepare_gradient_calculation_operands: grad_input =
  softmax; calculate_gradients: an indexed -=, mul_) and is returned in fp32 for a w-bit input, so autograd casts
  it (engine.cpp validate_outputs) while the saved buffer is still held: + w bits. With fp32 logits, .float() is
  the logits themselves and nothing is cast.
- --cross-entropy-loss-fusion (fusions/fused_cross_entropy.py, torch.compile through megatron/core/jit.py): the
  same forward; in backward Inductor scatters into a fresh fp32 copy of the softmax (fx_passes/reinplace.py will
  not reinplace into a view of a graph input whose copy-back is a later result) and calculate_gradients casts to
  bf16: + 32 + 16 bits. (The 'te' impl is refused by megatron/training/arguments.py at that commit.)

Token-sized tensors zerocalc leaves out, from the same code and measured here (bytes per token): at the forward
peak 37 (the labels' [s, b] copy 8, logits_max 4, target_mask 1, masked_target 8, arange 8, predicted logits and
its clone 8); after forward 13 (target_mask 1, masked_target 8, the loss 4; 4 or 8 more when gloo releases the
last all-reduced tensor late); in backward the scalar loss's seed gradient (4 bytes), and with fp32 logits, where
no vocabulary-sized tensor is made, arange 8, the mask as fp32 4, 1 - it 4 and two CPU scalar operands (16 bytes).

On Megatron CI's gpt3 7B memory_speed runs (docs/research/published_runs.json MLM-01 tp1 pp4 vpp8 mbs1 and MLM-04
tp4 mbs2, seq 8192, vocab 131073 padded to 131200 / 131584, last rank, distributed optimizer, stage 1): the loss
term went from 6 / 8 bytes per T x V (forward / backward) to 2 / 2, i.e. -6,448,742,400 and -3,233,808,384 bytes at
the backward peak. zerocalc's tensors at the peak when this was written (2026-12-02, with issue 20's Megatron DDP
buckets and library workspaces in), against mem-max-allocated-bytes 60,720,852,992 and 57,143,791,616:
66,696,938,496 (+9.84 %) -> 60,248,196,096 (-0.78 %) and 60,238,169,088 (+5.42 %) -> 57,004,360,704 (-0.24 %).
"""

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
    pytest.skip("megatron-core not installed: pip install -r requirements-validation.txt", allow_module_level=True)

from zerocalc import Scenario  # noqa: E402
from zerocalc.layout import Layout  # noqa: E402
from zerocalc.model.architecture import Architecture  # noqa: E402
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.parallel.ranks import layout_report  # noqa: E402
from zerocalc.scenario import FieldError  # noqa: E402
from zerocalc.step.losses import LOSSES, loss_transients  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEQ, BATCH, HIDDEN = 8, 2, 4
T = SEQ * BATCH
RUNS = [{"dtype": "bf16"}, {"dtype": "bf16", "vocab": 512}, {"dtype": "fp16"}, {"dtype": "fp32"},
        {"dtype": "fp32", "vocab": 512}, {"dtype": "bf16", "fused": True}, {"dtype": "bf16", "fused": True, "vocab": 512},
        {"dtype": "fp32", "fused": True}]
FORWARD_SIDE, AFTER_FORWARD_SIDE, SEED = 37 * T, 13 * T, 4        # bytes (module docstring)
# gloo's work object sometimes drops its reference to the last all-reduced tensor only after forward has returned
# (seen in about one run in six): sum_exp_logits (fp32), or fused, predicted_logits_sum_exp_logits (2 x fp32).
def late_all_reduce(fused):
    return (0, 8 * T if fused else 4 * T)
FP32_BACKWARD_SIDE = 16 * T + 16


@pytest.fixture(scope="module")
def measured():
    runs = [{"tokens_shape": [SEQ, BATCH], "hidden": HIDDEN, "vocab": 256, **r} for r in RUNS]
    out = subprocess.run([sys.executable, "-m", "tests.measure.megatron_loss", json.dumps(runs)], cwd=ROOT,
                         capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-4000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    return {(r["dtype"], r["vocab"], r["fused"]): r for r in results}


def predicted(dtype, vocab=256, fused=False):
    """zerocalc's loss terms for the measured step: (forward, backward) of "logits and loss", and the saved softmax."""
    arch = Architecture(layers=1, hidden=HIDDEN, heads=1, ffn=8, vocab=vocab, seq_len=SEQ, norm="layernorm",
                        gated_mlp=False, activation="gelu", positions="learned")
    work = Workload(arch, micro_batch=BATCH, seq_len=SEQ, implementation="megatron", activation_dtype=dtype,
                    loss_fusion=fused)
    shape = layout_report(Scenario.from_convention("megatron", params=param_count(arch)), work).ranks[-1].shape
    assert work.vocab_columns == vocab                         # a multiple of Megatron's 128: no padding
    terms = loss_transients(work, shape)
    return terms["forward"], terms["backward"], shape.act.head["loss log-softmax (fp32)"]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: "-".join(str(v) for v in r.values()))
def test_measured_live_bytes_are_zerocalcs_terms_plus_the_listed_token_tensors(measured, run):
    m = measured[(run["dtype"], run.get("vocab", 256), run.get("fused", False))]
    forward, backward, softmax = predicted(run["dtype"], run.get("vocab", 256), run.get("fused", False))
    assert m["loss_finite"]
    assert m["forward_peak"] == forward + softmax + FORWARD_SIDE
    assert m["after_forward"] - softmax - AFTER_FORWARD_SIDE in late_all_reduce(run.get("fused", False))  # no logits
    narrow = run["dtype"] != "fp32" or run.get("fused", False)
    assert m["backward_peak"] == backward + (SEED if narrow else FP32_BACKWARD_SIDE)


@pytest.mark.parametrize("dtype, fused", [("bf16", False), ("fp32", False), ("bf16", True)])
def test_every_vocabulary_sized_byte_is_counted(measured, dtype, fused):
    """Doubling the vocabulary moves each measured figure by exactly what zerocalc's terms move."""
    small, large = measured[(dtype, 256, fused)], measured[(dtype, 512, fused)]
    (f1, b1, s1), (f2, b2, s2) = predicted(dtype, 256, fused), predicted(dtype, 512, fused)
    assert large["forward_peak"] - small["forward_peak"] == (f2 + s2) - (f1 + s1)
    late = late_all_reduce(fused)[1]
    assert large["after_forward"] - small["after_forward"] - (s2 - s1) in (0, late, -late)
    assert large["backward_peak"] - small["backward_peak"] == b2 - b1


def test_bytes_per_token_and_vocabulary_column():
    """6 bytes per T x V at each phase for bf16 Megatron (with the saved 4), against Hugging Face's 10 and 12."""
    tv = T * 256
    f, b, s = predicted("bf16")
    assert (f + s, b + s) == (6 * tv, 6 * tv)
    f, b, s = predicted("bf16", fused=True)
    assert (f + s, b + s) == (6 * tv, 10 * tv)
    f, b, s = predicted("fp32")
    assert (f, b, s) == (0, 0, 4 * tv)
    assert {"huggingface", "megatron", "megatron, fused"} <= set(LOSSES)


def test_the_fused_loss_is_a_megatron_choice(capsys):
    arch = Architecture(layers=1, hidden=HIDDEN, heads=1, ffn=8, vocab=256, seq_len=SEQ)
    with pytest.raises(FieldError) as err:
        Workload(arch, loss_fusion=True)                      # Hugging Face kernels have no such flag
    assert err.value.field == "loss_fusion"
    with pytest.raises(FieldError):
        Workload(arch, implementation="megatron", loss_fusion="yes")
    from zerocalc.cli.main import main
    model = ["--layers", "1", "--hidden", "4", "--heads", "1", "--ffn", "8", "--vocab", "256"]
    assert main(model + ["--cross-entropy-loss-fusion"]) == 2
    assert "--cross-entropy-loss-fusion: got True" in capsys.readouterr().err
    assert main(model + ["--implementation", "megatron", "--cross-entropy-loss-fusion", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["workload"]["loss_fusion"] is True


MLM_7B = Architecture(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=16384, vocab=131073, seq_len=8192,
                      gated_mlp=False, norm="layernorm", bias=True, positions="learned", activation="gelu",
                      attn_dropout=0.1, resid_dropout=0.1, embd_dropout=0.1)


@pytest.mark.parametrize("layout, micro_batch, columns", [
    (Layout(tp=1, pp=4, vpp=8, schedule="interleaved", micro_batches=4), 1, 131200),     # MLM-01
    (Layout(tp=4, pp=1, micro_batches=2), 2, 131584 // 4)])                               # MLM-04
def test_megatron_ci_7b_loss_terms(layout, micro_batch, columns):
    scenario = Scenario.from_convention("megatron", params=param_count(MLM_7B), workers=2)
    work = Workload(MLM_7B, micro_batch=micro_batch, seq_len=8192, implementation="megatron", layout=layout)
    last = layout_report(scenario, work).ranks[-1]
    tv = micro_batch * 8192 * columns
    assert last.shape.logits_elements == tv
    for phase in ("forward", "backward"):
        assert last.peaks[1].phases[phase]["logits and loss"] == 2 * tv
    hf = layout_report(scenario, replace(work, implementation="huggingface")).ranks[-1]
    # Hugging Face's upcast: logits, fp32 gradient, cast back; under tp with vocab-parallel logits, torch's
    # loss_parallel: zeros_like, exp and their sum beside the saved log-softmax (step/losses.py)
    hf_bytes = 8 if layout.tp == 1 or not layout.loss_parallel else 12
    assert hf.peaks[1].phases["backward"]["logits and loss"] == hf_bytes * hf.shape.logits_elements
