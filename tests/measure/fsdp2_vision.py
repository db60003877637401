"""FSDP2 (`fully_shard`) units of a vision-language model on CPU: a small Qwen2.5-VL (transformers 5.24's
Qwen2_5_VLForConditionalGeneration) wrapped by its `_no_split_modules` (every Qwen2_5_VLVisionBlock and decoder
layer its own unit, as accelerate's TRANSFORMER_BASED_WRAP does), then the root, with
MixedPrecisionPolicy(bf16, fp32), on `world` gloo processes; one step with one image.

Reported per rank, in bytes (tests/measure/fsdp2_buffers.py's sampling of FSDP's own storages): `at_loss` (what
stays gathered after the model returns: the root), `forward` (the largest in forward) and `units`: each unit's
gathered parameter bytes (its FSDPParam all-gather outputs' padded size in bf16), named by its module.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

VISION = dict(depth=3, hidden_size=64, intermediate_size=96, num_heads=4, out_hidden_size=48, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[2], window_size=56)
TEXT = dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=301, rope_scaling={"rope_type": "default", "mrope_section": [2, 2, 2]})
IMAGE_TOKEN, START, END = 300, 298, 299


def config() -> dict:
    """The model's config.json (zerocalc reads the same dict: model/hf_config.py, vision_config.py)."""
    return {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "vision_config": dict(VISION, model_type="qwen2_5_vl"), "text_config": dict(TEXT, model_type="qwen2_5_vl_text"),
            "image_token_id": IMAGE_TOKEN, "vision_start_token_id": START, "vision_end_token_id": END,
            "tie_word_embeddings": False}


def _measure(case):
    import torch
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from tests.measure.fsdp2_buffers import _storages

    cfg = config()
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        vision_config=VISION, text_config=TEXT, image_token_id=IMAGE_TOKEN, vision_start_token_id=START,
        vision_end_token_id=END, tie_word_embeddings=False)).float()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    names = set(model._no_split_modules)
    wrapped = [(n, m) for n, m in model.named_modules() if type(m).__name__ in names]
    for _, m in wrapped:
        fully_shard(m, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    states = [m._get_fsdp_state() for m in model.modules() if isinstance(m, FSDPModule)]
    groups = [g for s in dict.fromkeys(states) for g in s._fsdp_param_groups]
    ctx = states[0]._comm_ctx
    units = {}
    for n, m in wrapped + [("(root)", model)]:
        for g in m._get_fsdp_state()._fsdp_param_groups:
            units[n] = sum(fp.padded_sharded_param_size.numel() * case["world"] * 2 for fp in g.fsdp_params)
    marks = {"forward": 0, "on": False}

    class Sampler(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if marks["on"] and hasattr(ctx, "all_gather_state"):     # set by the root's lazy init
                marks["forward"] = max(marks["forward"], _storages(groups, ctx, {}))
            return out

    grid = (1, 8, 8)                         # 8 x 8 patches of 14 px: 112 x 112 px, 16 tokens after the 2 x 2 merge
    patches = grid[1] * grid[2]
    pixels = torch.randn(patches, 3 * 2 * 14 * 14)
    text = [5, 6, START] + [IMAGE_TOKEN] * (patches // 4) + [END, 7, 8, 9]
    ids = torch.tensor([text])
    with Sampler():
        marks["on"] = True
        loss = model(input_ids=ids, labels=ids, pixel_values=pixels, image_grid_thw=torch.tensor([grid])).loss
        marks["on"] = False
        at_loss = _storages(groups, ctx, {})
    loss.backward()
    return dict(config=cfg, at_loss=at_loss, forward=marks["forward"], units=units, seq=len(text),
                loss=float(loss.detach()))


def _worker(rank, world, port, outdir, case):
    from tests.measure.fsdp2_lora import run_cases
    run_cases(rank, world, port, outdir, case, _measure)


def fsdp2_vision(world: int = 2, timeout: float = 300) -> list:
    """Run the measurement on `world` CPU processes; one dict per rank (see the module docstring)."""
    from tests.measure.fsdp2_lora import run_workers
    return run_workers("tests.measure.fsdp2_vision", world, {"world": world, "runs": [{}]}, timeout)


if __name__ == "__main__":
    import json
    print(json.dumps(fsdp2_vision()[0]["results"][0], indent=1))
