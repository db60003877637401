"""The batch section of the report (issue 37, step/batches.py): the typical step's and the worst step's peaks per
ZeRO stage, which one the verdict judges, and the solvers' answers in the batch's own words: the longest sample a
padded micro-batch may hold, the largest token budget of a packed row."""

from __future__ import annotations

from typing import Optional

from ..answers.solve import max_seq_len, seq_len_step
from ..parallel.ranks import peaks_at_seq_len
from ..step.batches import steps

SOLVER_KEYS = {"padded": "max_longest_sample", "packed": "max_token_budget"}


def worst_step_words(workload) -> Optional[str]:
    """What the verdict names as the step that decides it (None for a fixed batch: there is one step)."""
    return None if workload.batch_mode == "fixed" else steps(workload)[1].words


def batch_dict(report, answers: bool = True, max_seq: Optional[dict] = None) -> Optional[dict]:
    """The batch section, or None for a fixed batch (the report before issue 37, unchanged). `max_seq`: solve's
    max_seq_len when the caller has it already (the longest sequence is the costliest search)."""
    w = report.workload
    if w.batch_mode == "fixed":
        return None
    typical, worst = steps(w)
    unit = seq_len_step(w)
    seq = min(w.seq_len, -(-typical.seq_len // unit) * unit)    # the layout's sequence multiple, rounded up
    typical_peaks = report.peaks if seq == w.seq_len else peaks_at_seq_len(report, seq)

    def step_row(step, seq_len, peaks) -> dict:
        return {"micro_batch": step.micro_batch, "seq_len": seq_len, "tokens": step.micro_batch * seq_len,
                "words": step.words, "peak_bytes": [p.peak_bytes for p in peaks], "fits": [p.fits for p in peaks]}

    out = {"mode": w.batch_mode,
           "lengths": [{"percentile": p, "tokens": t} for p, t in w.batch_lengths],
           "typical": step_row(typical, seq, typical_peaks),
           "worst": step_row(worst, w.seq_len, report.peaks),
           "decides": worst.words}
    if answers:
        # padded: the longest sample at this micro-batch; packed: the largest row budget at this many rows
        found = max_seq if max_seq is not None else max_seq_len(report.scenario, w)
        out["solve"] = {SOLVER_KEYS[w.batch_mode]: {str(k): v for k, v in found.items()}}
    return out


def batch_lines(section: Optional[dict], format_bytes, unit) -> list:
    """The text report's lines for the section."""
    if not section:
        return []
    lines = ["", f"Batch ({section['mode']}): the verdict judges {section['decides']}"]
    for name in ("typical", "worst"):
        row = section[name]
        peaks = ", ".join(f"ZeRO-{s} {format_bytes(b, unit)}" for s, b in enumerate(row["peak_bytes"]))
        lines.append(f"  {name}: {row['micro_batch']} x {row['seq_len']:,} tokens: {peaks}")
    for key, per_stage in section.get("solve", {}).items():
        words = "longest sample that fits" if key == "max_longest_sample" else "largest token budget per row"
        lines.append(f"  {words}: " + ", ".join(f"ZeRO-{s} {v:,}" for s, v in per_stage.items()))
    return lines
