"""caching_allocator.simulate's fast path (issue 32): the same rules for the configuration every report replays,
fixed segments (no expandable segments) with no capacity (nothing is ever released), at a fraction of the cost.

Blocks are plain ints, not objects: a free list holds size << 128 | ptr (addresses pass 2^64 when a search
probes a 10^8-token sequence), so best fit (the first block at or above the request, by size then address) is one
bisect over ints; the free blocks are two dicts, by start (-> size) and
by end (-> start), which is all free_block's merge needs (a block's neighbour in its segment starts at its end or
ends at its start; segments lie K_LARGE_BUFFER apart, so no neighbour crosses a segment). Allocated blocks are the
live tensors' (ptr, size). Results equal caching_allocator._Allocator's (tests/test_caching_fast.py replays both).

State(...).run(events) replays; copy() forks a state, so a prefix shared by many replays (the persistent model
states, allocated once into an empty allocator) is replayed once (timeline.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort

from .caching_rules import (FREE, K_LARGE_BUFFER, K_MIN_BLOCK, K_SMALL_SIZE, MALLOC, Config, Result,
                            allocation_size, round_size)

_LOW = (1 << 128) - 1


def eligible(config: Config) -> bool:
    return not config.expandable_segments and config.capacity is None


class State:
    __slots__ = ("c", "pools", "starts", "ends", "live", "next_ptr", "allocated", "reserved", "requested",
                 "pool_reserved", "peaks", "segments")

    def __init__(self, config: Config = Config()):
        self.c = config
        self.pools = {}             # (stream, small) -> sorted [size << 128 | ptr] of free blocks
        self.starts = {}            # free block ptr -> size
        self.ends = {}              # free block end -> ptr
        self.live = {}              # tensor id -> (ptr, block size, requested bytes, pool key)
        self.next_ptr = self.allocated = self.reserved = self.requested = self.segments = 0
        self.pool_reserved = [0, 0]     # large, small
        # peak allocated, reserved at it, peak reserved, allocated at it, peak requested, large peak, small peak
        self.peaks = [0, 0, 0, 0, 0, 0, 0]

    def copy(self) -> "State":
        s = State.__new__(State)
        s.c, s.next_ptr, s.allocated, s.reserved = self.c, self.next_ptr, self.allocated, self.reserved
        s.requested, s.segments = self.requested, self.segments
        s.pools = {k: list(v) for k, v in self.pools.items()}
        s.starts, s.ends, s.live = dict(self.starts), dict(self.ends), dict(self.live)
        s.pool_reserved, s.peaks = list(self.pool_reserved), list(self.peaks)
        return s

    def run(self, events) -> "State":
        mss, divisions = self.c.max_split_size, self.c.roundup_power2_divisions
        pools, starts, ends, live, pool_reserved = self.pools, self.starts, self.ends, self.live, self.pool_reserved
        allocated, reserved, requested = self.allocated, self.reserved, self.requested
        peak_alloc, reserved_at, peak_reserved, alloc_at, peak_requested = self.peaks[:5]
        for event in events:
            if event[0] == MALLOC:
                _, tid, orig, stream = event
                size = round_size(orig, divisions) if divisions or orig < K_MIN_BLOCK else -(-orig // 512) * 512
                small = size <= K_SMALL_SIZE
                key = (stream, small)
                lst = pools.get(key)
                if lst is None:
                    lst = pools[key] = []
                i = bisect_left(lst, size << 128)
                if i < len(lst):
                    v = lst[i]
                    bsize = v >> 128
                    if size < mss <= bsize or (size >= mss and bsize >= size + K_LARGE_BUFFER):
                        v = None
                else:
                    v = None
                if v is not None:
                    del lst[i]
                    ptr = v & _LOW
                    del starts[ptr], ends[ptr + bsize]
                else:                                       # alloc_block: a new segment
                    bsize = allocation_size(size)
                    ptr = self.next_ptr
                    self.next_ptr += bsize + K_LARGE_BUFFER
                    if self.next_ptr > _LOW:
                        raise OverflowError("the replayed step reserves 2^128 bytes or more")
                    self.segments += 1
                    reserved += bsize
                    pool_reserved[small] += bsize
                    if pool_reserved[small] > self.peaks[5 + small]:
                        self.peaks[5 + small] = pool_reserved[small]
                rest = bsize - size
                if rest >= K_MIN_BLOCK if small else (size < mss and rest > K_SMALL_SIZE):
                    insort(lst, rest << 128 | (ptr + size))
                    starts[ptr + size] = rest
                    ends[ptr + bsize] = ptr + size
                    bsize = size
                live[tid] = (ptr, bsize, orig, key)
                allocated += bsize
                requested += orig
                if allocated > peak_alloc:
                    peak_alloc, reserved_at = allocated, reserved
                if reserved > peak_reserved:
                    peak_reserved, alloc_at = reserved, allocated
                if requested > peak_requested:
                    peak_requested = requested
            elif event[0] == FREE:
                got = live.pop(event[1], None)
                if got is None:
                    continue
                ptr, bsize, orig, key = got
                lst = pools[key]
                allocated -= bsize
                requested -= orig
                end = ptr + bsize
                nsize = starts.pop(end, None)              # try_merge_blocks: the free block after it
                if nsize is not None:
                    del lst[bisect_left(lst, nsize << 128 | end)]
                    del ends[end + nsize]
                    end += nsize
                prev = ends.pop(ptr, None)                 # and the free block before it
                if prev is not None:
                    del lst[bisect_left(lst, starts.pop(prev) << 128 | prev)]
                    ptr = prev
                insort(lst, (end - ptr) << 128 | ptr)
                starts[ptr] = end - ptr
                ends[end] = ptr
            else:
                raise ValueError(f"unknown allocator event {event[0]!r}")
        self.allocated, self.reserved, self.requested = allocated, reserved, requested
        self.peaks[:5] = peak_alloc, reserved_at, peak_reserved, alloc_at, peak_requested
        return self

    def result(self) -> Result:
        p = self.peaks
        return Result(p[0], p[2], p[3], p[1], {"small": p[6], "large": p[5]}, p[4], self.segments, 0, False,
                      self.reserved, self.allocated)
