"""What would make it fit, on the command line: the same advice as the page (answers/combined.advice: single
changes, else combinations, else the closest), as sentences and as JSON whose changes are this CLI's own flags,
so a script or a CI job can apply one and ask again."""

from __future__ import annotations

from typing import List, Optional

from ..answers.combined import advice
from ..answers.fixes import apply, sentence
from ..parallel.ranks import layout_report

SKIPPED = {"gpu_memory", "shard_group"}      # None: the catalogued card's capacity, the whole group


def flag_values(fix, image_tokens: int = 0) -> List[str]:
    """The fix's changes as flags of `zerocalc` (a catalogued GPU clears a custom capacity; the shard group is
    the whole data-parallel group again; --seq-len is the text, the images' tokens are added to it)."""
    out = []
    for part in (fix.scenario, fix.workload, fix.layout):
        for name, value in part.items():
            if name in SKIPPED and value is None:
                continue
            if name == "seq_len":
                value -= image_tokens
            flag = "--" + name.replace("_", "-")
            out += [flag, ("yes" if value else "no") if isinstance(value, bool) else str(value)]
    return out


def default_stage(scenario) -> int:
    """The stage checked when --check-stage is not given: ZeRO-3 across workers, ZeRO-0 on one GPU (no shard)."""
    return 0 if scenario.workers == 1 else 3


def advice_dict(scenario, workload, stage: Optional[int], units: str = "decimal") -> dict:
    """{"stage", "fits", "fixes": [...]}: each fix's sentence, cost, whether it fits, its changes as flags, and the
    peak at every stage of the plan it gives."""
    stage = default_stage(scenario) if stage is None else stage
    fits = layout_report(scenario, workload).peaks[stage].fits
    out = []
    for fix in ([] if fits else advice(scenario, workload, stage)):
        s, w = apply(fix, scenario, workload)
        peaks = [p.peak_bytes for p in layout_report(s, w).peaks]
        out.append({"kind": fix.kind, "parts": [p.kind for p in fix.parts], "stage": fix.stage, "fits": fix.fits,
                    "flags": flag_values(fix, workload.vision_tokens.text_tokens) + ["--check-stage", str(fix.stage)],
                    "peak_bytes": fix.peak_bytes, "capacity_bytes": fix.capacity_bytes,
                    "peak_bytes_per_stage": peaks, "cost": fix.cost, "cost_note": fix.cost_note,
                    "changes_job": fix.job_change,
                    "sentence": sentence(fix, scenario, workload, units, stage)})
    return {"stage": stage, "fits": fits, "fixes": out}


def advice_text(advised: dict) -> str:
    stage = advised["stage"]
    if advised["fits"]:
        return f"\nZeRO-{stage} fits: no change needed.\n"
    fixes = advised["fixes"]
    if not fixes:
        return f"\nZeRO-{stage} does not fit, and nothing zerocalc tries changes that.\n"
    if not fixes[0]["fits"]:
        return (f"\nNothing zerocalc tries makes ZeRO-{stage} fit (one change or several together). The closest:\n"
                f"  {fixes[0]['sentence']}\n")
    head = ("no single change is enough; joined changes" if all(f["parts"] for f in fixes) else
            "one change each" if not any(f["parts"] for f in fixes) else
            "single changes, and joined ones cheaper than any single one")
    lines = [f"\nWhat would make ZeRO-{stage} fit ({head}, cheapest first):"]
    for i, fix in enumerate(fixes, 1):
        lines.append(f"  {i}. {fix['sentence']}\n     flags: {' '.join(fix['flags'])}")
    return "\n".join(lines) + "\n"
