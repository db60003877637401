"""A state converted: its link (the fields that matter for it, at non-default values: to_query; the state read
back: from_query, every bad value named and replaced by its default) and the core's inputs (resolve: its
Architecture, Scenario, Layout, Workload and FineTune, a value the core refuses reset to its default)."""

from __future__ import annotations

import functools
from dataclasses import fields as dc_fields
from typing import Dict, List, NamedTuple, Optional, Tuple

from zerocalc.defaults import TARGETS as POLICY_TARGETS, implied, link_defaults
from zerocalc.model.architecture import Architecture
from zerocalc.model.finetune import FineTune
from zerocalc.gpus import DEFAULT_GPU
from zerocalc.layout import Layout
from .text import allowed, format_value, parse_value
from .stages import STAGE_NAMES, stage_layout
from .step import step_versions, step_workload
from .vision import vision_tower, vision_workload
from .optimizer import OPTIMIZER_OPTION_FIELDS
from zerocalc.step.workload import Workload

from .fields import (ARCH_FIELDS, CUSTOM, DENSE_IDS, FIELD, FIELDS, FINETUNE_FIELDS, FINETUNE_MODE_FIELDS,
                     MAX_LISTED_KEYS, PARAMS_ONLY, PRECISION_FIELDS, RENAMED, _ARCH_ATTR, _arch_value, _defaults,
                     base_architecture, default_for, defaults)


def _significant(state: dict) -> Tuple[str, ...]:
    """Fields that matter for this state (architecture and layout fields only when a model with a shape is
    chosen: model parallelism splits tensors, so it needs them)."""
    return _significant_for(*_significance_key(state))


def _significance_key(state: dict) -> tuple:
    return state["model"] == PARAMS_ONLY, state.get("finetune"), state.get("recompute") == "full"


@functools.lru_cache(maxsize=64)
def _idle_for(params_only: bool, finetune: str, full_recompute: bool) -> Tuple[str, ...]:
    """The fields that do not matter: the rest of FIELDS."""
    keep = set(_significant_for(params_only, finetune, full_recompute))
    return tuple(f.name for f in FIELDS if f.name not in keep)


@functools.lru_cache(maxsize=64)
def _significant_for(params_only: bool, finetune: str, full_recompute: bool) -> Tuple[str, ...]:
    names = [f.name for f in FIELDS]
    if params_only:
        shaped = set(ARCH_FIELDS) | set(LAYOUT_FIELDS[:-1]) | set(FINETUNE_FIELDS)
        return tuple(n for n in names if n not in shaped)
    idle = set(FINETUNE_FIELDS[1:]) - set(FINETUNE_MODE_FIELDS.get(finetune, ()))
    if not full_recompute:
        idle.add("recompute_every")                   # one block in N is a form of full recompute
    return tuple(n for n in names if n != "params" and n not in idle)


def to_query(state: dict) -> Dict[str, str]:
    """The URL parameters of a state: fields that differ from their defaults, in FIELDS order."""
    default = _defaults(state["model"], state["convention"])
    default = {**default, **link_defaults(state, default)}     # what the defaults policy gives back (pipelines fill)
    return {n: format_value(FIELD[n], state[n]) for n in _significant(state) if state[n] != default[n]}


def unknown_keys_warnings(keys) -> List[str]:
    """One warning per unknown link key, the first MAX_LISTED_KEYS of them, then how many more (a link has many)."""
    keys = list(keys)
    out = [f"Ignored unknown link parameter {str(k)[:40]!r}." for k in keys[:MAX_LISTED_KEYS]]
    if len(keys) > MAX_LISTED_KEYS:
        out.append(f"Ignored {len(keys) - MAX_LISTED_KEYS:,} more unknown link parameters.")
    return out


def from_query(query) -> Tuple[dict, List[str]]:
    """(state, warnings) from URL parameters (a mapping of str -> str or list of str)."""
    warnings, raw, unknown = [], {}, []
    for key in query:
        values = query[key] if isinstance(query[key], (list, tuple)) else [query[key]]
        if key in RENAMED and RENAMED[key][0] not in query:
            try:
                key, values = RENAMED[key][0], [RENAMED[key][1](v) for v in values]
            except ValueError:                # refused below, named by the new field with its allowed range
                key = RENAMED[key][0]
        if key not in FIELD:
            unknown.append(key)
            continue
        if len(values) > 1:
            warnings.append(f"Link parameter {key!r} was given {len(values)} times; the last one is used.")
        raw[key] = values[-1] if values else ""
    warnings = unknown_keys_warnings(unknown) + warnings
    state: dict = {}
    for f in FIELDS:  # model and convention come first in FIELDS order, so later defaults can follow them
        if f.name in raw:
            try:
                state[f.name] = parse_value(f, raw[f.name])
                continue
            except (ValueError, ArithmeticError):
                warnings.append(f"Link parameter {f.name}={str(raw[f.name])[:40]!r} is not allowed "
                                f"({allowed(f)}); using the default, {format_value(f, default_for(f.name, state))}.")
        state[f.name] = default_for(f.name, state)
    free = [t for t in POLICY_TARGETS if t not in raw]          # as the CLI: pipelines fill, on the fields the
    if free:                                                    # core accepts (a refused pp is reset); a state
        used = resolve(state).state                             # refused whole (the default view) implies from
        state.update(implied(used if used != defaults() else state, free))   # its own fields, as to_query read it
    return state, warnings


# --- state -> core inputs -------------------------------------------------------------------------------------

def architecture(state: dict) -> Optional[Architecture]:
    if state["model"] == PARAMS_ONLY:
        return None
    base = base_architecture(state["model"])
    changes = {}
    for name in ARCH_FIELDS:
        if state[name] != _arch_value(base, name):
            changes[_ARCH_ATTR.get(name, name)] = state[name] if name != "head_dim" else (state[name] or None)
    ids = state.get(DENSE_IDS, ()) if state["model"] == CUSTOM else base.dense_layer_ids
    if ids != base.dense_layer_ids:
        changes["dense_layer_ids"] = ids
    if changes:
        base = Architecture(**{**{f.name: getattr(base, f.name) for f in dc_fields(Architecture)}, **changes})
    return vision_tower(state, base, _defaults(state["model"], state["convention"]))


def scenario_fields(state: dict, params: int) -> dict:
    return dict(params=params, workers=state["workers"], shard_group=state["shard_group"] or None,
                **{n: state[n] for n in ("gpus_per_node", "offload_optimizer", "offload_params", "convention",
                                         *OPTIMIZER_OPTION_FIELDS)}, **{n: None if state[n] == "none" else state[n]
                                                                          for n in PRECISION_FIELDS})


LAYOUT_FIELDS = ("tp", "pp", "schedule", "vpp", "cp", "sequence_parallel", "loss_parallel", "vocab_divisor", "ep",
                 "etp", *STAGE_NAMES, "micro_batches")


def layout(state: dict) -> Layout:
    return Layout(tp=state["tp"], pp=state["pp"], vpp=state["vpp"], cp=state["cp"],
                  sequence_parallel=state["sequence_parallel"], micro_batches=state["micro_batches"],
                  schedule=state["schedule"], loss_parallel=state["loss_parallel"],
                  vocab_divisor=state["vocab_divisor"] or None, ep=state["ep"], etp=state["etp"], **stage_layout(state))


def workload(state: dict, arch: Architecture) -> Workload:
    return Workload(
        arch, micro_batch=state["micro_batch"], **vision_workload(state, arch),
        activation_dtype=None if state["activation_dtype"] == "auto" else state["activation_dtype"],
        attention=state["attention"], recompute=state["recompute"],
        recompute_every=state["recompute_every"] if state["recompute"] == "full" else 1,
        implementation=state["implementation"],
        reduce_bucket_size=state["reduce_bucket_size"], allgather_bucket_size=state["allgather_bucket_size"],
        prefetch_bucket_size=state["prefetch_bucket_size"], max_live_parameters=state["max_live_parameters"],
        param_persistence_threshold=state["param_persistence_threshold"], overlap_comm=state["overlap_comm"],
        cuda_context_bytes=None if state["cuda_context_bytes"] < 0 else state["cuda_context_bytes"],   # -1
        fragmentation_percent=None if state["fragmentation_percent"] < 0 else state["fragmentation_percent"],   # -1
        nccl_buffsize=state["nccl_buffsize"], nccl_nvls=bool(state["nccl_nvls"]), nccl_percent=state["nccl_percent"],
        gpu=state["gpu"] if state["gpu"] != CUSTOM else DEFAULT_GPU,
        gpu_memory=state["gpu_memory"] if state["gpu"] == CUSTOM else None, layout=layout(state),
        moe_imbalance_percent=state["moe_imbalance_percent"], moe_capacity_percent=state["moe_capacity_percent"],
        moe_dispatcher=state["moe_dispatcher"],
        finetune=finetune(state), **step_workload(state),      # the router loss: MoE under Hugging Face only
        router_loss=bool(state["router_loss"]) and arch.moe_layers > 0 and state["implementation"] == "huggingface",
        holds_output=bool(state["holds_output"]) and state["implementation"] == "huggingface"
        and state["loss"] == "auto", holds_graph=bool(state["holds_graph"]))


def finetune(state: dict) -> FineTune:
    """The training mode; "auto" dtypes are peft's adapter default and the base's own dtype (None in the core)."""
    return FineTune(
        mode=state["finetune"], lora_rank=state["lora_rank"], lora_targets=tuple(state["lora_targets"]),
        lora_dropout=state["lora_dropout"], adapter_dtype=_auto(state["adapter_dtype"]),
        modules_to_save=tuple(state["modules_to_save"]), train_last_layers=state["train_last_layers"],
        train_modules=tuple(state["train_modules"]), base_dtype=_auto(state["base_dtype"]),
        quant_type=state["quant_type"], quant_block_size=int(state["quant_block_size"]),
        double_quant=state["double_quant"], kbit_prepare=state["kbit_prepare"],
        quantize_head=state["quantize_head"] and state["finetune"] == "qlora",
        fp32_parts=_fp32_parts(state), versions=step_versions(state))


def _fp32_parts(state: dict) -> str:
    """The page keeps the field's value while another mode is shown: only the parts that mode reads reach the
    core (none where the mode has no such field, embed-head-norms a full fine-tune's)."""
    parts, mode = state["fp32_parts"], state["finetune"]
    if "fp32_parts" not in FINETUNE_MODE_FIELDS[mode] or parts == "embed-head-norms" and mode != "full":
        return "none"
    return parts


def _auto(value):
    return None if value == "auto" else value


def canonical(state: dict) -> dict:
    """The state with fields that do not matter for it (per _significant) at their defaults."""
    default = _defaults(state["model"], state["convention"])   # model and convention are always significant
    out = dict(state)
    for name in _idle_for(*_significance_key(state)):
        out[name] = default[name]
    return out


_FROM_ARCH_ATTR = {v: k for k, v in _ARCH_ATTR.items()}
# When the core refuses a field that is already at its default, the other field of the pair is the one to reset
# (vpp 1 with the interleaved schedule: the schedule goes back to 1F1B).
_PARTNER = {"vpp": "schedule", "schedule": "vpp", "experts_per_token": "experts", "v_head_dim": "kv_lora_rank",
            "etp": "ep"}


class Resolved(NamedTuple):
    state: dict               # the state actually used (bad cross-field values reset to their defaults)
    scenario: object
    workload: Optional[Workload]
    warnings: List[str]


def resolve(state: dict) -> Resolved:
    """Core inputs from a state. A value the core refuses (a shard group that does not divide the workers, heads
    that do not divide the hidden size) is reset to its default with a warning naming it, and the rest is kept."""
    from zerocalc import FieldError, Scenario
    from zerocalc.model.inventory import param_count
    from zerocalc.parallel.ranks import check_plan

    state, warnings = dict(state), []
    for _ in range(len(FIELDS)):
        stage = "architecture"
        try:
            arch = architecture(state)
            stage = "scenario"
            params = state["params"] if arch is None else param_count(arch)
            scenario = Scenario(**scenario_fields(state, params))
            stage = "workload"
            work = None if arch is None else workload(state, arch)
            if work is not None:
                check_plan(scenario, work)        # checked by the report, not the Workload (experts, optimizer)
            return Resolved(state, scenario, work, warnings)
        except FieldError as exc:
            name = _FROM_ARCH_ATTR.get(exc.field, exc.field) if stage == "architecture" else exc.field
            partner = _PARTNER.get(name)
            if name in FIELD and state[name] == default_for(name, state) and partner and \
                    state[partner] != default_for(partner, state):
                name = partner
            if name not in FIELD or state[name] == default_for(name, state):
                # the default itself is refused in this combination: fall back to every default
                warnings.append(f"{exc}; using the default view.")
                state = defaults()
                continue
            warnings.append(f"{name}: {state[name]!r} is not allowed here ({exc.allowed}); using the default, "
                            f"{format_value(FIELD[name], default_for(name, state))}.")
            state[name] = default_for(name, state)
    raise RuntimeError("could not resolve a valid state")  # unreachable: defaults() always resolves
