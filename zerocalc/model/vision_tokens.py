"""Images and video become tokens by each family's rule (issue 37), read from its processor at transformers 5.24:

- Qwen2.5-VL / Qwen3-VL (models/qwen2_vl/image_processing_qwen2_vl.py smart_resize, get_number_of_image_patches):
  each side rounded to a multiple of patch x merge (28 / 32 px), the area brought within [min_pixels, max_pixels];
  the tower sees (h / patch) x (w / patch) patches (an image fills the temporal patch by repetition), the language
  model one token per merge x merge patches, between vision_start and vision_end. Video: frames grouped by the
  temporal patch (2), per-frame smart_resize (qwen2_vl/video_processing_qwen2_vl.py) or the frames-and-pixels one
  (qwen3_vl/video_processing_qwen3_vl.py smart_resize).
- Gemma 3 (gemma3/processing_gemma3.py, image_processing_gemma3.py pan_and_scan_batched): every image resized to
  896 x 896 (4096 patches of 14 px), pooled to 256 tokens between boi and eoi; pan-and-scan adds crops of an
  elongated image (ratio >= 1.2, at most 4 crops of at least 256 px), each one more 896 px image.
- InternVL (got_ocr2/image_processing_got_ocr2.py get_optimal_tiled_canvas, get_number_of_image_patches;
  internvl/processing_internvl.py): 448 px tiles on the grid of 1..max_tiles (12) tiles closest to the image's
  aspect ratio, plus a thumbnail when there is more than one; each tile 1024 patches + a class token in the tower,
  256 tokens (pixel shuffle 0.5) between <img> and </img>.
- Llama 3.2 Vision (mllama/image_processing_mllama.py get_optimal_tiled_canvas, pack_images; modeling_mllama.py):
  560 px tiles, every image padded to max_num_tiles (4) tiles of 1601 patches (with the class token; 1608 with
  the tower's padding to a multiple of 8), one <|image|> token in the text; the text's cross-attention layers
  attend to the 4 x 1601 projected patches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from ..scenario import FieldError, require_int
from .vision import VisionTower

# The checkpoints' processor settings (preprocessor_config.json) where they differ from the class defaults: Qwen2.5-VL
# min/max pixels 3136 / 12845056, Qwen3-VL size {shortest_edge 65536, longest_edge 16777216} (as transcribed in
# public code, search index ids 69393411951 and 62983406432); video: the video processors' class defaults.
RULES = MappingProxyType({
    "qwen2.5-vl": dict(min_pixels=3136, max_pixels=12845056, video_min=128 * 28 * 28, video_max=28 * 28 * 768,
                       markers=2),
    "qwen3-vl": dict(min_pixels=65536, max_pixels=16777216, video_min=128 * 32 * 32, video_max=32 * 32 * 768,
                     markers=2),
    "gemma3": dict(min_crop=256, max_crops=4, min_ratio=1.2, markers=2),
    "internvl": dict(size=448, max_tiles=12, markers=2),
    "mllama": dict(size=560, max_tiles=4, markers=1),
})
INPUT_LIMITS = {"images": (0, 10_000), "width": (1, 100_000), "height": (1, 100_000), "pixel_budget": (0, 10**10),
                "video_frames": (0, 100_000)}


@dataclass(frozen=True)
class ImageInputs:
    """What one sample carries: images of one resolution (W x H px), or a video's frames (Qwen), and a pixel budget
    (Qwen: max_pixels per image; InternVL: tiles of 448 x 448 px, at least one; 0: the checkpoint's own)."""

    images: int = 0
    width: int = 448
    height: int = 448
    pixel_budget: int = 0
    video_frames: int = 0
    pan_and_scan: bool = False        # Gemma 3

    def __post_init__(self):
        for f, (lo, hi) in INPUT_LIMITS.items():
            require_int(f, getattr(self, f), lo, hi)
        if not isinstance(self.pan_and_scan, bool):
            raise FieldError("pan_and_scan", self.pan_and_scan, "true or false")
        if max(self.width, self.height) / min(self.width, self.height) > 200:     # smart_resize refuses it
            raise FieldError("image_size", f"{self.width}x{self.height}", "an aspect ratio of at most 200")


class VisionTokens(NamedTuple):
    """One sample's images through the tower and into the language model."""
    passes: int           # sequences the tower runs (images, crops, tiles; Qwen: one per image or video)
    tower_tokens: int     # the tower's tokens over all passes (each pass at its own length, summed)
    longest_pass: int     # the longest pass (attention within one image)
    text_tokens: int      # tokens the images add to the text sequence (placeholders and markers)
    cross_tokens: int     # tokens the text's cross-attention layers attend to (Llama 3.2 Vision; 0 otherwise)


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple:
    """qwen2_vl/image_processing_qwen2_vl.py smart_resize, step for step (the same floats give the same sizes)."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _video_resize_3d(frames, height, width, temporal, factor, min_pixels, max_pixels) -> tuple:
    """qwen3_vl/video_processing_qwen3_vl.py smart_resize: the bound is on frames x pixels."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _qwen(t: VisionTower, x: ImageInputs, rule: dict) -> VisionTokens:
    factor, merge2 = t.patch * t.merge, t.merge ** 2
    max_pixels = x.pixel_budget or rule["max_pixels"]
    if x.pixel_budget and x.pixel_budget < rule["min_pixels"]:
        raise FieldError("pixel_budget", x.pixel_budget, f"0 (the checkpoint's {rule['max_pixels']:,}) or at least "
                         f"the processor's min_pixels ({rule['min_pixels']:,})")
    h, w = smart_resize(x.height, x.width, factor, rule["min_pixels"], max_pixels)
    per_image = (h // t.patch) * (w // t.patch)
    passes, tower = x.images, x.images * per_image
    longest = per_image if x.images else 0
    if x.video_frames:
        if x.video_frames < t.temporal_patch:
            raise FieldError("video_frames", x.video_frames, f"at least the temporal patch ({t.temporal_patch})")
        if t.projector == "qwen3-vl":
            vh, vw = _video_resize_3d(x.video_frames, x.height, x.width, t.temporal_patch, factor,
                                      rule["video_min"], rule["video_max"])
        else:
            vh, vw = smart_resize(x.height, x.width, factor, rule["video_min"], rule["video_max"])
        grid_t = -(-x.video_frames // t.temporal_patch)
        video = grid_t * (vh // t.patch) * (vw // t.patch)
        passes, tower, longest = passes + 1, tower + video, max(longest, video)
    text = tower // merge2 + rule["markers"] * passes
    return VisionTokens(passes, tower, longest, text, 0)


def gemma_crops(height: int, width: int, rule: dict) -> int:
    """Crops pan-and-scan adds (gemma3/image_processing_gemma3.py pan_and_scan_batched); 0 when it does not act."""
    long_side, short_side = max(width, height), min(width, height)
    if long_side / short_side < rule["min_ratio"]:
        return 0
    n = int(math.floor(long_side / short_side + 0.5))
    n = min(int(math.floor(long_side / rule["min_crop"])), n)
    n = min(rule["max_crops"], max(2, n))
    crop_w = int(math.ceil(width / (n if width >= height else 1)))
    crop_h = int(math.ceil(height / (1 if width >= height else n)))
    return 0 if min(crop_w, crop_h) < rule["min_crop"] else n


def _gemma(t: VisionTower, x: ImageInputs, rule: dict) -> VisionTokens:
    if x.pixel_budget:
        raise FieldError("pixel_budget", x.pixel_budget, "0 for Gemma 3 (every crop is 896 x 896 px; set images "
                         "per sample or pan_and_scan)")
    crops = 1 + (gemma_crops(x.height, x.width, rule) if x.pan_and_scan else 0)
    passes = x.images * crops
    per_pass = t.positions                        # (896 / 14)^2 patches, pooled merge x merge (4 x 4) to 256 tokens
    return VisionTokens(passes, passes * per_pass, per_pass if passes else 0,
                        passes * (per_pass // t.merge ** 2 + rule["markers"]), 0)


def internvl_grid(height: int, width: int, size: int, max_tiles: int) -> tuple:
    """got_ocr2 get_optimal_tiled_canvas with min 1 tile: (columns, rows) closest to the image's aspect ratio; on a
    tie, more tiles while the image covers more than half of their area."""
    grids = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1) if c * r <= max_tiles),
                   key=lambda g: g[0] * g[1])
    aspect, area, best, best_diff = width / height, width * height, (1, 1), float("inf")
    for c, r in grids:
        diff = abs(aspect - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and area > 0.5 * size * size * c * r:
            best = (c, r)
    return best


def _internvl(t: VisionTower, x: ImageInputs, rule: dict) -> VisionTokens:
    max_tiles = rule["max_tiles"] if not x.pixel_budget else x.pixel_budget // rule["size"] ** 2
    if x.pixel_budget and max_tiles < 1:
        raise FieldError("pixel_budget", x.pixel_budget, f"0 (up to {rule['max_tiles']} tiles) or at least one "
                         f"{rule['size']} x {rule['size']} px tile ({rule['size'] ** 2:,} pixels)")
    c, r = internvl_grid(x.height, x.width, rule["size"], max_tiles) if max_tiles > 1 else (1, 1)
    tiles = 1 + c * r if c * r > 1 else 1         # the thumbnail joins a grid of more than one tile
    passes = x.images * tiles
    per_pass = t.positions                        # (448 / 14)^2 patches + the class token
    return VisionTokens(passes, passes * per_pass, per_pass if passes else 0,
                        x.images * (tiles * (per_pass - 1) // t.merge ** 2 + rule["markers"]), 0)


def _mllama(t: VisionTower, x: ImageInputs, rule: dict) -> VisionTokens:
    if x.pixel_budget:
        raise FieldError("pixel_budget", x.pixel_budget, "0 for Llama 3.2 Vision (every image is padded to "
                         f"{t.tiles} tiles of {rule['size']} px; set images per sample)")
    padded = t.positions + (-t.positions) % 8     # modeling_mllama.py: patches padded to a multiple of 8
    per_image = t.tiles * padded                  # pack_images pads every image to max_num_tiles tiles
    return VisionTokens(x.images, x.images * per_image, per_image if x.images else 0, x.images * rule["markers"],
                        x.images * t.tiles * t.positions)


_RULE_FUNCTIONS = {"qwen2.5-vl": _qwen, "qwen3-vl": _qwen, "gemma3": _gemma, "internvl": _internvl,
                   "mllama": _mllama}


def vision_tokens(t: VisionTower, x: ImageInputs) -> VisionTokens:
    """One sample's images (and video) through the family's rule."""
    if x.video_frames and t.temporal_patch == 1:
        raise FieldError("video_frames", x.video_frames, "0 for this family (video frames are modelled for Qwen)")
    if x.pan_and_scan and t.projector != "gemma3":
        raise FieldError("pan_and_scan", True, "false unless the model is Gemma 3")
    return _RULE_FUNCTIONS[t.projector](t, x, RULES[t.projector])
