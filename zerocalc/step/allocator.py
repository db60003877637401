"""The caching allocator's reserve: what PyTorch holds beyond the live tensors, per allocator and sharding mode.

Read from c10/cuda/CUDACachingAllocator.cpp at pytorch/pytorch eb42ad6eca0ce61e7c581212b4bf32f991425571:
- every request is rounded up to kMinBlockSize = 512 bytes (round_size); requests of at most kSmallSize = 1 MiB
  come from the small pool in kSmallBuffer = 2 MiB segments; larger ones from the large pool, whose new segments
  are kLargeBuffer = 20 MiB for requests under kMinLargeAlloc = 10 MiB and the request rounded up to
  kRoundLarge = 2 MiB otherwise (get_allocation_size);
- a cached block is split when the remainder is at least 512 bytes (small pool, or expandable segments) or above
  1 MiB and the request is below max_split_size (large pool; unlimited by default); a block of max_split_size or
  more serves only requests within kLargeBuffer of its size (should_split, get_free_block);
- "Once freed, blocks can be re-allocated on the same stream, but not on any other stream" (the file's opening
  comment): a tensor allocated on a communication stream leaves its block cached there;
- before it raises an out-of-memory error the allocator frees cached blocks that are not split and retries
  (alloc_block's retry, release_cached_blocks: "Free all non-split cached blocks");
- with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True there is one segment per stream and pool that grows by
  mapping 2 MiB (small pool) or 20 MiB (large pool) pages (Note [Expandable Segments]), so the 20 MiB segments of
  1-10 MiB requests and the slivers left when tensor sizes change go away; the pools stay per stream.

What that implies for one step, and the band zerocalc shows (reserve = percent of the live tensors, rounded up,
plus unit cycles x the stage's cycle unit):
- low end, every allocator: 0. Rounding alone adds at most 511 bytes per tensor and under 2 MiB per segment
  (well below 0.1 % of a training step's live set), and everything cached but not split is released before an
  out-of-memory error: a plan whose tensors fit can run, if slowly (cudaMalloc retries).
- point: fragmentation_percent (5): what survives that release, the split blocks partly in use. Published
  out-of-memory messages, printed after the release, show 0.1-7.6 % (answers/ranges.py lists them).
- high end: what a run with room reports as max_memory_reserved, where nothing forced a release: every pool at
  its own high-water mark. Per sharding mode (MODES):
  * replicated (ZeRO-0/1/2, DDP-like): parameters, gradients, optimizer state and the reduce buckets are allocated
    once and the buckets reduced in place, so the reserve is the compute stream's: activations and temporaries of
    varying sizes freed and re-allocated each step. No cycle unit.
  * sharded (ZeRO-3 / FSDP FULL_SHARD): each unit is gathered on an all-gather stream and its gradient
    reduce-scattered on another; blocks freed there stay cached there. The all-gather pool keeps the prefetched
    unit beyond the live one and the reduce-scatter pool the unit's unsharded gradient, neither of which the
    compute stream can use: two unit cycles, the unit being the largest gathered module in the compute dtype
    plus its gradient in the reduce dtype (cycle_unit_bytes).
  ALLOCATORS gives the percent and the unit cycles at the high end: the default allocator's 35 % covers the
  largest excess beyond the unit cycles among the published (allocated, reserved) pairs of one run
  (tests/test_allocator.py: ratios 1.01-1.35, FSDP1, FSDP2, Megatron FSDP and DeepSpeed ZeRO-2; the widest,
  FSDP1 LoRA on Llama-2-7B with limit_all_gathers, needs 31.4 % beyond two unit cycles), rounded up to 5 %. So
  the band is 0-35 % of the tensors wide, plus two unit cycles under ZeRO-3. With expandable segments
  the high end is 10 %, an assumption: no published pair under expandable segments was found. "flat" is the band
  before issue 20, 0-15 % of the tensors and no unit cycles.
The model (issue 32): caching_allocator.py replays the step's allocation sequence (timeline.py, built from the
stage's parts) with the rules above; simulated_reserve is its peak reserved - peak allocated. With
Workload.fragmentation_percent None it is the point of every phase of the stage (step/peak.py); the band above
stays as it is around it. docs/peak-memory.md 3b compares both with the ledger's reserved cases.
Not modelled: sequence lengths that change from step to step (the "N + 1" slivers of Note [Expandable Segments];
torchtune's unpacked QLoRA run reserved 1.51x what the same run reserved with expandable segments, issue #1185),
recordStream holding NCCL tensors beyond their use (TORCH_NCCL_AVOID_RECORD_STREAMS, torchtitan #735), CUDA
graphs' private pools.
"""

from __future__ import annotations

from typing import NamedTuple

from ..tables import DTYPE_BITS, bytes_of


class AllocatorModel(NamedTuple):
    high_percent: int     # percent of the live tensors at the band's high end
    high_units: int       # unit cycles at the high end (times the stage's cycle unit; 0 in replicated modes)
    source: str


ALLOCATORS = {
    "caching": AllocatorModel(
        35, 2, "PyTorch's caching allocator (the default): up to 35 % of the tensors plus two unit cycles under "
        "ZeRO-3, the widest published (allocated, reserved) pair of one run (1.35x, FSDP1 LoRA Llama-2-7B, "
        "meta-llama/llama-cookbook#41)"),
    "expandable": AllocatorModel(
        10, 2, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one growing segment per stream (Note "
        "[Expandable Segments]); 10 % is an assumption, no published pair was found"),
    "flat": AllocatorModel(15, 0, "the flat band before issue 20: 0-15 % of the tensors"),
}
DEFAULT_ALLOCATOR = "caching"
MODES = {0: "replicated", 1: "replicated", 2: "replicated", 3: "sharded"}


DEFAULT_PERCENT = 5         # the point's percent where a reserve has no simulation (fragmentation_percent None)


def replays(workload) -> bool:
    """Whether the workload's reserve is the caching allocator model's replay (issue 32: the default): no percent
    set, and an allocator with a model ("flat" has none)."""
    return workload.fragmentation_percent is None and workload.allocator != "flat"


def reserve_bytes(tensors: int, percent, units: int = 0, unit_bytes: int = 0, simulated=None) -> int:
    """The reserve over a phase's live tensors: percent of them rounded up, plus `units` cycles of `unit_bytes`.
    percent None (Workload.fragmentation_percent unset) takes the caching allocator model's reserve, `simulated`
    (simulated_reserve's point), instead of the percent; where nothing was simulated (an RL engine's parts),
    DEFAULT_PERCENT."""
    if percent is None:
        base = -(-tensors * DEFAULT_PERCENT // 100) if simulated is None else simulated
    else:
        base = -(-tensors * percent // 100)
    return base + units * unit_bytes


def cycle_unit_bytes(scenario, workload, stage: int, shape) -> int:
    """What one gather-free cycle leaves on the communication streams (0 outside ZeRO-3, or with nothing to
    shard): the largest gathered module in the compute dtype and its gradient in the reduce dtype (FSDP's
    reduce_dtype when the workload names one, else the gradient dtype)."""
    if MODES[stage] != "sharded" or scenario.group * workload.layout.cp <= 1:
        return 0
    reduce = workload.reduce_dtype or scenario.grad_dtype
    elements = shape.largest_layer_params
    return bytes_of(elements, shape.compute_bits) + bytes_of(elements, DTYPE_BITS[reduce])


def band(allocator: str, stage: int, tensors: int, unit_bytes: int, percent: int = 5,
         units: int = 0) -> tuple[int, int, int]:
    """(low, point, high) reserve over `tensors` live bytes at one ZeRO stage, as answers.ranges moves it: 0; the
    point's percent and unit cycles; the allocator's high percent and unit cycles, or the point's where larger
    (unit cycles count at sharded stages only: elsewhere the cycle unit is 0)."""
    model = ALLOCATORS[allocator]
    unit_bytes = unit_bytes if MODES[stage] == "sharded" else 0
    high = reserve_bytes(tensors, max(percent, model.high_percent), max(units, model.high_units), unit_bytes)
    return 0, reserve_bytes(tensors, percent, units, unit_bytes), high


def simulated_reserve(peak, shape, allocator: str = DEFAULT_ALLOCATOR, low: bool = True, pieces=None) -> tuple:
    """(low, point) reserve of one stage by the caching allocator's model (issue 32): the step's allocation
    sequence (timeline.py) replayed through caching_allocator.py, peak reserved - peak allocated. The point is a
    run with room (nothing released, as max_memory_reserved of a run that fits reports); the low end replays the
    same step in a budget of its allocated peak + one 20 MiB segment, where the allocator releases its unsplit
    cached blocks before it would fail (low=False skips that replay: low is then None). "expandable" replays with
    expandable segments; "flat" has no model (0, 0)."""
    from .caching_allocator import K_LARGE_BUFFER, Config
    from .timeline import Pieces, blocks_reserve, plan_of, replay
    if allocator == "flat":
        return 0, 0
    plan = plan_of(peak, shape, peak.cycle_unit_bytes, pieces or Pieces())
    roomy = Config(expandable_segments=allocator == "expandable")
    point = blocks_reserve(plan, roomy)
    if not low:
        return None, point["reserve"]
    tight = replay(plan, plan.layers, roomy._replace(capacity=point["allocated"] + K_LARGE_BUFFER))
    low_bytes = max(0, tight.peak_reserved - tight.peak_allocated) if not tight.oom else 0
    return min(low_bytes, point["reserve"]), point["reserve"]
