"""A measurement against the estimate: each figure like for like, and the Workload assumption that would absorb
the difference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Dict, Optional, Tuple

from ...gpus import ESTIMATE_GAP
from ...scenario import FieldError
from ...units import format_bytes
from ...step.context import context_bytes
from ...step.peak import NOT_ALLOCATED, OUTSIDE, RESERVE, phase_figures
from .measurement import Measurement
from .phase import PHASE_WORDS
from .verdict import lowers_estimate, measured_fit

TENSOR_EXCLUDED = (*NOT_ALLOCATED, *OUTSIDE)       # not one allocation: the live tensors' parts


@dataclass(frozen=True)
class Residual:
    """One measured figure against the part of the estimate it counts."""
    quantity: str                 # "allocated", "reserved", "nvidia-smi used"
    measured_bytes: int
    estimated_bytes: int
    estimate_covers: str          # which components of the estimate it is compared with
    phase: str                    # the estimate's phase where that part is largest
    tolerance_bytes: int = 0      # the measurement's printed rounding

    @property
    def residual_bytes(self) -> int:
        """measured - estimated: positive when the run used more than estimated."""
        return self.measured_bytes - self.estimated_bytes

    @property
    def residual_percent(self) -> Optional[float]:
        """For display only; the residual's exact value is residual_bytes."""
        return None if not self.estimated_bytes else 100.0 * self.residual_bytes / self.estimated_bytes

    @property
    def within_rounding(self) -> bool:
        return abs(self.residual_bytes) <= self.tolerance_bytes

    def to_dict(self) -> dict:
        return {"quantity": self.quantity, "measured_bytes": self.measured_bytes,
                "estimated_bytes": self.estimated_bytes, "residual_bytes": self.residual_bytes,
                "residual_percent": self.residual_percent, "estimate_covers": self.estimate_covers,
                "phase": self.phase, "tolerance_bytes": self.tolerance_bytes, "within_rounding": self.within_rounding}


@dataclass(frozen=True)
class PhaseResidual:
    """A probe phase against the estimate's phase of the same name (forward, backward, optimizer_step)."""
    phase: str
    measured_allocated_bytes: Optional[int]
    estimated_tensor_bytes: int
    measured_reserved_bytes: Optional[int]
    estimated_reserved_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Suggestion:
    """A Workload assumption, the value that would absorb a residual, and why."""
    field: str
    current: int
    suggested: int
    sentence: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Calibration:
    measurement: Measurement
    stage: Optional[int]
    residuals: Tuple[Residual, ...]
    phases: Tuple[PhaseResidual, ...]
    suggestions: Tuple[Suggestion, ...]
    sentences: Tuple[str, ...]
    verdict: dict = None          # verdict.measured_fit: what the measurement says of the fit
    reproduced: Optional[bool] = None   # compare_stage: whether the estimate with every suggestion set matches

    def residual(self, quantity: str) -> Optional[Residual]:
        return next((r for r in self.residuals if r.quantity == quantity), None)

    def suggestion(self, field_name: str) -> Optional[Suggestion]:
        return next((s for s in self.suggestions if s.field == field_name), None)

    def suggested_workload(self, workload, fields=None):
        """The workload with the suggested assumptions set (all of them, or those named in `fields`)."""
        chosen = {s.field: s.suggested for s in self.suggestions if fields is None or s.field in fields}
        return replace(workload, **chosen) if chosen else workload

    def to_dict(self) -> dict:
        return {"stage": self.stage, "measurement": self.measurement.to_dict(),
                "residuals": [r.to_dict() for r in self.residuals], "phases": [p.to_dict() for p in self.phases],
                "suggestions": [s.to_dict() for s in self.suggestions], "sentences": list(self.sentences),
                "verdict": self.verdict, "reproduced": self.reproduced}


def _phases_of(peak) -> Tuple[Optional[int], Dict[str, Dict[str, int]]]:
    if isinstance(peak, dict):
        if not isinstance(peak.get("phases"), dict):
            raise FieldError("peak", type(peak).__name__, "a StagePeak or a report \"peak\" row with \"phases\"")
        return peak.get("stage"), peak["phases"]
    phases = getattr(peak, "phases", None)
    if not isinstance(phases, dict):
        raise FieldError("peak", type(peak).__name__, "a StagePeak or a report \"peak\" row with \"phases\"")
    return getattr(peak, "stage", None), phases


def _largest(parts_by_phase: Dict[str, int]) -> Tuple[str, int]:
    phase = max(parts_by_phase, key=lambda p: (parts_by_phase[p], p))
    return phase, parts_by_phase[phase]


def _ceil_percent(numerator: int, denominator: int) -> int:
    """The smallest whole percent p with denominator * p / 100 >= numerator (numerator >= 0)."""
    return -(-100 * numerator // denominator)


def _capacity_suggestion(m: Measurement, workload, units: str = "binary") -> Optional["Suggestion"]:
    """gpu_memory from a measured capacity. PyTorch's own total (the OOM message's "total capacity", mem_get_info)
    is what the verdict compares with, so it is taken as it is. nvidia-smi's total is not: the driver keeps part of
    it (zerocalc.gpus), so only a card whose nvidia-smi total differs from the catalogue's gets a suggestion, its
    total less ESTIMATE_GAP, and the sentence says where the exact figure is printed."""
    def _gib(n: int) -> str:
        return format_bytes(n, units)
    current = workload.capacity_bytes
    if m.usable_total_bytes is not None:
        if abs(m.usable_total_bytes - current) <= m.tolerance_bytes.get("usable_total_bytes", 0):
            return None
        return Suggestion(
            "gpu_memory", current, m.usable_total_bytes,
            f"PyTorch reports a total capacity of {m.usable_total_bytes:,} bytes ({_gib(m.usable_total_bytes)}): "
            f"the ceiling its allocator works under; the estimate assumes {current:,} ({workload.gpu_label}). "
            f"gpu_memory = {m.usable_total_bytes:,} would use the measured capacity.")
    smi = m.nvidia_smi_total_bytes
    if smi is None or smi == workload.nvidia_smi_bytes or smi - ESTIMATE_GAP == current:
        return None
    return Suggestion(
        "gpu_memory", current, smi - ESTIMATE_GAP,
        f"nvidia-smi reports {smi:,} bytes ({_gib(smi)}) in total, which is more than PyTorch can use: the driver "
        f"keeps 0.02-1.08 GiB of it on the published cards. gpu_memory = {smi - ESTIMATE_GAP:,} (1.25 GiB less) is a "
        f"safe estimate (now {current:,}, {workload.gpu_label}); the exact figure is the OOM message's 'total "
        "capacity' or torch.cuda.mem_get_info()[1].")


def _lowers(x: "Suggestion", phases: Dict[str, Dict[str, int]]) -> bool:
    """Whether a suggestion lowers the estimate. A percent replacing the allocator's model (current None, issue
    32) lowers it where that percent of the peak phase's tensors is below the model's reserve there."""
    if x.field != "fragmentation_percent" or x.current is not None:
        return lowers_estimate(x.field, x.current, x.suggested)
    parts = max(phases.values(), key=lambda c: phase_figures(c)["device_bytes"])
    return -(-phase_figures(parts)["allocated_bytes"] * x.suggested // 100) < parts.get(RESERVE, 0)


def _keep_direction(suggestions: list, sentences: list, phases: Dict[str, Dict[str, int]]) -> list:
    """The measurement says the plan fails while the estimate fits: a Set that lowers the estimate would move it
    further from the run, so it is left out, and a sentence says why."""
    kept = [x for x in suggestions if not _lowers(x, phases)]
    for x in suggestions:
        if x not in kept:
            now = "the allocator model's" if x.current is None else f"{x.current:,}"
            sentences.append(f"{x.field} stays {now}: the measurement says the plan does not fit, and "
                             f"{x.suggested:,} would lower the estimate.")
    return kept


def _failed_request_sentence(m: Measurement, parts: Dict[str, int], _gib) -> str:
    """The failing phase, from the traceback, and the estimate's term of that phase the failed request matches
    (within the message's printed rounding, or 1%): "3.14 GiB = one fp32 partition's Adam temporary"."""
    ask = m.failed_request_bytes
    slack = max(m.tolerance_bytes.get("allocated_peak_bytes", 0), ask // 100)
    sizes = []                              # (bytes, how the sentence names it): a term, or one of its N copies
    for name, value in parts.items():
        if name in TENSOR_EXCLUDED:
            continue
        sizes.append((value, f"the estimate's \"{name}\""))
        copies = name.rpartition(" x ")[2]
        if copies.isdigit() and int(copies) > 1:
            sizes.append((value // int(copies), f"one of the {copies} copies in the estimate's \"{name}\""))
    match = min(((abs(v - ask), v, said) for v, said in sizes if abs(v - ask) <= slack), default=None)
    said = (f"The run ran out of memory in {PHASE_WORDS[m.failed_phase]} (the traceback's frame {m.failed_frame!r}), "
            f"asking for {_gib(ask)} more")
    if match is None:
        return said + f"; no single term the estimate holds in {PHASE_WORDS[m.failed_phase]} is that size."
    return said + f": {_gib(ask)} = {match[2]} ({_gib(match[1])}) in that phase."


def compare(measurement: Measurement, peak, workload, units: str = "binary") -> Calibration:
    """The measurement against one stage's estimated peak (a peak.StagePeak, or a report's "peak" row).

    Rules, each a like-for-like comparison:
    - torch.cuda.max_memory_allocated counts live tensors only: compared with the estimate's tensors, every
      component except "allocator reserve" and those outside the allocator (peak.OUTSIDE), in the phase where
      they are largest;
    - max_memory_reserved adds the caching allocator's cached, unused blocks: compared with tensors + "allocator
      reserve";
    - nvidia-smi's memory.used adds the CUDA context, NCCL's buffers and whatever else is on the device: compared
      with the whole peak (tensors + reserve + context + NCCL).
    Absorbing assumptions (the Workload's): fragmentation_percent from the measured (reserved - allocated) as a
    share of allocated, rounded up to a whole percent; cuda_context_bytes from the measured used - reserved. A
    residual on the tensors themselves belongs to no assumption: its sentence says where to look. Exact integers
    throughout; percentages are floats for display only.
    """
    def _gib(n: int) -> str:           # sizes in the sentences: the page's unit system (binary by default)
        return format_bytes(n, units)
    if not isinstance(measurement, Measurement):
        raise FieldError("measurement", type(measurement).__name__, "a calibrate Measurement (from parse)")
    stage, phases = _phases_of(peak)
    figures = {p: phase_figures(parts) for p, parts in phases.items()}
    tensors = {p: f["allocated_bytes"] for p, f in figures.items()}
    reserved = {p: f["reserved_bytes"] for p, f in figures.items()}
    whole = {p: f["device_bytes"] for p, f in figures.items()}
    m, tol = measurement, measurement.tolerance_bytes
    residuals, sentences, suggestions = [], [], []
    for quantity, value, estimate, covers, tkey in (
            ("allocated", m.needed_at_least_bytes, tensors, "tensors: every component except allocator reserve and "
             "what lies outside the allocator (CUDA context, NCCL buffers)" + ("; measured: allocated at the failure + the failed request, a lower bound"
                               if m.out_of_memory else ""), "allocated_peak_bytes"),
            ("reserved", m.reserved_peak_bytes, reserved, "tensors + allocator reserve", "reserved_peak_bytes"),
            ("nvidia-smi used", m.nvidia_smi_used_bytes, whole, "the whole peak: tensors + allocator reserve + "
             "CUDA context + NCCL buffers", "nvidia_smi_used_bytes")):
        if value is not None and estimate:
            phase, est = _largest(estimate)
            if m.failed_phase in estimate:           # the traceback's phase: the failure is compared where it was
                phase, est = m.failed_phase, estimate[m.failed_phase]
            residuals.append(Residual(quantity, value, est, covers, phase, tol.get(tkey, 0)))
    if m.out_of_memory and m.failed_phase in phases:
        sentences.append(_failed_request_sentence(m, phases[m.failed_phase], _gib))

    alloc_r = next((r for r in residuals if r.quantity == "allocated"), None)
    if alloc_r is not None:
        if alloc_r.within_rounding:
            sentences.append(f"Live tensors: measured {_gib(alloc_r.measured_bytes)} against "
                             f"{_gib(alloc_r.estimated_bytes)} estimated, equal within the printed rounding.")
        else:
            pct = alloc_r.residual_percent
            more = alloc_r.residual_bytes > 0
            hint = ("whether the run keeps tensors the estimate does not count (EMA weights, a reference model, "
                    "cached batches, eager attention scores)" if more else
                    "whether the run avoids tensors the estimate counts (a fused or chunked loss that never holds "
                    "the fp32 logits, activation checkpointing, offload)")
            sentences.append(
                f"Live tensors: the run {'needed at least' if m.out_of_memory else 'allocated'} "
                f"{_gib(abs(alloc_r.residual_bytes))} {'more' if more else 'less'} than estimated ({pct:+.1f}%, "
                f"estimated peak in {alloc_r.phase}). No allocator or context assumption absorbs this: check the "
                f"micro-batch, sequence length, recompute, attention kernel and dtypes, and {hint}.")
            extra = workload.measured_extra_bytes
            target = max(0, extra + alloc_r.residual_bytes)
            if target != extra:
                suggestions.append(Suggestion(
                    "measured_extra_bytes", extra, target,
                    f"measured_extra_bytes = {target:,} ({_gib(target)}) would hold what the run "
                    f"{'needed' if m.out_of_memory else 'allocated'} beyond the estimate in every phase, so the "
                    f"verdict follows the run (now {extra:,}); fixing the plan's inputs is better where one is off."))

    cur_f, cur_c = workload.fragmentation_percent, context_bytes(workload)
    if m.reserved_peak_bytes is not None:
        base = m.allocated_peak_bytes if m.allocated_peak_bytes is not None else (
            alloc_r.estimated_bytes if alloc_r is not None else _largest(tensors)[1] if tensors else None)
        if base:
            cached = max(0, m.reserved_peak_bytes - base)
            pct = min(100, _ceil_percent(cached, base))
            source = "measured" if m.allocated_peak_bytes is not None else "estimated (no allocated figure given)"
            suggestions.append(Suggestion(
                "fragmentation_percent", cur_f, pct,
                f"The caching allocator held {_gib(cached)} beyond the {_gib(base)} of live tensors "
                f"({source}): {100.0 * cached / base:.1f}% of them. fragmentation_percent = {pct} would absorb it "
                f"(now {'the allocator model' if cur_f is None else cur_f})."))
    if m.nvidia_smi_used_bytes is not None:
        if m.reserved_peak_bytes is not None:
            base, what = m.reserved_peak_bytes, "PyTorch reserved (measured)"
        else:
            est = _largest(reserved)[1] if reserved else 0
            base, what = est, "the estimated tensors + allocator reserve (no reserved figure given)"
        outside = max(0, m.nvidia_smi_used_bytes - base)
        # the estimate's NCCL buffers (step/nccl.py) stay their own row: the context takes the rest
        nccl = max((parts.get("NCCL buffers", 0) for parts in phases.values()), default=0)
        context = min(max(0, outside - nccl), 2**40)
        full = nccl * 100 // workload.nccl_percent if workload.nccl_percent else 0     # at 100 %
        if outside < nccl and full:            # less outside than the modelled buffers: fewer were connected
            pct = outside * 100 // full
            suggestions.append(Suggestion(
                "nccl_percent", workload.nccl_percent, pct,
                f"nvidia-smi saw {_gib(outside)} outside PyTorch's allocator, less than the {_gib(nccl)} of NCCL "
                f"buffers estimated (step/nccl.py): nccl_percent = {pct} counts {_gib(full * pct // 100)} of "
                f"them (now {workload.nccl_percent}); NCCL connects only what a step uses."))
            nccl = full * pct // 100
            context = min(outside - nccl, 2**40)
        suggestions.append(Suggestion(
            "cuda_context_bytes", cur_c, context,
            f"nvidia-smi saw {_gib(m.nvidia_smi_used_bytes)} in use, {_gib(base)} of it {what}: the other "
            f"{_gib(outside)} is the CUDA context, cuBLAS/cuDNN handles, NCCL buffers and any other process on "
            f"that GPU. With the estimate's NCCL buffers ({_gib(nccl)}) kept, cuda_context_bytes = {context:,} "
            f"would absorb it (now {cur_c:,}, {_gib(cur_c)})."))
        if m.reserved_peak_bytes is not None and m.nvidia_smi_used_bytes < m.reserved_peak_bytes:
            sentences.append("nvidia-smi shows less than PyTorch's reserved peak: it was sampled at another moment "
                             "(or on another GPU), so the context figure is a lower bound.")
    capacity = _capacity_suggestion(m, workload, units)
    if capacity is not None:
        suggestions.append(capacity)
    verdict = measured_fit(m, capacity.suggested if capacity is not None else workload.capacity_bytes, units)
    if verdict["fits"] is False and whole and max(whole.values()) <= workload.capacity_bytes:
        suggestions = _keep_direction(suggestions, sentences, phases)

    phase_rows = []
    for phase in phases:
        a, r = m.per_phase.get(phase), m.per_phase_reserved.get(phase)
        if a is not None or r is not None:
            phase_rows.append(PhaseResidual(phase, a, tensors[phase], r, reserved[phase]))
    unknown = sorted(set(m.per_phase) - set(phases))
    if unknown:
        sentences.append("Probe phases with no estimate of that name (forward, backward, optimizer_step): "
                         + ", ".join(unknown) + ".")
    if not residuals:
        sentences.append("Nothing to compare: the measurement has no allocated, reserved or nvidia-smi figure.")
    return Calibration(m, stage, tuple(residuals), tuple(phase_rows), tuple(suggestions), tuple(sentences), verdict)


def calibration_dict(text, gb: str, scenario, workload, stage: int, units: str = "binary") -> dict:
    """A pasted text read (parse.parse) and compared with one stage (compare_stage), as plain data: what the app
    asks of a paste, in one call it can run in its worker process."""
    from .parse import parse
    return compare_stage(parse(text, gb=gb), scenario, workload, stage, units).to_dict()


def compare_stage(measurement: Measurement, scenario, workload, stage: int, units: str = "binary") -> Calibration:
    """compare() against the worst rank's peak of one ZeRO stage of a scenario and workload, and whether the
    estimate with every suggestion set reproduces the measurement (each residual within the printed rounding; an
    out-of-memory's lower bound met), said in a sentence."""
    from ...parallel.ranks import layout_report

    def _gib(n: int) -> str:
        return format_bytes(n, units)
    before_peak = layout_report(scenario, workload).peaks[stage]
    calibration = compare(measurement, before_peak, workload, units)
    if not calibration.residuals:
        return calibration
    after_workload = calibration.suggested_workload(workload)
    after_peak = layout_report(scenario, after_workload).peaks[stage]
    if calibration.verdict["fits"] is False and after_peak.fits:     # the Sets together would turn it green
        sentences = list(calibration.sentences)
        calibration = replace(calibration, suggestions=tuple(_keep_direction(
            list(calibration.suggestions), sentences, before_peak.phases)), sentences=tuple(sentences))
        after_workload = calibration.suggested_workload(workload)
        after_peak = layout_report(scenario, after_workload).peaks[stage]
    after = compare(measurement, after_peak, after_workload, units)
    how = "with the suggestions below set" if calibration.suggestions else "as it stands"
    if measurement.out_of_memory:      # a lower bound and a failure: the estimate must hold the one and fail too
        need = after.residual("allocated")
        ok = (need is None or need.residual_bytes <= need.tolerance_bytes) and not after_peak.fits
        sentence = (f"The estimate {how} holds the run's lower bound ({_gib(measurement.needed_at_least_bytes)}: "
                    "allocated + the failed request) and does not fit, as the run did not." if ok else
                    f"Even with every suggestion set the estimate ({_gib(after_peak.peak_bytes)}) does not reproduce "
                    "the failure: an input of the plan, not an assumption, differs from the run.")
        return replace(calibration, sentences=calibration.sentences + (sentence,), reproduced=ok)
    # fragmentation_percent is a whole percent: the reserve can only land within one percent of the tensors above
    step = -(-after.residual("allocated").estimated_bytes // 100) if after.residual("allocated") else 0
    ok = all(r.within_rounding or r.quantity != "allocated" and -step - r.tolerance_bytes <= r.residual_bytes <= 0
             for r in after.residuals)
    if ok:
        figures = "; ".join(f"{r.quantity} {_gib(r.measured_bytes)} measured, {_gib(r.estimated_bytes)} estimated"
                            for r in after.residuals) + ("; the reserve within the one percent its whole-percent "
                                                         "setting allows" if step else "")
        sentence = f"The estimate {how} reproduces the measurement ({figures})."
    else:
        worst = max(after.residuals, key=lambda r: abs(r.residual_bytes))
        sentence = (f"Even with every suggestion set the estimate stays {_gib(abs(worst.residual_bytes))} "
                    f"{'under' if worst.residual_bytes > 0 else 'over'} the measured {worst.quantity}: an input of "
                    "the plan, not an assumption, differs from the run.")
    return replace(calibration, sentences=calibration.sentences + (sentence,), reproduced=ok)
