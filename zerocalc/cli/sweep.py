"""--sweep FIELD: every ZeRO stage's peak along one input (answers/sweep), as a table and as JSON, with the
checked stage's edge: what the page's sweep chart draws, for a script."""

from __future__ import annotations

from ..answers.sweep import sweep, sweep_sentence
from ..scenario import FieldError
from ..units import format_bytes
from .advice import default_stage


def sweep_for(args, scenario, workload):
    """The sweep asked for (None when not asked, or without an architecture)."""
    if getattr(args, "sweep", None) is None or workload is None:
        return None
    try:
        return sweep(scenario, workload, args.sweep,
                     default_stage(scenario) if args.check_stage is None else args.check_stage)
    except FieldError as exc:          # the LoRA rank without adapters: named as --sweep
        raise FieldError("sweep", exc.value, exc.allowed) from None


def sweep_text(result, units: str) -> str:
    if not result:
        return ""
    lines = ["", f"Peak against {result['label']} (each point the whole plan with that value; "
                 f"capacity {format_bytes(result['capacity_bytes'], units)}):"]
    for p in result["points"]:
        cells = "  ".join(f"ZeRO-{s} {format_bytes(b, units):>10}{'' if ok else ' ✗'}"
                          for s, (b, ok) in enumerate(zip(p["peak_bytes"], p["fits"])))
        mark = "  (as set)" if p["value"] == result["current"] else ""
        lines.append(f"  {p['value']:>12,}  {cells}{mark}")
    lines.append("  " + sweep_sentence(result))
    return "\n".join(lines) + "\n"
