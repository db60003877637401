"""The caching allocator's constants and size rules, shared by its reference model (caching_allocator.py, whose
docstring reads them from c10/cuda/CUDACachingAllocator.cpp at pytorch/pytorch
eb42ad6eca0ce61e7c581212b4bf32f991425571) and its fast path (caching_fast.py)."""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

K_MIN_BLOCK = 512                 # kMinBlockSize
K_SMALL_SIZE = 1 << 20            # kSmallSize: the largest small-pool request
K_SMALL_BUFFER = 2 << 20          # kSmallBuffer: a small-pool segment (and expandable page)
K_LARGE_BUFFER = 20 << 20         # kLargeBuffer: a segment for 1-10 MiB requests (and a large expandable page)
K_MIN_LARGE_ALLOC = 10 << 20      # kMinLargeAlloc
K_ROUND_LARGE = 2 << 20           # kRoundLarge
UNLIMITED = (1 << 64) - 1         # max_split_size's default (std::numeric_limits<size_t>::max())
MALLOC, FREE = "malloc", "free"


class Config(NamedTuple):
    max_split_size: int = UNLIMITED
    roundup_power2_divisions: int = 0
    expandable_segments: bool = False
    capacity: Optional[int] = None        # bytes the allocator may reserve (None: unlimited, nothing released)


class Result(NamedTuple):
    peak_allocated: int                   # max_memory_allocated: the rounded blocks in use
    peak_reserved: int                    # max_memory_reserved
    allocated_at_peak_reserved: int
    reserved_at_peak_allocated: int
    peak_reserved_by_pool: Dict[str, int]     # "small" / "large" -> its own high-water mark
    peak_requested: int                   # the sizes asked for, unrounded
    segments: int                         # cudaMalloc calls (expandable: page maps)
    retries: int                          # out-of-memory releases and retries
    oom: bool                             # an allocation failed even after the release
    reserved_end: int
    allocated_end: int


def roundup_power2_next_division(size: int, divisions: int) -> int:
    if size <= 4 or divisions <= 1 or size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


def round_size(size: int, divisions: int = 0) -> int:
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    if divisions > 0 and size > K_MIN_BLOCK * divisions:
        return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK * -(-size // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-size // K_ROUND_LARGE)


def should_split(block_size: int, size: int, small: bool, config: Config) -> bool:
    remaining = block_size - size
    if small or config.expandable_segments:
        return remaining >= K_MIN_BLOCK
    return size < config.max_split_size and remaining > K_SMALL_SIZE
