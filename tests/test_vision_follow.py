"""The tower follows the fine-tuning, as the launchers do (issue 37).

Sources, at pinned commits:
- hiyouga/LLaMA-Factory ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30 src/llamafactory/hparams/finetuning_args.py:
  freeze_vision_tower True, freeze_multi_modal_projector True, freeze_language_model False; model_utils/misc.py
  find_all_linear_modules leaves the projector (always) and the tower (when frozen) out of lora_target "all".
- modelscope/ms-swift 3602360a562313afbf2ef6065fdf61f271a2c5b9 swift/arguments/tuner_args.py: freeze_vit True,
  freeze_aligner True (full training freezes them; all-linear LoRA adds no adapters there).
- peft 0.21.2 (measured below on small configs of transformers 5.24's Qwen2_5_VLForConditionalGeneration): under
  get_peft_model only adapters train, and target_modules="all-linear" reaches the tower's block linears and the
  merger's.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from zerocalc.cli.main import run
from zerocalc.frameworks.llamafactory.reader import import_llamafactory
from zerocalc.frameworks.swift.reader import import_swift
from zerocalc.model.finetune import FineTune
from zerocalc.model.vision import TOWERS, VisionTower, launcher_mode, resolved, tower_counts, tower_mode, \
    tower_tensors
from zerocalc.scenario import FieldError

QWEN = TOWERS["qwen2.5-vl-7b"]


def trainable(t: VisionTower) -> int:
    return sum(p.elements for p in tower_tensors(t) if p.trainable)


def test_follow_trains_the_tower_in_full_and_freezes_tower_and_projector_under_adapters():
    assert tower_mode(QWEN, FineTune()) == "trained"
    for mode in ("freeze", "lora", "dora", "qlora"):
        assert tower_mode(QWEN, FineTune(mode=mode)) == "frozen-all"
        assert trainable(resolved(QWEN, FineTune(mode=mode))) == 0
    assert trainable(resolved(QWEN, FineTune())) == tower_counts(QWEN)["vision"]
    # an explicit tower mode wins over the launcher's keys, which win over the default
    launcher = FineTune(mode="lora", vision_training="lora")
    assert tower_mode(QWEN, launcher) == "lora" and tower_mode(replace(QWEN, training="trained"), launcher) == "trained"
    with pytest.raises(FieldError, match="vision_training"):
        FineTune(vision_training="thawed")


def test_launcher_keys_map_to_tower_modes():
    assert launcher_mode(True, True, "full") == launcher_mode(True, True, "lora") == "frozen-all"
    assert launcher_mode(True, False, "full") == "frozen"
    assert launcher_mode(False, False, "full") == "trained" and launcher_mode(False, False, "lora") == "lora"


def test_llamafactory_and_swift_imports_say_the_tower_mode():
    full = import_llamafactory(b"model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\nfinetuning_type: full\n")
    assert full.finetune["vision_training"] == "frozen-all"
    assert "default" in full.sources["finetune.vision_training"]
    thawed = import_llamafactory(b"model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\nfinetuning_type: lora\n"
                                 b"freeze_vision_tower: false\nfreeze_multi_modal_projector: false\n")
    assert thawed.finetune["vision_training"] == "lora"
    plain_lora = import_llamafactory(b"model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\n")
    assert "vision_training" not in plain_lora.finetune          # the default already follows: frozen-all
    swift = import_swift(b"model: Qwen/Qwen2.5-VL-7B-Instruct\ntuner_type: full\n")
    assert swift.finetune["vision_training"] == "frozen-all"
    swift_projector = import_swift(b"model: Qwen/Qwen2.5-VL-7B-Instruct\ntuner_type: full\nfreeze_aligner: false\n")
    assert swift_projector.finetune["vision_training"] == "frozen"


def test_the_cli_plan_follows_lora_and_the_flag_wins():
    base = ["--model", "qwen2.5-vl-7b", "--workers", "8", "--seq-len", "1024", "--images-per-sample", "1",
            "--finetune", "lora", "--json"]
    d = json.loads(run(base))
    assert d["vision"]["training"] == "frozen-all" and d["vision"]["activation_bytes"] == 0
    trained = json.loads(run(base + ["--vision-training", "trained"]))
    assert trained["vision"]["training"] == "trained" and trained["vision"]["activation_bytes"] > 0


torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def small_qwen():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    vision = dict(depth=2, hidden_size=64, intermediate_size=96, num_heads=4, out_hidden_size=48, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[1])
    text = dict(hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=300,
                rope_scaling={"rope_type": "default", "mrope_section": [2, 2, 2]})
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(vision_config=vision, text_config=text))
    ours = VisionTower(projector="qwen2.5-vl", depth=2, width=64, heads=4, mlp=96, patch=14, out=48, norm="rmsnorm",
                       gated_mlp=True, fused_qkv=True, patch_bias=False, temporal_patch=2, merge=2)
    return model, ours


def visual_trainable(model) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and ".visual." in n)


def test_peft_trainable_tower_parameters_equal_the_followed_mode():
    model, ours = small_qwen()
    assert visual_trainable(model) == trainable(resolved(ours, FineTune())) == tower_counts(ours)["vision"]
    # LoRA on the language model (LLaMA-Factory's "all" with the tower and projector left out, here by name):
    # nothing in the tower or the projector trains, as "follow" resolves it under LoRA
    lm_only = peft.LoraConfig(r=8, target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|"
                                                  r"up_proj|down_proj)")
    wrapped = peft.get_peft_model(model, lm_only)
    assert visual_trainable(wrapped) == trainable(resolved(ours, FineTune(mode="lora"))) == 0


def test_peft_all_linear_reaches_the_tower_and_the_merger():
    """Why "follow" is not plain peft all-linear: peft 0.21.2 puts adapters on every tower block linear (zerocalc's
    "lora" mode counts exactly those) and on the merger's two linears (not counted: a few r (in + out))."""
    model, ours = small_qwen()
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear"))
    adapters = {n: p.numel() for n, p in wrapped.named_parameters() if "lora_" in n and ".visual." in n}
    blocks = sum(n for k, n in adapters.items() if ".visual.blocks." in k)
    assert blocks == tower_counts(replace(ours, training="lora"))["adapters"]
    assert any(".visual.merger." in k for k in adapters)


def test_an_imported_launchers_freeze_keys_alone_add_no_tower_on_the_page_as_in_the_cli(tmp_path):
    """A LLaMA-Factory full fine-tune of Qwen2.5-VL names no images: its freeze keys set the tower's mode, but the
    plan, as the CLI reads the same file, is the language model alone (cli/vision.py INPUT_FLAGS; the page's
    VISION_INPUTS), on both surfaces."""
    from tests.app_helpers import header_text, run_app
    from tests.test_app_imports import uploader
    text = b"model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\nfinetuning_type: full\nstage: sft\n"
    path = tmp_path / "qwen_vl_full.yaml"
    path.write_bytes(text)
    cli = json.loads(run(["--llamafactory-config", str(path), "--json"]))
    at = run_app(sections=["sec_load"])
    uploader(at, "Training config").upload(path.name, text, "application/x-yaml")
    at.run()
    assert not at.exception
    link = dict(at.query_params)
    assert link["model"] == "qwen2.5-vl-7b" and link["vision_training"] == "frozen-all"      # the freeze keys, kept
    assert "vision" not in cli and cli["params"] == 7_615_616_512
    assert "7,615,616,512 parameters" in header_text(at)
