"""The ledger: every persistent per-parameter state tensor, with its category and dtype.

Bytes stay exact integers: an entry holds `num / den` elements per parameter (1/256 for a block-quantization
scale, 2/d for a factored moment) of a dtype `bits` wide, and every count rounds up to whole elements, then to
whole bytes.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple, Optional, Tuple

from ..tables import DTYPE_BITS, OPTIMIZERS, SHAPED_OPTIMIZERS, OptState
from .optimizers import assumed_per_param, optimizer_states


class LedgerEntry(NamedTuple):
    name: str
    category: str       # "parameters" | "gradients" | "optimizer"
    dtype: str
    source: str         # the Scenario field that sets this entry's dtype ("optimizer" for fixed optimizer dtypes)
    num: int            # elements per parameter = num / den
    den: int
    bits: int
    state: Optional[OptState] = None    # a shaped optimizer's row: its elements follow each tensor's shape

    @property
    def bytes_per_param(self) -> Fraction:
        return Fraction(self.num * self.bits, self.den * 8)

    def elements(self, params: int) -> int:
        return -(-params * self.num // self.den)

    def nbytes(self, elements: int) -> int:
        return -(-elements * self.bits // 8)


def _entry(name, category, dtype, source, per_param=(1, 1)) -> LedgerEntry:
    num, den = per_param
    return LedgerEntry(name, category, dtype, source, num, den, DTYPE_BITS[dtype])


@lru_cache(maxsize=1024)
def _build(param_dtype: str, grad_dtype: str, master_dtype: Optional[str], grad_accum_dtype: Optional[str],
           optimizer: str, optimizer_dtype: str, factored_dim: int, fallback: str = "adamw",
           rank: int = 128) -> Tuple[LedgerEntry, ...]:
    entries = [
        _entry("parameters", "parameters", param_dtype, "param_dtype"),
        _entry("gradients", "gradients", grad_dtype, "grad_dtype"),
    ]
    if grad_accum_dtype is not None:
        entries.append(_entry("gradient accumulation buffer", "gradients", grad_accum_dtype, "grad_accum_dtype"))
    if master_dtype is not None:
        entries.append(_entry("master parameters", "optimizer", master_dtype, "master_dtype"))
    if optimizer in SHAPED_OPTIMIZERS:
        # Per parameter only on assumed square factored_dim matrices; with an architecture each group's rows follow
        # its tensors' shapes (states/groups.py).
        for st in optimizer_states(optimizer, fallback):
            dtype, source = (optimizer_dtype, "optimizer_dtype") if st.dtype == "state" else (st.dtype, "optimizer")
            per = assumed_per_param(st, factored_dim, rank, dtype)
            entries.append(LedgerEntry(st.name, "optimizer", dtype, source, per.numerator, per.denominator,
                                       DTYPE_BITS[dtype], st))
        return tuple(entries)
    for name, per_param, dtype in OPTIMIZERS[optimizer]:
        if per_param == "factored":
            per_param = (2, factored_dim)
        if dtype == "state":
            entries.append(_entry(name, "optimizer", optimizer_dtype, "optimizer_dtype", per_param))
        else:
            entries.append(_entry(name, "optimizer", dtype, "optimizer", per_param))
    return tuple(entries)


def build_ledger(scenario) -> Tuple[LedgerEntry, ...]:
    """The persistent state entries a scenario's precision fields and optimizer imply."""
    s = scenario
    return _build(s.param_dtype, s.grad_dtype, s.master_dtype, s.grad_accum_dtype, s.optimizer,
                  s.optimizer_dtype, s.factored_dim, s.fallback_optimizer, s.optimizer_rank)


def bytes_per_param(ledger) -> Fraction:
    if isinstance(ledger, tuple):        # build_ledger's: one of few, met again by every report
        return _bytes_per_param(ledger)
    return sum((e.bytes_per_param for e in ledger), Fraction(0))


@lru_cache(maxsize=1024)     # Fraction sums are slow and a ledger does not depend on the workers
def _bytes_per_param(ledger: Tuple[LedgerEntry, ...]) -> Fraction:
    return sum((e.bytes_per_param for e in ledger), Fraction(0))
