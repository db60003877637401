"""The "pack the batch" fix (issue 37): a padded batch's worst step is micro_batch x the longest sample (one long
sample pads every row), while a packer fills each row up to a token budget, so packing bounds the worst step by the
budget (step/batches.py). With the samples' lengths given, the typical padded micro-batch holds micro_batch x the
median longest of micro_batch samples tokens, padding included; packing into one row of that many tokens (at least
the longest sample, which must fit a row) keeps the job: the same samples, at least as many per step, no extra
compute, kept apart by flash-attention's varlen kernels (transformers DataCollatorWithFlattening). Offered where
that budget is below the padded worst step and the packed step fits; applied, it is the workload below.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Tuple

from ..scenario import FieldError
from ..step.batches import steps

COST = (1, "packing: the same samples in rows filled to the token budget (the typical padded micro-batch's "
           "tokens), kept apart by flash-attention's varlen kernels: no extra compute")


def pack_budget(workload) -> Optional[int]:
    """The token budget of the packed row, or None when packing cannot lower the worst step (not a padded batch,
    no lengths, or a budget no smaller than micro_batch x seq_len)."""
    if workload.batch_mode != "padded" or not workload.batch_lengths:
        return None
    typical, worst = steps(workload)
    budget = max(workload.seq_len, typical.tokens)
    return budget if budget < worst.tokens else None


def pack_change(scenario, workload, stage: int, peak_of) -> Optional[Tuple[dict, int]]:
    """(workload changes, peak) of packing into one row of pack_budget tokens, when it fits at `stage`; `peak_of`
    is fixes._peak (None where the core refuses the combination: packing needs flash attention)."""
    budget = pack_budget(workload)
    if budget is None:
        return None
    change = {"batch_mode": "packed", "micro_batch": 1, "seq_len": budget}
    try:
        packed = replace(workload, **change)
    except FieldError:
        return None
    peak = peak_of(scenario, packed, stage)
    return (change, peak) if peak is not None and peak <= workload.capacity_bytes else None


def pack_text(change: dict) -> str:
    return f"pack the batch (token budget {change['seq_len']:,})"
