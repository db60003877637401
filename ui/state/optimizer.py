"""The optimizers' options in the app's state (issue 23): Muon's fallback optimizer, Newton-Schulz dtype and
tensor-parallel scope, GaLore / APOLLO's rank, Adam / AdamW's step implementation (issue 31: its temporaries;
zerocalc.scenario.Scenario fields of the same names), and which optimizer reads which. A link carries them; the Precision section shows the ones the chosen optimizer reads."""

from __future__ import annotations

from zerocalc.scenario import INT_LIMITS
from zerocalc.tables import DTYPE_BITS, FALLBACK_OPTIMIZERS, MUON_TP, OPTIMIZER_IMPLS

# The fields each optimizer reads beyond the precision fields (the others do not change its bytes).
OPTIMIZER_OPTIONS = {"muon": ("fallback_optimizer", "ns_dtype", "muon_tp"), "galore-adamw": ("optimizer_rank",),
                     "apollo-adamw": ("optimizer_rank",), "adam": ("optimizer_impl",), "adamw": ("optimizer_impl",)}
OPTIMIZER_OPTION_FIELDS = ("fallback_optimizer", "ns_dtype", "muon_tp", "optimizer_rank", "optimizer_impl")


def optimizer_fields(field) -> tuple:
    """The fields, built with ui.state.fields's Field, with the Scenario's defaults."""
    return (field("fallback_optimizer", "choice", "adamw", FALLBACK_OPTIMIZERS),
            field("ns_dtype", "choice", "bf16", tuple(DTYPE_BITS)), field("muon_tp", "choice", "full", MUON_TP),
            field("optimizer_rank", "int", 128, (), *INT_LIMITS["optimizer_rank"]),
            field("optimizer_impl", "choice", "auto", OPTIMIZER_IMPLS))
