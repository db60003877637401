"""A critic's value head and a reward model's score head (model/architecture.py score_head): the blocks with a
Linear(h, 1) in place of the LM head, as verl 0.9.1 (AutoModelForTokenClassification, num_labels=1), OpenRLHF 0.11.2
(value_head Linear(h, 1, bias=False)) and TRL's reward models (AutoModelForSequenceClassification, num_labels=1)
build them: no vocabulary head, no vocabulary logits. Counted against transformers' own classes on the CPU."""

import json
import os
from dataclasses import replace

import pytest

from tests.rl_helpers import grpo, model
from zerocalc.cli.main import main
from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.rl.phases import rl_phases
from zerocalc.scenario import FieldError


def _needs_transformers():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("torch and transformers are not installed (requirements-validation.txt): the count cannot run")


@pytest.mark.parametrize("cls, bias", [("AutoModelForSequenceClassification", 0), ("AutoModelForTokenClassification", 1)])
def test_score_head_parameters_are_transformers_classification_models(cls, bias):
    _needs_transformers()
    import transformers
    from transformers import Qwen2Config
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=1000, num_labels=1, tie_word_embeddings=False)
    counted = sum(p.numel() for p in getattr(transformers, cls).from_config(cfg).parameters())
    arch = Architecture(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=1000, seq_len=2048, qkv_bias=True,
                        score_head=1)
    assert param_count(arch) + bias == counted          # TokenClassification's score keeps a bias of num_labels


def test_a_critic_has_no_lm_head_and_no_vocabulary_logits(capsys):
    args = ["rl", "--model", "qwen2.5-7b", "--gpus", "8", "--convention", "fsdp2", "--micro-batch", "4",
            "--recompute", "full", "--algorithm", "ppo", "--critic", "same", "--reward-model", "same", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    models = {m["role"]: m for m in out["models"]}
    arch = MODEL_PRESETS["qwen2.5-7b"][0]
    assert models["critic"]["params"] == param_count(arch) - arch.vocab * arch.hidden + arch.hidden
    assert models["reward"]["params"] == models["critic"]["params"]
    tokens = models["critic"]["scoring_pass"]["tokens"]
    assert models["critic"]["scoring_pass"]["loss_end"] == f"{2 * tokens:,} = 2 x {tokens:,} x 1 (verl)"
    # the critic's update is today's CLI with its own flags (--score-head 1 among them)
    flags = models["critic"]["update_pass"]["zerocalc_flags"]
    assert flags[flags.index("--score-head") + 1] == "1" and "--loss" not in flags
    assert main(["--model", "qwen2.5-7b", "--gpus", "8", "--convention", "fsdp2", "--recompute", "full", *flags,
                 "--json"]) == 0
    today = json.loads(capsys.readouterr().out)
    stage = models["critic"]["training_peak"]["stage"]
    assert models["critic"]["training_peak"]["peak_bytes"] == today["peak"][stage]["peak_bytes"]
    assert models["critic"]["training_peak"]["peak_bytes"] < models["policy"]["training_peak"]["peak_bytes"]


def test_a_score_head_is_never_tied():
    with pytest.raises(FieldError) as err:
        replace(MODEL_PRESETS["qwen2.5-0.5b"][0], score_head=1)
    assert err.value.field == "tied_embeddings"
    plan = grpo(algorithm="ppo", critic=model())          # a plan built directly keeps the architecture it is given
    assert rl_phases(plan).views["critic"].report.workload.arch.score_head == 0
