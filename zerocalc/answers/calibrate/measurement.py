"""What a measurement is: the quantities a pasted text can give, in exact bytes, its rows, and the error
for text that cannot be one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, Optional, Tuple

from ...scenario import FieldError

MAX_TEXT_CHARS = 1_000_000      # the app's upload cap; longer pastes are refused, not truncated silently
MAX_TEXT_LINES = 10_000         # and lines: every format is read line by line
FORMATS = ("probe", "memory_stats", "memory_summary", "deepspeed", "torch_oom", "nvidia_smi", "plain")
FORMAT_HELP = {
    "probe": "the line tools/zerocalc_probe.py prints (zerocalc-probe v1 ...)",
    "memory_stats": "torch.cuda.memory_stats() as JSON or printed (\"allocated_bytes.all.peak\": ...)",
    "memory_summary": "the table torch.cuda.memory_summary() prints",
    "deepspeed": "DeepSpeed see_memory_usage lines (MA ... Max_MA ... CA ... Max_CA ...)",
    "torch_oom": "a CUDA out of memory message (Tried to allocate ... is reserved by PyTorch but unallocated)",
    "nvidia_smi": "nvidia-smi --query-gpu=memory.used,memory.total --format=csv lines, or the nvidia-smi table",
    "plain": "labelled numbers (max_memory_allocated: 12345, max_memory_reserved: 70.2 GiB)",
}
# usable_total_bytes: the capacity PyTorch can use (cudaMemGetInfo's total: the OOM message's "total capacity",
# torch.cuda.mem_get_info, total_memory), below nvidia-smi's total (zerocalc.gpus): the two are never mixed.
QUANTITIES = ("allocated_peak_bytes", "reserved_peak_bytes", "nvidia_smi_used_bytes", "nvidia_smi_total_bytes",
              "usable_total_bytes")
BINARY = {"B": 1, "BYTES": 1, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50}
DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
GIB = 2**30
MAX_BYTES = 2**60               # no device measures more; larger numbers are typos or garbage


class CalibrationError(FieldError):
    """Text that no parser understands, or a value in it that cannot be a measurement. Field "calibration"."""

    def __init__(self, value, allowed: str = None):
        shown = value if not isinstance(value, str) or len(value) <= 80 else value[:80] + "..."
        super().__init__("calibration", shown, allowed or formats_sentence())


def formats_sentence(names=FORMATS) -> str:
    return "text in one of these formats: " + "; ".join(f"{n} ({FORMAT_HELP[n]})" for n in names)


@dataclass(frozen=True)
class Reading:
    """One row of a multi-row paste: a GPU of nvidia-smi, a see_memory_usage line, a probe phase or rank."""
    label: str
    allocated_peak_bytes: Optional[int] = None
    reserved_peak_bytes: Optional[int] = None
    used_bytes: Optional[int] = None
    total_bytes: Optional[int] = None


@dataclass(frozen=True)
class Measurement:
    """What a run used, in bytes (None: not in the text). Peaks are the largest over every row / line / rank given.
    per_phase (allocated) and per_phase_reserved come from the probe's line; tolerance_bytes says, per quantity,
    how far the printed rounding lets the true value lie from the one read (0 or absent: exact)."""
    allocated_peak_bytes: Optional[int] = None
    reserved_peak_bytes: Optional[int] = None
    nvidia_smi_used_bytes: Optional[int] = None
    nvidia_smi_total_bytes: Optional[int] = None
    usable_total_bytes: Optional[int] = None
    per_phase: Dict[str, int] = field(default_factory=dict)
    per_phase_reserved: Dict[str, int] = field(default_factory=dict)
    source_format: str = ""
    notes: Tuple[str, ...] = ()
    readings: Tuple[Reading, ...] = ()
    tolerance_bytes: Dict[str, int] = field(default_factory=dict)
    gpu_name: Optional[str] = None
    # An out-of-memory message's "Tried to allocate": the request that failed. The run needed at least
    # allocated + this, and it did not fit the capacity it ran under.
    failed_request_bytes: Optional[int] = None
    # The phase the traceback pasted with it names (calibrate/phase.py: forward, backward, optimizer_step), and the
    # frame that says so; None without a known frame.
    failed_phase: Optional[str] = None
    failed_frame: Optional[str] = None

    @property
    def out_of_memory(self) -> bool:
        return self.failed_request_bytes is not None

    @property
    def needed_at_least_bytes(self) -> Optional[int]:
        """Live tensors the run needed: its allocated peak, plus the failed request after an out-of-memory."""
        if self.allocated_peak_bytes is None:
            return None
        return self.allocated_peak_bytes + (self.failed_request_bytes or 0)

    def to_dict(self) -> dict:
        return {"allocated_peak_bytes": self.allocated_peak_bytes, "reserved_peak_bytes": self.reserved_peak_bytes,
                "nvidia_smi_used_bytes": self.nvidia_smi_used_bytes,
                "nvidia_smi_total_bytes": self.nvidia_smi_total_bytes,
                "usable_total_bytes": self.usable_total_bytes, "per_phase": dict(self.per_phase),
                "per_phase_reserved": dict(self.per_phase_reserved), "source_format": self.source_format,
                "notes": list(self.notes), "readings": [asdict(r) for r in self.readings],
                "tolerance_bytes": dict(self.tolerance_bytes), "gpu_name": self.gpu_name,
                "failed_request_bytes": self.failed_request_bytes, "failed_phase": self.failed_phase,
                "failed_frame": self.failed_frame}
