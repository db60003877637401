"""Views that vary one input: per-worker memory against the worker count, the fit on every catalogued GPU, and
the worked formula behind each ledger cell. Plain data, for the CLI's JSON and the UI's charts alike.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List

from .gpus import GPU_CATALOG
from .model_states import model_states
from .peak import stage_peak, step_shape
from .tables import PARTITIONED

SCALING_WORKERS = tuple(2**k for k in range(13))   # 1 .. 4096, the UI's log axis


def scaling(scenario, workers=SCALING_WORKERS) -> Dict[str, list]:
    """Per-worker persistent bytes per stage as the worker count varies (the shard group follows the workers)."""
    rows = {"workers": list(workers)}
    for stage in range(4):
        rows[f"stage_{stage}"] = []
    for n in workers:
        report = model_states(replace(scenario, workers=n, shard_group=None))
        for r in report.stages:
            rows[f"stage_{r.stage}"].append(r.per_worker_total)
    return rows


def fits_on(scenario, workload, report=None) -> List[dict]:
    """For each catalogued GPU: its capacity and, per stage, the peak and whether it fits."""
    report = report or model_states(scenario)
    shape = step_shape(scenario, workload)
    rows = []
    for key, (label, capacity, _) in GPU_CATALOG.items():
        on_gpu = replace(workload, gpu=key, gpu_memory=None)
        stage_peaks = [stage_peak(scenario, on_gpu, r, shape) for r in report.stages]
        rows.append({"gpu": key, "name": label, "capacity_bytes": capacity,
                     "fits": {str(p.stage): p.fits for p in stage_peaks},
                     "peak_bytes": {str(p.stage): p.peak_bytes for p in stage_peaks}})
    return rows


def ledger_cells(report) -> List[dict]:
    """Every (entry, stage) cell with the numbers of its formula: elements x bits / 8 / divisor = bytes."""
    s = report.scenario
    cells = []
    for i, entry in enumerate(report.ledger):
        elements = entry.elements(s.params)
        for r in report.stages:
            divisor = s.group if entry.category in PARTITIONED[r.stage] else 1
            cells.append({"entry": entry.name, "category": entry.category, "stage": r.stage, "dtype": entry.dtype,
                          "params": s.params, "elements": elements, "bits": entry.bits, "divisor": divisor,
                          "bytes": r.per_worker_by_entry[i], "location": r.entry_location[i]})
    return cells

