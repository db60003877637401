"""Images and video -> tokens by each family's processor rule (zerocalc/model/vision_tokens.py), checked against the
processors of transformers 5.24 themselves: Qwen2VLImageProcessor.get_number_of_image_patches and the Qwen2-VL /
Qwen3-VL video processors' get_num_of_video_patches (models/qwen2_vl, models/qwen3_vl), Gemma3ImageProcessor run on
real pixels with pan-and-scan (models/gemma3), GotOcr2ImageProcessor.get_number_of_image_patches with InternVL's
448 px tiles (models/got_ocr2), and MllamaImageProcessor's padded tiles (models/mllama)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerocalc.model.vision import TOWERS
from zerocalc.model.vision_tokens import RULES, ImageInputs, vision_tokens
from zerocalc.scenario import FieldError

SIZES = [(448, 448), (640, 480), (1920, 1080), (1080, 1920), (3000, 200), (32, 32), (4000, 4000), (1001, 333),
         (896, 896), (2048, 640), (250, 4000)]


def test_fixed_families_per_image():
    gemma = vision_tokens(TOWERS["gemma-3-4b"], ImageInputs(images=3, width=1920, height=1080))
    assert gemma == (3, 3 * 4096, 4096, 3 * 258, 0)
    mllama = vision_tokens(TOWERS["llama-3.2-11b-vision"], ImageInputs(images=2, width=64, height=64))
    assert mllama == (2, 2 * 4 * 1608, 4 * 1608, 2, 2 * 4 * 1601)
    # Qwen2.5-VL at 448 x 448: 32 x 32 patches, 256 tokens plus vision_start / vision_end
    qwen = vision_tokens(TOWERS["qwen2.5-vl-7b"], ImageInputs(images=1, width=448, height=448))
    assert qwen == (1, 1024, 1024, 258, 0)


def test_refusals_name_the_field():
    with pytest.raises(FieldError, match="pixel_budget"):
        vision_tokens(TOWERS["gemma-3-4b"], ImageInputs(images=1, pixel_budget=10**6))
    with pytest.raises(FieldError, match="pixel_budget"):
        vision_tokens(TOWERS["qwen2.5-vl-7b"], ImageInputs(images=1, pixel_budget=1000))
    with pytest.raises(FieldError, match="video_frames"):
        vision_tokens(TOWERS["internvl3-8b"], ImageInputs(video_frames=8))
    with pytest.raises(FieldError, match="pan_and_scan"):
        vision_tokens(TOWERS["qwen3-vl-8b"], ImageInputs(images=1, pan_and_scan=True))
    with pytest.raises(FieldError, match="width"):
        ImageInputs(images=1, width=0)


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.parametrize("name, patch", [("qwen2.5-vl-7b", 14), ("qwen3-vl-8b", 16)])
@pytest.mark.parametrize("budget", [0, 200_704, 1_003_520])
def test_qwen_images_match_the_processor(name, patch, budget):
    from transformers import Qwen2VLImageProcessor
    rule = RULES[TOWERS[name].projector]
    proc = Qwen2VLImageProcessor(min_pixels=rule["min_pixels"], max_pixels=budget or rule["max_pixels"],
                                 patch_size=patch, merge_size=2)
    for w, h in SIZES:
        ours = vision_tokens(TOWERS[name], ImageInputs(images=2, width=w, height=h, pixel_budget=budget))
        patches = proc.get_number_of_image_patches(h, w, {})
        assert ours.tower_tokens == 2 * patches and ours.text_tokens == 2 * (patches // 4 + 2), (w, h)


def video_processor(module: str, cls: str):
    """The video processor's own get_num_of_video_patches, its smart_resize and its class defaults, read from the
    installed transformers file with ast (importing the module needs torchvision, which this venv does not have)."""
    import ast
    import importlib.util
    import math
    from types import SimpleNamespace
    path = Path(importlib.util.find_spec("transformers").origin).parent / "models" / module.replace(".", "/")
    tree = ast.parse(path.with_suffix(".py").read_text())
    ns = {"math": math}
    resize = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "smart_resize")
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    method = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "get_num_of_video_patches")
    body = [resize, method] + [n for n in klass.body if isinstance(n, ast.Assign) and
                               all(isinstance(t, ast.Name) for t in n.targets) and isinstance(n.value, (
                                   ast.Constant, ast.Dict, ast.BinOp))]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)
    attrs = {k: v for k, v in ns.items() if not callable(v) and k != "math" and not k.startswith("__")}
    return lambda frames, h, w: ns["get_num_of_video_patches"](SimpleNamespace(**attrs), frames, h, w, {})


@pytest.mark.parametrize("frames", [2, 7, 16, 64])
def test_qwen_video_matches_the_video_processors(frames):
    for name, module, cls in (("qwen2.5-vl-7b", "qwen2_vl.video_processing_qwen2_vl", "Qwen2VLVideoProcessor"),
                              ("qwen3-vl-8b", "qwen3_vl.video_processing_qwen3_vl", "Qwen3VLVideoProcessor")):
        patches = video_processor(module, cls)
        for w, h in SIZES[:5]:
            ours = vision_tokens(TOWERS[name], ImageInputs(video_frames=frames, width=w, height=h))
            assert ours.tower_tokens == patches(frames, h, w), (name, w, h)


def test_gemma_pan_and_scan_matches_the_image_processor():
    from transformers import Gemma3ImageProcessor
    rule = RULES["gemma3"]
    proc = Gemma3ImageProcessor(size={"height": 896, "width": 896})
    for w, h in SIZES:
        image = torch.zeros(3, h, w, dtype=torch.uint8)
        out = proc(image, do_pan_and_scan=True, pan_and_scan_min_crop_size=rule["min_crop"],
                   pan_and_scan_max_num_crops=rule["max_crops"],
                   pan_and_scan_min_ratio_to_activate=rule["min_ratio"], return_tensors="pt")
        ours = vision_tokens(TOWERS["gemma-3-4b"], ImageInputs(images=1, width=w, height=h, pan_and_scan=True))
        assert ours.passes == out["pixel_values"].shape[0] == 1 + int(out["num_crops"][0]), (w, h)


@pytest.mark.parametrize("budget", [0, 448 * 448 * 6, 448 * 448])
def test_internvl_tiles_match_the_image_processor(budget):
    from transformers import GotOcr2ImageProcessor
    max_tiles = budget // (448 * 448) if budget else 12
    proc = GotOcr2ImageProcessor(size={"height": 448, "width": 448}, crop_to_patches=True, min_patches=1,
                                 max_patches=max_tiles)
    for w, h in SIZES:
        tiles = proc.get_number_of_image_patches(h, w, {})
        ours = vision_tokens(TOWERS["internvl3-8b"], ImageInputs(images=1, width=w, height=h, pixel_budget=budget))
        assert ours.passes == tiles and ours.text_tokens == 2 + 256 * tiles, (w, h)
        assert ours.tower_tokens == tiles * 1025


def test_mllama_pads_every_image_to_its_tiles():
    from transformers import MllamaImageProcessor
    proc = MllamaImageProcessor(size={"height": 560, "width": 560}, max_image_tiles=4)
    for w, h in SIZES[:4]:
        out = proc(torch.zeros(3, h, w, dtype=torch.uint8), return_tensors="pt")
        assert tuple(out["pixel_values"].shape[2:4]) == (TOWERS["llama-3.2-11b-vision"].tiles, 3)
