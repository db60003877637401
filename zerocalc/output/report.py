"""A report as plain data (dicts, lists, ints): what the CLI prints as JSON and the UI downloads.

Integers are bytes. Keys named in the core issue are a public interface: keep them.
"""

from __future__ import annotations

from dataclasses import asdict, fields, is_dataclass, replace
from fractions import Fraction
from functools import lru_cache

from .. import __version__
from ..gpus import GPU_CATALOG
from ..answers.explore import fits_on, ledger_cells, scaling
from ..answers.explore import stage_rows as ledger_rows_of
from ..answers.ranges import ranges, ranges_dict
from ..answers.solve import solve
from ..answers.verdict import stage_verdicts
from ..model.finetune import caveats, describe
from ..step.context import context_dict
from ..versions import family_of, versions_dict
from ..model.inventory import counts, largest_layer
from ..step.nccl import nccl_dict
from ..step.peak import phase_figures
from ..layout import stage_sizes
from ..parallel.costs import bubble_fraction
from ..parallel.ranks import LayoutReport, layout_report, report_for
from ..states.deepspeed_estimator import DeepSpeedView, deepspeed_view
from ..step.activations import recompute_name
from ..step.buffers import describe as comm_buffers, framework
from ..step.grad_lifetime import describe as grad_lifetime
from ..step.host import host_rows as host_memory
from ..step.optimizer_step import describe as optimizer_impl
from ..step.losses import LOSS_NAMES
from ..step.megatron_recompute import megatron_recompute_words
from ..step.op_checkpoint import USER_POLICY_PREFIX, op_rule
from ..states.zero import ModelStatesReport, workers_per_node
from ..tables import CONVENTIONS, PARTITIONED
from .batch import batch_dict, worst_step_words
from .experts import experts_dict
from .groups import group_bytes, group_ledgers, trainable_counts
from .vision import vision_dict
from .optimizers import ledger_total, shaped_row


def _policy_words(policy: str) -> str:
    return op_rule(policy).about if policy.startswith(USER_POLICY_PREFIX) else f"{policy} policy"


def recipe_text(workload) -> str:
    """The step's recipe in words: checkpointing, compile and the loss (the page's header line and the CLI)."""
    name = "selective recompute" if workload.recompute_modules != "core_attn" else recompute_name(workload.recompute)
    parts = [name + (f", one block in {workload.recompute_every}"
                                                  if workload.recompute_every > 1 else "")
             + (f" ({_policy_words(workload.op_policy)})" if workload.op_policy != "torchtitan" else "")
             + megatron_recompute_words(workload)]
    if workload.arch.mtp_layers:
        parts.append(f"{workload.arch.mtp_layers} multi-token prediction module{'s' * (workload.arch.mtp_layers > 1)}")
    if workload.compile:
        parts.append("torch.compile'd blocks")
    if workload.repeat_kv:
        parts.append("K and V repeated to every query head before the attention kernel")
    if workload.activation_offload:
        parts.append("activations offloaded to the CPU")
    if workload.optimizer_in_backward:
        parts.append("optimizer step in backward")
    if workload.float8 != "none":
        parts.append(f"float8 linears ({workload.float8}"
                     f"{', float8 all-gather' if workload.float8_all_gather else ''})")
    if workload.async_tp:
        parts.append("async tensor parallel")
    if workload.loss != "auto":
        chunks = f" ({workload.loss_chunks} chunks)" if workload.loss in ("chunked", "torchtitan-chunked") else ""
        parts.append(f"{LOSS_NAMES[workload.loss]}{chunks}")
    return ", ".join(parts)

def gpu_dict(workload) -> dict:
    """The GPU the verdict is against: the capacity PyTorch can use (the verdict's), nvidia-smi's total beside it,
    each with its source (zerocalc.gpus); a custom capacity is taken as what PyTorch can use."""
    if workload.gpu_memory is not None:
        return {"key": "custom", "name": workload.gpu_label, "capacity_bytes": workload.capacity_bytes,
                "capacity_source": "custom: the capacity PyTorch can use, as given", "capacity_estimated": False,
                "nvidia_smi_bytes": None, "nvidia_smi_source": None}
    gpu = GPU_CATALOG[workload.gpu]
    return {"key": workload.gpu, "name": gpu.name, "capacity_bytes": gpu.usable_bytes,
            "capacity_source": gpu.usable_source, "capacity_estimated": gpu.estimated,
            "nvidia_smi_bytes": gpu.smi_bytes, "nvidia_smi_source": gpu.smi_source}


def plain(obj, skip=()) -> dict:
    """A dataclass's fields as a dict, one level deep: what asdict gives for these flat records, without its
    recursive deep copy (40% of the report's time when it walked the whole architecture inside the workload only
    to drop it). Nested dataclasses still go through asdict; the records hold no lists or dicts to share."""
    out = {}
    for name in _field_names(type(obj)):
        if name not in skip:
            v = getattr(obj, name)
            out[name] = asdict(v) if _is_dataclass_type(type(v)) else v
    return out


# Per class, not per value: is_dataclass(0) looks the attribute up on int and builds an AttributeError to say no,
# and dataclasses.fields() rebuilds its tuple on every record. Classes do not change.

@lru_cache(maxsize=64)
def _field_names(cls) -> tuple:
    return tuple(f.name for f in fields(cls))


@lru_cache(maxsize=256)
def _is_dataclass_type(cls) -> bool:
    return is_dataclass(cls)


def _exact(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def ledger_rows(report: ModelStatesReport) -> list:
    """One row per ledger entry: bytes per parameter, and the first stage that shards it."""
    rows = []
    for (head, first), unique, entry in zip(_ledger_heads(tuple(report.ledger)), report.unique_by_entry,
                                            report.ledger):
        row = dict(head)
        row["one_copy_bytes"], row["sharded_from_stage"] = unique, first
        if entry.state is not None:          # a shaped optimizer's state (output/optimizers.py)
            row.update(shaped_row(report, entry, unique, isinstance(report, LayoutReport) and
                                  max(1, trainable_counts(report)["trainable_params"])))
        rows.append(row)
    return rows


@lru_cache(maxsize=256)      # a ledger's own figures (Fraction arithmetic) do not depend on the workers
def _ledger_heads(ledger) -> tuple:
    """Per entry: the row's fields up to its bytes per parameter, and the first stage that shards it."""
    heads = []
    for entry in ledger:
        first = min(stage for stage, cats in PARTITIONED.items() if entry.category in cats)
        heads.append(({
            "name": entry.name, "category": entry.category, "dtype": entry.dtype, "set_by": entry.source,
            "elements_per_param": _exact(Fraction(entry.num, entry.den)),
            "bytes_per_param": float(entry.bytes_per_param), "bytes_per_param_exact": _exact(entry.bytes_per_param),
        }, first))
    return tuple(heads)


def _stage_row(r, per_node: int, names) -> dict:
    return {
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
        "redundancy_factor": r.cluster_total / r.unique_total,   # float(Fraction(a, b)) is a / b, correctly rounded
        "communication_bytes_per_step": r.communication_bytes,
    }


def stage_rows(report) -> list:
    """Per ZeRO stage: the worst rank's bytes (every worker's, without a layout) and the cluster's."""
    per_node = workers_per_node(report.scenario)
    rows = [_stage_row(r, per_node, [row.entry.name for row in ledger_rows_of(report, r.stage)])
            for r in report.stages]
    if isinstance(report, LayoutReport):
        for row, i, s in zip(rows, report.worst, range(4)):
            row["worst_rank"] = report.ranks[i].rank.name
            row["communication_bytes_by_kind"] = report.ranks[i].communication[s]
            row["per_worker_group_bytes"] = group_bytes(row["per_worker_entry_bytes"])
    return rows


def deepspeed_dict(view: DeepSpeedView) -> dict:
    return {
        "inputs": {"params": view.params, "largest_layer_params": view.largest_layer_params,
                   "gpus_per_node": view.gpus_per_node, "nodes": view.nodes, "buffer_factor": view.buffer_factor},
        "zero2": [row._asdict() for row in view.zero2],
        "zero3": [row._asdict() for row in view.zero3],
        "differences": list(view.differences),
    }


def layout_dict(report: LayoutReport) -> dict:
    w = report.workload
    layout, dp = w.layout, report.scenario.workers
    return {"dp": dp, "tp": layout.tp, "pp": layout.pp, "vpp": layout.vpp, "cp": layout.cp,
            "sequence_parallel": layout.sequence_parallel, "micro_batches": layout.micro_batches,
            "schedule": layout.schedule, "loss_parallel": layout.loss_parallel,
            "world_size": layout.world(dp), "zero_shard_group": report.scenario.group * layout.cp,
            "vocab_multiple": layout.vocab_multiple(w.implementation), "padded_vocab": w.vocab_rows,
            # the pipeline's idle share of the step: bubble / (compute + bubble), bubble (pp - 1) / (vpp x m)
            "pipeline_idle_share": bubble_fraction(layout) / (1 + bubble_fraction(layout)),
            "stored_params": report.stored_params, "stage_split": "given" if layout.stage_layers else
            layout.stage_split, "stage_layers": list(stage_sizes(layout, w.arch.layers))}


def _peak_row(p, rank_name: str = None) -> dict:
    peak, capacity = p.peak_bytes, p.capacity_bytes      # peak_bytes is a max over the phases: taken once
    row = {"stage": p.stage, "phases": p.phases, "phase_totals": p.phase_totals, "peak_bytes": peak,
           # per phase: what max_memory_allocated, max_memory_reserved and nvidia-smi read (peak.phase_figures)
           "phase_figures": {name: phase_figures(parts) for name, parts in p.phases.items()},
           "peak_phase": p.peak_phase, "capacity_bytes": capacity, "fits": peak <= capacity,
           "headroom_bytes": capacity - peak, "utilisation": peak / capacity}
    if rank_name is not None:
        row["rank"] = rank_name
    return row


def rank_rows(report: LayoutReport) -> list:
    rows = []
    for v in report.ranks:
        c, shape = v.rank, v.shape
        largest_name, largest = c.largest_module()
        rows.append({
            "name": c.name, "pp_stage": c.pp_ranks[0], "pp_stages": list(c.pp_ranks), "count": c.count,
            "layers": c.layers, "chunks": [c._asdict() for c in c.chunks], "embedding": c.first, "output": c.last,
            "params": shape.params, "largest_module": largest_name, "largest_module_params": largest,
            "persistent_params": shape.persistent_params,
            "in_flight_micro_batches": {"chunks": shape.in_flight[0], "first_chunk": shape.in_flight[1],
                                        "last_chunk": shape.in_flight[2]},
            "activation_bytes": shape.activation_bytes,
            "activation_bytes_per_layer": shape.act.per_layer_total,
            "activation_bytes_per_micro_batch": shape.act.total,
            "activation_offload_bytes": shape.offloaded, "activation_offload_host_bytes": shape.host_bytes,
            "recompute_flops_per_step": v.recompute_flops,
            "stages": [{"stage": r.stage, "per_worker_bytes": dict(r.per_worker_by_category),
                        "per_worker_total_bytes": r.per_worker_total, "gpu_bytes_per_worker": r.gpu_bytes,
                        "communication_bytes_per_step": r.communication_bytes,
                        "communication_bytes_by_kind": v.communication[r.stage]} for r in v.stages],
            "peak": [_peak_row(p) for p in v.peaks],
        })
    return rows


def _activation_rank(report: LayoutReport):
    """The rank class holding the most activations: what the top-level activation fields describe."""
    return max(report.ranks, key=lambda v: v.shape.activation_bytes)


# Architecture-only: the same for every layout and worker count (spread into the report, never shared).

@lru_cache(maxsize=256)
def _architecture_sizes(a) -> dict:
    """The architecture block's parameter counts and largest module."""
    largest_name, largest = largest_layer(a)
    return {**counts(a), "largest_layer_params": largest, "largest_layer": largest_name}


def _architecture_fields(a) -> dict:
    """plain(a), reused while the app passes the same Architecture object again. Only for that object: an equal
    one may hold 0 where this one holds 0.0 (0 == 0.0), and the record echoes the fields' own values."""
    held, record = _architecture_record(a)
    return record if held is a else plain(a)


@lru_cache(maxsize=256)
def _architecture_record(a) -> tuple:
    return a, plain(a)


def peak_dict(report: LayoutReport, layouts: bool = False, answers: bool = True, sequences: bool = False,
              measured: dict = None) -> dict:
    """The peak-memory half of the report: architecture, layout, activations, per-rank and worst-rank live sets,
    fit, and with `answers` the solvers and the fits-on table (and, when asked, every layout of the same GPUs that
    fits)."""
    s, workload = report.scenario, report.workload
    a = workload.arch
    heaviest = _activation_rank(report)
    shape = heaviest.shape
    out = {
        "architecture": {**_architecture_sizes(a), "stored_params": report.stored_params,
                         "moe_layers": a.moe_layers, **trainable_counts(report), **_architecture_fields(a)},
        "finetune": {**plain(workload.finetune), "description": describe(workload.finetune, s.param_dtype),
                     "caveats": list(caveats(workload.finetune, a))},
        "workload": plain(workload, skip=("arch", "layout", "finetune")),
        "versions": versions_dict(workload.finetune.versions, family_of(a)),
        "cuda_context": context_dict(workload),
        "recipe": recipe_text(workload),
        "layout": layout_dict(report),
        "experts": experts_dict(report),
        "activation_rank": heaviest.rank.name,
        "activation_bits": shape.act_bits,
        "activation_bytes_per_layer": shape.act.per_layer_total,
        "activation_bytes_per_moe_layer": shape.act.per_moe_layer_total,
        "activation_bytes": shape.activation_bytes,
        "activation_offload_host_bytes": shape.host_bytes,
        "host_memory": host_memory(report),
        "activation_terms": {"per_layer": shape.act.per_layer, "per_moe_layer": shape.act.per_moe_layer,
                             "per_sliding_layer": shape.act.per_sliding_layer,
                             "checkpointed_block": shape.act.checkpointed, "embedding_end": shape.act.embed,
                             "every_stage": shape.act.stage, "output_end": shape.act.head,
                             "first_block_adjustment": shape.act.first_block_delta,
                             "recompute_working": shape.act.recompute_working,
                             "recompute_backward": shape.act.recompute_backward},
        "gpu": gpu_dict(workload),
        "comm_buffers": comm_buffers(s, workload, shape),
        "nccl": nccl_dict(s, workload),
        "grad_lifetime": grad_lifetime(workload, framework(s, workload, shape)),
        "optimizer_impl": optimizer_impl(s, framework(s, workload, shape)),
        "peak": [_peak_row(p, report.ranks[i].rank.name) for p, i in zip(report.peaks, report.worst)],
        "ranks": rank_rows(report),
    }
    out["verdicts"] = verdicts_of(report, measured)
    solution = solve(s, workload, sequences) if answers or layouts else None
    if workload.batch_mode != "fixed":                    # the typical and the worst step (output/batch.py)
        out["batch"] = batch_dict(report, answers, solution.max_seq_len if solution else None)
    if answers or layouts:
        out["solve"] = {
            "max_micro_batch": {str(k): v for k, v in solution.max_micro_batch.items()},
            **({"max_seq_len": {str(k): v for k, v in solution.max_seq_len.items()}} if sequences else {}),
            "min_workers": {str(k): v for k, v in solution.min_workers.items()},
            "min_gpus": {str(k): v for k, v in solution.min_gpus.items()},
            "lowest_stage": solution.lowest_stage,
        }
        out["fits_on"] = fits_on(report)
    if layouts:
        from ..parallel.search import search_dict
        out["solve"].update(search_dict(s, workload))
    out["group_ledgers"] = group_ledgers(report)
    if workload.finetune.quantized:
        out["finetune_comparison"] = quantized_vs_plain(report)
    return out


def verdicts_of(report: LayoutReport, measured: dict = None) -> list:
    """The one verdict per stage every surface reads (answers/verdict.py): the GPU at each phase, the host RAM per
    node, the assumptions' band, and a measured run of the plan at its stage ({stage: measured_fit's answer})."""
    peaks = [_peak_row(p, report.ranks[i].rank.name) for p, i in zip(report.peaks, report.worst)]
    bands = ranges_dict(ranges(report.scenario, report.workload))["stages"]
    return stage_verdicts(peaks, host_memory(report), bands, measured, step=worst_step_words(report.workload))


def quantized_vs_plain(report: LayoutReport) -> dict:
    """A quantized base against the same adapters on a plain one: the peaks, and why the quantized one is not
    always smaller (users are surprised: litgpt#1112, torchtune#2255)."""
    w, s = report.workload, report.scenario
    plain = replace(w, finetune=replace(w.finetune, mode="lora", kbit_prepare=False, quantize_head=False))
    other = layout_report(s, plain)
    reasons = []
    shape = report.ranks[report.worst[3]].shape
    if shape.dequantized:
        reasons.append(f"each 4-bit linear is dequantized while it runs ({shape.dequantized:,} bytes for the "
                       "largest), in forward and again in backward")
    if w.finetune.kbit_prepare:
        reasons.append("prepare_model_for_kbit_training upcasts every non-quantized weight to fp32, so the "
                       "activations are fp32 too")
    return {"quantized_peak_bytes": [p.peak_bytes for p in report.peaks],
            "plain_peak_bytes": [p.peak_bytes for p in other.peaks],
            "quantized_model_state_bytes": [r.gpu_bytes for r in report.stages],
            "plain_model_state_bytes": [r.gpu_bytes for r in other.stages],
            "reasons": reasons}


def report_dict(report, deepspeed: DeepSpeedView = None, layouts: bool = False, answers: bool = True,
                sequences: bool = False, measured: dict = None) -> dict:
    """The report as plain data; `sequences` adds solve.max_seq_len (its search costs more than the others)."""
    s = report.scenario
    ledger = ledger_rows(report)
    per_param = ledger_total(report.ledger, ledger)
    out = {
        "zerocalc_version": __version__,
        "convention": s.convention,
        "convention_summary": CONVENTIONS[s.convention]["summary"],
        "params": s.params,
        "workers": s.workers,
        "shard_group": s.group,
        "gpus_per_node": s.gpus_per_node,
        "scenario": plain(s),
        "bytes_per_param": float(per_param),
        "bytes_per_param_exact": _exact(per_param),
        "one_copy_bytes": report.unique_total,
        "ledger": ledger,
        "ledger_cells": ledger_cells(report),
        "stages": stage_rows(report),
    }
    if answers:
        out["scaling"] = scaling(report)
    if deepspeed is not None:
        out["deepspeed_estimator"] = deepspeed_dict(deepspeed)
    if isinstance(report, LayoutReport):
        out["world_size"] = report.workload.layout.world(s.workers)
        out.update(peak_dict(report, layouts, answers, sequences, measured))
        if report.workload.arch.vision is not None:     # a vision-language model (output/vision.py)
            out["vision"] = vision_dict(s, report.workload)
    return out


def deepspeed_for(report, buffer_factor: float = 1.5) -> DeepSpeedView:
    """DeepSpeed's own estimators for the same model over the data-parallel GPUs (nodes = workers / GPUs per node,
    rounded up). They know no tensor or pipeline parallelism: under a layout the note says so."""
    s, workload = report.scenario, report.workload
    nodes = -(-s.workers // s.gpus_per_node)
    gpus_per_node = min(s.gpus_per_node, s.workers)
    return deepspeed_view(s.params, largest_layer(workload.arch)[1], gpus_per_node, nodes, buffer_factor, report,
                          workload.layout.model_parallel)


# What full_report(answers=False) leaves out: only the detail views read them.
ANSWER_KEYS = ("scaling", "deepspeed_estimator", "solve", "fits_on")


def full_report(scenario, workload=None, buffer_factor: float = 1.5, layouts: bool = False,
                answers: bool = True) -> dict:
    """Everything the UI shows, in one call: the report, with the per-rank and peak half when a workload is given
    and DeepSpeed's own estimates beside it; `layouts` adds the search over every layout of the same GPUs.
    `answers=False` leaves out ANSWER_KEYS (the scaling sweep, DeepSpeed's estimates, the solvers and the fits-on
    table: 60% of the time), which only the detail views read; the first screen needs the bytes, peaks and fit."""
    report = report_for(scenario, workload)
    view = deepspeed_for(report, buffer_factor) if workload is not None and answers else None
    return report_dict(report, view, layouts, answers)
