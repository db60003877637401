"""Views that vary one input: per-worker memory against the worker count, the fit on every catalogued GPU, and
the worked formula behind each ledger cell. Plain data, for the CLI's JSON and the UI's charts alike.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List

from ..gpus import GPU_CATALOG
from ..states.groups import state_rows as group_rows
from ..states.zero import StateRow, row_bytes
from ..step.allocator import replays
from ..step.peak import peak_on_gpu
from ..step.shape import param_groups
from ..tables import PARTITIONED

SCALING_WORKERS = tuple(2**k for k in range(13))   # 1 .. 4096, the UI's log axis


def stage_rows(report, stage: int):
    """The ledger rows behind a stage's per-worker cells: the scenario's own for pure data parallelism, the
    worst rank's (one row per entry and parameter group) under a layout."""
    ranks = getattr(report, "ranks", None)
    if ranks is None:
        s = report.scenario
        return tuple(StateRow(e, e.elements(s.params), s.group) for e in report.ledger)
    return ranks[report.worst[stage]].rows


def scaling(report, workers=SCALING_WORKERS) -> Dict[str, list]:
    """Per-worker persistent bytes per stage as the data-parallel degree varies (the shard group follows it), for
    the rank holding the most parameters."""
    ranks = getattr(report, "ranks", None)
    s = report.scenario
    rows = {"workers": list(workers)}
    for stage in range(4):
        rows[f"stage_{stage}"] = []
    view = None if ranks is None else max(ranks, key=lambda v: v.shape.params)
    for n in workers:
        if view is None:
            state_rows = [StateRow(e, e.elements(s.params), n) for e in report.ledger]
        else:
            scaled = replace(s, workers=n, shard_group=None)
            shape = view.shape._replace(groups=param_groups(scaled, report.workload, view.rank))
            state_rows = group_rows(scaled, report.ledger, shape, report.workload.finetune)
        for stage in range(4):
            rows[f"stage_{stage}"].append(sum(row_bytes(r, stage) for r in state_rows))
    return rows


NEAR_CARD = 1 << 30     # under the allocator's model, a card this close to a peak is checked with its own report


def fits_on(report) -> List[dict]:
    """For each catalogued GPU: its capacity and, per stage, the worst rank's peak and whether it fits (a peak
    does not depend on the capacity it is checked against; only its library workspaces and NCCL buffers depend on
    the card). Under the allocator's model the card's workspaces also move the replayed reserve (a few MiB): a
    card within NEAR_CARD of a stage's peak gets its own report, so a "fits" here is the card's own verdict."""
    from ..parallel.ranks import layout_report
    w = report.workload
    modelled = w is not None and replays(w)
    rows = []
    for key, gpu in GPU_CATALOG.items():
        capacity = gpu.usable_bytes
        peak = {str(p.stage): p.peak_bytes if w is None else peak_on_gpu(p, report.scenario, w, key)
                for p in report.peaks}
        if modelled and any(abs(b - capacity) < NEAR_CARD for b in peak.values()):
            own = layout_report(report.scenario, replace(w, gpu=key, gpu_memory=None)).peaks
            peak = {str(p.stage): p.peak_bytes for p in own}
        rows.append({"gpu": key, "name": gpu.name, "capacity_bytes": capacity, "nvidia_smi_bytes": gpu.smi_bytes,
                     "estimated": gpu.estimated,
                     "fits": {stage: b <= capacity for stage, b in peak.items()},
                     "peak_bytes": peak})
    return rows


def ledger_cells(report) -> List[dict]:
    """Every (entry, stage) cell with the numbers of its formula: elements x bits / 8 / divisor = bytes. Entry by
    entry, each entry's four stages together."""
    per_stage = []
    for r in report.stages:
        cells = []
        for i, row in enumerate(stage_rows(report, r.stage)):
            entry = row.entry
            divisor = row.divisor if entry.category in PARTITIONED[r.stage] else 1
            cells.append({"entry": entry.name, "category": entry.category, "stage": r.stage, "dtype": entry.dtype,
                          # a shaped optimizer's state follows shapes, not a parameter count
                          "params": None if entry.state is not None else row.elements * entry.den // entry.num,
                          "elements": row.elements,
                          "bits": entry.bits, "divisor": divisor, "bytes": r.per_worker_by_entry[i],
                          "location": r.entry_location[i]})
        per_stage.append(cells)
    return [cells[i] for i in range(max(map(len, per_stage))) for cells in per_stage if i < len(cells)]
