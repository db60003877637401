"""FSDP wraps a vision tower's blocks as their own units (issue 37): transformers 5.24 lists them in the model's
_no_split_modules (an instance's set gathers its sub-models': modeling_utils.py post_init), accelerate 1.15's
TRANSFORMER_BASED_WRAP wraps those classes (utils/dataclasses.py set_auto_wrap_policy), so the root that stays
gathered holds the embeddings, the head, the merger / projector and the patch embedding, not the tower.

Checked two ways: the unit sizes against the module tree of each family built on the meta device (padded over 8
ranks, as FSDP2 pads each tensor's rows), and the gathered bytes against fully_shard on 2 gloo processes with a
small Qwen2_5_VLForConditionalGeneration (tests/measure/fsdp2_vision.py), exactly.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.model.vision import TOWERS
from zerocalc.model.vision_tokens import ImageInputs
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.workload import Workload

ROOT = Path(__file__).resolve().parent / "fixtures"
FILES = {"qwen2.5-vl-7b": "vision_configs", "qwen3-vl-8b": "vision_configs", "internvl3-8b": "vision_configs",
         "llama-3.2-11b-vision": "vision_configs", "gemma-3-4b": "model_configs"}
N = 8


def rank0(arch, workers, images, seq_len=4096):
    sc = Scenario.from_convention("fsdp2", params=param_count(arch), workers=workers)
    w = Workload(arch, micro_batch=1, seq_len=seq_len, images=images, comm_buffers="fsdp", reduce_dtype="fp32",
                 layout=Layout())
    return layout_report(sc, w).ranks[0]


def test_the_tower_leaves_the_root_qwen2_5_vl_7b():
    arch = replace(MODEL_PRESETS["qwen2.5-vl-7b"][0], vision=TOWERS["qwen2.5-vl-7b"])
    r = rank0(arch, N, ImageInputs(images=1))
    units = r.shape.fsdp
    tower_blocks = 32 * units.tower.params               # 32 blocks of 19,712,448 padded elements
    assert units.tower.params == 19_712_448
    # the root kept gathered at the loss: the embeddings, head, final norm, patch embedding and merger only
    assert r.peaks[3].phases["forward"]["gathered parameters"] == 2 * (units.first.params + units.last.params)
    assert 2 * tower_blocks == 1_261_596_672             # what the root held before (bf16 bytes, 1.26 GB)


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _padded(p) -> int:
    rows = p.shape[0] if p.dim() else 1
    return -(-rows // N) * N * (p.numel() // rows)


@pytest.mark.parametrize("name", sorted(FILES))
def test_tower_units_equal_the_no_split_blocks_of_the_module_tree(name):
    from tests.measure.meta_counts import build_meta_model
    model, _cfg, _ = build_meta_model(json.loads((ROOT / FILES[name] / f"{name}.json").read_text()),
                                      text_only=False)
    classes, units, inside = set(model._no_split_modules), {}, set()
    for n, module in model.named_modules():
        if type(module).__name__ in classes and not any(n.startswith(u + ".") for u in units):
            params = list(module.named_parameters())
            units[n] = sum(_padded(p) for _, p in params)
            inside.update(f"{n}.{k}" for k, _ in params)
    tower = {k: v for k, v in units.items() if ".visual." in f".{k}." or "vision" in k}
    arch = replace(MODEL_PRESETS[name][0], vision=TOWERS[name])
    fsdp = rank0(arch, N, ImageInputs(images=1)).shape.fsdp
    t = TOWERS[name]
    assert len(tower) == t.depth + t.global_depth + (name.startswith("gemma") and 1)   # + SiglipVisionEmbeddings
    assert fsdp.tower.params == max(v for k, v in tower.items() if not k.endswith("embeddings"))
    if name.startswith("qwen"):          # the root: everything outside those units, exactly
        assert fsdp.first.params + fsdp.last.params == sum(_padded(p) for k, p in model.named_parameters()
                                                           if k not in inside)


@pytest.fixture(scope="module")
def measured():
    from tests.measure.fsdp2_vision import fsdp2_vision
    return fsdp2_vision(world=2, timeout=300)


def test_fully_shard_keeps_only_the_root_gathered_at_the_loss(measured):
    from zerocalc.model.hf_config import architecture_from_config
    from zerocalc.model.vision_config import tower_from_config
    from zerocalc.step.vision_activations import lm_seq_len
    from tests.measure.fsdp2_vision import config
    cfg = config()
    arch = architecture_from_config(cfg)
    arch = replace(arch, vision=tower_from_config(cfg, arch.hidden))
    x = ImageInputs(images=1, width=112, height=112)
    r = rank0(arch, 2, x, lm_seq_len(arch.vision, 16, x))
    for rank in measured:
        got = rank["results"][0]
        assert got["at_loss"] == got["units"]["(root)"] == r.peaks[3].phases["forward"]["gathered parameters"]
        assert got["units"]["model.visual.blocks.0"] == 2 * r.shape.fsdp.tower.params
        assert got["units"]["model.language_model.layers.0"] == 2 * r.shape.fsdp.block.params
