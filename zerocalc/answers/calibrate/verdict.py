"""Measured beats estimated: what a pasted measurement of the plan says of the fit, whatever the estimate says.

- An out-of-memory message is a failure on the capacity it reports ("total capacity", PyTorch's own ceiling):
  the run needed at least its allocated memory plus the failed request. On a card of that capacity or less it
  does not fit; on a larger one it does not fit only where that lower bound alone is over the capacity, and
  otherwise the measurement does not decide (the estimate does, and the sentence says so).
- A completed run's measured peak (PyTorch's reserved peak, else its allocated peak; nvidia-smi's used memory
  where it is larger, context included) over the capacity does not fit; under it, it fits, as measured.
"""

from __future__ import annotations

from typing import Optional

from ...units import format_bytes
from .measurement import Measurement


def _gib(n: int) -> str:
    return format_bytes(n, "binary")


def measured_fit(m: Measurement, capacity_bytes: int, units: str = "binary") -> dict:
    """{"fits": True | False | None (the measurement does not decide), "bytes": the figure compared, "sentence"};
    sizes in `units` (decimal / binary / a unit name)."""
    def _gib(n: int) -> str:
        return format_bytes(n, units)

    if m.out_of_memory:
        need = m.needed_at_least_bytes
        ran_on = m.usable_total_bytes
        if ran_on is not None and capacity_bytes <= ran_on + m.tolerance_bytes.get("usable_total_bytes", 0):
            return {"fits": False, "bytes": need, "sentence": (
                f"Measured: the run ran out of memory on {_gib(ran_on)} (PyTorch's total capacity; this plan "
                f"checks {_gib(capacity_bytes)}). It needed at least {_gib(need)}: {_gib(m.allocated_peak_bytes)} "
                f"allocated + the {_gib(m.failed_request_bytes)} it failed to allocate.")}
        if need is not None and need > capacity_bytes:
            return {"fits": False, "bytes": need, "sentence": (
                f"Measured: the run ran out of memory needing at least {_gib(need)}, more than the "
                f"{_gib(capacity_bytes)} this plan checks.")}
        return {"fits": None, "bytes": need, "sentence": (
            "Measured: an out-of-memory on a smaller card"
            + (f" ({_gib(ran_on)})" if ran_on is not None else "")
            + f"; its lower bound {_gib(need or 0)} is under this plan's {_gib(capacity_bytes)}, so the estimate "
            "decides here.")}
    peak = _completed_peak(m)
    if peak is None:
        return {"fits": None, "bytes": None, "sentence": ""}
    figure, what = peak
    fits = figure <= capacity_bytes
    return {"fits": fits, "bytes": figure, "sentence": (
        f"Measured: {what} {_gib(figure)}, {'within' if fits else 'over'} the {_gib(capacity_bytes)} this plan "
        f"checks: {'fits' if fits else 'does not fit'}, whatever the estimate says.")}


def _completed_peak(m: Measurement) -> Optional[tuple]:
    """The largest figure a completed run printed, as (bytes, its name)."""
    figures = [(m.reserved_peak_bytes, "PyTorch's reserved peak"), (m.allocated_peak_bytes, "the allocated peak"),
               (m.nvidia_smi_used_bytes, "nvidia-smi's used memory")]
    given = [(b, what) for b, what in figures if b is not None]
    return max(given, key=lambda g: g[0]) if given else None


def lowers_estimate(field: str, current: int, suggested: int) -> bool:
    """Whether setting a calibration suggestion would lower the estimated peak (or raise the capacity)."""
    if field == "gpu_memory":
        return False                  # the capacity the run measured is a fact, not a direction
    return suggested < current
