"""A vision-language config.json imported whole (zerocalc/model/vision_config.py and hf_config.py's wrappers): the
language model and the tower read from the file equal the presets' rows, and variants count what transformers 5.24
builds on the meta device (a wrapper's own tie_word_embeddings; other depths, widths and tile counts)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from zerocalc.cli.main import run
from zerocalc.model.hf_config import ConfigError, architecture_from_config
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.model.vision import TOWERS, tower_counts
from zerocalc.model.vision_config import tower_from_config

ROOT = Path(__file__).resolve().parent / "fixtures"
FILES = {"qwen2.5-vl-7b": "vision_configs", "qwen3-vl-8b": "vision_configs", "internvl3-8b": "vision_configs",
         "llama-3.2-11b-vision": "vision_configs", "gemma-3-4b": "model_configs", "gemma-3-27b": "model_configs"}


def config(name):
    return json.loads((ROOT / FILES[name] / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_file_gives_the_presets_rows(name):
    cfg = config(name)
    arch = architecture_from_config(cfg)
    assert param_count(arch) == param_count(MODEL_PRESETS[name][0])
    assert tower_from_config(cfg, arch.hidden) == TOWERS[name]


def test_a_language_models_config_has_no_tower():
    cfg = json.loads((ROOT / "model_configs" / "llama-3.1-8b.json").read_text())
    assert tower_from_config(cfg, 4096) is None


@pytest.mark.parametrize("name, key, value, words", [
    ("gemma-3-4b", "vision_use_head", True, "no pooling head"),
    ("internvl3-8b", "use_qk_norm", True, "q/k norms"),
])
def test_unmodelled_parts_are_refused(name, key, value, words):
    cfg = config(name)
    cfg["vision_config"][key] = value
    with pytest.raises(ConfigError, match=words):
        tower_from_config(cfg, 2560)


def test_the_cli_plans_a_config_files_tower():
    path = str(ROOT / "vision_configs" / "qwen3-vl-8b.json")
    d = json.loads(run(["--config", path, "--workers", "8", "--images-per-sample", "1", "--json"]))
    assert d["params"] == MODEL_PRESETS["qwen3-vl-8b"][1] and d["vision"]["family"] == "qwen3-vl"


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def variants():
    out = []
    internvl = config("internvl3-8b")
    del internvl["tie_word_embeddings"]                      # InternVLConfig's default: tied
    out.append(("internvl3-8b tied", internvl))
    qwen = config("qwen2.5-vl-7b")
    qwen["tie_word_embeddings"] = True
    qwen["vision_config"].update(depth=4, hidden_size=640, intermediate_size=1000, num_heads=8)
    out.append(("qwen2.5-vl small tied", qwen))
    qwen3 = config("qwen3-vl-8b")
    qwen3["vision_config"].update(deepstack_visual_indexes=[1], depth=3, num_position_embeddings=1024)
    out.append(("qwen3-vl one deepstack", qwen3))
    mllama = config("llama-3.2-11b-vision")
    mllama["vision_config"].update(max_num_tiles=2, num_global_layers=2, intermediate_layers_indices=[1, 2],
                                   vision_output_dim=1280 * 3, supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]])
    mllama["text_config"].update(cross_attention_layers=[3, 8], num_hidden_layers=12)
    out.append(("mllama 2 tiles", mllama))
    gemma = config("gemma-3-4b")
    gemma["vision_config"].update(num_hidden_layers=3, image_size=448)
    gemma["mm_tokens_per_image"] = 64
    out.append(("gemma3 448 px", gemma))
    return out


@pytest.mark.parametrize("label, cfg", variants(), ids=[v[0] for v in variants()])
def test_variants_count_what_transformers_builds(label, cfg):
    from tests.measure.meta_counts import build_meta_model
    model, _cfg, _note = build_meta_model(copy.deepcopy(cfg), text_only=False)
    built = sum(p.numel() for p in model.parameters())
    arch = architecture_from_config(cfg)
    assert param_count(arch) + tower_counts(tower_from_config(cfg, arch.hidden))["vision"] == built
