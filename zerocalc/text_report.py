"""The report as aligned plain-text tables for a terminal. Units are labelled exactly (GB = 10^9, GiB = 2^30)."""

from __future__ import annotations

from .architecture import largest_layer
from .ledger import bytes_per_param
from .peak import peaks, step_shape
from .solve import solve
from .model_states import workers_per_node
from .report import ledger_rows
from .tables import CONVENTIONS
from .units import format_bytes, in_unit, resolve_unit


def _table(header, rows) -> str:
    cells = [header] + rows
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _bpp(value) -> str:
    return f"{float(value):g}"


def render_text(report, deepspeed=None, units: str = "decimal", workload=None) -> str:
    s = report.scenario
    auto = units in ("decimal", "binary")
    # A fixed unit labels the header; an automatic one labels each cell, so 16 GB next to 16 PB never reads 0.00.
    unit = "auto" if auto else units
    cell = (lambda n: format_bytes(n, units)) if auto else (lambda n: in_unit(n, units))
    out = [
        f"zerocalc: {s.params:,} parameters, {s.workers:,} workers, shard group {s.group:,}, "
        f"convention {s.convention}",
        f"  {CONVENTIONS[s.convention]['summary']}",
        "",
        f"Ledger: {_bpp(bytes_per_param(report.ledger))} bytes per parameter",
        _table(["entry", "category", "dtype", "bytes/param", "sharded from"],
               [[r["name"], r["category"], r["dtype"], _bpp(r["bytes_per_param"]),
                 f"stage {r['sharded_from_stage']}"] for r in ledger_rows(report)]),
        "",
        "Per worker and cluster-wide, persistent model state only" + ("" if auto else f" ({unit}):") +
        (":" if auto else ""),
        _table(["stage", "params", "grads", "optimizer", "per worker", "on GPU", "cluster", "redundant",
                "comm/step"],
               [[r.stage, *(cell(r.per_worker_by_category[c]) for c in ("parameters", "gradients", "optimizer")),
                 cell(r.per_worker_total), cell(r.gpu_bytes), cell(r.cluster_total), cell(r.redundant_bytes),
                 cell(r.communication_bytes)]
                for r in report.stages]),
    ]
    if s.offload_optimizer != "none" or s.offload_params != "none":
        per_node = workers_per_node(s)
        out += ["", f"Offload (optimizer: {s.offload_optimizer}, params: {s.offload_params}), "
                    f"{per_node} workers per node:",
                _table(["stage", "GPU/worker", "CPU/worker", "NVMe/worker", "CPU/node", "NVMe/node"],
                       [[r.stage, format_bytes(r.gpu_bytes, units), format_bytes(r.cpu_bytes, units),
                         format_bytes(r.nvme_bytes, units), format_bytes(r.cpu_bytes * per_node, units),
                         format_bytes(r.nvme_bytes * per_node, units)] for r in report.stages])]
    if deepspeed is not None:
        out += ["", _deepspeed_text(deepspeed, units)]
    if workload is None:
        out += ["", "Not included: activations, gathered parameters, communication buffers, temporaries and "
                    "allocator overhead (the peak working set): give --model, --config or an architecture."]
    else:
        out += ["", peak_text(report, workload, units)]
    return "\n".join(out)


def _deepspeed_text(view, units) -> str:
    rows = [[f"ZeRO-2 offload_optimizer={r.offload_optimizer}", format_bytes(r.cpu_bytes, units),
             format_bytes(r.gpu_bytes, units)] for r in view.zero2]
    rows += [[f"ZeRO-3 offload_param={r.offload_param}, offload_optimizer={r.offload_optimizer}, "
              f"zero_init={int(r.zero_init)}", format_bytes(r.cpu_bytes, units), format_bytes(r.gpu_bytes, units)]
             for r in view.zero3]
    return "\n".join([
        f"DeepSpeed's own estimators ({view.nodes} node(s) x {view.gpus_per_node} GPUs, "
        f"largest layer {view.largest_layer_params:,} params, buffer factor {view.buffer_factor:g}):",
        _table(["options", "per CPU", "per GPU"], rows),
        "How its assumptions differ:",
        *(f"  - {note}" for note in view.differences),
    ])


def peak_text(report, workload, units) -> str:
    s, a = report.scenario, workload.arch
    shape = step_shape(s, workload)
    stage_peaks = peaks(s, workload, report)
    unit = resolve_unit(workload.capacity_bytes, units)
    solution = solve(s, workload, report)
    lines = [
        f"Peak working set per worker on {workload.gpu_label} ({format_bytes(workload.capacity_bytes, unit)}): "
        f"micro-batch {workload.micro_batch}, sequence {workload.seq_len}, {workload.attention} attention, "
        f"recompute {workload.recompute}, {shape.act_bits}-bit activations ({workload.implementation}).",
        f"  activations: {format_bytes(shape.act.per_layer_total, units)} per layer x {a.layers} layers, "
        f"{format_bytes(shape.act.total, units)} in all; largest layer {largest_layer(a)[0]} "
        f"({largest_layer(a)[1]:,} params)",
        _table(["stage", "peak", "phase", "capacity", "headroom", "used", "fits"],
               [[p.stage, format_bytes(p.peak_bytes, unit), p.peak_phase, format_bytes(p.capacity_bytes, unit),
                 format_bytes(p.headroom_bytes, unit), f"{100 * p.peak_bytes / p.capacity_bytes:.1f}%",
                 "yes" if p.fits else "NO"] for p in stage_peaks]),
        "",
        "What makes each stage's peak:",
    ]
    for p in stage_peaks:
        parts = ", ".join(f"{k} {format_bytes(v, unit)}" for k, v in p.phases[p.peak_phase].items())
        lines.append(f"  stage {p.stage} ({p.peak_phase}): {parts}")
    lines += ["", "Answers:"]
    for stage in range(4):
        mb, mw = solution.max_micro_batch[stage], solution.min_workers[stage]
        lines.append(f"  stage {stage}: largest micro-batch that fits: {mb if mb else 'none (not even 1)'}; "
                     f"fewest workers that fit: {mw if mw is not None else 'none up to 10,000,000'}")
    lowest = solution.lowest_stage
    lines.append(f"  lowest stage that fits: {lowest if lowest is not None else 'none'}")
    return "\n".join(lines)
