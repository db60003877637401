"""The ledger's verdict cases (issue 31): published runs whose outcome is reported, out of memory or ran, against
zerocalc's verdict for the same plan.

The cases live in validation/verdicts.json, each with zerocalc's arguments (`argv`, as for `python -m zerocalc`),
the ZeRO stage the run used and the outcome the source reports ("oom" or "ran"), quoted with its address. A case
runs through the same parser and report as the measured cases (tools/validation_ledger.py zerocalc_report) and is
read at the report's own verdict for that stage: `fits` of its worst rank, the device figure (CUDA context and
NCCL's buffers included) against the capacity PyTorch can use on the card, the one verdict every surface shows.
Beside it, the high end of the report's band for that stage (zerocalc.answers.ranges): a "fits" whose band reaches
past the card reads "may not fit".

The dangerous disagreement is a reported out-of-memory run that zerocalc says fits; the summary counts those
apart and lists every disagreement.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERDICTS = ROOT / "validation" / "verdicts.json"
OUTCOMES = ("oom", "ran")


def load_verdicts(path: Path = VERDICTS) -> list:
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f)["cases"]


def evaluate_verdict(case: dict) -> dict:
    """zerocalc's verdict for the case's plan at its stage, and whether it agrees with the reported outcome."""
    from tools.validation_ledger import zerocalc_report
    if case["outcome"] not in OUTCOMES:
        raise ValueError(f"{case['id']}: outcome {case['outcome']!r} is not one of {OUTCOMES}")
    scenario, workload, report = zerocalc_report(case["argv"])
    stage = case["stage"]
    row = report["peak"][stage]
    fits = bool(row["fits"])
    out = {"fits": fits, "peak_bytes": row["peak_bytes"], "capacity_bytes": row["capacity_bytes"],
           "phase": row["peak_phase"], "rank": row["rank"],
           "agrees": fits == (case["outcome"] == "ran"),
           "dangerous": fits and case["outcome"] == "oom"}
    from zerocalc.answers.ranges import ranges
    band = ranges(scenario, workload).band(stage)
    out["band_bytes"] = [band.low_bytes, band.high_bytes]
    out["band_fits"] = band.high_bytes <= row["capacity_bytes"]
    return out


def summarise_verdicts(rows: list) -> dict:
    """How many verdicts agree with the reported outcomes, the dangerous disagreements, every disagreement."""
    agree = [r for r in rows if r["result"]["agrees"]]
    return {"cases": len(rows), "expressed": len(rows),
            "oom": sum(r["outcome"] == "oom" for r in rows), "ran": sum(r["outcome"] == "ran" for r in rows),
            "agree": len(agree), "agree_share": len(agree) / len(rows) if rows else None,
            "dangerous": [r["id"] for r in rows if r["result"]["dangerous"]],
            "disagree": [r["id"] for r in rows if not r["result"]["agrees"]]}


def verdict_ledger(cases: list) -> dict:
    rows = [{**case, "result": evaluate_verdict(case)} for case in cases]
    return {"summary": summarise_verdicts(rows), "cases": rows}


def render_verdicts(doc: dict) -> list:
    """The markdown section's lines (empty without verdict cases)."""
    from tools.validation_markdown import cell, command, gib, quoted_case, table_row
    s, rows = doc["summary"], doc["cases"]
    if not rows:
        return []
    lines = ["## Out of memory or ran: zerocalc's verdict against reported outcomes", "",
             f"Cases in `validation/verdicts.json` (tools/validation_verdicts.py): a reported outcome against the "
             f"report's own verdict for the plan at the run's stage (its device figure against the capacity "
             f"PyTorch can use); the band's high end beside it.", "",
             f"- **{s['expressed']} reported outcomes** ({s['oom']} out of memory, {s['ran']} ran): zerocalc's "
             f"verdict agrees on {s['agree']} ({s['agree_share']:.0%})",
             f"- **reported out of memory where zerocalc says it fits** (the unsafe side): "
             f"{', '.join(s['dangerous']) or 'none'}",
             f"- every disagreement: {', '.join(s['disagree']) or 'none'}", "",
             "| id | source | GPUs | reported | zerocalc | peak | capacity | band's high end | agrees |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        res, src = r["result"], r["source"]
        band = gib(res["band_bytes"][1]) if "band_bytes" in res else "-"
        lines.append(table_row(r["id"], f"[{cell(src.get('title') or src['url'])}]({src['url']})",
                               f"{r['gpus']} x {cell(r['gpu'])}", r["outcome"],
                               "fits" if res["fits"] else "does not fit", gib(res["peak_bytes"]),
                               gib(res["capacity_bytes"]), band, "yes" if res["agrees"] else "**no**"))
    lines += ["", "Commands and assumptions:", ""]
    for r in rows:
        lines += quoted_case(r, "", command(r["argv"]))
    return lines + [""]
