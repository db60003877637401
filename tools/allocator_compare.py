"""The caching allocator's model (zerocalc/step/caching_allocator.py, timeline.py) against the validation ledger's
max_memory_reserved and device cases (validation/cases.json), beside the flat 5 % reserve it replaced as the
default (issue 32).

    python tools/allocator_compare.py          # the table: case, measured, zerocalc before (5 %), with the model

Each case runs through the CLI's parser like tools/validation_ledger.py; the rank class whose tensors + reserve is
largest at the case's stage is read, the phase that peaks. "before" is the flat default's figure (tensors + 5 %,
+ the memory outside the allocator for a device reading); "after" replaces the 5 % by the simulated reserve (peak
reserved - peak allocated of the replayed step, timeline.blocks_reserve).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.validation_ledger import _resolve, load_cases  # noqa: E402

GIB = 2**30


def compare(case: dict) -> dict:
    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.parallel.ranks import report_for
    from zerocalc.step.allocator import DEFAULT_PERCENT, reserve_bytes
    from zerocalc.step.peak import OUTSIDE, tensor_bytes
    from zerocalc.step.replay_pieces import pieces_of
    from zerocalc.step.timeline import blocks_reserve, plan_of
    args = build_parser().parse_args(_resolve(case["argv"]))
    scenario, _arch, workload, _imported = _inputs(args)
    report = report_for(scenario, workload)
    stage = case["stage"]
    best = None
    for view in report.ranks:
        peak = view.peaks[stage] if hasattr(view, "peaks") else None
        if peak is None:
            continue
        parts = peak.phases[peak.peak_phase]
        tensors = tensor_bytes(peak)
        before = tensors + reserve_bytes(tensors, DEFAULT_PERCENT)     # the flat default before the model
        sim = blocks_reserve(plan_of(peak, view.shape, peak.cycle_unit_bytes,
                                     pieces_of(scenario, workload, view.shape, stage)))
        after = tensors + sim["reserve"]
        context = sum(parts.get(k, 0) for k in OUTSIDE) if case["kind"] == "device" else 0
        row = (before + context, after + context, tensors, sim["reserve"])
        best = max(best, row) if best else row
    measured = case["measured_bytes"]
    return {"id": case["id"], "kind": case["kind"], "measured": measured, "before": best[0], "after": best[1],
            "tensors": best[2], "reserve": best[3]}


def main() -> int:
    rows = [compare(c) for c in load_cases() if c.get("argv") and c["kind"] in ("max_memory_reserved", "device")]
    print("| case | kind | measured GiB | before (5 %) | error | after (model) | error | simulated reserve GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        m = r["measured"]
        print(f"| {r['id']} | {r['kind']} | {m / GIB:.2f} | {r['before'] / GIB:.2f} | {r['before'] / m - 1:+.1%} | "
              f"{r['after'] / GIB:.2f} | {r['after'] / m - 1:+.1%} | {r['reserve'] / GIB:.2f} |")
    for key in ("before", "after"):
        errs = sorted(r[key] / r["measured"] - 1 for r in rows)
        within = sum(abs(e) <= 0.10 for e in errs)
        under5 = sum(e < -0.05 for e in errs)
        print(f"{key}: median {errs[len(errs) // 2]:+.1%}, within 10 %: {within}/{len(errs)}, "
              f"under by more than 5 %: {under5}, worst {min(errs):+.1%} / {max(errs):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
