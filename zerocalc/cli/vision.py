"""The CLI's vision flags (issue 37): images per sample and their resolution, or a pixel budget, a video's frames,
Gemma 3's pan-and-scan and the tower's training mode -> the preset's tower on the Architecture and the images on
the Workload, the language model's sequence grown by the images' tokens (step/vision_activations.py lm_seq_len)."""

from __future__ import annotations

from dataclasses import replace

from ..model.hf_config import parse_config
from ..model.vision import TOWERS, TRAINING
from ..model.vision_config import VISION_MODEL_TYPES, tower_from_config
from ..model.vision_tokens import ImageInputs
from ..scenario import FieldError
from ..step.vision_activations import lm_seq_len

VISION_FLAGS = ("images_per_sample", "image_size", "pixel_budget", "video_frames", "pan_and_scan",
                "vision_training", "vision_lora_rank")
# ImageInputs' and VisionTower's fields -> the flag that sets them (a refusal names the flag)
FIELD_FLAGS = {"images": "images_per_sample", "width": "image_size", "height": "image_size",
               "pixel_budget": "pixel_budget", "video_frames": "video_frames", "pan_and_scan": "pan_and_scan",
               "vision_training": "vision_training", "lora_rank": "vision_lora_rank"}


def _size(text: str):
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and 0 < len(p) <= 6 for p in parts):
        raise ValueError(f"expected WIDTHxHEIGHT in pixels, e.g. 1344x896; got {text!r}")
    return int(parts[0]), int(parts[1])


def _whole(text: str) -> int:
    if not text.isdigit() or len(text) > 12:
        raise ValueError(f"expected a whole number; got {text!r}")
    return int(text)


def add_vision_flags(p):
    v = p.add_argument_group("vision-language models (a preset with a vision tower: " + ", ".join(TOWERS) + ")")
    v.add_argument("--images-per-sample", type=_whole, help="images in each sample (default 0; the language "
                   "model's sequence grows by their tokens: --seq-len is the text)")
    v.add_argument("--image-size", type=_size, metavar="WxH", help="the images' resolution in pixels (default 448x448)")
    v.add_argument("--pixel-budget", type=_whole, help="Qwen: max_pixels per image; InternVL: pixels of the 448 px "
                   "tiles allowed (0: the checkpoint's own)")
    v.add_argument("--video-frames", type=_whole, help="Qwen: one video of this many frames per sample, at "
                   "--image-size")
    v.add_argument("--pan-and-scan", choices=("yes", "no"), help="Gemma 3: crops of an elongated image (default no)")
    v.add_argument("--vision-training", choices=TRAINING, help="the tower: follow (default: trained under full "
                   "fine-tuning, tower and projector frozen under freeze / LoRA / QLoRA, as LLaMA-Factory, ms-swift "
                   "and peft do; an imported launcher's freeze keys decide), trained, frozen (the projector trains), "
                   "frozen-all or lora")
    v.add_argument("--vision-lora-rank", type=_whole, help="with --vision-training lora: the adapters' rank (8)")


# The flags that give the tower something to see: only they put it in the plan. The training-mode flags shape a
# tower that is there (the page's fields follow the same rule: an imported launcher's freeze keys alone add none).
INPUT_FLAGS = VISION_FLAGS[:5]


def vision_given(args, flags=VISION_FLAGS) -> list:
    return [f"--{f.replace('_', '-')}" for f in flags if getattr(args, f, None) is not None]


def _refuse(exc: FieldError):
    raise FieldError(FIELD_FLAGS.get(exc.field, exc.field), exc.value, exc.allowed) from None


def with_tower(args, arch):
    """The preset's tower on the architecture when a vision flag is given (the language model alone otherwise)."""
    given = vision_given(args)
    if not given or arch is None:
        return arch
    if not vision_given(args, INPUT_FLAGS):          # only a training-mode flag: nothing for a tower to see
        flag = given[0][2:].replace("-", "_")
        raise FieldError(flag, getattr(args, flag), "with an image flag (" +
                         ", ".join(f"--{f.replace('_', '-')}" for f in INPUT_FLAGS) +
                         "): without one the plan is the language model alone, and has no tower to train")
    model = getattr(args, "model", None)
    tower = TOWERS.get(model or "")
    config = getattr(getattr(args, "_hub", None), "config", None) or (
        parse_config(args.config) if getattr(args, "config", None) else None)
    if tower is None and config is not None:      # a vision-language config.json: its own tower
        tower = tower_from_config(config, arch.hidden)
    if tower is None:
        raise FieldError(given[0][2:].replace("-", "_"), model or "a model without a vision tower",
                         "a --model with a vision tower (" + ", ".join(TOWERS) + ") or a vision-language "
                         "--config / --hub (" + ", ".join(VISION_MODEL_TYPES) + ")")
    changes = {}
    if args.vision_training is not None:
        changes["training"] = args.vision_training
    if args.vision_lora_rank is not None:
        changes["lora_rank"] = args.vision_lora_rank
    try:
        return replace(arch, vision=replace(tower, **changes))
    except FieldError as exc:
        _refuse(exc)


def vision_fields(args, arch, seq_len) -> dict:
    """The Workload's images and its sequence (text + image tokens), or nothing without a tower."""
    if arch is None or arch.vision is None:
        return {}
    w, h = args.image_size or (448, 448)
    try:
        images = ImageInputs(images=args.images_per_sample or 0, width=w, height=h,
                             pixel_budget=args.pixel_budget or 0, video_frames=args.video_frames or 0,
                             pan_and_scan=args.pan_and_scan == "yes")
        return {"images": images, "seq_len": lm_seq_len(arch.vision, seq_len, images)}
    except FieldError as exc:
        _refuse(exc)
