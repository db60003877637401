"""Vision-language planning questions (issue 37): the most images per sample, and the largest pixel budget per
image, for which each ZeRO stage fits, everything else held (the text of each sample included: the language
model's sequence is the text plus the images' tokens). Each answer is a plan the same report gives a verdict for:
applied (with_images), it fits at that stage, and one more image or one more step of pixels does not.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, Optional

from ..model.vision_tokens import RULES, ImageInputs, vision_tokens
from ..parallel.ranks import layout_report
from ..scenario import FieldError
from ..step.workload import WORKLOAD_LIMITS
from .solve import STAGES, largest_true

MAX_IMAGES = 1_000        # the search's bound on images per sample


def with_images(workload, images: ImageInputs):
    """The workload with other image inputs, each sample's text held: seq_len = text + the new images' tokens."""
    tower = workload.arch.vision
    text = workload.seq_len - workload.vision_tokens.text_tokens
    return replace(workload, images=images, seq_len=text + vision_tokens(tower, images).text_tokens)


def _fitting(scenario, workload, candidates) -> Dict[int, int]:
    """Per stage, the largest k in [lo, hi] whose plan candidates(k) fits (lo - 1: none), each plan reported once."""
    make, lo, hi = candidates
    cache: Dict[int, tuple] = {}

    def peaks(k: int):
        if k not in cache:
            try:
                w = make(k)
            except FieldError:            # beyond what the plan allows (the sequence limit, an aspect ratio)
                cache[k] = None
            else:
                cache[k] = None if w.seq_len > WORKLOAD_LIMITS["seq_len"][1] else layout_report(scenario, w).peaks
        return cache[k]
    return {s: largest_true(lambda k, s=s: peaks(k) is not None and peaks(k)[s].fits, lo, hi) for s in STAGES}


def max_images(scenario, workload) -> Dict[int, int]:
    """Most images per sample (at the workload's resolution and budget) for which each stage fits; None: not even
    the text alone."""
    x = workload.images
    found = _fitting(scenario, workload, (lambda n: with_images(workload, replace(x, images=n)), 0, MAX_IMAGES))
    return {s: n if n >= 0 else None for s, n in found.items()}


def pixel_step(workload) -> Optional[int]:
    """The pixel budget's unit for the family: Qwen's (patch x merge)^2 (smart_resize's factor squared), InternVL's
    448 x 448 tile; None where the rule has no budget (Gemma 3's fixed crops, Llama 3.2 Vision's fixed tiles)."""
    t = workload.arch.vision
    if t is None or t.projector in ("gemma3", "mllama"):
        return None
    if t.projector == "internvl":
        return RULES["internvl"]["size"] ** 2
    return (t.patch * t.merge) ** 2


def max_pixel_budget(scenario, workload) -> Dict[int, Optional[int]]:
    """Largest pixel budget per image (a multiple of pixel_step, at most what the image itself or the checkpoint
    asks) for which each stage fits, the images per sample held; 0: not even the smallest; None: no budget."""
    step = pixel_step(workload)
    x = workload.images
    if step is None or not x.images:              # a video's frames follow the video processor's own bounds
        return {s: None for s in STAGES}
    rule = RULES[workload.arch.vision.projector]
    if workload.arch.vision.projector == "internvl":
        lo, hi = 1, rule["max_tiles"]
    else:            # from min_pixels up to where the image is no longer scaled down (or the checkpoint's maximum)
        f = workload.arch.vision.patch * workload.arch.vision.merge
        natural = max(f, round(x.height / f) * f) * max(f, round(x.width / f) * f)     # smart_resize's rounding
        lo = -(-rule["min_pixels"] // step)
        hi = max(lo, min(natural, rule["max_pixels"]) // step)
    found = _fitting(scenario, workload,
                     (lambda k: with_images(workload, replace(x, pixel_budget=k * step)), lo, hi))
    return {s: k * step if k >= lo else 0 for s, k in found.items()}
