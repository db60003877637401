"""Parameter groups in a report: bytes by group, each group's ledger, and how many stored parameters train."""

from __future__ import annotations

from functools import lru_cache

from ..model.placement import stored_holdings
from ..parallel.ranks import LayoutReport


def group_bytes(entry_bytes: dict) -> dict:
    """Per-entry bytes summed by parameter group (the entry names' "group: " prefix; "dense" for the rest)."""
    out = {}
    for name, nbytes in entry_bytes.items():
        group = name.split(": ", 1)[0] if ": " in name else "dense"
        out[group] = out.get(group, 0) + nbytes
    return out


def group_label(group: str) -> str:
    """A group_bytes key for people: "nf4, frozen" -> "frozen (nf4)", "fp32" -> "trained (fp32)"."""
    parts = [] if group in ("", "dense") else group.split(", ")
    words = ["frozen" if "frozen" in parts else "trained"] + (["experts"] if "experts" in parts else [])
    dtypes = [p for p in parts if p not in ("frozen", "experts")]
    return " ".join(words) + (f" ({dtypes[0]})" if dtypes else "")


def group_ledgers(report: LayoutReport) -> dict:
    """Which ledger entries each parameter group keeps, in bytes per parameter of that group (None: the entry
    vanishes), for the rank class holding the most parameters: how frozen weights drop their gradient, master copy
    and optimizer state, and what a quantized base stores instead of its weights."""
    view = max(report.ranks, key=lambda v: v.shape.params)
    names = [e.name for e in report.ledger]
    groups = []
    for g in view.shape.groups:
        kept = {}            # entry -> bytes of the group: over one common divisor, so summed as integers
        for row in view.rows:
            group, _, entry = row.entry.name.rpartition(": ")
            if group != g.name:
                continue
            key = entry if entry in names else "parameters"       # a quantized weight's parts are its parameters
            kept[key] = kept.get(key, 0) + row.entry.nbytes(row.elements)
        # int / int is correctly rounded: the same float as the exact Fraction's
        per = max(1, g.params)
        groups.append({"group": g.name or "dense", "label": group_label(g.name), "params": g.params,
                       "trainable": not g.name.endswith("frozen"),
                       "bytes_per_param": {n: (kept[n] / per if n in kept else None) for n in names},
                       "total_bytes_per_param": sum(kept.values()) / per})
    return {"rank": view.rank.name, "entries": names, "groups": groups}


def trainable_counts(report: LayoutReport) -> dict:
    """Stored parameters that train and that do not (adapters and trained copies included), one copy each."""
    w, s = report.workload, report.scenario
    return dict(_holding_counts(stored_holdings(w.arch, w.layout, w.implementation, w.finetune, s.param_dtype)))


@lru_cache(maxsize=256)      # one copy of the model does not depend on the workers (handed out as a copy)
def _holding_counts(held) -> dict:
    trainable = sum(h.elements for h in held if h.tensor.trainable)
    adapters = sum(h.elements for h in held if h.tensor.role == "adapter")
    return {"trainable_params": trainable, "frozen_params": sum(h.elements for h in held) - trainable,
            "adapter_params": adapters}
