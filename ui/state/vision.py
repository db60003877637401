"""The page's vision fields (issue 37), kept apart from ui/state/fields.py: images per sample and their resolution, a
pixel budget, a video's frames, Gemma 3's pan-and-scan and the tower's training mode. A vision-language preset's tower
joins the plan when an image field differs from its default, as an image flag does on the CLI (cli/vision.py); the
sequence field is the text, the language model's sequence grows by the images' tokens (lm_seq_len)."""

from __future__ import annotations

from dataclasses import replace

from zerocalc.model.vision import TOWERS, TRAINING
from zerocalc.model.vision_tokens import INPUT_LIMITS, ImageInputs
from zerocalc.scenario import FieldError
from zerocalc.step.vision_activations import lm_seq_len

VISION_FIELDS = ("images_per_sample", "image_width", "image_height", "pixel_budget", "video_frames", "pan_and_scan",
                 "vision_training", "vision_lora_rank")
# ImageInputs' and VisionTower's fields -> the page's (a refusal names the field the page shows)
_NAMES = {"images": "images_per_sample", "width": "image_width", "height": "image_height", "lora_rank":
          "vision_lora_rank"}


def vision_fields(field) -> tuple:
    """The fields, built with ui.state.fields's Field."""
    lim = INPUT_LIMITS
    return (field("images_per_sample", "int", 0, (), *lim["images"]),
            field("image_width", "int", 448, (), *lim["width"]), field("image_height", "int", 448, (), *lim["height"]),
            field("pixel_budget", "count", 0, (), *lim["pixel_budget"]),
            field("video_frames", "int", 0, (), *lim["video_frames"]), field("pan_and_scan", "bool", False),
            field("vision_training", "choice", "follow", TRAINING), field("vision_lora_rank", "int", 8, (), 1, 4096))


# The fields that give the tower something to see: only they put it in the plan, as on the CLI (cli/vision.py
# INPUT_FLAGS); the training mode (an import's freeze keys write it) shapes a tower that is there.
VISION_INPUTS = VISION_FIELDS[:6]


def _given(state: dict, defaults: dict) -> bool:
    return any(state.get(n, defaults[n]) != defaults[n] for n in VISION_INPUTS)


def _renamed(exc: FieldError) -> FieldError:
    return FieldError(_NAMES.get(exc.field, exc.field), exc.value, exc.allowed)


def vision_tower(state: dict, arch, defaults: dict):
    """The architecture with the preset's tower when a vision field is set (unchanged otherwise)."""
    tower = TOWERS.get(state.get("model"))
    if arch is None or not _given(state, defaults):
        return arch
    if tower is None:
        name = next(n for n in VISION_FIELDS if state.get(n, defaults[n]) != defaults[n])
        raise FieldError(name, state[name], "its default unless the model has a vision tower: " + ", ".join(TOWERS))
    try:
        return replace(arch, vision=replace(tower, training=state["vision_training"],
                                            lora_rank=state["vision_lora_rank"]))
    except FieldError as exc:
        raise _renamed(exc) from None


def vision_workload(state: dict, arch) -> dict:
    """The Workload's images and sequence (the text grown by the images' tokens)."""
    if arch is None or arch.vision is None:
        return {"seq_len": state["seq_len"]}
    try:
        images = ImageInputs(images=state["images_per_sample"], width=state["image_width"],
                             height=state["image_height"], pixel_budget=state["pixel_budget"],
                             video_frames=state["video_frames"], pan_and_scan=bool(state["pan_and_scan"]))
        return {"images": images, "seq_len": lm_seq_len(arch.vision, state["seq_len"], images)}
    except FieldError as exc:
        raise _renamed(exc) from None
