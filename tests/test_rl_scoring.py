"""The RL scoring pass's rule (zerocalc/rl/models.py ModelView.scoring: no-grad, the larger of one block and the
loss end) against transformers' Llama run on the CPU (tests/measure/nograd_scoring.py, live storages tracked op
by op). Two shapes: a large vocabulary, where the loss end is the peak (exact), and a wide FFN with a small
vocabulary, where a block is (the block's saved set bounds its transients, within 10 %)."""

import os

import pytest

from zerocalc.model.architecture import Architecture
from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.rl.models import model_view
from zerocalc.rl.plan import RLModel
from zerocalc.scenario import Scenario
from zerocalc.step.workload import Workload


def _needs_torch():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("torch and transformers are not installed (requirements-validation.txt): the measurement "
                    "cannot run; the rule's other tests stand")


def _scoring(hidden, ffn, vocab, layers, batch, seq) -> dict:
    arch = Architecture(layers=layers, hidden=hidden, heads=4, kv_heads=2, ffn=ffn, vocab=vocab, seq_len=2048)
    scenario = Scenario.from_convention("pure-bf16", params=param_count(arch), workers=1)
    workload = Workload(arch, micro_batch=batch, seq_len=seq, finetune=FineTune(mode="freeze"),
                        gpu_memory=80 * 2**30)
    parts = model_view("reference", RLModel(scenario, workload, 0), False).scoring()
    return {k[len("reference "):]: v for k, v in parts.items()}


@pytest.mark.parametrize("shape, exact", [((256, 688, 4096, 4, 2, 512), True), ((256, 2048, 256, 2, 2, 512), False)],
                         ids=["loss-end", "block"])
def test_scoring_pass_against_a_real_no_grad_forward(shape, exact):
    _needs_torch()
    from tests.measure.nograd_scoring import scoring_peak
    measured = scoring_peak(*shape)
    ours = _scoring(*shape)
    transient = ours.get("logits and log-probs (no grad)", 0) + ours.get("activations (one block, no grad)", 0)
    if exact:
        assert "logits and log-probs (no grad)" in ours
        assert transient == measured["peak"]
    else:
        assert "activations (one block, no grad)" in ours
        assert measured["model_peak"] <= transient <= 1.10 * measured["model_peak"]


def test_the_larger_of_block_and_loss_end_is_taken():
    small_vocab = _scoring(256, 2048, 256, 2, 2, 512)
    big_vocab = _scoring(256, 688, 4096, 4, 2, 512)
    assert "activations (one block, no grad)" in small_vocab and "logits and log-probs (no grad)" not in small_vocab
    assert "logits and log-probs (no grad)" in big_vocab and "activations (one block, no grad)" not in big_vocab
    # bf16 logits, their fp32 upcast and the fp32 log-softmax: 2 + 4 + 4 bytes per token and vocabulary entry
    assert big_vocab["logits and log-probs (no grad)"] == 10 * 2 * 512 * 4096
