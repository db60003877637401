"""A vision-language config.json -> its VisionTower (issue 37): the keys of each family's vision_config and of the
wrapper, with the config classes' defaults of transformers 5.24 for absent keys (models/qwen2_5_vl,
qwen3_vl, siglip + gemma3, internvl, mllama: configuration_*.py). A key that would build parts the tower rows do not
have (a SigLIP pooling head, InternViT's q/k norms) is refused, never approximated. The language model is
hf_config.py's (its text_config); this file reads the tower only.
"""

from __future__ import annotations

import math
from typing import Optional

from .hf_config import _check_int, _refuse
from .vision import VisionTower

# model_type -> the vision_config defaults transformers 5.24 gives an absent key
DEFAULTS = {
    "qwen2_5_vl": dict(depth=32, hidden_size=3584, intermediate_size=3420, num_heads=16, in_channels=3, patch_size=14,
                       spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=3584),
    "qwen3_vl": dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, in_channels=3, patch_size=16,
                     spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=3584, num_position_embeddings=2304,
                     deepstack_visual_indexes=[8, 16, 24]),
    "gemma3": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                   num_channels=3, image_size=224, patch_size=16, vision_use_head=True),
    "internvl": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, attention_bias=False,
                     use_qk_norm=False, intermediate_size=4096, norm_type="layer_norm", num_channels=3,
                     image_size=[448, 448], patch_size=[14, 14], use_mean_pooling=True, use_mask_token=False,
                     use_absolute_position_embeddings=True),
    "mllama": dict(hidden_size=1280, num_hidden_layers=32, num_global_layers=8, attention_heads=16, num_channels=3,
                   intermediate_size=5120, vision_output_dim=7680, image_size=448, patch_size=14, max_num_tiles=4,
                   intermediate_layers_indices=[3, 7, 15, 23, 30],
                   supported_aspect_ratios=[[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]),
}
VISION_MODEL_TYPES = tuple(DEFAULTS)


def _get(v: dict, key: str, model_type: str):
    return v.get(key, DEFAULTS[model_type][key])


def _int(v: dict, key: str, model_type: str, lo: int = 1, hi: int = 10**6) -> int:
    return _check_int(f"vision_config.{key}", _get(v, key, model_type), lo, hi)


def _side(v: dict, key: str, model_type: str) -> int:
    """image_size / patch_size: an integer, or InternVL's [h, w] pair of equal sides."""
    value = _get(v, key, model_type)
    if isinstance(value, list):
        if len(value) != 2 or value[0] != value[1]:
            raise _refuse(f"vision_config.{key}", value, "a square size: an integer or [n, n]")
        value = value[0]
    return _check_int(f"vision_config.{key}", value, 1, 100_000)


def _list(v: dict, key: str, model_type: str) -> list:
    value = _get(v, key, model_type)
    if not isinstance(value, list):
        raise _refuse(f"vision_config.{key}", value, "a list")
    return value


def _require(v: dict, key: str, model_type: str, wanted, words: str):
    if _get(v, key, model_type) != wanted:
        raise _refuse(f"vision_config.{key}", _get(v, key, model_type), words)


def tower_from_config(cfg: dict, hidden: int) -> Optional[VisionTower]:
    """The tower of a vision-language config (None for a language model's config); `hidden` is its language model's
    width (the projector's output)."""
    model_type = cfg.get("model_type")
    if model_type not in DEFAULTS:
        return None
    v = cfg.get("vision_config") or {}
    if not isinstance(v, dict):
        raise _refuse("vision_config", v, "a JSON object")
    if model_type in ("qwen2_5_vl", "qwen3_vl"):
        qwen3 = model_type == "qwen3_vl"
        out = _int(v, "out_hidden_size", model_type)
        common = dict(depth=_int(v, "depth", model_type), width=_int(v, "hidden_size", model_type),
                      heads=_int(v, "num_heads", model_type), mlp=_int(v, "intermediate_size", model_type),
                      patch=_int(v, "patch_size", model_type), out=out, channels=_int(v, "in_channels", model_type),
                      temporal_patch=_int(v, "temporal_patch_size", model_type),
                      merge=_int(v, "spatial_merge_size", model_type), fused_qkv=True)
        if qwen3:
            return VisionTower(projector="qwen3-vl", positions=_int(v, "num_position_embeddings", model_type),
                               deepstack=len(_list(v, "deepstack_visual_indexes", model_type)), **common)
        return VisionTower(projector="qwen2.5-vl", norm="rmsnorm", gated_mlp=True, patch_bias=False, **common)
    if model_type == "gemma3":
        _require(v, "vision_use_head", model_type, False, "false (Gemma 3's SigLIP tower has no pooling head)")
        side = _side(v, "image_size", model_type) // _side(v, "patch_size", model_type)
        tokens = _check_int("mm_tokens_per_image", cfg.get("mm_tokens_per_image", 256), 1, 10**6)
        pool = math.isqrt(side * side // tokens)
        if pool * pool * tokens != side * side:
            raise _refuse("mm_tokens_per_image", tokens, f"a square divisor of the {side * side:,} patches")
        return VisionTower(projector="gemma3", depth=_int(v, "num_hidden_layers", model_type),
                           width=_int(v, "hidden_size", model_type), heads=_int(v, "num_attention_heads", model_type),
                           mlp=_int(v, "intermediate_size", model_type), patch=_side(v, "patch_size", model_type),
                           out=hidden, channels=_int(v, "num_channels", model_type), positions=side * side,
                           post_norm=True, merge=pool)
    if model_type == "internvl":
        for key, wanted, words in (("use_qk_norm", False, "false (q/k norms are not in the tower's rows)"),
                                   ("use_mask_token", False, "false"),
                                   ("use_absolute_position_embeddings", True, "true")):
            _require(v, key, model_type, wanted, words)
        ratio = cfg.get("downsample_ratio", 0.5)
        if ratio not in (0.5,):
            raise _refuse("downsample_ratio", ratio, "0.5 (a 2 x 2 pixel shuffle)")
        side = _side(v, "image_size", model_type) // _side(v, "patch_size", model_type)
        norm = {"layer_norm": "layernorm", "rms_norm": "rmsnorm"}.get(_get(v, "norm_type", model_type))
        if norm is None:
            raise _refuse("vision_config.norm_type", _get(v, "norm_type", model_type), "layer_norm or rms_norm")
        return VisionTower(projector="internvl", depth=_int(v, "num_hidden_layers", model_type),
                           width=_int(v, "hidden_size", model_type), heads=_int(v, "num_attention_heads", model_type),
                           mlp=_int(v, "intermediate_size", model_type), patch=_side(v, "patch_size", model_type),
                           out=hidden, channels=_int(v, "num_channels", model_type), norm=norm,
                           attn_bias=bool(_get(v, "attention_bias", model_type)), positions=side * side + 1,
                           cls_token=True, layer_scale=True, merge=2,
                           post_norm=not _get(v, "use_mean_pooling", model_type))
    # mllama
    width, indices = _int(v, "hidden_size", model_type), _list(v, "intermediate_layers_indices", model_type)
    if _int(v, "vision_output_dim", model_type) != width * (1 + len(indices)):
        raise _refuse("vision_config.vision_output_dim", v.get("vision_output_dim"),
                      f"hidden_size x (1 + the intermediate layers) = {width * (1 + len(indices)):,}")
    text = cfg.get("text_config") or {}
    cross = text.get("cross_attention_layers", [3, 8, 13, 18, 23, 28, 33, 38]) if isinstance(text, dict) else None
    if not isinstance(cross, list):
        raise _refuse("text_config.cross_attention_layers", cross, "a list of layer indices")
    heads = _check_int("text_config.num_attention_heads", text.get("num_attention_heads", 32), 1, 10**5)
    side = _side(v, "image_size", model_type) // _side(v, "patch_size", model_type)
    return VisionTower(projector="mllama", depth=_int(v, "num_hidden_layers", model_type), width=width,
                       heads=_int(v, "attention_heads", model_type), mlp=_int(v, "intermediate_size", model_type),
                       patch=_side(v, "patch_size", model_type), out=hidden,
                       channels=_int(v, "num_channels", model_type), attn_bias=False, patch_bias=False,
                       positions=side * side + 1, cls_token=True,
                       global_depth=_int(v, "num_global_layers", model_type, 0),
                       tiles=_int(v, "max_num_tiles", model_type),
                       aspect_ratios=len(_list(v, "supported_aspect_ratios", model_type)),
                       feature_layers=len(indices), cross_layers=len(cross),
                       cross_head_dim=hidden // heads, extra_vocab=8)
