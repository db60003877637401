"""The validation ledger: zerocalc against peak memories measured on real GPUs and published (issue 20).

    python tools/validation_ledger.py            # print the summary
    python tools/validation_ledger.py --write    # regenerate docs/validation.md and docs/validation.json
    python tools/validation_ledger.py --check    # exit 1, with a diff, when the committed files are stale

The cases live in validation/cases.json. A case either gives zerocalc's arguments (`argv`, as for
`python -m zerocalc`), the ZeRO stage the run used and the rank to read, or names what zerocalc lacks to express it
(`missing`). Each expressible case runs in-process through the CLI's own parser and inputs (zerocalc.cli.main) and
the report it prints with --json (zerocalc.output.report.report_dict; the solvers and fits-on table are left out:
no figure here reads them). Its figure is compared like with like:

- max_memory_allocated: the live tensors, the peak without the "allocator reserve", the parts outside the
  allocator ("CUDA context", "NCCL buffers") and the smaller backward moment under full recompute
  (zerocalc.step.peak.phase_figures);
- max_memory_reserved: tensors + the allocator reserve, and the band of the reserve assumption
  (zerocalc.answers.ranges) from its low to its high end; the error is measured to the band;
- device (nvidia-smi / nvml): the whole peak, CUDA context and NCCL's buffers included.

Each is the largest over the phases of one rank class: the last pipeline stage where the source measured there
(Megatron logs rank world_size - 1), else the busiest rank. The error is zerocalc / measured - 1, signed, of the
point estimate (what a user sees): the headline, the median, the worst and "within 10%" count it. A reserved
figure's error to the band of the reserve assumption sits beside it. Every row says whether zerocalc reads under
the measurement (the unsafe side: the plan would be told it fits when it may not) or over; the summary lists
every under-prediction, per source.

The verdict cases (validation/verdicts.json: a reported out-of-memory or ran outcome against the report's verdict)
are tools/validation_verdicts.py's, in their own section.

An RL run (`rl_argv`: the arguments of `python -m zerocalc rl`) is read from the plan's phases on the training
processes' GPU class, at one end of the band (`rl_end`: "max", every sequence at its longest, or "typical"), in the
phase the case names or the worst one (`rl_phase`), like with like: max_memory_allocated is the phase's
trainer_allocated_bytes (the training processes' live tensors: no engine, no CUDA context, no reserve; verl logs
the actor process's torch.cuda.max_memory_allocated as perf/max_memory_allocated_gb), max_memory_reserved adds the
trainers' allocator reserve, a device reading is the phase's whole total.
Nothing here is hand-edited: the documents are what this file computes from the cases and zerocalc today.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.validation_markdown import WITHIN, pct, render_md, share, summary_lines, under_list  # noqa: E402

CASES = ROOT / "validation" / "cases.json"
DOC_MD = ROOT / "docs" / "validation.md"
DOC_JSON = ROOT / "docs" / "validation.json"
KINDS = ("max_memory_allocated", "max_memory_reserved", "device")
RESERVE, CONTEXT, WORKSPACES = "allocator reserve", "CUDA context", "library workspaces"


def load_cases(path: Path = CASES) -> list:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["cases"]


def _resolve(argv: list) -> list:
    """The case's arguments with --config paths read from the repository root, wherever this runs from."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--config" and not os.path.isabs(out[i + 1]):
            out[i + 1] = str(ROOT / out[i + 1])
    return out


def zerocalc_report(argv: list):
    """(scenario, workload, report dict) for a case's arguments, as `python -m zerocalc ... --json` builds them."""
    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.output.report import report_dict
    from zerocalc.parallel.ranks import report_for
    args = build_parser().parse_args(_resolve(argv))
    scenario, _arch, workload, _imported = _inputs(args)
    if workload is None:
        raise ValueError("the case names no model: zerocalc gives no peak without one")
    report = report_for(scenario, workload)
    return scenario, workload, report_dict(report, None, layouts=False, answers=False)


def phase_figures(parts: dict) -> dict:
    """One phase's parts -> its tensors, tensors + reserve, and total (the core's three numbers, peak.phase_figures)."""
    from zerocalc.step.peak import phase_figures as figures
    f = figures(parts)
    return {"max_memory_allocated": f["allocated_bytes"], "max_memory_reserved": f["reserved_bytes"],
            "device": f["device_bytes"]}


def rank_figure(peak_row: dict, kind: str) -> tuple:
    """(figure, phase) for one rank's peak row of one stage: the phase where this kind of figure is largest."""
    best = max(peak_row["phases"].items(), key=lambda kv: (phase_figures(kv[1])[kind], kv[0]))
    return phase_figures(best[1])[kind], best[0]


def pick_rank(report: dict, case: dict) -> tuple:
    """(rank row, how it was chosen): the last pipeline stage's rank class when the source measured there (the
    largest such class, experts included), else the busiest rank class for this kind of figure."""
    stage, kind, ranks = case["stage"], case["kind"], report["ranks"]
    if case.get("read_rank") == "last":
        last = report["layout"]["pp"] - 1
        ranks = [r for r in ranks if last in r["pp_stages"]]
        how = "last pipeline stage"
    else:
        how = "busiest rank"
    row = max(ranks, key=lambda r: rank_figure(r["peak"][stage], kind)[0])
    return row, how


def _outside(parts: dict) -> int:
    """What a phase holds outside PyTorch's allocator: its device figure beyond its reserved one."""
    f = phase_figures(parts)
    return f["device"] - f["max_memory_reserved"]


def reserve_band(scenario, workload, stage: int, tensors: int, outside: int, rank_is_worst: bool):
    """(low, high) of tensors + reserve over the allocator-reserve assumption's range, or None where the report
    gives no band for this rank (ranges answers for the worst rank of each stage)."""
    try:
        from zerocalc.answers.ranges import ASSUMPTIONS, ranges
    except ImportError:
        return None
    if "allocator_reserve" not in ASSUMPTIONS or not rank_is_worst:
        return None
    band = ranges(scenario, workload, vary=("allocator_reserve",)).band(stage)
    low, high = band.low_bytes - outside, band.high_bytes - outside
    return (min(low, tensors), max(high, tensors))


def error_to(value: int, measured: int) -> float:
    return value / measured - 1


def band_error(low: int, high: int, measured: int) -> float:
    """0 inside the band, else the error of the nearer end."""
    if low <= measured <= high:
        return 0.0
    return error_to(low if measured < low else high, measured)


def rl_phases(argv: list, end: str) -> tuple:
    """(the RL report's phases at one end of the band, the training GPU class) for `python -m zerocalc rl` argv."""
    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.cli.rl import plan_of
    from zerocalc.rl.report import rl_report
    plan, _imported, _args = plan_of(_resolve(argv), lambda rest: _inputs(build_parser().parse_args(rest)))
    report = rl_report(plan, answers=False)
    phases = report["phases"] if end == "max" else report.get("typical_phases", report["phases"])
    return phases, "every GPU" if report["placement"] == "colocated" else "training GPU"


def rl_figures(phase: dict) -> dict:
    tensors = phase["trainer_allocated_bytes"]
    reserve = sum(v for k, v in phase["parts"].items() if k.endswith(RESERVE) and not k.startswith("engine"))
    return {"max_memory_allocated": tensors, "max_memory_reserved": tensors + reserve, "device": phase["total_bytes"]}


def evaluate_rl(case: dict) -> dict:
    phases, gpu = rl_phases(case["rl_argv"], case.get("rl_end", "max"))
    kind, measured = case["kind"], case["measured_bytes"]
    mine = [p for p in phases if p["gpu"] == gpu]
    if case.get("rl_phase", "worst") == "worst":
        phase = max(mine, key=lambda p: (rl_figures(p)[kind], p["name"]))
    else:
        phase = next(p for p in mine if p["name"] == case["rl_phase"])
    figure = rl_figures(phase)[kind]
    out = {"expressed": True, "rank": gpu, "rank_rule": f"{case.get('rl_end', 'max')} end of the band",
           "phase": phase["name"], "zerocalc_bytes": figure, "parts": dict(phase["parts"]),
           "point_error": error_to(figure, measured)}
    return _headline(out)


def side(point_error: float) -> str:
    """'under' (zerocalc below the measurement: the unsafe side), 'over', or 'exact'."""
    return "under" if point_error < 0 else "over" if point_error > 0 else "exact"


def _headline(out: dict) -> dict:
    """The row's headline: the point error (what a user sees), and which side of the measurement it falls."""
    out["error"] = out["point_error"]
    out["side"] = side(out["point_error"])
    return out


def evaluate(case: dict) -> dict:
    """A case's result: zerocalc's figure like with like, the rank read, and the signed error."""
    if "rl_argv" in case:
        return evaluate_rl(case)
    if "argv" not in case:
        return {"expressed": False}
    scenario, workload, report = zerocalc_report(case["argv"])
    stage, kind, measured = case["stage"], case["kind"], case["measured_bytes"]
    row, how = pick_rank(report, case)
    peak = row["peak"][stage]
    figure, phase = rank_figure(peak, kind)
    parts = peak["phases"][phase]
    if RESERVE not in parts or CONTEXT not in parts:    # renamed in the report: say so rather than count it as tensors
        raise KeyError(f"{case['id']}: the report's phase has no {RESERVE!r} or {CONTEXT!r} part: {sorted(parts)}")
    out = {"expressed": True, "rank": row["name"], "rank_rule": how, "phase": phase, "zerocalc_bytes": figure,
           "parts": dict(parts), "point_error": error_to(figure, measured)}
    _headline(out)
    if case.get("steady_bytes") and parts.get("model states"):
        # what stays allocated between steps (Megatron logs it too) against zerocalc's persistent part, the model
        # states and the library workspaces (taken once per process and kept): splits the error into what persists
        # and the step's transients
        steady = parts["model states"] + parts.get(WORKSPACES, 0)
        out["steady_bytes"] = steady
        out["steady_error"] = error_to(steady, case["steady_bytes"])
        out["transient_error"] = error_to(figure - steady if kind == "max_memory_allocated" else
                                          figure - steady - parts.get(RESERVE, 0)
                                          - (_outside(parts) if kind == "device" else 0),
                                          measured - case["steady_bytes"])
    if kind == "max_memory_reserved":
        worst = report["peak"][stage]["rank"] == row["name"]
        band = reserve_band(scenario, workload, stage, figure - parts.get(RESERVE, 0), _outside(parts), worst)
        if band is not None:
            out["band_bytes"] = list(band)
            out["band_error"] = band_error(band[0], band[1], measured)
    return out


def band_or_point(result: dict) -> float:
    """The error to the reserve band where the row has one, else the point error (the band column's figure)."""
    return result.get("band_error", result["point_error"])


def summarise(rows: list) -> dict:
    """Of the expressed rows: the point error's median, worst and share within 10% (the headline), the same of the
    band column beside it, and every under-prediction (id, point error), worst first."""
    done = [r for r in rows if r["result"]["expressed"]]
    errors = [r["result"]["point_error"] for r in done]
    bands = [band_or_point(r["result"]) for r in done]
    out = {"cases": len(rows), "expressed": len(done), "median_error": None, "worst_error": None,
           "worst_case": None, "within_10_percent": None, "median_band_error": None,
           "within_10_percent_band": None, "under": [], "over": 0}
    if done:
        worst = max(done, key=lambda r: (abs(r["result"]["point_error"]), r["id"]))
        out.update(median_error=statistics.median(errors), worst_error=worst["result"]["point_error"],
                   worst_case=worst["id"], within_10_percent=sum(abs(e) <= WITHIN for e in errors) / len(errors),
                   median_band_error=statistics.median(bands),
                   within_10_percent_band=sum(abs(e) <= WITHIN for e in bands) / len(bands),
                   under=[[r["id"], r["result"]["point_error"]] for r in
                          sorted(done, key=lambda r: (r["result"]["point_error"], r["id"]))
                          if r["result"]["side"] == "under"],
                   over=sum(r["result"]["side"] == "over" for r in done))
    return out


def ledger(cases: list) -> dict:
    rows = [{**case, "result": evaluate(case)} for case in cases]
    summary = summarise(rows)
    summary["sources"] = {name: summarise([r for r in rows if r["source_name"] == name])
                          for name in sorted({r["source_name"] for r in rows})}
    from zerocalc import __version__
    from tools.validation_verdicts import load_verdicts, verdict_ledger
    return {"about": "zerocalc against published GPU peak memories; regenerate with "
                     "`python tools/validation_ledger.py --write`",
            "zerocalc_version": __version__, "summary": summary, "cases": rows,
            "verdicts": verdict_ledger(load_verdicts())}


# ---- the documents -----------------------------------------------------------------------------------------------



def render_json(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=False) + "\n"


def documents(cases: list | None = None) -> dict:
    doc = ledger(load_cases() if cases is None else cases)
    return {DOC_MD: render_md(doc), DOC_JSON: render_json(doc)}


def check(docs: dict) -> list:
    """The differences between the committed files and a fresh run, as unified diffs (empty when equal)."""
    diffs = []
    for path, fresh in docs.items():
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if old != fresh:
            rel = path.relative_to(ROOT)
            diff = difflib.unified_diff(old.splitlines(), fresh.splitlines(), f"{rel} (committed)",
                                        f"{rel} (zerocalc now)", lineterm="", n=1)
            diffs.append("\n".join(list(diff)[:80]))
    return diffs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="regenerate docs/validation.md and docs/validation.json")
    mode.add_argument("--check", action="store_true", help="exit 1 when the committed files are stale")
    args = p.parse_args(argv)
    docs = documents()
    if args.check:
        diffs = check(docs)
        if diffs:
            print("the validation ledger is stale: run `python tools/validation_ledger.py --write`\n", file=sys.stderr)
            print("\n\n".join(diffs), file=sys.stderr)
            return 1
        print("the validation ledger matches zerocalc")
        return 0
    if args.write:
        for path, text in docs.items():
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    summary = json.loads(docs[DOC_JSON])["summary"]
    for line in summary_lines(summary):
        print(line)
    v = json.loads(docs[DOC_JSON])["verdicts"]["summary"]
    if v["expressed"]:
        print(f"verdicts: {v['agree']} of {v['expressed']} agree with the reported outcome; reported out of memory "
              f"where zerocalc says it fits: {', '.join(v['dangerous']) or 'none'}")
    for name, t in summary["sources"].items():
        print(f"  {name}: {t['expressed']}/{t['cases']} expressed, point error median {pct(t['median_error'])}, "
              f"worst {pct(t['worst_error'])} ({t['worst_case']}), within 10% {share(t['within_10_percent'])}; "
              f"under: {under_list(t['under'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
