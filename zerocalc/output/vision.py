"""A vision-language plan's own rows (issue 37), as plain data and as text: the tower, projector and cross-attention
extras (parameters, training mode), one sample's images through the family's token rule, the language model's
sequence (text + image tokens), the tower's saved activations per micro-batch, and the answers: most images per
sample, largest pixel budget per image, per ZeRO stage (keyed "0".."3", as the solvers' answers are)."""

from __future__ import annotations

from typing import Optional

from ..answers.vision import max_images, max_pixel_budget, pixel_step
from ..model.vision import resolved, tower_counts
from ..parallel.ranks import layout_report
from ..units import format_bytes


def vision_dict(scenario, workload) -> Optional[dict]:
    """The plan's vision rows, or None for a language model alone."""
    t = workload.arch.vision if workload is not None else None
    if t is None:
        return None
    t = resolved(t, workload.finetune)           # "follow" as the fine-tuning resolves it
    x, v = workload.images, workload.vision_tokens
    first = layout_report(scenario, workload).ranks[0].shape.act       # the first stage's: the tower runs there
    terms = {k[len("vision: "):]: n for k, n in first.embed.items() if k.startswith("vision: ")}
    return {"family": t.projector, "training": t.training, "params": tower_counts(t),
            "images_per_sample": x.images, "image_size": [x.width, x.height], "pixel_budget": x.pixel_budget,
            "video_frames": x.video_frames, "pan_and_scan": x.pan_and_scan,
            "tower_passes": v.passes, "tower_tokens": v.tower_tokens, "longest_pass_tokens": v.longest_pass,
            "image_tokens": v.text_tokens, "cross_attention_tokens": v.cross_tokens,
            "seq_len": workload.seq_len, "text_tokens": workload.seq_len - v.text_tokens,
            "activation_terms": terms, "activation_bytes": sum(terms.values()),
            "pixel_step": pixel_step(workload),
            "max_images_per_sample": {str(s): n for s, n in max_images(scenario, workload).items()},
            "max_pixel_budget": {str(s): n for s, n in max_pixel_budget(scenario, workload).items()}}


def vision_text(d: Optional[dict], units: str = "decimal") -> str:
    if d is None:
        return ""
    unit = "GB" if units == "decimal" else "GiB" if units == "binary" else units
    p = d["params"]
    lines = [f"\nVision ({d['family']}, tower {d['training']}): tower {p['tower']:,} + projector {p['projector']:,}"
             + (f" + cross-attention {p['cross_attention']:,}" if p["cross_attention"] else "")
             + (f" + adapters {p['adapters']:,}" if p["adapters"] else "") + " parameters",
             f"  per sample: {d['images_per_sample']} image(s) of {d['image_size'][0]}x{d['image_size'][1]} px"
             + (f", budget {d['pixel_budget']:,} px" if d["pixel_budget"] else "")
             + (f", a video of {d['video_frames']} frames" if d["video_frames"] else "")
             + f" -> {d['tower_passes']} tower pass(es), {d['tower_tokens']:,} tower tokens, {d['image_tokens']:,}"
             f" tokens in the language model's sequence of {d['seq_len']:,} ({d['text_tokens']:,} text)"
             + (f"; cross-attention over {d['cross_attention_tokens']:,}" if d["cross_attention_tokens"] else ""),
             f"  vision activations per micro-batch: {format_bytes(d['activation_bytes'], unit)} (in the first "
             "stage's activations above)"]
    lines += [f"  stage {s}: {answer_words(d, s)}" for s in range(4)]
    return "\n".join(lines) + "\n"


def answer_words(d: dict, stage: int) -> str:
    """One stage's vision answers in words, as the CLI's text and the page's sentences say them."""
    n, b = d["max_images_per_sample"][str(stage)], d["max_pixel_budget"][str(stage)]
    images = "not even the text alone fits" if n is None else f"most images per sample that fit: {n:,}"
    budget = "" if b is None else f"; largest pixel budget per image: {b:,} px" if b else \
        "; not even the smallest pixel budget fits"
    return images + budget
