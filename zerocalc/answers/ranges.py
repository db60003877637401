"""Ranges: the low-high band of each stage's peak when the working-set assumptions vary over documented ranges,
and a fit verdict that says how much the answer depends on them.

Each assumption is a set of Workload fields with a low and a high value (a point outside its range widens the band
to the point, so low <= point <= high always holds: the peak grows with every one of these fields). The band is
computed by whole reports (ranks.layout_report with dataclasses.replace of the fields): all assumptions at their
low values, all at their high values, and each alone (the others at the point) to show which one drives the band.

The ranges and where their figures come from:
- cuda_context (cuda_context_bytes): what nvidia-smi shows beyond PyTorch's allocator besides NCCL's buffers, the
  CUDA context and the kernel modules it loads, by card and torch release (step/context.py: the bare context +
  128 MiB to the bare context + 1 GiB under lazy loading, e.g. 0.65-1.52 GiB on an H100 SXM; 1,017 MiB of modules
  to 1,948 before torch 1.13). A given context (a measurement), an AMD card or a custom capacity: 0.5-1.5 GiB.
  The context alone: 287,047,680 bytes with lazy module loading against 666,632,192 bytes eager (pytorch/pytorch
  PR #86509, which made CUDA_MODULE_LOADING=LAZY PyTorch's default); "around 400MB if CUDA >= 11.7 is used and lazy
  module loading enabled" and "~300MB" now, ">1000MB" before CUDA 11.7 loaded kernels lazily (ptrblck in
  pytorch/pytorch #109888 and #107667).
- nccl (nccl_percent), 25-200 % of NCCL's buffers as step/nccl.py models them per communicator from NCCL's code:
  low, Simple's buffers alone and no NVLS (NCCL connects what a step uses); high, trees beside the rings and both
  sides of each send/recv connection.
- allocator_reserve (fragmentation_percent, allocator_units), modelled per allocator and sharding mode in
  step/allocator.py (Workload.allocator, default "caching"; its docstring derives the band from
  c10/cuda/CUDACachingAllocator.cpp and tests/test_allocator.py checks it against published pairs). Low end 0 % and
  no unit cycles: rounding adds under 512 bytes a tensor and cached blocks that are not split are released
  before an out-of-memory error. The point, fragmentation_percent (5 %), is what survives that release:
  out-of-memory messages users publish ("X is allocated by PyTorch, and Y is reserved by PyTorch but
  unallocated") show Y / X from about 0.1 % (120.54 MiB of 90.63 GiB, a vLLM report) through 3.7 % (1.22 of
  33.29 GiB), 5.2 % (1.51 of 28.92 GiB, ColossalAI discussion #2907) and 7.6 % (3.24 of 42.40 GiB) to over 20 %
  on a small process (1.17 of 5.45 GiB). High end: what a run with room reports as max_memory_reserved, every
  pool at its high-water mark: 35 % of the tensors with the default allocator, plus two unit cycles of the
  communication streams under ZeRO-3 (published pairs reach 1.35x); 10 % with expandable segments (an
  assumption); "flat" keeps the band before issue 20, 0-15 % and no unit cycles. calibrate.compare measures the
  reserve for a real run. With fragmentation_percent None the point is the caching allocator model's reserve
  (step/allocator.py simulated_reserve, issue 32) and the band reaches it where it lies above the high end.
- buckets (reduce_bucket_size, prefetch_bucket_size), opt-in: between the values Hugging Face's "auto" DeepSpeed
  config fills in from the hidden size h (reduce_bucket_size = h * h, stage3_prefetch_bucket_size = 0.9 * h * h:
  accelerate's Accelerator._prepare_deepspeed and transformers' HfTrainerDeepSpeedConfig) and DeepSpeed's own
  defaults (5e8 and 5e7 elements, deepspeed/runtime/zero/config.py).
- moe_imbalance (moe_imbalance_percent), in the default band of a mixture-of-experts model under expert parallelism
  (default_vary; issue 37), the point staying balanced unless the user sets a factor: the pairs the busiest expert-parallel rank receives,
  from balanced routing (100 %) to the capacity factor where the router drops tokens above it (a rank cannot
  receive more), else 125 %: an assumption, Switch Transformer's capacity factor 1.25 (Fedus et al. 2021, the
  drop threshold its balanced training ran at); a rank averages E / ep experts, so it swings less than one hot
  expert, and a narrow fine-tuning set can swing more: widen it with `bounds`. Moves nothing without expert
  parallelism (Workload.routing).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from ..parallel.ranks import layout_report
from ..scenario import FieldError
from ..step.allocator import ALLOCATORS
from ..step.context import context_band
from ..step.nccl import HIGH_PERCENT as NCCL_HIGH, LOW_PERCENT as NCCL_LOW
from ..step.peak import outside_parts, tensor_bytes, with_overheads
from ..step.workload import WORKLOAD_LIMITS
from ..tables import STAGES

GIB = 2**30
FITS_EVEN_AT_HIGH = "fits even at the high end"
FITS = "fits"
FITS_LOW_ONLY = "fits at the low end only"
NO_FIT = "does not fit even at the low end"
VERDICTS = (FITS_EVEN_AT_HIGH, FITS, FITS_LOW_ONLY, NO_FIT)


@dataclass(frozen=True)
class Assumption:
    """A named set of Workload fields varied together, with their low and high values for a workload."""
    name: str
    label: str
    fields: Tuple[str, ...]
    low: Callable[[object], Dict[str, int]]
    high: Callable[[object], Dict[str, int]]
    source: str


def _hf_auto(workload) -> Dict[str, int]:
    h = workload.arch.hidden
    return {"reduce_bucket_size": h * h, "prefetch_bucket_size": 9 * h * h // 10}


ASSUMPTIONS: Dict[str, Assumption] = {
    "cuda_context": Assumption(
        "cuda_context", "CUDA context", ("cuda_context_bytes",),
        lambda w: {"cuda_context_bytes": context_band(w)[0]}, lambda w: {"cuda_context_bytes": context_band(w)[1]},
        "by card and torch release (step/context.py): the bare context, 2.04 KiB per thread slot of the card "
        "(534 MiB on an H100 SXM, meta-pytorch/torchcomms#777), + 128 MiB to + 1 GiB of kernel modules under lazy "
        "loading (450 MiB at the point: torch's whole eager-lazy gap on an A100, stas00/ml-engineering), 1,017 to "
        "1,948 MiB before torch 1.13; 0.5-1.5 GiB for a given context, AMD or a custom capacity; NCCL's buffers "
        "are their own row (nccl)"),
    "allocator_reserve": Assumption(
        "allocator_reserve", "allocator reserve", ("fragmentation_percent", "allocator_units"),
        lambda w: {"fragmentation_percent": 0, "allocator_units": 0},
        lambda w: {"fragmentation_percent": ALLOCATORS[w.allocator].high_percent,
                   "allocator_units": ALLOCATORS[w.allocator].high_units},
        "0 (rounding only; cached blocks are released before an OOM) to what a run with room reserves "
        "(step/allocator.py, c10/cuda/CUDACachingAllocator.cpp): 35 % of the tensors with PyTorch's caching "
        "allocator, plus two unit cycles of ZeRO-3's communication streams (published pairs up to 1.35x); 10 % "
        "with expandable segments (an assumption); 15 % and no units for \"flat\", the band before issue 20"),
    "nccl": Assumption(
        "nccl", "NCCL buffers", ("nccl_percent",),
        lambda w: {"nccl_percent": NCCL_LOW}, lambda w: {"nccl_percent": NCCL_HIGH},
        f"{NCCL_LOW} % to {NCCL_HIGH} % of the modelled buffers (step/nccl.py, from NCCL's code): low, Simple's "
        "buffers alone without NVLS (NCCL connects only what a step uses); high, trees beside the rings and both "
        "sides of each send/recv connection (NVIDIA/nccl#1685's measured all-to-all on 8 x H100 lies at 1.25x)"),
    "buckets": Assumption(
        "buckets", "bucket sizes", ("reduce_bucket_size", "prefetch_bucket_size"),
        _hf_auto, lambda w: {"reduce_bucket_size": 500_000_000, "prefetch_bucket_size": 50_000_000},
        "between Hugging Face's \"auto\" values (h*h and 0.9*h*h elements: accelerate, transformers) and "
        "DeepSpeed's defaults (5e8 and 5e7 elements, deepspeed/runtime/zero/config.py)"),
}
ASSUMPTIONS["moe_imbalance"] = Assumption(
    "moe_imbalance", "MoE routing imbalance", ("moe_imbalance_percent",),
    lambda w: {"moe_imbalance_percent": 100},
    lambda w: {"moe_imbalance_percent": max(100, w.moe_capacity_percent) if w.moe_capacity_percent else 125},
    "100 % (balanced routing) to the capacity factor where tokens are dropped, else 125 %: an assumption from "
    "Switch Transformer's capacity factor 1.25 (Fedus et al. 2021); the busiest expert-parallel rank only")
DEFAULT_VARY = ("cuda_context", "allocator_reserve", "nccl")


def default_vary(workload) -> Tuple[str, ...]:
    """The assumptions a band varies unless told: DEFAULT_VARY, and the MoE imbalance where it moves anything (a
    mixture-of-experts model under expert parallelism: the busiest rank's expert MLP activations, the dispatched
    tokens the all-to-all delivers among them)."""
    moe = workload.arch is not None and workload.arch.moe_layers > 0 and workload.layout.ep > 1
    return DEFAULT_VARY + (("moe_imbalance",) if moe else ())


def _imbalance_note(workload) -> str:
    """Which assumption decides the imbalance band's high end, in words."""
    if workload.moe_capacity_percent:
        return (f"MoE imbalance: the high end is the capacity factor {workload.moe_capacity_percent / 100:g} "
                "(moe_capacity_percent): the router drops the tokens above it, so no rank receives more")
    return ("MoE imbalance: dropless routing (no capacity factor), so the high end is an assumption, 125 % of a "
            "balanced share on the busiest expert-parallel rank (Switch Transformer's capacity factor 1.25); the "
            "point is balanced unless moe_imbalance_percent is set")
# Fields that change only a phase's overheads, not its tensors (peak.with_overheads): moved without a new report.
OVERHEAD_FIELDS = frozenset({"cuda_context_bytes", "fragmentation_percent", "allocator_units", "nccl_percent"})


class StageBand(NamedTuple):
    stage: int
    low_bytes: int
    point_bytes: int
    high_bytes: int
    capacity_bytes: int
    verdict: str
    swing: Dict[str, Tuple[int, int]]    # assumption -> (peak at its low, at its high), the others at the point

    @property
    def drivers(self) -> Tuple[str, ...]:
        """The assumptions by how far each alone moves the peak, widest first."""
        return tuple(sorted(self.swing, key=lambda n: (-(self.swing[n][1] - self.swing[n][0]), n)))


class Ranges(NamedTuple):
    bands: Tuple[StageBand, ...]
    vary: Tuple[str, ...]
    low: Dict[str, int]                  # field -> value at the low end
    point: Dict[str, int]                # field -> the workload's value
    high: Dict[str, int]                 # field -> value at the high end
    notes: Tuple[str, ...]

    def band(self, stage: int) -> StageBand:
        return self.bands[stage]


def verdict(low: int, point: int, high: int, capacity: int) -> str:
    """How the fit depends on the assumptions: from "fits even at the high end" to "does not fit even at the low
    end"; "fits" when the point fits but the high end does not."""
    if not low <= point <= high:
        raise FieldError("band", (low, point, high), "low <= point <= high")
    if high <= capacity:
        return FITS_EVEN_AT_HIGH
    if point <= capacity:
        return FITS
    if low <= capacity:
        return FITS_LOW_ONLY
    return NO_FIT


def _ends(workload, names, bounds) -> Tuple[Dict[str, int], Dict[str, int], Dict[str, int], list]:
    low, point, high, notes = {}, {}, {}, []
    for name in names:
        spec = ASSUMPTIONS[name]
        lows, highs = spec.low(workload), spec.high(workload)
        for f in spec.fields:
            lo, hi = bounds.get(f, (lows[f], highs[f]))
            lo, hi = min(lo, hi), max(lo, hi)
            value = getattr(workload, f)
            limit_lo, limit_hi = WORKLOAD_LIMITS[f]
            lo, hi = max(lo, limit_lo), min(hi, limit_hi)
            if value is None:            # fragmentation_percent unset: the allocator model's point (issue 32)
                low[f], point[f], high[f] = lo, value, hi
                continue
            if not lo <= value <= hi:
                notes.append(f"{f} = {value:,} lies outside its range {lo:,}-{hi:,}: the band reaches it")
            low[f], point[f], high[f] = min(lo, value), value, max(hi, value)
    return low, point, high, notes


def ranges(scenario, workload, vary=None, bounds: Optional[Dict[str, Tuple[int, int]]] = None) -> Ranges:
    """Per ZeRO stage: the peak with every varied assumption at its low end, at the point, at its high end, the
    swing of each alone, and the verdict. `vary` names ASSUMPTIONS entries; `bounds` replaces the range of a
    varied field ({"cuda_context_bytes": (lo, hi)}), clipped to the field's WORKLOAD_LIMITS. vary None:
    default_vary(workload)."""
    vary = default_vary(workload) if vary is None else tuple(vary)
    unknown = [n for n in vary if n not in ASSUMPTIONS]
    if unknown or len(set(vary)) != len(vary):
        raise FieldError("vary", list(vary), "distinct names from " + ", ".join(ASSUMPTIONS))
    bounds = dict(bounds or {})
    varied = [f for n in vary for f in ASSUMPTIONS[n].fields]
    for f, pair in bounds.items():
        if f not in varied or not (isinstance(pair, tuple) and len(pair) == 2 and
                                   all(isinstance(v, int) and not isinstance(v, bool) for v in pair)):
            raise FieldError("bounds", {f: pair}, "a varied field (" + ", ".join(varied) + ") -> (low, high) "
                             "integers")
    low, point, high, notes = _ends(workload, vary, bounds)
    if "moe_imbalance" in vary:
        notes.append(_imbalance_note(workload))

    point_report = layout_report(scenario, workload)
    # Every rank class's (tensors, cycle unit) per stage: the worst rank is the largest total at each setting.
    tensors = [[(tensor_bytes(v.peaks[s]), v.peaks[s].cycle_unit_bytes, v.peaks[s].simulated_reserve, v.shape)
                for v in point_report.ranks] for s in STAGES]

    point_sims = [p.simulated_reserve for p in point_report.peaks]

    def peaks(fields, high_end=False):
        if fields.keys() <= OVERHEAD_FIELDS:       # the step's tensors do not move: only its overheads do
            percent = fields.get("fragmentation_percent", workload.fragmentation_percent)
            units = fields.get("allocator_units", workload.allocator_units)
            outside = {id(shape): sum(outside_parts(workload, shape, fields.get("cuda_context_bytes"),
                                                    fields.get("nccl_percent")).values())
                       for shape in {id(v.shape): v.shape for v in point_report.ranks}.values()}
            return [max(with_overheads(t, outside[id(shape)], percent, units, u, sim) for t, u, sim, shape in ranks)
                    for ranks in tensors]
        moved = layout_report(scenario, replace(workload, **fields)).peaks
        # the allocator model's reserve is not monotone in the tensors (a larger step can fill blocks a smaller one
        # left cached): a high end keeps at least the point's reserve, so more tensors never lower the band
        return [p.peak_bytes + (max(0, sim - p.simulated_reserve) if high_end and None not in (sim, p.simulated_reserve)
                                else 0) for p, sim in zip(moved, point_sims)]

    at_point = [p.peak_bytes for p in point_report.peaks]
    at_low, at_high = peaks(low), peaks(high, True)
    swings = {}
    for name in vary:
        own = ASSUMPTIONS[name].fields
        swings[name] = (peaks({f: low[f] for f in own}), peaks({f: high[f] for f in own}, True))
    capacity = workload.capacity_bytes
    bands = []
    for s in STAGES:
        # a simulated point (fragmentation_percent None) may lie outside the percent's range: the band reaches it
        band = (min(at_low[s], at_point[s]), at_point[s], max(at_high[s], at_point[s]))
        bands.append(StageBand(s, *band, capacity, verdict(*band, capacity),
                               {n: (lo[s], hi[s]) for n, (lo, hi) in swings.items()}))
    return Ranges(tuple(bands), vary, low, point, high, tuple(notes))


def ranges_dict(r: Ranges) -> dict:
    """Plain data for JSON and the UI: integers are bytes."""
    return {
        "vary": list(r.vary),
        "assumptions": [{"name": n, "label": ASSUMPTIONS[n].label, "source": ASSUMPTIONS[n].source,
                         "fields": {f: {"low": r.low[f], "point": r.point[f], "high": r.high[f]}
                                    for f in ASSUMPTIONS[n].fields}} for n in r.vary],
        "stages": [{"stage": b.stage, "low_bytes": b.low_bytes, "point_bytes": b.point_bytes,
                    "high_bytes": b.high_bytes, "capacity_bytes": b.capacity_bytes, "verdict": b.verdict,
                    "swing": {n: {"low_bytes": lo, "high_bytes": hi} for n, (lo, hi) in b.swing.items()},
                    "drivers": list(b.drivers)} for b in r.bands],
        "notes": list(r.notes),
    }
