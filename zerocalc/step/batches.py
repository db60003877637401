"""The batch as it really is (issue 37): how a micro-batch is cut from samples of different lengths, and what its
typical step and its worst step look like. One function (micro_batch_shape) applies the batching rule; the RL
planner (zerocalc/rl/batching.py) and a plain training step both call it.

A micro-batch is
- fixed: micro_batch x seq_len, every sample that long (the report before issue 37);
- padded: micro_batch samples, each padded to the micro-batch's longest (transformers DataCollatorWithPadding,
  padding="longest"; verl use_remove_padding=False): one long sample sets every row's length. seq_len is the
  longest a sample may be (the truncation: max_seq_length, cutoff_len), so the worst step is micro_batch x
  seq_len and the typical step micro_batch x the longest of micro_batch samples drawn from the lengths;
- packed: micro_batch rows of seq_len tokens each, samples' real tokens concatenated into a row and kept apart
  by flash-attention's varlen kernels (transformers DataCollatorWithFlattening and the models' packed
  position_ids; verl use_remove_padding=True): seq_len is the token budget of a row. A packer fills each row
  towards its budget, so the typical step is the worst: the budget, whatever the lengths (activations are linear
  in tokens under flash attention, so the packed row counts as one sequence of that many tokens).

The lengths are a distribution the user gives: percentile points ((50, 512), (90, 2048), (100, 8192)), or a CSV
of sample lengths read into those points. The longest of b samples drawn independently is, at its median, the
length at percentile 100 x 0.5^(1/b): one sample in a micro-batch of 8 sets the padded length at p91.7.
"""

from __future__ import annotations

import csv
import io
from typing import NamedTuple, Optional, Tuple

from ..scenario import FieldError, require_int

BATCH_MODES = ("fixed", "padded", "packed")
# The percentiles a CSV of lengths is read into (nearest rank): enough points for the median longest of up to
# a few hundred samples and the mean; 100 is the longest sample.
CSV_PERCENTILES = (1, 10, 25, 50, 75, 90, 95, 99, 100)
MAX_LENGTH = 10**8                    # WORKLOAD_LIMITS["seq_len"]
PERCENTILE_WORDS = {"max": 100, "median": 50}
Points = Tuple[Tuple[int, int], ...]  # (percentile 1..100, tokens), percentiles rising, the last 100


class Batching(NamedTuple):
    """How one pass cuts its samples into micro-batches (the RL planner's passes, a plain step's micro-batch)."""
    sequences: int                     # samples per micro-batch (ppo_micro_batch_size_per_gpu, ...)
    packed: bool = False               # remove padding: a micro-batch is its samples' summed lengths
    max_tokens: Optional[int] = None   # dynamic batch size: at most this many tokens per micro-batch

    def check(self, field: str) -> "Batching":
        require_int(f"{field}.sequences", self.sequences, 1, 10**7)
        if not isinstance(self.packed, bool):
            raise FieldError(f"{field}.packed", self.packed, "true or false")
        if self.max_tokens is not None:
            require_int(f"{field}.max_tokens", self.max_tokens, 1, 10**9)
        return self

    @property
    def kind(self) -> str:
        return "dynamic" if self.max_tokens is not None else "packed" if self.packed else "padded"


def micro_batch_shape(batching: Batching, length: int, longest: int, per_gpu: int) -> Tuple[int, int]:
    """(micro_batch, seq_len) of one micro-batch: `length` is each sample's length at this end of the band,
    `longest` the longest a padded micro-batch is padded to, `per_gpu` the samples one data-parallel rank holds
    in the step."""
    b = batching
    per_gpu = max(1, per_gpu)
    if b.max_tokens is not None:
        if b.max_tokens < longest:
            # verl asserts max_token_len >= the longest sequence (rearrange_micro_batches)
            raise FieldError("max_tokens", b.max_tokens, f"at least the longest sequence ({longest:,} tokens): "
                                                         "verl refuses a budget below it")
        tokens = min(b.max_tokens, per_gpu * length)
        if b.packed:
            return 1, max(tokens, length)
        return max(1, tokens // longest), longest
    sequences = min(b.sequences, per_gpu)
    if b.packed:
        return 1, sequences * length
    return sequences, longest


# --- the lengths -------------------------------------------------------------------------------------------


def check_points(field: str, points) -> Points:
    """Percentile points as the Workload keeps them: (percentile, tokens) pairs, percentiles 1..100 rising, tokens
    not falling, the last at percentile 100 (the longest sample)."""
    if not isinstance(points, (tuple, list)) or not points:
        raise FieldError(field, points, "(percentile, tokens) points ending at percentile 100, e.g. "
                                        "p50=512,p90=2048,max=8192")
    out = []
    for pair in points:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise FieldError(field, pair, "a (percentile, tokens) pair")
        pct, tokens = pair
        require_int(f"{field} percentile", pct, 1, 100)
        require_int(f"{field} tokens", tokens, 1, MAX_LENGTH)
        if out and (pct <= out[-1][0] or tokens < out[-1][1]):
            raise FieldError(field, f"p{pct}={tokens}", "percentiles rising and lengths not falling "
                                                        f"(after p{out[-1][0]}={out[-1][1]})")
        out.append((pct, tokens))
    if out[-1][0] != 100:
        raise FieldError(field, points, "a last point at percentile 100: the longest sample (max=N)")
    return tuple(out)


def parse_points(text: str, field: str = "batch_lengths") -> Points:
    """'p50=512,p90=2048,p99=6000,max=8192' -> ((50, 512), (90, 2048), (99, 6000), (100, 8192))."""
    points = []
    for item in str(text).replace(" ", "").split(","):
        key, _, value = item.partition("=")
        pct = PERCENTILE_WORDS.get(key.lower(), key[1:] if key[:1].lower() == "p" else None)
        if pct is None or not str(pct).isdigit() or not value.isdigit() or len(value) > 9:
            raise FieldError(field, item, "points like p50=512, p90=2048, max=8192 (whole tokens)")
        points.append((int(pct), int(value)))
    return check_points(field, points)


def points_from_csv(text: str, field: str = "lengths_csv") -> Points:
    """A CSV of sample lengths (the first column; a header row is skipped) read into CSV_PERCENTILES by nearest
    rank."""
    lengths = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cell = row[0].strip() if row else ""
        if not cell:
            continue
        if not cell.isdigit() or len(cell) > 9:
            if number == 1 and not lengths:
                continue                                     # a header
            raise FieldError(field, f"line {number}: {cell[:40]!r}", "a whole number of tokens in the first column")
        if not 1 <= int(cell) <= MAX_LENGTH:
            raise FieldError(field, f"line {number}: {cell}", f"a length from 1 to {MAX_LENGTH:,} tokens")
        lengths.append(int(cell))
    if not lengths:
        raise FieldError(field, "no lengths", "a CSV with one sample length (tokens) per row")
    lengths.sort()
    n = len(lengths)
    return check_points(field, [(p, lengths[max(0, -(-p * n // 100) - 1)]) for p in CSV_PERCENTILES])


def quantile(points: Points, percentile: float) -> int:
    """The length at a percentile: linear between the points, the first point's length below it (a length at or
    under the lowest point is taken at that point: the conservative side)."""
    lo_p, lo_t = points[0]
    if percentile <= lo_p:
        return lo_t
    for hi_p, hi_t in points[1:]:
        if percentile <= hi_p:
            return lo_t + -(-int((hi_t - lo_t) * (percentile - lo_p) * 1000) // int((hi_p - lo_p) * 1000))
        lo_p, lo_t = hi_p, hi_t
    return points[-1][1]


def median_longest(points: Points, samples: int) -> int:
    """The median of the longest of `samples` lengths drawn independently: the length at percentile
    100 x 0.5^(1/samples)."""
    return quantile(points, 100 * 0.5 ** (1 / samples))


# --- the typical and the worst step -------------------------------------------------------------------------


class Step(NamedTuple):
    micro_batch: int
    seq_len: int
    words: str

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq_len


def steps(workload) -> Tuple[Step, Step]:
    """(typical, worst): the micro-batch shapes of the workload's typical step and of its worst step. The worst
    step is the workload's own micro_batch x seq_len (the report's peaks), the typical step the one a step meets
    at the median."""
    b, s, mode, points = workload.micro_batch, workload.seq_len, workload.batch_mode, workload.batch_lengths
    if mode == "padded":
        worst = Step(b, s, f"the worst step: {b} x {s:,} tokens (a micro-batch padded to the longest sample)")
        if not points:
            return worst, worst
        longest = min(s, median_longest(points, b))
        shape = micro_batch_shape(Batching(b), longest, longest, b)
        return Step(*shape, f"the typical step: {b} x {longest:,} tokens (the median longest of {b} samples "
                            "drawn from the lengths)"), worst
    if mode == "packed":
        worst = Step(b, s, f"the worst step: {b} x {s:,} tokens (every row filled to its token budget)")
        return worst, worst
    fixed = Step(b, s, f"the step: {b} x {s:,} tokens")
    return fixed, fixed


def check_batch(workload) -> None:
    """The batch fields as the Workload accepts them (its __post_init__ calls this)."""
    w = workload
    if w.batch_mode not in BATCH_MODES:
        raise FieldError("batch_mode", w.batch_mode, ", ".join(BATCH_MODES))
    if w.batch_lengths:
        object.__setattr__(w, "batch_lengths", check_points("batch_lengths", w.batch_lengths))
        if w.batch_mode == "fixed":
            raise FieldError("batch_lengths", w.batch_lengths, "none with batch_mode fixed (every sample is "
                                                               "seq_len long): padded or packed")
    elif w.batch_lengths is not None and w.batch_lengths != ():
        raise FieldError("batch_lengths", w.batch_lengths, "(percentile, tokens) points, or none")
    if w.batch_mode == "packed" and w.attention != "flash":
        # the packed row's samples are kept apart only by varlen attention (flash-attn's cu_seqlens); eager
        # attention over a packed row would let them attend to each other
        raise FieldError("batch_mode", "packed", "fixed or padded with eager attention (packing needs flash "
                                                 "attention's varlen kernels)")
