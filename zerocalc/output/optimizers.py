"""A shaped optimizer's ledger row (tables.SHAPED_OPTIMIZERS) as the report shows it: its rule in words, and its
bytes per parameter measured on the architecture, or read on the assumed square matrices without one."""

from __future__ import annotations

from fractions import Fraction

from ..states.ledger import bytes_per_param
from ..states.optimizers import SCALES, describe


def _exact(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def shaped_row(report, entry, unique: int, trained) -> dict:
    """Fields added to a ledger row of a shaped state: which tensors keep it, its shape rule, what it scales with,
    where it lives; with an architecture (trained: the parameters that train) its bytes per parameter are one
    copy's bytes over them, else the value on square factored_dim matrices, said as an assumption."""
    st = entry.state
    out = {"shape_rule": st.shape if isinstance(st.shape, str) else "per parameter", "kept_by": describe(st.holders),
           "scales_with": SCALES.get(st.shape, "parameter count"), "memory": st.place}
    if trained:
        out.update(bytes_per_param=unique / trained, bytes_per_param_exact=_exact(Fraction(unique, trained)),
                   elements_per_param=None)
    else:
        d = report.scenario.factored_dim
        out["assumed"] = f"no architecture: square {d:,} x {d:,} hidden matrices (factored_dim)"
    return out


def ledger_total(ledger, rows) -> Fraction:
    """Bytes per parameter of a ledger: its entries' sum, or with a shaped optimizer its rows (ledger_rows) as
    measured on the architecture."""
    if not any("kept_by" in r for r in rows):
        return bytes_per_param(ledger)
    return sum((Fraction(r["bytes_per_param_exact"]) for r in rows), Fraction(0))
