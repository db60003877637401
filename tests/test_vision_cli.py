"""The vision flags end to end (issue 37): the CLI plans a vision-language model with its tower (parameters equal
the published totals, the tower's activations on the first stage, the sequence grown by the image tokens), and its
answers, applied as flags, give the verdict they promised: the most images per sample and the largest pixel budget
fit at their stage, one more image or one more step of pixels does not."""

from __future__ import annotations

import json

import pytest

from zerocalc.cli.main import run
from zerocalc.model.presets import MODEL_PRESETS

BASE = ["--workers", "8", "--seq-len", "1024", "--recompute", "full", "--json"]


def plan(model, *flags):
    return json.loads(run(["--model", model, *BASE, *flags]))


def fits(d, stage):
    return next(v for v in d["verdicts"] if v["stage"] == stage)["fits"]


def test_a_vision_plan_counts_the_whole_model_and_grows_the_sequence():
    d = plan("qwen2.5-vl-7b", "--images-per-sample", "2", "--image-size", "1344x896")
    assert d["params"] == MODEL_PRESETS["qwen2.5-vl-7b"][1]                 # 8,292,166,656: tower included
    v = d["vision"]
    # 1344 x 896 px: 96 x 64 patches of 14 px, 1,536 tokens after the 2 x 2 merge, + vision_start / vision_end
    assert (v["tower_tokens"], v["image_tokens"]) == (2 * 96 * 64, 2 * (1536 + 2))
    assert v["seq_len"] == d["workload"]["seq_len"] == 1024 + 2 * 1538
    ends = d["activation_terms"]["embedding_end"]
    assert sum(n for k, n in ends.items() if k.startswith("vision: ")) == v["activation_bytes"] > 0
    text_only = json.loads(run(["--model", "qwen2.5-vl-7b", *BASE]))
    assert "vision" not in text_only and text_only["params"] == 7_615_616_512      # no vision flag: the LM alone


def test_frozen_tower_has_no_gradients_or_optimizer_state():
    trained = plan("gemma-3-4b", "--images-per-sample", "1")
    frozen = plan("gemma-3-4b", "--images-per-sample", "1", "--vision-training", "frozen")
    states = lambda d: next(p for p in d["peak"] if p["stage"] == 0)["phases"]["forward"]["model states"]  # noqa
    groups = {g["label"]: g["params"] for g in frozen["group_ledgers"]["groups"]}
    tower = frozen["vision"]["params"]["tower"]
    assert tower == 416_866_032 and groups["frozen"] == tower
    # the frozen tower keeps only its 2-byte parameters: 14 of the 16 bytes per parameter go (ZeRO paper ledger)
    assert states(trained) - states(frozen) == 14 * tower
    # and saves no activations: only the projector's terms are left
    assert set(k for k, n in frozen["vision"]["activation_terms"].items() if n) == {"projector"}


@pytest.mark.parametrize("model, flags, gpu", [
    ("qwen2.5-vl-7b", ["--image-size", "1344x896"], "L40S-48GB"),
    ("gemma-3-4b", [], "A100-40GB"),      # on an L4 the allocator model leaves ZeRO-3 no image (its 262k head)
    ("llama-3.2-11b-vision", [], "L40S-48GB"),
])
def test_most_images_applied_give_the_promised_verdict(model, flags, gpu):
    d = plan(model, "--images-per-sample", "1", "--gpu", gpu, *flags)
    stage = 3
    n = d["vision"]["max_images_per_sample"][str(stage)]
    assert n and n > 1, d["vision"]["max_images_per_sample"]
    assert fits(plan(model, "--images-per-sample", str(n), "--gpu", gpu, *flags), stage)
    assert not fits(plan(model, "--images-per-sample", str(n + 1), "--gpu", gpu, *flags), stage)


@pytest.mark.parametrize("model, size, gpu", [("qwen3-vl-8b", "4096x3072", "L40S-48GB"),
                                              ("internvl3-8b", "3584x2688", "L40S-48GB")])
def test_largest_pixel_budget_applied_gives_the_promised_verdict(model, size, gpu):
    flags = ["--images-per-sample", "8", "--image-size", size, "--gpu", gpu]
    d = plan(model, *flags)
    stage, step = 3, d["vision"]["pixel_step"]
    budget = d["vision"]["max_pixel_budget"][str(stage)]
    assert budget and budget % step == 0, d["vision"]["max_pixel_budget"]
    assert fits(plan(model, *flags, "--pixel-budget", str(budget)), stage)
    assert not fits(plan(model, *flags, "--pixel-budget", str(budget + step)), stage)


@pytest.mark.parametrize("argv, words", [
    (["--model", "llama-3.1-8b", "--images-per-sample", "2"], "--images-per-sample: got 'llama-3.1-8b'; allowed: "
                                                               "a --model with a vision tower"),
    (["--model", "gemma-3-4b", "--images-per-sample", "1", "--pixel-budget", "1000000"],
     "--pixel-budget: got 1000000; allowed: 0 for Gemma 3"),
    (["--model", "internvl3-8b", "--video-frames", "8"], "--video-frames: got 8; allowed: 0 for this family"),
    (["--model", "qwen2.5-vl-7b", "--images-per-sample", "1", "--pixel-budget", "100"], "--pixel-budget: got 100"),
    (["--model", "qwen2.5-vl-7b", "--images-per-sample", "1", "--vision-training", "lora", "--vision-lora-rank",
      "0"], "--vision-lora-rank"),
    (["--model", "qwen2.5-vl-7b", "--vision-training", "trained"], "--vision-training: got 'trained'; allowed: with "
                                                                    "an image flag (--images-per-sample, "),
])
def test_refusals_name_the_flag(argv, words, capsys):
    from zerocalc.cli.main import main
    assert main(argv) == 2
    assert words in capsys.readouterr().err
