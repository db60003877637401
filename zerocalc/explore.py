"""Views that vary one input: per-worker memory against the worker count, the fit on every catalogued GPU, and
the worked formula behind each ledger cell. Plain data, for the CLI's JSON and the UI's charts alike.
"""

from __future__ import annotations

from typing import Dict, List

from .gpus import GPU_CATALOG
from .model_states import StateRow, row_bytes
from .tables import PARTITIONED

SCALING_WORKERS = tuple(2**k for k in range(13))   # 1 .. 4096, the UI's log axis


def stage_operands(report, stage: int):
    """(parameters one rank holds, ZeRO divisor) behind a stage's per-worker cells: the scenario's own for pure
    data parallelism, the worst rank's under a layout."""
    ranks = getattr(report, "ranks", None)
    if ranks is None:
        return report.scenario.params, report.scenario.group
    shape = ranks[report.worst[stage]].shape
    return shape.params, shape.shard


def scaling(report, workers=SCALING_WORKERS) -> Dict[str, list]:
    """Per-worker persistent bytes per stage as the data-parallel degree varies (the shard group follows it), for
    the rank holding the most parameters."""
    ranks = getattr(report, "ranks", None)
    s = report.scenario
    params, cp = (s.params, 1) if ranks is None else (max(v.shape.params for v in ranks),
                                                      report.workload.layout.cp)
    rows = {"workers": list(workers)}
    for stage in range(4):
        rows[f"stage_{stage}"] = []
    elements = [e.elements(params) for e in report.ledger]
    for n in workers:
        state_rows = [StateRow(e, k, n * cp) for e, k in zip(report.ledger, elements)]
        for stage in range(4):
            rows[f"stage_{stage}"].append(sum(row_bytes(r, stage) for r in state_rows))
    return rows


def fits_on(report) -> List[dict]:
    """For each catalogued GPU: its capacity and, per stage, the worst rank's peak and whether it fits (a peak
    does not depend on the capacity it is checked against)."""
    rows = []
    for key, (label, capacity, _) in GPU_CATALOG.items():
        rows.append({"gpu": key, "name": label, "capacity_bytes": capacity,
                     "fits": {str(p.stage): p.peak_bytes <= capacity for p in report.peaks},
                     "peak_bytes": {str(p.stage): p.peak_bytes for p in report.peaks}})
    return rows


def ledger_cells(report) -> List[dict]:
    """Every (entry, stage) cell with the numbers of its formula: elements x bits / 8 / divisor = bytes."""
    cells = []
    for i, entry in enumerate(report.ledger):
        for r in report.stages:
            params, group = stage_operands(report, r.stage)
            divisor = group if entry.category in PARTITIONED[r.stage] else 1
            cells.append({"entry": entry.name, "category": entry.category, "stage": r.stage, "dtype": entry.dtype,
                          "params": params, "elements": entry.elements(params), "bits": entry.bits,
                          "divisor": divisor, "bytes": r.per_worker_by_entry[i], "location": r.entry_location[i]})
    return cells
