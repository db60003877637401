"""The report as aligned plain-text tables for a terminal. Units are labelled exactly (GB = 10^9, GiB = 2^30)."""

from __future__ import annotations

from ..answers.solve import solve
from ..gpus import GPU_CATALOG
from ..layout import stage_sizes
from ..model.finetune import caveats, describe
from ..step.context import context_dict
from ..versions import describe as describe_versions, family_of, rows_in_effect
from ..model.inventory import largest_layer
from ..parallel.search import SearchBoundError, modelled_search, search_layouts
from ..step.allocator import DEFAULT_PERCENT, replays
from ..states.zero import workers_per_node
from ..step.buffers import describe as comm_buffers, framework
from ..step.grad_lifetime import describe as grad_lifetime
from ..step.optimizer_step import describe as optimizer_impl
from ..step.peak import phase_figures
from ..tables import CONVENTIONS, SHAPED_OPTIMIZERS
from ..units import format_bytes, in_unit, resolve_unit
from .optimizers import ledger_total
from .groups import group_bytes, group_label, group_ledgers, trainable_counts
from .batch import batch_dict, batch_lines
from .report import ledger_rows, recipe_text, verdicts_of

# FineTune.fp32_parts: what the activations line adds (step/fp32_stream.py)
STREAM_TEXT = {"norms": " with fp32 norms",
               "embed-head-norms": " with an fp32 residual stream (fp32 embeddings and norms)"}


def recompute_text(workload) -> str:
    """"full", or "full, one block in 2" under torchtitan-style layer recompute."""
    if workload.recompute == "full" and workload.recompute_every > 1:
        return f"full, one block in {workload.recompute_every}"
    if workload.recompute_modules != "core_attn":               # Megatron's --recompute-modules
        return f"selective ({workload.recompute_modules})"
    if workload.recompute_method != "uniform" or workload.recompute_num_layers > 1:
        return f"full, {workload.recompute_method} {workload.recompute_num_layers}"   # Megatron's method and N
    return workload.recompute


def _offloaded(shape, units) -> str:
    if not shape.offloaded:
        return ""
    return (f" on the GPU ({format_bytes(shape.offloaded, units)} moved to the CPU, taking "
            f"{format_bytes(shape.host_bytes, units)} of pinned host memory per rank)")


def _checkpointed(act, units) -> str:
    if not act.checkpointed:
        return ""
    return (f" ({act.checkpointed_layers} of them checkpointed, "
            f"{format_bytes(sum(act.checkpointed.values()), units)} each)")


def _table(header, rows) -> str:
    cells = [header] + rows
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _bpp(value) -> str:
    return f"{float(value):g}"


def render_text(report, deepspeed=None, units: str = "decimal", measured: dict = None) -> str:
    s = report.scenario
    workload = getattr(report, "workload", None)
    auto = units in ("decimal", "binary")
    # A fixed unit labels the header; an automatic one labels each cell, so 16 GB next to 16 PB never reads 0.00.
    unit = "auto" if auto else units
    cell = (lambda n: format_bytes(n, units)) if auto else (lambda n: in_unit(n, units))
    out = [
        f"zerocalc: {s.params:,} parameters, {s.workers:,} workers, shard group {s.group:,}, "
        f"convention {s.convention}",
        f"  {CONVENTIONS[s.convention]['summary']}",
        "",
        f"Ledger: {_bpp(ledger_total(report.ledger, ledger_rows(report)))} bytes per parameter" + (
            " that trains (frozen parameters hold their stored weights only)"
            if workload is not None and workload.finetune.mode != "full" else ""),
        _table(["entry", "category", "dtype", "bytes/param", "sharded from"],
               [[r["name"], r["category"], r["dtype"], _bpp(r["bytes_per_param"]),
                 f"stage {r['sharded_from_stage']}" + (f"; {r['kept_by']}" if "kept_by" in r else "")]
                for r in ledger_rows(report)]),
        *_assumed(report),
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
        out += ["", peak_text(report, units, measured)]
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


def layout_line(report) -> str:
    w, s = report.workload, report.scenario
    L = w.layout
    parts = [f"Layout: dp {s.workers:,} x tp {L.tp} x pp {L.pp} x cp {L.cp} = {L.world(s.workers):,} GPUs"]
    if L.tp > 1:
        parts.append(f"sequence parallel {'on' if L.sequence_parallel else 'off'}, "
                     f"{'vocab-parallel' if L.loss_parallel else 'gathered'} logits")
    if L.pp > 1:
        parts.append(f"{L.schedule}" + (f" with {L.vpp} virtual stages" if L.vpp > 1 else ""))
        if L.stage_layers is not None or L.stage_split != "even":
            sizes = stage_sizes(L, w.arch.layers)
            shown = ", ".join(map(str, sizes)) if len(sizes) <= 32 else f"{len(sizes):,} stages"
            parts.append(f"layers per stage ({'given' if L.stage_layers else L.stage_split + ' split'}): {shown}")
    parts.append(f"{L.micro_batches} micro-batch{'es' if L.micro_batches > 1 else ''} per step")
    parts.append(f"ZeRO shards over dp x cp = {s.group * L.cp:,}")
    if L.ep > 1 or L.etp > 1:
        parts.append(f"experts over ep {L.ep} x etp {L.etp} ({w.arch.experts // L.ep:,} of {w.arch.experts:,} "
                     f"routed experts per GPU), ZeRO over the expert-data-parallel group "
                     f"{L.expert_data_parallel(s.workers):,}")
    if w.vocab_rows != w.arch.vocab:
        parts.append(f"vocabulary padded {w.arch.vocab:,} -> {w.vocab_rows:,}")
    return "; ".join(parts)


def _rank_table(report, unit) -> str:
    rows = []
    for v in report.ranks:
        rows.append([v.rank.name, f"{v.rank.count:,}", v.rank.layers, f"{v.shape.params:,}",
                     format_bytes(v.shape.activation_bytes, unit),
                     *(format_bytes(p.peak_bytes, unit) + ("" if p.fits else " NO") for p in v.peaks)])
    return _table(["rank class", "ranks", "layers", "params", "activations", "peak 0", "peak 1", "peak 2",
                   "peak 3"], rows)


def _layouts_text(report, unit) -> list:
    gpus = report.workload.layout.world(report.scenario.workers)
    try:
        plans = search_layouts(report.scenario, report.workload)
    except SearchBoundError as exc:
        return ["", f"Layouts of {gpus:,} GPUs not searched: {exc}."]
    if not plans:
        return ["", f"No layout of {gpus:,} GPUs fits (every tp, pp, cp, ZeRO stage, recompute and offload tried)."]
    rows = [[f"{p.dp}x{p.tp}x{p.pp}x{p.cp}" + (f" ep {p.ep}" if p.ep > 1 else ""), p.micro_batches, p.stage,
             p.recompute,
             "none" if p.offload_level == 0 else ("optimizer" if p.offload_level == 1 else "optimizer+params"),
             format_bytes(p.peak_bytes, unit), format_bytes(p.headroom_bytes, unit),
             format_bytes(p.communication_bytes, unit), f"{100 * p.bubble:.0f}%", f"{100 * p.overhead:.0f}%",
             p.worst_rank] for p in plans[:10]]
    batch = report.scenario.workers * report.workload.micro_batch * report.workload.layout.micro_batches
    count = f"{len(plans):,}; cheapest 10"
    if replays(report.workload):
        _plans, n, exact = modelled_search(report.scenario, report.workload, gpus)
        count = f"{n:,}; cheapest {min(10, len(plans))}" if exact else \
            f"{n:,} with a {DEFAULT_PERCENT}% reserve; cheapest {len(plans)} re-checked with the allocator's model"
    return ["", f"Layouts of {gpus:,} GPUs that fit ({count}; the micro-batch and the global "
                f"batch of {batch:,} sequences per step held):",
            _table(["dp x tp x pp x cp", "micro-batches", "stage", "recompute", "offload", "peak", "headroom",
                    "comm/step", "bubble", "time overhead", "worst rank"], rows),
            "  time overhead: recomputed forward FLOPs (a step is about 3 forwards) + the pipeline bubble "
            "(pp - 1) / (vpp x micro-batches)."]


def capacity_text(workload, unit) -> str:
    """'79.11 GiB that PyTorch can use; nvidia-smi shows 79.65 GiB': the verdict's capacity first."""
    text = f"{format_bytes(workload.capacity_bytes, unit)} that PyTorch can use"
    if workload.nvidia_smi_bytes is None:
        return text + ", as given"
    estimated = " (estimated)" if GPU_CATALOG[workload.gpu].estimated else ""
    return f"{text}{estimated}; nvidia-smi shows {format_bytes(workload.nvidia_smi_bytes, unit)}"


def _verdict_cell(v: dict) -> str:
    """The verdict column (answers/verdict.py): yes, NO, or NO with what decides it when not the GPU's peak."""
    if v["fits"]:
        return "yes"
    if v["answer"] != "does not fit":
        return f"NO ({v['answer']})"
    return "NO" if v["deciding"].startswith("GPU memory") else f"NO ({v['deciding']})"


def peak_text(report, units, measured: dict = None) -> str:
    s, workload = report.scenario, report.workload
    a = workload.arch
    heaviest = max(report.ranks, key=lambda v: v.shape.activation_bytes)
    shape = heaviest.shape
    unit = resolve_unit(workload.capacity_bytes, units)
    solution = solve(s, workload)
    verdicts = verdicts_of(report, measured)
    lines = [
        layout_line(report),
        f"Peak working set per GPU on {workload.gpu_label} ({capacity_text(workload, unit)}): "
        f"micro-batch {workload.micro_batch}, sequence {workload.seq_len}, {workload.attention} attention, "
        f"recompute {recompute_text(workload)}, {shape.act_bits}-bit activations"
        f"{STREAM_TEXT.get(workload.finetune.fp32_parts, '')}"
        f" ({workload.implementation}"
        f"{', fused cross entropy' if workload.loss_fusion else ''}); recipe: {recipe_text(workload)}.",
        versions_line(workload.finetune.versions, family_of(workload.arch)),
        context_line(workload, units),
        f"  activations ({heaviest.rank.name}): {format_bytes(shape.act.per_layer_total, units)} per layer per "
        f"micro-batch x {heaviest.rank.layers} layers{_checkpointed(shape.act, units)}, "
        f"{format_bytes(shape.activation_bytes, units)} in flight"
        f"{_offloaded(shape, units)}; "
        f"largest layer {largest_layer(a)[0]} ({largest_layer(a)[1]:,} params)",
        _table(["stage", "peak", "phase", "capacity", "headroom", "used", "verdict", "worst rank"],
               [[p.stage, format_bytes(p.peak_bytes, unit), p.peak_phase, format_bytes(p.capacity_bytes, unit),
                 format_bytes(p.headroom_bytes, unit), f"{100 * p.peak_bytes / p.capacity_bytes:.1f}%",
                 _verdict_cell(v), report.ranks[i].rank.name]
                for p, i, v in zip(report.peaks, report.worst, verdicts)]),
    ]
    if workload.finetune.mode != "full":
        lines += [""] + finetune_text(report, unit)
    if len(report.ranks) > 1:
        lines += ["", "Per rank class (every rank of a class holds the same bytes):", _rank_table(report, unit)]
    lines += batch_lines(batch_dict(report, True, solution.max_seq_len), format_bytes, unit)   # issue 37
    lines += ["", "What makes each stage's peak:"]
    for p in report.peaks:
        parts = ", ".join(f"{k} {format_bytes(v, unit)}" for k, v in p.phases[p.peak_phase].items())
        lines.append(f"  stage {p.stage} ({p.peak_phase}): {parts}")
        f = phase_figures(p.phases[p.peak_phase])
        lines.append(f"    reads as allocated {format_bytes(f['allocated_bytes'], unit)} (max_memory_allocated), "
                     f"reserved {format_bytes(f['reserved_bytes'], unit)} (max_memory_reserved), device "
                     f"{format_bytes(f['device_bytes'], unit)} (nvidia-smi: the verdict's number)")
        if p.peak_phase != "optimizer_step" and s.optimizer in SHAPED_OPTIMIZERS:   # its own step terms, named
            step = p.phases["optimizer_step"]
            own = [k for k in step if k.startswith(("Muon", "Newton-Schulz", "paged"))]
            if own:
                lines.append(f"    its optimizer step ({format_bytes(p.phase_totals['optimizer_step'], unit)}) "
                             "holds " + ", ".join(f"{k} {format_bytes(step[k], unit)}" for k in own))
    lines.append(f"  communication buffers: {comm_buffers(s, workload, shape)['why']}")
    lines.append(f"  gradients live: {grad_lifetime(workload, framework(s, workload, shape))['why']}")
    if s.optimizer in ("adam", "adamw"):
        lines.append(f"  optimizer step: {optimizer_impl(s, framework(s, workload, shape))['why']}")
    mp = workload.layout.model_parallel
    lines += ["", "Answers (the layout held):"]
    for stage in range(4):
        mb, mw = solution.max_micro_batch[stage], solution.min_workers[stage]
        fewest = "none up to 10,000,000" if mw is None else (f"{mw:,}" + (f" ({mw * mp:,} GPUs)" if mp > 1 else ""))
        longest = solution.max_seq_len[stage]
        lines.append(f"  stage {stage}: largest micro-batch that fits: {mb if mb else 'none (not even 1)'}; "
                     f"longest sequence that fits: {f'{longest:,} tokens' if longest else 'none'}; "
                     f"fewest data-parallel workers that fit: {fewest}")
    lowest = solution.lowest_stage
    lines.append(f"  lowest stage that fits: {lowest if lowest is not None else 'none'}")
    lines += _layouts_text(report, unit)
    return "\n".join(lines)


def context_line(workload, units) -> str:
    """The CUDA context counted outside the allocator and what it rests on (step/context.py)."""
    c = context_dict(workload)
    return (f"  CUDA context: {format_bytes(c['bytes'], units)} ({c['how']}; "
            f"{format_bytes(c['low_bytes'], units)}-{format_bytes(c['high_bytes'], units)} in the range)")


def versions_line(versions, family=None) -> str:
    """The library releases the plan assumes, and the older-release rows they switch on for the plan's family
    (zerocalc/versions.py)."""
    rows = rows_in_effect(versions, family)
    return f"  library versions assumed: {describe_versions(versions)}" + (
        "; older-release rows: " + "; ".join(f"{r.library} < {r.below}: {r.key}"
                                             + ("" if r.modelled else f" (counted with {r.switch})" if r.switch
                                                else " (not counted)") for r in rows)
        if rows else "")


def finetune_text(report, unit) -> list:
    """What trains, the bytes of each parameter group, and for a quantized base the same adapters on a plain one."""
    from .report import quantized_vs_plain
    s, ft = report.scenario, report.workload.finetune
    c = trainable_counts(report)
    stored = c["trainable_params"] + c["frozen_params"]
    worst = report.ranks[report.worst[0]]
    groups = group_bytes(dict(zip([r.entry.name for r in worst.rows], worst.stages[0].per_worker_by_entry)))
    lines = [f"Fine-tuning: {describe(ft, s.param_dtype)}.",
             f"  {c['trainable_params']:,} of {stored:,} stored parameters train "
             f"({100 * c['trainable_params'] / stored:.2f}%; adapters {c['adapter_params']:,}).",
             f"  stage 0 model states by group ({worst.rank.name}): " +
             "; ".join(f"{group_label(g)} {format_bytes(b, unit)}" for g, b in groups.items())]
    lines += [f"  not counted: {c}" for c in caveats(ft, report.workload.arch)]
    ledgers = group_ledgers(report)
    lines += [f"  bytes per parameter each group keeps ({ledgers['rank']}; - : the entry vanishes):",
              "  " + _table(["entry"] + [g["label"] for g in ledgers["groups"]],
                            [[name] + ["-" if g["bytes_per_param"][name] is None else f"{g['bytes_per_param'][name]:.4g}"
                                       for g in ledgers["groups"]] for name in ledgers["entries"]]
                            ).replace("\n", "\n  ")]
    if ft.quantized:
        q = quantized_vs_plain(report)
        lines.append(f"  against the same adapters on a {ft.base_dtype or s.param_dtype} base: peak "
                     + ", ".join(f"stage {i} {format_bytes(a, unit)} vs {format_bytes(b, unit)}"
                                 for i, (a, b) in enumerate(zip(q["quantized_peak_bytes"], q["plain_peak_bytes"]))))
        lines += [f"  a quantized base costs extra: {r}" for r in q["reasons"]]
    return lines


def _assumed(report) -> list:
    notes = {r["assumed"] for r in ledger_rows(report) if "assumed" in r}
    return [f"  optimizer state read on {n.removeprefix('no architecture: ')}: give a model for its shapes"
            for n in sorted(notes)]
