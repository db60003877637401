"""The parallel layout of a job beyond data parallelism: tensor (tp), pipeline (pp, with vpp virtual stages),
context (cp) parallelism and the pipeline schedule. The data-parallel degree dp is Scenario.workers (the ZeRO /
FSDP group); world = dp x tp x pp x cp.

Facts the layout applies, with their sources:
- Pipeline split: layers are cut into pp x vpp chunks in order; chunk v*pp + r lives on pipeline rank r
  (Megatron-LM's virtual pipeline model parallel layout: rank r holds chunks r, r + pp, r + 2pp, ...). When pp does
  not divide the layers, the first chunks take one layer more (numpy.array_split order); Megatron requires
  divisibility unless the first/last stage sizes are given, so the interleaved schedule requires it here too.
- In-flight micro-batches per rank (what a pipeline rank holds activations for at its peak), Megatron-LM
  megatron/core/pipeline_parallel/schedules.py: non-interleaved 1F1B warms up pp - r - 1 micro-batches, then runs
  one forward before each backward, so rank r holds min(pp - r, m); the interleaved schedule warms up
  2 (pp - r - 1) + (vpp - 1) pp chunk-micro-batches (capped at m x vpp), visits chunk (k // pp) mod vpp at its k-th
  forward and chunk vpp - 1 - (k // pp) mod vpp at its k-th backward; GPipe (torch.distributed.pipelining
  ScheduleGPipe) runs every forward before any backward, so every rank holds all m.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from typing import Optional, Tuple

from .scenario import FieldError, require_choice, require_int

SCHEDULES = ("1f1b", "interleaved", "gpipe")
LAYOUT_LIMITS = {
    "tp": (1, 4096),
    "pp": (1, 4096),
    "vpp": (1, 256),
    "cp": (1, 4096),
    "ep": (1, 65_536),
    "etp": (1, 4096),
    "micro_batches": (1, 100_000),
}
VOCAB_DIVISOR_LIMITS = (1, 1_000_000)
MEGATRON_VOCAB_DIVISOR = 128      # Megatron-LM --make-vocab-size-divisible-by default


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    vpp: int = 1                      # virtual pipeline stages (model chunks) per pipeline rank
    cp: int = 1
    sequence_parallel: bool = False
    micro_batches: int = 1            # per optimizer step (gradient accumulation steps)
    schedule: str = "1f1b"
    loss_parallel: bool = True        # vocab-parallel logits and loss under TP (Megatron; torchtitan's default)
    vocab_divisor: Optional[int] = None   # pad the vocabulary to a multiple of this x tp; None: by the kernels
    ep: int = 1                       # expert parallel: routed experts split over ep ranks
    etp: int = 1                      # expert tensor parallel: each expert's FFN split over etp ranks

    def __post_init__(self):
        for field, (lo, hi) in LAYOUT_LIMITS.items():
            require_int(field, getattr(self, field), lo, hi)
        require_choice("schedule", self.schedule, SCHEDULES)
        for field in ("sequence_parallel", "loss_parallel"):
            if not isinstance(getattr(self, field), bool):
                raise FieldError(field, getattr(self, field), "true or false")
        if self.vocab_divisor is not None:
            require_int("vocab_divisor", self.vocab_divisor, *VOCAB_DIVISOR_LIMITS)
        if self.schedule == "interleaved" and self.vpp < 2:
            raise FieldError("vpp", self.vpp, "at least 2 with the interleaved schedule (1 is plain 1F1B)")
        if self.vpp > 1 and self.schedule != "interleaved":
            raise FieldError("vpp", self.vpp, "1 unless the schedule is interleaved")
        if self.schedule == "interleaved" and self.pp < 2:
            raise FieldError("schedule", self.schedule, "1f1b or gpipe when pp is 1 (interleaving needs pp >= 2)")

    @property
    def model_parallel(self) -> int:
        """Ranks one data-parallel replica spans: tp x pp x cp."""
        return self.tp * self.pp * self.cp

    @property
    def is_trivial(self) -> bool:
        return self.model_parallel == 1

    def expert_data_parallel(self, dp: int) -> int:
        """Megatron-Core's parallel folding: the expert layers re-partition the ranks of a pipeline stage
        (dp x tp x cp) as etp x ep x edp, so experts' ZeRO / FSDP group is edp = dp x tp x cp / (ep x etp)."""
        return dp * self.tp * self.cp // (self.ep * self.etp)

    def world(self, dp: int) -> int:
        return dp * self.model_parallel

    def vocab_multiple(self, implementation: str) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x tp
        (megatron/training/vocab_utils.py); Hugging Face checkpoints keep it as is and DTensor shards an uneven
        dimension in torch.chunk order (the first ranks take ceil(V / tp) rows). An explicit divisor pads as
        Megatron does, whatever the kernels."""
        if self.vocab_divisor is not None:
            return self.vocab_divisor * self.tp
        return MEGATRON_VOCAB_DIVISOR * self.tp if implementation == "megatron" else 1


def padded_vocab(vocab: int, multiple: int) -> int:
    return -(-vocab // multiple) * multiple


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_experts(layout: Layout, arch, dp: int) -> None:
    """Expert parallelism needs experts to split and a stage's ranks to fold into etp x ep x edp."""
    if layout.ep == 1 and layout.etp == 1:
        return
    if not arch.experts:
        raise FieldError("ep" if layout.ep > 1 else "etp", layout.ep if layout.ep > 1 else layout.etp,
                         "1 for a model without experts")
    if arch.experts % layout.ep:
        raise FieldError("ep", layout.ep, f"a divisor of the experts ({arch.experts:,}): one of "
                         + ", ".join(str(d) for d in _divisors(arch.experts)[:24]))
    if arch.moe_ffn % layout.etp:
        raise FieldError("etp", layout.etp, f"a divisor of the expert FFN width ({arch.moe_ffn:,})")
    stage_ranks = dp * layout.tp * layout.cp
    if stage_ranks % (layout.ep * layout.etp):
        raise FieldError("ep", layout.ep, f"ep x etp dividing dp x tp x cp ({stage_ranks:,}): Megatron's parallel "
                                          "folding re-partitions a pipeline stage's ranks for the experts")


def check_against(layout: Layout, arch, seq_len: int, attention: str) -> None:
    """Raise FieldError naming the layout field a model cannot be split by, with the values allowed."""
    tp = layout.tp
    if tp > 1:
        dims = {"heads": arch.heads}
        if not arch.mla:                     # latent attention has no KV heads to split
            dims["kv_heads"] = arch.n_kv_heads
        dims["ffn"] = arch.ffn
        if arch.shared_expert_ffn:
            dims["shared_expert_ffn"] = arch.shared_expert_ffn
        bad = [f"{k} ({v:,})" for k, v in dims.items() if v % tp]
        if bad:
            g = 0
            for v in dims.values():
                g = gcd(g, v)
            names = list(dims)
            raise FieldError("tp", tp, f"a divisor of {', '.join(names[:-1])} and {names[-1]} (not of "
                                       f"{', '.join(bad)}): one of " + ", ".join(str(d) for d in _divisors(g)[:24]))
    chunks = layout.pp * layout.vpp
    if chunks > arch.layers:
        raise FieldError("pp", layout.pp, f"at most the layers ({arch.layers:,})"
                         + (f" / vpp ({layout.vpp})" if layout.vpp > 1 else ""))
    if layout.schedule == "interleaved" and arch.layers % chunks:
        raise FieldError("vpp", layout.vpp, f"pp x vpp dividing the layers ({arch.layers:,}) with the interleaved "
                                            "schedule (Megatron-LM requires it)")
    cp = layout.cp
    if cp > 1:
        if attention != "flash":
            raise FieldError("cp", cp, "1 with eager attention (context parallel runs flash / fused attention)")
        if seq_len % (2 * cp):
            raise FieldError("cp", cp, f"a value with 2 x cp dividing the sequence length ({seq_len:,}): causal "
                                       "load balancing splits it into 2 x cp chunks")
    if layout.sequence_parallel and tp > 1 and (seq_len // cp) % tp:
        raise FieldError("sequence_parallel", True, f"false, or tp ({tp}) dividing the sequence per context rank "
                                                    f"({seq_len // cp:,})")


# --- pipeline placement --------------------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def chunk_layers(layers: int, pp: int, vpp: int) -> Tuple[Tuple[int, ...], ...]:
    """Layers of each model chunk on each pipeline rank: result[r][v] for chunk v of rank r."""
    n = pp * vpp
    base, extra = divmod(layers, n)
    sizes = [base + (1 if c < extra else 0) for c in range(n)]      # array_split order over global chunks
    return tuple(tuple(sizes[v * pp + r] for v in range(vpp)) for r in range(pp))


@lru_cache(maxsize=4096)
def in_flight(schedule: str, pp: int, vpp: int, m: int, rank: int,
              first_weight: int = 0, last_weight: int = 0, chunk_weight: int = 1) -> Tuple[int, int, int]:
    """At this rank's activation peak: (chunk-micro-batches alive, of them of the model's first chunk, of its last).

    first_weight / last_weight / chunk_weight: bytes one micro-batch of the first chunk's extra (embedding end),
    the last chunk's extra (output end), and one chunk's layers hold; the peak is where their sum is largest.
    """
    holds_first, holds_last = rank == 0, rank == pp - 1
    if schedule == "gpipe":
        alive = m * vpp
        return alive, m if holds_first else 0, m if holds_last else 0
    if vpp == 1:
        alive = min(pp - rank, m)
        return alive, alive if holds_first else 0, min(1, alive) if holds_last else 0
    return _interleaved(pp, vpp, m, rank, first_weight if holds_first else 0, last_weight if holds_last else 0,
                        chunk_weight)


def _interleaved(pp, vpp, m, rank, first_weight, last_weight, chunk_weight):
    """The first state of the schedule (in time order) where the weighted sum is largest."""
    best, best_state = -1, (0, 0, 0)
    for count, first, last in _interleaved_states(pp, vpp, m, rank):
        weight = count * chunk_weight + first * first_weight + last * last_weight
        if weight > best:
            best, best_state = weight, (count, first if rank == 0 else 0, last if rank == pp - 1 else 0)
    return best_state


@lru_cache(maxsize=1024)
def _interleaved_states(pp, vpp, m, rank) -> Tuple[Tuple[int, int, int], ...]:
    """Each distinct (chunk-micro-batches alive, of the first chunk, of the last chunk) the interleaved schedule
    passes through on this rank, in the order it first reaches them. Independent of the weights, so the walk
    (up to 3 x pp x vpp steps) runs once per schedule, not once per micro-batch size a solver tries."""
    total = m * vpp
    warmup = min(2 * (pp - rank - 1) + (vpp - 1) * pp, total)
    alive = [0] * vpp
    count = 0                      # sum(alive), kept as it moves
    seen = {}                      # state -> None: a dict keeps the order of first arrival

    for k in range(warmup):
        alive[(k // pp) % vpp] += 1
        count += 1
        seen.setdefault((count, alive[0], alive[-1]))
    # Steady state: forward k = warmup + i, then backward i. Its composition repeats every pp x vpp steps, so
    # two periods after the warm-up hold the steady-state maximum; the cool-down only frees.
    steady = total - warmup
    for i in range(min(steady, 2 * pp * vpp + 1)):
        alive[((warmup + i) // pp) % vpp] += 1
        count += 1
        seen.setdefault((count, alive[0], alive[-1]))
        alive[vpp - 1 - (i // pp) % vpp] -= 1
        count -= 1
    return tuple(seen)
