"""Tokens per micro-batch of each RL pass (zerocalc/rl/batching.py) as the frameworks cut them, the typical..max
band of lengths, and the verdict that names which end decides it. Sources: verl 0.9.1
workers/engine/fsdp/transformer_impl.py prepare_model_inputs (remove padding packs the real tokens; without it a
micro-batch pads to its longest), utils/seqlen_balancing.py rearrange_micro_batches (dynamic batches within the
token budget); openrlhf 0.11.2 trainer/ppo_utils/experience_maker.py (rollout.micro_batch_size for the forward
passes), cli/train_ppo_ray.py (dynamic batches turn packing on)."""

import json
from pathlib import Path

import pytest

from zerocalc.cli.main import main
from zerocalc.rl.batching import Batching, micro_batch_shape
from zerocalc.rl.configs import read_openrlhf, read_verl
from zerocalc.scenario import FieldError

FIX = Path(__file__).resolve().parent / "fixtures" / "rl"
VERL = ["--verl-config", str(FIX / "verl_run_qwen2-7b.sh"), "--gpu", "H100-SXM-80GB"]


def report(capsys, *args):
    assert main(["rl", *args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("batching, length, expected", [
    (Batching(40), 450, (40, 1536)),                       # padded: the longest sets every sequence
    (Batching(40, packed=True), 450, (1, 40 * 450)),       # packed: the real tokens
    (Batching(40, packed=True), 1536, (1, 40 * 1536)),
    (Batching(40, True, 16384), 1536, (1, 16384)),         # dynamic: the budget
    (Batching(40, True, 16384), 100, (1, 640 * 100 if 640 * 100 < 16384 else 16384)),
    (Batching(40, False, 16384), 1536, (16384 // 1536, 1536)),
])
def test_micro_batch_shapes(batching, length, expected):
    assert micro_batch_shape(batching, length, 1536, 640) == expected


def test_a_gpus_share_of_the_step_caps_a_micro_batch():
    assert micro_batch_shape(Batching(40, packed=True), 1536, 1536, 8) == (1, 8 * 1536)
    assert micro_batch_shape(Batching(40, True, 65536), 1536, 1536, 8) == (1, 8 * 1536)


def test_a_budget_below_the_longest_sequence_is_refused_as_verl_refuses_it():
    with pytest.raises(FieldError) as err:
        micro_batch_shape(Batching(4, True, 1000), 500, 1536, 64)
    assert err.value.field == "max_tokens"


def test_the_verl_example_packs_40_sequences_per_pass(capsys):
    out = report(capsys, *VERL)
    models = {m["role"]: m for m in out["models"]}
    assert models["policy"]["update_pass"]["tokens"] == 40 * 1536
    assert models["policy"]["scoring_pass"]["tokens"] == 40 * 1536
    assert models["reference"]["scoring_pass"]["tokens"] == 40 * 1536
    assert models["reference"]["streams_params"] is True
    assert "reference parameters" not in next(p for p in out["phases"] if p["name"] == "reference log-probs")["parts"]
    assert out["verdict"]["fits"] is True
    assert "no typical lengths given" in out["verdict"]["decided_by"]


def test_the_band_and_which_end_decides(capsys):
    # 8 x A100-80GB: the policy's old log-probs at 40 x 1,536 tokens do not fit, typical GSM8K lengths do
    base = [*VERL[:2], "--gpu", "A100-80GB", "--logprob-micro-batch", "80"]
    out = report(capsys, *base, "--typical-prompt-length", "150", "--typical-response-length", "300")
    v = out["verdict"]
    assert set(v["band"]) == {"max", "typical"} and v["band"]["typical"]["length_tokens"] == 450
    assert v["band"]["typical"]["fits"] and not v["band"]["max"]["fits"] and not v["fits"]
    assert v["decided_by"].startswith("the lengths decide it")
    typical = {p["name"]: p for p in out["typical_phases"]}
    top = {p["name"]: p for p in out["phases"]}
    assert typical["policy log-probs"]["total_bytes"] < top["policy log-probs"]["total_bytes"]


def test_padded_micro_batches_keep_the_longest_at_both_ends(capsys):
    out = report(capsys, *VERL, "--packing", "no", "--typical-response-length", "300")
    typical = {p["name"]: p["total_bytes"] for p in out["typical_phases"]}
    assert typical["policy update"] == next(p["total_bytes"] for p in out["phases"] if p["name"] == "policy update")


def test_verl_dynamic_batches_read_their_budgets():
    text = ("actor_rollout_ref.actor.use_dynamic_bsz=True actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24000 "
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=48000 algorithm.adv_estimator=gae")
    s = read_verl(text).settings
    assert s["max_tokens"] == 24000 and s["reference_max_tokens"] == 48000
    assert s["logprob_max_tokens"] == 24000                  # ${oc.select:...ppo_max_token_len_per_gpu}
    assert s["critic_update_max_tokens"] == 32768            # critic.ppo_max_token_len_per_gpu's default


def test_openrlhf_packs_and_scores_in_rollout_micro_batches():
    s = read_openrlhf((FIX / "openrlhf_train_ppo_llama_ray_hybrid_engine.sh").read_bytes()).settings
    assert s["packing"] is True and s["logprob_micro_batch"] == s["critic_micro_batch"] == 8
    dyn = read_openrlhf("--train.dynamic_batch_enable --train.max_tokens_per_gpu 20000").settings
    assert dyn["packing"] is True and dyn["max_tokens"] == 20000 and dyn["reference_max_tokens"] == 20000


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(sequences=st.integers(1, 256), typical=st.integers(1, 4096), extra=st.integers(0, 8192),
       per_gpu=st.integers(1, 4096), budget=st.one_of(st.none(), st.integers(1, 1 << 20)), packed=st.booleans())
def test_typical_never_exceeds_max_and_packing_never_exceeds_padding(sequences, typical, extra, per_gpu, budget,
                                                                      packed):
    longest = typical + extra
    if budget is not None and budget < longest:
        with pytest.raises(FieldError):
            micro_batch_shape(Batching(sequences, packed, budget), typical, longest, per_gpu)
        return
    b = Batching(sequences, packed, budget)
    low, high = (micro_batch_shape(b, n, longest, per_gpu) for n in (typical, longest))
    assert low[0] * low[1] <= high[0] * high[1]
    padded = micro_batch_shape(Batching(sequences, False, budget), longest, longest, per_gpu)
    assert micro_batch_shape(Batching(sequences, True, budget), longest, longest, per_gpu)[1] <= \
        padded[0] * padded[1] or budget is not None
    if budget is not None:
        assert high[0] * high[1] <= max(budget, longest)


@pytest.mark.parametrize("typical", [("64", "32"), ("150", "300"), ("512", "1000")])
def test_every_phase_at_the_typical_end_holds_at_most_the_max_ends(capsys, typical):
    out = report(capsys, *VERL, "--model", "qwen2.5-0.5b", "--typical-prompt-length", typical[0],
                 "--typical-response-length", typical[1])
    top = {p["name"]: p["total_bytes"] for p in out["phases"]}
    for p in out["typical_phases"]:
        assert p["total_bytes"] <= top[p["name"]], p["name"]
