"""The loss implementations' terms (zerocalc/step/losses.py) against CPU measurements of their own code.

tests/measure/loss_peaks.py runs each package's loss on the CPU and tracks live storages: Hugging Face's
ForCausalLMLoss runs here in CI; torchtune 0.6.1's CEWithChunkedOutputLoss needs its wheel's loss file
(TORCHTUNE_LOSS_FILE; torchtune itself does not import beside torchao 0.18), so its figures are also kept as
recorded at T=256, V=4096, h=64, bf16, batch 2 (rerun: python -m tests.measure.loss_peaks 256 4096 64 bf16).
Liger's and cut-cross-entropy's Triton kernels do not run on the CPU: their rows follow the code (cited there).
"""

import os

import pytest

from zerocalc.model.architecture import Architecture
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError, Scenario
from zerocalc.step.losses import LOSSES, liger_chunk_rows, loss_transients
from zerocalc.step.workload import Workload

T, V, H = 256, 4096, 64               # batch 2 x 128 tokens
TV = T * V
ARCH = Architecture(layers=2, hidden=H, heads=4, ffn=160, vocab=V, seq_len=256)


def loss_end(loss="auto", chunks=8):
    work = Workload(ARCH, micro_batch=2, seq_len=128, loss=loss, loss_chunks=chunks)
    shape = layout_report(Scenario.from_convention("pure-bf16", params=1), work).ranks[-1].shape
    return loss_transients(work, shape, "bf16"), shape.act.head


# torchtune chunked, n = 8, recorded (bytes above the inputs): forward peak 6,852,656, saved 4,229,160, backward
# peak 5,277,480; the formula's T x V terms: (w + 4 + 4/n) TV forward, 4 TV saved, (4 + 8/n) TV backward.
TORCHTUNE_8 = {"forward": 6_852_656, "saved": 4_229_160, "backward": 5_277_480}


def test_torchtune_chunked_loss_matches_its_recorded_measurement():
    phases, head = loss_end("chunked", 8)
    saved = head["loss log-softmax (fp32)"]
    assert saved == 4 * TV
    for phase in ("forward", "backward"):
        got = TORCHTUNE_8[phase]
        assert abs(phases[phase] + saved - got) <= 0.01 * got, (phase, phases[phase] + saved, got)
    assert abs(saved - TORCHTUNE_8["saved"]) <= 0.01 * TORCHTUNE_8["saved"]


def test_chunking_removes_the_upcast_and_the_full_gradients_but_not_the_log_softmax():
    hf, hf_head = loss_end()
    chunked, chunked_head = loss_end("chunked", 8)
    assert hf_head["loss log-softmax (fp32)"] == chunked_head["loss log-softmax (fp32)"]
    assert (hf["forward"], hf["backward"]) == (6 * TV, 8 * TV)
    assert (chunked["forward"], chunked["backward"]) == (2 * TV + TV // 2, TV)


@pytest.mark.parametrize("loss", ["liger", "cut", "torchtitan-chunked"])
def test_fused_losses_keep_nothing_vocabulary_sized(loss):
    phases, head = loss_end(loss)
    assert not any(k.startswith("loss") for k in head)
    assert max(phases.values()) < 3 * TV                  # Hugging Face: 6 TV at forward, 8 TV at backward
    if loss == "torchtitan-chunked":                      # recorded: forward peak 2,459,660 at n = 8
        assert abs(phases["forward"] - 2_459_660) <= 0.01 * 2_459_660


def test_liger_chunk_rule():
    # ops/fused_linear_cross_entropy.py: inc_factor = ceil(V / H) = 32 for Llama 3 (128256 / 4096);
    # 8192 rows -> next_power_of_2(256) = 256
    assert liger_chunk_rows(8192, 128256, 4096) == 256
    assert liger_chunk_rows(100, 128256, 4096) == 4            # ceil(100 / 32) = 4
    assert liger_chunk_rows(3, 10, 4096) == 3                  # never more than the rows


def test_loss_choices_are_checked():
    with pytest.raises(FieldError, match="loss"):
        Workload(ARCH, loss="fused-magic")
    with pytest.raises(FieldError, match="loss"):
        Workload(ARCH, loss="liger", implementation="megatron")
    assert set(LOSSES) >= {"chunked", "liger", "cut", "torchtitan-chunked", "compiled"}


def test_huggingface_loss_measured_on_the_cpu():
    pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
    from tests.measure.loss_peaks import huggingface
    m = huggingface(T, V, H, "bf16")                      # batch 2 x 128, under the Trainer (logits dropped)
    phases, head = loss_end()
    saved = head["loss log-softmax (fp32)"]
    assert abs(phases["forward"] + saved - m["forward_peak"]) <= 0.01 * m["forward_peak"]
    assert abs(phases["backward"] + saved - m["backward_peak"]) <= 0.01 * m["backward_peak"]


@pytest.mark.skipif(not os.path.exists(os.environ.get(
    "TORCHTUNE_LOSS_FILE", "/work/src/torchtune/torchtune/modules/loss/ce_chunked_output_loss.py")),
    reason="torchtune's loss file is not here (TORCHTUNE_LOSS_FILE): the recorded figures above stand")
def test_torchtune_chunked_loss_measured_live():
    from tests.measure.loss_peaks import torchtune_chunked
    m = torchtune_chunked(256, V, H, "bf16", 8)
    phases, head = loss_end("chunked", 8)
    saved = head["loss log-softmax (fp32)"]
    assert abs(phases["forward"] + saved - m["forward_peak"]) <= 0.01 * m["forward_peak"]


def test_vocab_parallel_loss_under_tensor_parallelism_measured_on_two_ranks():
    # torch's loss_parallel() on DTensor logits sharded over the vocabulary (as torchtitan's output projection
    # leaves them): 14 bytes per local T x V element at the forward peak (logits, fp32 upcast, shifted copy, the
    # saved log-softmax), 16 in backward (the logits dropped first, as torchtitan does)
    pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
    from tests.measure.loss_parallel import loss_parallel_peaks
    from zerocalc.layout import Layout
    m = loss_parallel_peaks(T, V, H, "bf16", world=2)[0]
    work = Workload(ARCH, micro_batch=1, seq_len=T, layout=Layout(tp=2, sequence_parallel=True, loss_parallel=True))
    shape = layout_report(Scenario.from_convention("pure-bf16", params=1), work).ranks[-1].shape
    phases = loss_transients(work, shape, "bf16")
    saved = shape.act.head["loss log-softmax (fp32)"]
    local = T * V // 2
    assert saved == 4 * local
    assert phases["forward"] + saved == 14 * local and phases["backward"] + saved == 16 * local
    for phase in ("forward", "backward"):                       # the rest: token-sized (12 T and 33 T + 12 bytes)
        assert 0 <= m[f"{phase}_peak"] - (phases[phase] + saved) <= 64 * T
