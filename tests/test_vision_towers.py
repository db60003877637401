"""Vision towers as data (issue 37): the tower, projector and cross-attention extras of each vision-language preset
count exactly what transformers 5.24 builds from the model's config.json on the meta device, component by
component, and the whole model is the language model's row plus the tower.

Configs: tests/fixtures/vision_configs/*.json (each with a .source.json saying where it was read) and, for Gemma 3,
tests/fixtures/model_configs/gemma-3-*.json. Oracle: transformers' own classes (Qwen2_5_VLForConditionalGeneration,
Qwen3VLForConditionalGeneration, Gemma3ForConditionalGeneration, InternVLForConditionalGeneration,
MllamaForConditionalGeneration), built with AutoModelForImageTextToText.from_config under torch.device("meta").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS, PUBLISHED_DIFFERENCES
from zerocalc.model.vision import TOWERS, VisionTower, largest_tower_module, tower_counts
from zerocalc.scenario import FieldError

ROOT = Path(__file__).resolve().parent / "fixtures"
CONFIGS = {name: (ROOT / "vision_configs" / f"{name}.json") for name in
           ("qwen2.5-vl-7b", "qwen3-vl-8b", "internvl3-8b", "llama-3.2-11b-vision")}
CONFIGS.update({name: ROOT / "model_configs" / f"{name}.json" for name in ("gemma-3-4b", "gemma-3-27b")})


def test_every_tower_has_its_language_model_and_a_sourced_config():
    assert set(TOWERS) == set(CONFIGS)
    for name in TOWERS:
        assert name in MODEL_PRESETS
        source = json.loads(Path(str(CONFIGS[name])[:-len(".json")] + ".source.json").read_text())
        assert source["repo"] and source["where_found"]


@pytest.mark.parametrize("name", sorted(TOWERS))
def test_the_published_total_is_the_language_model_plus_the_tower(name):
    arch, published, _ = MODEL_PRESETS[name]
    assert PUBLISHED_DIFFERENCES[name][0] == tower_counts(TOWERS[name])["vision"]
    assert param_count(arch) + tower_counts(TOWERS[name])["vision"] == published


def test_bad_tower_fields_are_named():
    with pytest.raises(FieldError, match="heads"):
        VisionTower(projector="qwen3-vl", depth=2, width=100, heads=3, mlp=8, patch=16, out=8)
    with pytest.raises(FieldError, match="projector"):
        VisionTower(projector="llava", depth=2, width=8, heads=2, mlp=8, patch=16, out=8)
    with pytest.raises(FieldError, match="depth"):
        VisionTower(projector="gemma3", depth=0, width=8, heads=2, mlp=8, patch=16, out=8)


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# Which top-level modules of each family are the tower, the projector and the text model.
PARTS = {"qwen2.5-vl-7b": ("model.visual.", "model.visual.merger."),
         "qwen3-vl-8b": ("model.visual.", ("model.visual.merger.", "model.visual.deepstack_merger_list.")),
         "internvl3-8b": ("model.vision_tower.", "model.multi_modal_projector."),
         "gemma-3-4b": ("model.vision_tower.", "model.multi_modal_projector."),
         "gemma-3-27b": ("model.vision_tower.", "model.multi_modal_projector."),
         "llama-3.2-11b-vision": ("model.vision_model.", "model.multi_modal_projector.")}


def built(name):
    """(name -> elements of each unique parameter, name -> elements of each module's own parameters)."""
    from tests.measure.meta_counts import build_meta_model
    model, _cfg, _note = build_meta_model(json.loads(CONFIGS[name].read_text()), text_only=False)
    params, modules, seen = {}, {}, set()
    for mname, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if id(p) not in seen]
        for pname, p in module.named_parameters(recurse=False):
            if id(p) not in seen:
                params[f"{mname}.{pname}"] = p.numel()
        seen.update(id(p) for p in own)
        if own:
            modules[mname] = sum(p.numel() for p in own)
    return params, modules


@pytest.mark.parametrize("name", sorted(TOWERS))
def test_tower_projector_and_extras_equal_the_meta_device_build(name):
    params, modules = built(name)
    tower_prefix, projector_prefix = PARTS[name]
    projector_prefix = (projector_prefix,) if isinstance(projector_prefix, str) else projector_prefix
    projector = sum(n for k, n in params.items() if k.startswith(projector_prefix))
    tower = sum(n for k, n in params.items() if k.startswith(tower_prefix)) - \
        (projector if name.startswith("qwen") else 0)
    ours = tower_counts(TOWERS[name])
    assert (ours["tower"], ours["projector"]) == (tower, projector)
    arch = MODEL_PRESETS[name][0]
    assert param_count(arch) + ours["vision"] == sum(params.values())
    # the tower's largest module (ZeRO-3 gathers it whole): Llama 3.2 Vision's tile embedding is 73.8M
    vision_modules = {k: v for k, v in modules.items() if f"{k}.".startswith((tower_prefix,) + projector_prefix)}
    assert largest_tower_module(TOWERS[name])[1] == max(vision_modules.values())


def test_tower_training_modes_flag_the_tower_and_its_adapters():
    """Frozen: the tower's own tensors keep no gradient, the projector trains; LoRA adds rank-8 adapters beside
    each block linear, as peft's LoraConfig(r=8) on those modules (counted against peft below)."""
    from dataclasses import replace
    from zerocalc.model.vision import tower_tensors
    t = TOWERS["qwen2.5-vl-7b"]
    frozen = tower_tensors(replace(t, training="frozen"))
    assert all(not p.trainable for p in frozen if p.role == "vision")
    assert all(p.trainable for p in frozen if p.role == "projector")
    lora = tower_counts(replace(t, training="lora"))
    # per block: qkv (1280 -> 3840), proj, gate, up (1280 -> 3420), down (3420 -> 1280): r (in + out) each
    per_block = 8 * ((1280 + 3840) + (1280 + 1280) + 2 * (1280 + 3420) + (3420 + 1280))
    assert lora["adapters"] == 32 * per_block


def test_lora_tower_adapters_equal_peft():
    peft = pytest.importorskip("peft")
    from tests.test_vision_follow import small_qwen          # a small real Qwen2.5-VL on the meta device
    model, _ = small_qwen()
    cfg = peft.LoraConfig(r=8, target_modules=r".*visual\.blocks\.\d+\.(attn\.(qkv|proj)|mlp\.\w+_proj)")
    wrapped = peft.get_peft_model(model, cfg)
    adapters = sum(p.numel() for n, p in wrapped.named_parameters() if "lora_" in n)
    ours = VisionTower(projector="qwen2.5-vl", depth=2, width=64, heads=4, mlp=96, patch=14, out=48, norm="rmsnorm",
                       gated_mlp=True, fused_qkv=True, patch_bias=False, temporal_patch=2, merge=2, training="lora")
    assert tower_counts(ours)["adapters"] == adapters
