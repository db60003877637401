"""The parallel layout of a job beyond data parallelism: tensor (tp), pipeline (pp, with vpp virtual stages),
context (cp) parallelism and the pipeline schedule. The data-parallel degree dp is Scenario.workers (the ZeRO /
FSDP group); world = dp x tp x pp x cp.

Facts the layout applies, with their sources:
- Pipeline split: layers are cut into pp x vpp chunks in order; chunk v*pp + r lives on pipeline rank r
  (Megatron-LM's virtual pipeline model parallel layout: rank r holds chunks r, r + pp, r + 2pp, ...). When pp does
  not divide the layers, the first chunks take one layer more (numpy.array_split order); Megatron requires
  divisibility unless the first/last stage sizes are given, so the interleaved schedule requires it here too.
- Uneven stages (Layout.stage_layers, or a named rule, Layout.stage_split; stage_sizes below): the decoder layers
  of each of the pp x vpp stages in schedule order, stage c on rank c mod pp as its chunk c // pp. "torchtitan" is
  torchtitan's default split (distributed/pipeline_parallel.py generate_llm_fqn_per_model_part at 238fa99: the
  embedding and the head count as embedding_weight / head_weight layers, pipeline_parallel_first_stage_less_layers
  / _last_stage_less_layers, default 1 each; 126 layers over 8 stages: 15, 16 x 6, 15; over 16: 7, 8 x 14, 7).
  "megatron" is Megatron-LM's (megatron/core/transformer/transformer_block.py get_num_layers_to_build and
  transformer_layer.py get_transformer_layer_offset at d98e8a6): --decoder-first-pipeline-num-layers /
  --decoder-last-pipeline-num-layers on the first / last pipeline rank (split over its vpp chunks), the rest
  evenly over the middle ranks; or --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split
  (embedding_weight / head_weight 1): the layers plus one for each end split evenly, the model's first (last) chunk
  one layer short; every division exact, as Megatron asserts.
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
STAGE_SPLITS = ("even", "torchtitan", "megatron")
STAGE_LAYER_LIMITS = (0, 10_000)      # layers of one stage (an Architecture has at most 10,000)
MAX_STAGES = STAGE_LAYER_LIMITS[1] + 2   # stages of a split: at most one per layer and one for each end
MAX_STAGE_LIST_CHARS = 6 * MAX_STAGES    # a written list ("16,15,...") longer than this is refused unread
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
    # Uneven stages: the decoder layers of each of the pp x vpp stages in schedule order (None: by stage_split).
    stage_layers: Optional[Tuple[int, ...]] = None
    stage_split: str = "even"         # even | torchtitan | megatron (module docstring; stage_sizes)
    first_stage_layers: Optional[int] = None   # megatron: --decoder-first-pipeline-num-layers
    last_stage_layers: Optional[int] = None    # megatron: --decoder-last-pipeline-num-layers
    embedding_weight: Optional[int] = None     # the embedding counted as layers (None: the rule's default)
    head_weight: Optional[int] = None          # the head and loss counted as layers (None: the rule's default)

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
        self._check_split()

    def _check_split(self):
        require_choice("stage_split", self.stage_split, STAGE_SPLITS)
        for field in ("first_stage_layers", "last_stage_layers", "embedding_weight", "head_weight"):
            if getattr(self, field) is not None:
                require_int(field, getattr(self, field), *STAGE_LAYER_LIMITS)
        if self.stage_split != "megatron":
            for field in ("first_stage_layers", "last_stage_layers"):
                if getattr(self, field) is not None:
                    raise FieldError(field, getattr(self, field), "unset unless stage_split is megatron")
            for field in ("embedding_weight", "head_weight"):
                if self.stage_split == "even" and getattr(self, field) is not None:
                    raise FieldError(field, getattr(self, field), "unset unless stage_split is torchtitan or megatron")
        else:
            uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
            for field in ("embedding_weight", "head_weight"):
                if getattr(self, field) not in (None, 0, 1):
                    raise FieldError(field, getattr(self, field), "0 or 1 with stage_split megatron (its "
                                                                  "--account-for-*-in-pipeline-split flags)")
                if uneven and getattr(self, field):
                    raise FieldError(field, getattr(self, field), "0 with first or last stage layers (Megatron "
                                                                  "refuses both)")
        given = self.stage_layers
        if given is None:
            return
        if isinstance(given, list):
            object.__setattr__(self, "stage_layers", tuple(given))
            given = self.stage_layers
        n = self.pp * self.vpp
        if not isinstance(given, tuple) or len(given) != n:
            size = len(given) if isinstance(given, tuple) else type(given).__name__
            raise FieldError("stage_layers", f"{size} stages" if isinstance(size, int) else size,
                             f"pp x vpp = {n:,} layer counts, one per stage in schedule order")
        for count in given:
            require_int("stage_layers", count, *STAGE_LAYER_LIMITS)
        if self.stage_split != "even" or any(getattr(self, f) is not None for f in (
                "first_stage_layers", "last_stage_layers", "embedding_weight", "head_weight")):
            raise FieldError("stage_split", self.stage_split, "even and no split parameters when stage_layers "
                                                              "gives the counts")

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
    if layout.stage_layers is not None or layout.stage_split != "even":
        stage_sizes(layout, arch.layers)           # raises FieldError naming the split's field
    elif chunks > arch.layers:
        raise FieldError("pp", layout.pp, f"at most the layers ({arch.layers:,})"
                         + (f" / vpp ({layout.vpp})" if layout.vpp > 1 else ""))
    elif layout.schedule == "interleaved" and arch.layers % chunks:
        raise FieldError("vpp", layout.vpp, f"pp x vpp dividing the layers ({arch.layers:,}) with the interleaved "
                                            "schedule (Megatron-LM requires it), or uneven stages (stage_split, "
                                            "stage_layers)")
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
def chunk_layers(layers: int, pp: int, vpp: int, sizes: Optional[tuple] = None) -> Tuple[Tuple[int, ...], ...]:
    """Layers of each model chunk on each pipeline rank: result[r][v] for chunk v of rank r (stage v x pp + r).
    sizes: the stages' layer counts in schedule order (stage_sizes); None: the even split."""
    n = pp * vpp
    if sizes is None:
        base, extra = divmod(layers, n)
        sizes = tuple(base + (1 if c < extra else 0) for c in range(n))   # array_split order over the stages
    return tuple(tuple(sizes[v * pp + r] for v in range(vpp)) for r in range(pp))


def split_sizes(layers: int, pp: int, vpp: int, stage_split: str = "even", first_stage_layers=None,
                last_stage_layers=None, embedding_weight=None, head_weight=None) -> Tuple[int, ...]:
    """stage_sizes of a named rule for pp x vpp stages, without a Layout (the layout search tries a rule on
    candidates)."""
    return _stage_sizes(layers, pp, vpp, None, stage_split, first_stage_layers, last_stage_layers,
                        embedding_weight, head_weight)


def stage_sizes(layout: Layout, layers: int) -> Tuple[int, ...]:
    """The decoder layers of each of the pp x vpp stages in schedule order (module docstring), or FieldError
    naming the field a split cannot be made by."""
    return _stage_sizes(layers, layout.pp, layout.vpp, layout.stage_layers, layout.stage_split,
                        layout.first_stage_layers, layout.last_stage_layers, layout.embedding_weight,
                        layout.head_weight)


@lru_cache(maxsize=1024)
def _stage_sizes(layers, pp, vpp, given, split, first, last, embedding_weight, head_weight) -> Tuple[int, ...]:
    n = pp * vpp
    if given is not None:
        if sum(given) != layers:
            raise FieldError("stage_layers", f"{sum(given):,} layers in all", f"counts summing to the model's "
                                                                            f"layers ({layers:,})")
        return given
    if split == "even":
        base, extra = divmod(layers, n)
        return tuple(base + (1 if c < extra else 0) for c in range(n))
    if split == "torchtitan":
        return torchtitan_split(layers, n, 1 if embedding_weight is None else embedding_weight,
                                1 if head_weight is None else head_weight)
    return megatron_split(layers, pp, vpp, first, last, embedding_weight or 0, head_weight or 0)


def parse_stage_layers(text) -> Tuple[int, ...]:
    """A written list of stage layer counts ("15,16,16,...", schedule order) as a tuple; FieldError for anything
    else. The text is bounded before it is read: a link or a flag may carry it."""
    allowed = (f"comma-separated layer counts from {STAGE_LAYER_LIMITS[0]} to {STAGE_LAYER_LIMITS[1]:,}, one per "
               f"stage (at most {MAX_STAGES:,} stages)")
    if not isinstance(text, str) or len(text) > MAX_STAGE_LIST_CHARS:
        raise FieldError("stage_layers", text if isinstance(text, str) else type(text).__name__, allowed)
    items = [t.strip() for t in text.split(",")]
    if len(items) > MAX_STAGES or not all(t and len(t) <= 5 and t.isascii() and t.isdigit() for t in items):
        raise FieldError("stage_layers", text, allowed)
    values = tuple(int(t) for t in items)
    for value in values:
        require_int("stage_layers", value, *STAGE_LAYER_LIMITS)
    return values


def torchtitan_split(layers: int, stages: int, input_weight: int = 1, output_weight: int = 1) -> Tuple[int, ...]:
    """torchtitan's generate_llm_fqn_per_model_part (distributed/pipeline_parallel.py at 238fa99): the layers plus
    the two ends' weights split as evenly as they go, the first stages one more; the first stage's share less
    input_weight, the last's less output_weight. Its ValueErrors become FieldErrors."""
    if stages == 1:
        return (layers,)
    effective = layers + input_weight + output_weight
    if stages > effective:
        raise FieldError("stage_split", "torchtitan", f"a rule for at most {effective:,} stages (the layers plus "
                                                     f"the ends' weights; pp x vpp is {stages:,}): torchtitan "
                                                     "refuses more")
    per, extra = divmod(effective, stages)
    for field, weight in (("embedding_weight", input_weight), ("head_weight", output_weight)):
        if weight > per:
            raise FieldError(field, weight, f"at most the fewest layers per stage ({per:,}): torchtitan refuses "
                                            "a larger weight")
    sizes, placed = [], 0
    for stage in range(stages):
        share = per + (1 if stage < extra else 0)
        share -= input_weight if stage == 0 else output_weight if stage == stages - 1 else 0
        take = min(share, layers - placed)         # `if current_layer < num_layers`
        sizes.append(take)
        placed += take
    return tuple(sizes)


def megatron_split(layers: int, pp: int, vpp: int, first: Optional[int] = None, last: Optional[int] = None,
                   embedding: int = 0, loss: int = 0) -> Tuple[int, ...]:
    """Megatron-LM's layers per stage in schedule order (get_num_layers_to_build, get_transformer_layer_offset and
    TransformerConfig.__post_init__ at d98e8a6); each of its assertions a FieldError."""
    if first is not None or last is not None:
        middle_ranks = pp - (first is not None) - (last is not None)
        middle = layers - (first or 0) - (last or 0)
        for field, count in (("first_stage_layers", first), ("last_stage_layers", last)):
            if count is not None and (count <= 0 or count % vpp):
                raise FieldError(field, count, "a positive multiple of vpp" if vpp > 1 else "at least 1")
        if middle < 0 or bool(middle) != bool(middle_ranks) or (middle_ranks and middle % (middle_ranks * vpp)):
            raise FieldError("first_stage_layers" if first is not None else "last_stage_layers",
                             first if first is not None else last,
                             f"counts leaving the other {middle_ranks:,} pipeline ranks a multiple of "
                             f"{max(middle_ranks, 1) * vpp:,} layers of the {layers:,}")
        per_rank = [middle // middle_ranks if middle_ranks else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        return tuple(per_rank[c % pp] // vpp for c in range(pp * vpp))
    total = layers + embedding + loss
    if total % (pp * vpp):
        raise FieldError("stage_split", "megatron", f"pp x vpp ({pp * vpp:,}) dividing the layers ({layers:,})"
                         + (" plus the ends accounted as layers" if embedding or loss else "")
                         + ": Megatron asserts it (or give first_stage_layers / last_stage_layers)")
    chunk = total // (pp * vpp)
    sizes = [chunk] * (pp * vpp)
    sizes[0] -= embedding
    sizes[-1] -= loss
    if min(sizes) < 0:
        raise FieldError("embedding_weight" if sizes[0] < 0 else "head_weight", 1,
                         "0: the first or last chunk has no layer to give (Megatron: not enough layers)")
    return tuple(sizes)


@lru_cache(maxsize=4096)
def in_flight(schedule: str, pp: int, vpp: int, m: int, rank: int,
              first_weight: int = 0, last_weight: int = 0, chunk_weight=1) -> Tuple[int, int, int]:
    """At this rank's activation peak: (chunk-micro-batches alive, of them of the model's first chunk, of its last).

    first_weight / last_weight / chunk_weight: bytes one micro-batch of the first chunk's extra (embedding end),
    the last chunk's extra (output end), and one chunk's layers hold (one value, or one per local chunk when the
    chunks differ: uneven stages); the peak is where their sum is largest.
    """
    alive, first, last = in_flight_chunks(schedule, pp, vpp, m, rank, first_weight, last_weight, chunk_weight)
    return sum(alive), first, last


@lru_cache(maxsize=4096)
def in_flight_chunks(schedule: str, pp: int, vpp: int, m: int, rank: int, first_weight: int = 0,
                     last_weight: int = 0, chunk_weight=1) -> Tuple[Tuple[int, ...], int, int]:
    """in_flight with the micro-batches alive per local chunk: (alive of chunk 0, 1, ..., vpp - 1), first, last."""
    holds_first, holds_last = rank == 0, rank == pp - 1
    if schedule == "gpipe":
        return (m,) * vpp, m if holds_first else 0, m if holds_last else 0
    if vpp == 1:
        alive = min(pp - rank, m)
        return (alive,), alive if holds_first else 0, min(1, alive) if holds_last else 0
    weights = (chunk_weight,) * vpp if isinstance(chunk_weight, int) else tuple(chunk_weight)
    return _interleaved(pp, vpp, m, rank, first_weight if holds_first else 0, last_weight if holds_last else 0,
                        weights)


def _interleaved(pp, vpp, m, rank, first_weight, last_weight, weights):
    """The first state of the schedule (in time order) where the weighted sum is largest."""
    best, best_state = -1, ((0,) * vpp, 0, 0)
    same = len(set(weights)) == 1
    for alive in _interleaved_states(pp, vpp, m, rank):
        chunks = sum(alive) * weights[0] if same else sum(a * w for a, w in zip(alive, weights))
        weight = chunks + alive[0] * first_weight + alive[-1] * last_weight
        if weight > best:
            best, best_state = weight, (alive, alive[0] if rank == 0 else 0, alive[-1] if rank == pp - 1 else 0)
    return best_state


@lru_cache(maxsize=1024)
def _interleaved_states(pp, vpp, m, rank) -> Tuple[Tuple[int, ...], ...]:
    """The micro-batches alive per local chunk at each state of the interleaved schedule on this rank that can be
    its peak, in time order. Independent of the weights, so the walk (up to 3 x pp x vpp steps) runs once per
    schedule, not once per micro-batch size a solver tries. The warm-up only adds (its last state holds all its
    earlier ones); in the steady state each step adds one forward of chunk f and frees one backward of chunk b,
    both fixed over runs of steps, so the weighted sum after each forward is linear along a run and its largest
    value is at a run's first or last step: those states stand for all (uneven chunks weigh differently)."""
    total = m * vpp
    warmup = min(2 * (pp - rank - 1) + (vpp - 1) * pp, total)
    alive = [0] * vpp
    for k in range(warmup):
        alive[(k // pp) % vpp] += 1
    states = {tuple(alive): None}        # a dict keeps the order of first arrival
    # Steady state: forward k = warmup + i, then backward i. Its composition repeats every pp x vpp steps, so
    # two periods after the warm-up hold the steady-state maximum; the cool-down only frees.
    steps = min(total - warmup, 2 * pp * vpp + 1)

    def chunks(i):
        return ((warmup + i) // pp) % vpp, vpp - 1 - (i // pp) % vpp

    for i in range(steps):
        f, b = chunks(i)
        alive[f] += 1
        if i == 0 or i == steps - 1 or chunks(i - 1) != (f, b) or chunks(i + 1) != (f, b):
            states.setdefault(tuple(alive))
        alive[b] -= 1
    return tuple(states)
