"""Bytes a vision tower of the real transformers classes saves for backward (test-only; torch and transformers).

Each family's model is built from a small config of its own classes (Qwen2_5_VLForConditionalGeneration,
Qwen3VLForConditionalGeneration, Gemma3ForConditionalGeneration, InternVLForConditionalGeneration,
MllamaForConditionalGeneration; a one-layer text model) and its image path (get_image_features: the tower and the
merger or projector; Llama 3.2 Vision: the vision model then multi_modal_projector, as MllamaModel.forward) run on
random pixels under autograd's saved-tensor hooks, with the CUDA semantics of tests/measure/saved_tensors.py (SDPA saves
q, k, v, the output and an fp32 logsumexp; nothing s x s; a mask given to SDPA, as the memory-efficient kernel
keeps its attn_bias: Llama 3.2 Vision's tile mask). Storages are counted once; parameters and the pixel
input are not activations. Returns the bytes saved inside the tower's blocks ("blocks", one sum over all of them)
and outside them ("ends": patch embedding, positions, merger or projector input), as a CUDA run would save them.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tests.measure.saved_tensors import _Recorder, _tensors, gpu_semantics  # noqa: E402


def _blocks(model):
    for path in ("blocks", "encoder.layers", "encoder.layer", "transformer.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        blocks = list(obj)
        if hasattr(model, "global_transformer"):
            blocks += list(model.global_transformer.layers)
        return blocks
    raise ValueError(type(model).__name__)


TEXT = {"hidden_size": 48, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 300, "head_dim": 12}
MODEL_TYPES = {"qwen2.5-vl": "qwen2_5_vl", "qwen3-vl": "qwen3_vl", "gemma3": "gemma3", "internvl": "internvl",
               "mllama": "mllama"}


def build(family: str, vision: dict, dtype=torch.bfloat16):
    """A small whole model of the family (a one-layer text model of width 48), SDPA attention, in `dtype`."""
    from transformers import AutoConfig, AutoModelForImageTextToText
    torch.manual_seed(0)
    text = dict(TEXT)
    if family == "qwen2.5-vl" or family == "qwen3-vl":
        text["rope_scaling"] = {"rope_type": "default", "mrope_section": [2, 2, 2]}
    if family == "mllama":
        text.update(cross_attention_layers=vision.pop("cross_layers", [0]), pad_token_id=0,
                    num_hidden_layers=vision.pop("text_layers", 1))
    extra = {"image_token_id": 299} if family != "mllama" else {"image_token_index": 299}
    if family == "gemma3":
        extra = {"image_token_index": 299, "mm_tokens_per_image": vision.pop("tokens", 4)}
    cfg = AutoConfig.for_model(MODEL_TYPES[family], text_config=text, vision_config=vision, **extra)
    model = AutoModelForImageTextToText.from_config(cfg, attn_implementation="sdpa")
    return model.to(dtype).train()


def tower(model):
    m = model.model
    return getattr(m, "visual", None) or getattr(m, "vision_tower", None) or m.vision_model


def run(family: str, model, images: int, height: int, width: int, dtype=torch.bfloat16):
    """(inputs, a function running the family's image path: tower, merger / projector, as the model's forward)."""
    cfg = tower(model).config
    if family in ("qwen2.5-vl", "qwen3-vl"):
        p, t = cfg.patch_size, cfg.temporal_patch_size
        gh, gw = height // p, width // p
        x = {"pixel_values": torch.randn(images * gh * gw, cfg.in_channels * t * p * p, dtype=dtype),
             "image_grid_thw": torch.tensor([[1, gh, gw]] * images)}
        return x, lambda: model.model.get_image_features(**x)
    if family == "mllama":
        tiles = cfg.max_num_tiles
        x = {"pixel_values": torch.randn(1, images, tiles, 3, cfg.image_size, cfg.image_size, dtype=dtype),
             "aspect_ratio_ids": torch.ones(1, images, dtype=torch.long),
             "aspect_ratio_mask": torch.ones(1, images, tiles, dtype=torch.long)}

        def mllama():        # MllamaModel.forward: the tower, then the projector over its concatenated features
            states = model.model.vision_model(**x).last_hidden_state
            return model.model.multi_modal_projector(states)
        return x, mllama
    x = {"pixel_values": torch.randn(images, 3, height, width, dtype=dtype)}
    if family == "internvl":
        return x, lambda: model.model.get_image_features(**x, vision_feature_layer=-1,
                                                         vision_feature_select_strategy="default")
    return x, lambda: model.model.get_image_features(**x)


def measure(family: str, vision: dict, images: int, height: int, width: int, dtype=torch.bfloat16,
            checkpointing: bool = False) -> dict:
    """With checkpointing (gradient_checkpointing_enable, non-reentrant) each tower block keeps what it is called
    with, recorded on entry as tests/measure/saved_tensors.py does for decoder blocks."""
    model = build(family, dict(vision), dtype)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    args, forward = run(family, model, images, height, width, dtype)
    rec = _Recorder(model)
    for t in args.values():
        rec.seen.add(t.untyped_storage().data_ptr())       # the pixels are the data, not an activation
    rec.region = "ends"

    def enter(module, a, k):
        rec.region = "layer"                  # the recorder drops what a checkpointed "layer" saves inside it
        rec.checkpointing = False
        if checkpointing:
            for t in _tensors((a, k)):
                rec.add(t)
            rec.checkpointing = True

    def leave(module, a, k, out=None):
        rec.region, rec.checkpointing = "ends", False
    hooks = []
    for b in _blocks(tower(model)):
        hooks.append(b.register_forward_pre_hook(enter, with_kwargs=True))
        hooks.append(b.register_forward_hook(lambda m, a, k, o: leave(m, a, k), with_kwargs=True))
    try:
        with gpu_semantics(rec), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            inner = F.scaled_dot_product_attention

            def sdpa(query, key, value, attn_mask=None, *rest, **kwargs):
                # with a mask CUDA runs the memory-efficient kernel, which saves the mask (attn_bias) for backward
                if attn_mask is not None and not rec.paused and not rec.checkpointing:
                    rec.add(attn_mask)
                return inner(query, key, value, attn_mask, *rest, **kwargs)
            F.scaled_dot_product_attention = sdpa
            try:
                out = forward()
            finally:
                F.scaled_dot_product_attention = inner
    finally:
        for h in hooks:
            h.remove()
    return {"blocks": rec.by_region["layer"], "ends": rec.by_region["ends"], "output": out}


def measure_cross_layer(vision: dict, text_tokens: int, images: int = 1, dtype=torch.bfloat16) -> dict:
    """Llama 3.2 Vision's text model with two layers, a self-attention one then a cross-attention one
    (cross_attention_layers [1]), run through MllamaModel.forward with `images` images in one sample: the bytes
    each layer saves (the cross layer's include what cross-attention layers share: the projected vision states and
    the masks, saved first there)."""
    model = build("mllama", dict(vision), dtype)
    lm = model.model.language_model
    cfg = tower(model).config
    tiles = cfg.max_num_tiles
    ids = torch.randint(0, 250, (1, text_tokens))
    ids[0, :images] = 299                                    # the <|image|> tokens
    x = dict(input_ids=ids, pixel_values=torch.randn(1, images, tiles, 3, cfg.image_size, cfg.image_size, dtype=dtype),
             aspect_ratio_ids=torch.ones(1, images, dtype=torch.long),
             aspect_ratio_mask=torch.ones(1, images, tiles, dtype=torch.long),
             cross_attention_mask=torch.ones(1, text_tokens, images, tiles, dtype=torch.long))
    rec = _Recorder(model)
    rec.region = "other"
    hooks = []
    for i, layer in enumerate(lm.layers):
        hooks.append(layer.register_forward_pre_hook(lambda m, a, k, i=i: setattr(rec, "region", f"layer{i}"),
                                                     with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda m, a, k, o: setattr(rec, "region", "other"),
                                                 with_kwargs=True))
    try:
        with gpu_semantics(rec), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            inner = F.scaled_dot_product_attention

            def sdpa(query, key, value, attn_mask=None, *rest, **kwargs):
                if attn_mask is not None and not rec.paused:
                    rec.add(attn_mask)
                return inner(query, key, value, attn_mask, *rest, **kwargs)
            F.scaled_dot_product_attention = sdpa
            try:
                model.model(**x)
            finally:
                F.scaled_dot_product_attention = inner
    finally:
        for h in hooks:
            h.remove()
    return dict(rec.by_region)
