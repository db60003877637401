"""The ledger applied per parameter group: a group (tensors one rank holds that ZeRO shards over the same group, in
the same dtype, trained alike) gets its own ledger (a frozen group keeps only its parameters; a fixed storage dtype
sets its widths) and one row per entry with its elements and ZeRO divisor. A quantized base is stored as
bitsandbytes lays it out, tensor by tensor.
"""

from __future__ import annotations

from functools import lru_cache
from operator import attrgetter
from typing import Dict, NamedTuple, Tuple

from ..model.finetune import QUANT_TYPES, is_quant_state, quantized_storage
from ..scenario import Scenario
from ..tables import DTYPE_BITS
from .ledger import LedgerEntry, build_ledger
from .optimizers import holds, state_elements
from .zero import StateRow


class ParamGroup(NamedTuple):
    """Parameters one rank holds that ZeRO shards over the same group, in the same dtype, trained alike."""
    name: str            # "" (dense, trainable), "experts", "fp32" (a router kept in fp32), "nf4, frozen", ...
    params: int          # elements before ZeRO
    grad_params: int     # elements of their gradients (more than params where DTensor keeps a gradient whole)
    shard: int           # the ZeRO / FSDP divisor: dp x cp for dense tensors, the expert-data-parallel size for experts
    holdings: tuple = () # the tensors (placement.Holding): a quantized group's storage is laid out per tensor
    state_shard: int = 0 # a quantized group's quantization state divisor (0: shard): 1 where the framework keeps it
                         # whole on every rank (step/buffers.py shards_quant_state)
    state_on_gpu: bool = False  # that state outside the framework's reach: on the GPU under parameter offload too


# The scenario fields a ledger is built from (ledger.build_ledger): all that group_ledger reads of the scenario.
_LEDGER_FIELDS = ("param_dtype", "grad_dtype", "master_dtype", "grad_accum_dtype", "optimizer", "optimizer_dtype",
                  "factored_dim", "fallback_optimizer", "optimizer_rank")


_ledger_fields = attrgetter(*_LEDGER_FIELDS)     # scenario -> the tuple of those fields


def group_ledger(scenario, ledger, group: str) -> Tuple[LedgerEntry, ...]:
    """The ledger of one parameter group, its entries named after the group. A fixed storage dtype (a router kept
    in fp32, fp32 adapters, a bf16 base) sets the parameters' dtype, and for a trained group its gradients' (where
    they follow the parameter) and, without a master copy, its optimizer state's (torch optimizers keep state in
    the parameter's dtype); one stored at the master's width needs no master copy; a frozen group keeps only its
    parameters: no gradient, no master copy, no optimizer state."""
    if not group:            # the dense, trainable parameters: the scenario's own ledger
        return ledger
    return _group_ledger(_ledger_fields(scenario), ledger, group)


@lru_cache(maxsize=1024)     # keyed by the ledger's fields alone: a new worker count or offload finds it cached
def _group_ledger(precision: tuple, ledger, group: str) -> Tuple[LedgerEntry, ...]:
    parts = group.split(", ") if group else []
    storage = next((p for p in parts if p in DTYPE_BITS), None)
    if "frozen" in parts:
        ledger = tuple(e for e in ledger if e.category == "parameters")
        if storage:
            ledger = tuple(e._replace(dtype=storage, bits=DTYPE_BITS[storage]) for e in ledger)
    elif storage:
        scenario = Scenario(params=1, **dict(zip(_LEDGER_FIELDS, precision)))    # what the fields describe
        changes = {"param_dtype": storage}
        if scenario.grad_dtype == scenario.param_dtype:    # gradients follow their parameter, unless the ledger
            changes["grad_dtype"] = storage                # keeps them wider on purpose (Megatron's fp32 main_grad)
        if scenario.master_dtype is None:
            changes["optimizer_dtype"] = storage
        if storage == "fp32":        # a tensor kept in fp32 never narrows a wider ledger
            changes = {f: v for f, v in changes.items() if DTYPE_BITS[getattr(scenario, f)] < 32}
        # A parameter stored as wide as the master copy is its own master (Megatron's fp32_from_fp32_groups, torch
        # AMP), and its gradient its own accumulator: no second copy of either.
        for f in ("master_dtype", "grad_accum_dtype"):
            if getattr(scenario, f) and DTYPE_BITS[storage] >= DTYPE_BITS[getattr(scenario, f)]:
                changes[f] = None
        ledger = build_ledger(scenario.with_changes(**changes)) if changes else ledger
    return tuple(e._replace(name=f"{group}: {e.name}") for e in ledger) if group else ledger


def quant_of(group: str):
    """The quantized storage a group's name says (QUANT_TYPES: "nf4, frozen" -> "nf4"), else None."""
    return next((q for q in QUANT_TYPES if q in group.split(", ")), None)


def group_rows(scenario, ledger, g: ParamGroup, finetune) -> Tuple[StateRow, ...]:
    """One parameter group's ledger rows: its elements per entry, its ZeRO divisor. A quantized base is stored as
    bitsandbytes lays it out, tensor by tensor (finetune.quantized_storage)."""
    if quant_of(g.name):
        state = g.state_shard or g.shard
        return tuple(StateRow(entry, n, state, on_gpu=g.state_on_gpu) if is_quant_state(entry.name)
                     else StateRow(entry, n, g.shard) for entry, n in _quantized_entries(g.name, g.holdings, finetune))
    per_tensor = None
    if scenario.convention == "fsdp2" and g.holdings:      # FSDP2 pads each tensor's dim-0 shard
        per_tensor = sum(h.fsdp_shard(g.shard) for h in g.holdings)
    rows = []
    for e in group_ledger(scenario, ledger, g.name):
        if e.state is not None and g.holdings:        # a shaped optimizer's state: tensor by tensor
            n = state_elements(e.state, g.holdings, scenario.optimizer_rank, e.dtype)
            padded = None                             # FSDP2: a state shaped like its parameter is padded with it
            if per_tensor is not None and e.state.shape in ("param", ("fraction", (1, 1))):
                padded = sum(h.fsdp_shard(g.shard) for h in g.holdings if holds(e.state.holders, h.tensor, h.shape))
            rows.append(StateRow(e, n, g.shard, padded))
            continue
        rows.append(StateRow(e, e.elements(g.grad_params if e.category == "gradients" else g.params), g.shard,
                             None if per_tensor is None or (e.category == "gradients" and g.grad_params != g.params)
                             else e.elements(per_tensor)))
    return tuple(rows)


@lru_cache(maxsize=256)
def _quantized_entries(group: str, holdings: tuple, finetune) -> Tuple[Tuple[LedgerEntry, int], ...]:
    """A quantized group's stored tensors summed over its holdings: (entry, elements), as bitsandbytes lays out
    each weight (cached: solvers ask again for every worker count and micro-batch)."""
    parts: Dict[str, list] = {}
    for h in holdings:
        for name, (dtype, n) in quantized_storage(h.local_elements, h.tensor.shape[0], finetune).items():
            parts.setdefault(name, [dtype, 0])[1] += n * h.instances
    return tuple((LedgerEntry(f"{group}: {name}", "parameters", dtype, "finetune", 1, 1, DTYPE_BITS[dtype]), n)
                 for name, (dtype, n) in parts.items())


def state_rows(scenario, ledger, shape, finetune=None) -> Tuple[StateRow, ...]:
    """The ledger applied to each of one rank's parameter groups (gradients where DTensor keeps more of them)."""
    return group_state_rows(scenario, ledger, shape.groups, finetune)


def group_state_rows(scenario, ledger, groups, finetune=None) -> Tuple[StateRow, ...]:
    """state_rows from the rank's parameter groups alone."""
    return once_per_optimizer(tuple(row for g in groups for row in group_rows(scenario, ledger, g, finetune)))


def once_per_optimizer(rows) -> Tuple[StateRow, ...]:
    """A state the optimizer keeps once whatever its tensors (bitsandbytes' shared quantization maps, shape rule
    "once") counted in the first group that holds it: one optimizer steps every group of a rank (measured)."""
    seen, out = set(), []
    for row in rows:
        state = row.entry.state
        if state is not None and state.shape == "once" and row.elements:
            if state.name in seen:
                row = row._replace(elements=0)
            seen.add(state.name)
        out.append(row)
    return tuple(out)
