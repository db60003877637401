"""A report as plain data (dicts, lists, ints): what the CLI prints as JSON and the UI downloads.

Integers are bytes. Keys named in the core issue are a public interface: keep them.
"""

from __future__ import annotations

from dataclasses import asdict
from fractions import Fraction

from . import __version__
from .deepspeed_estimator import DeepSpeedView, deepspeed_view
from .explore import fits_on, ledger_cells, scaling
from .architecture import largest_layer, param_count
from .ledger import bytes_per_param
from .model_states import ModelStatesReport, model_states, workers_per_node
from .peak import peaks, step_shape
from .solve import solve
from .tables import CONVENTIONS, PARTITIONED


def _exact(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def ledger_rows(report: ModelStatesReport) -> list:
    """One row per ledger entry: bytes per parameter, and the first stage that shards it."""
    rows = []
    for entry, unique in zip(report.ledger, report.unique_by_entry):
        first = min(stage for stage, cats in PARTITIONED.items() if entry.category in cats)
        rows.append({
            "name": entry.name, "category": entry.category, "dtype": entry.dtype, "set_by": entry.source,
            "elements_per_param": _exact(Fraction(entry.num, entry.den)),
            "bytes_per_param": float(entry.bytes_per_param), "bytes_per_param_exact": _exact(entry.bytes_per_param),
            "one_copy_bytes": unique, "sharded_from_stage": first,
        })
    return rows


def stage_rows(report: ModelStatesReport) -> list:
    per_node = workers_per_node(report.scenario)
    names = [e.name for e in report.ledger]
    rows = []
    for r in report.stages:
        rows.append({
            "stage": r.stage,
            "partitioned": sorted(PARTITIONED[r.stage]),
            "per_worker_bytes": dict(r.per_worker_by_category),
            "per_worker_entry_bytes": dict(zip(names, r.per_worker_by_entry)),
            "per_worker_entry_location": dict(zip(names, r.entry_location)),
            "per_worker_total_bytes": r.per_worker_total,
            "gpu_bytes_per_worker": r.gpu_bytes,
            "cpu_bytes_per_worker": r.cpu_bytes,
            "nvme_bytes_per_worker": r.nvme_bytes,
            "cpu_bytes_per_node": r.cpu_bytes * per_node,
            "nvme_bytes_per_node": r.nvme_bytes * per_node,
            "cluster_total_bytes": r.cluster_total,
            "cluster_unique_bytes": r.unique_total,
            "cluster_redundant_bytes": r.redundant_bytes,
            "redundancy_factor": float(r.redundancy_factor),
            "communication_bytes_per_step": r.communication_bytes,
        })
    return rows


def deepspeed_dict(view: DeepSpeedView) -> dict:
    return {
        "inputs": {"params": view.params, "largest_layer_params": view.largest_layer_params,
                   "gpus_per_node": view.gpus_per_node, "nodes": view.nodes, "buffer_factor": view.buffer_factor},
        "zero2": [row._asdict() for row in view.zero2],
        "zero3": [row._asdict() for row in view.zero3],
        "differences": list(view.differences),
    }


def peak_dict(report: ModelStatesReport, workload) -> dict:
    """The peak-memory half of the report: architecture, activations, per-stage live sets, fit, solvers."""
    s, a = report.scenario, workload.arch
    shape = step_shape(s, workload)
    largest_name, largest = largest_layer(a)
    solution = solve(s, workload, report)
    return {
        "architecture": {"params": param_count(a), "largest_layer_params": largest, "largest_layer": largest_name,
                         **{k: v for k, v in asdict(a).items()}},
        "workload": {k: v for k, v in asdict(workload).items() if k != "arch"},
        "activation_bits": shape.act_bits,
        "activation_bytes_per_layer": shape.act.per_layer_total,
        "activation_bytes": shape.act.total,
        "activation_terms": {"per_layer": shape.act.per_layer, "embedding_end": shape.act.embed,
                             "output_end": shape.act.head, "recompute_working": shape.act.recompute_working},
        "gpu": {"name": workload.gpu_label, "capacity_bytes": workload.capacity_bytes},
        "peak": [{
            "stage": p.stage, "phases": p.phases, "phase_totals": p.phase_totals, "peak_bytes": p.peak_bytes,
            "peak_phase": p.peak_phase, "capacity_bytes": p.capacity_bytes, "fits": p.fits,
            "headroom_bytes": p.headroom_bytes, "utilisation": p.peak_bytes / p.capacity_bytes,
        } for p in peaks(s, workload, report)],
        "solve": {
            "max_micro_batch": {str(k): v for k, v in solution.max_micro_batch.items()},
            "min_workers": {str(k): v for k, v in solution.min_workers.items()},
            "lowest_stage": solution.lowest_stage,
        },
        "fits_on": fits_on(s, workload, report),
    }


def report_dict(report: ModelStatesReport, deepspeed: DeepSpeedView = None, workload=None) -> dict:
    s = report.scenario
    out = {
        "zerocalc_version": __version__,
        "convention": s.convention,
        "convention_summary": CONVENTIONS[s.convention]["summary"],
        "params": s.params,
        "workers": s.workers,
        "shard_group": s.group,
        "gpus_per_node": s.gpus_per_node,
        "scenario": asdict(s),
        "bytes_per_param": float(bytes_per_param(report.ledger)),
        "bytes_per_param_exact": _exact(bytes_per_param(report.ledger)),
        "one_copy_bytes": report.unique_total,
        "ledger": ledger_rows(report),
        "ledger_cells": ledger_cells(report),
        "stages": stage_rows(report),
        "scaling": scaling(s),
    }
    if deepspeed is not None:
        out["deepspeed_estimator"] = deepspeed_dict(deepspeed)
    if workload is not None:
        out.update(peak_dict(report, workload))
    return out


def full_report(scenario, workload=None, buffer_factor: float = 1.5) -> dict:
    """Everything the UI shows, in one call: the report, with the peak half when a workload is given and
    DeepSpeed's own estimates when the largest layer is known (nodes = workers / GPUs per node, rounded up)."""
    report = model_states(scenario)
    view = None
    if workload is not None:
        nodes = -(-scenario.workers // scenario.gpus_per_node)
        gpus_per_node = min(scenario.gpus_per_node, scenario.workers)
        view = deepspeed_view(scenario.params, largest_layer(workload.arch)[1], gpus_per_node, nodes,
                              buffer_factor, report)
    return report_dict(report, view, workload)
