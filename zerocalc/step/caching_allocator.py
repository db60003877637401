"""A model of PyTorch's CUDA caching allocator: malloc/free events in, allocated and reserved bytes out.

Read from c10/cuda/CUDACachingAllocator.cpp at pytorch/pytorch eb42ad6eca0ce61e7c581212b4bf32f991425571 (the pin of
step/allocator.py), function by function:
- round_size: under kMinBlockSize (512 B) -> 512; else a multiple of 512, or with roundup_power2_divisions d > 0 and
  a size above 512 * d, the next of d equal divisions between two powers of two (roundup_power2_next_division);
- get_pool: a rounded size of at most kSmallSize (1 MiB) is served from the small pool, else the large pool; each
  pool keeps its free blocks per stream ("Once freed, blocks can be re-allocated on the same stream");
- get_free_block: best fit, the free block of the same stream and pool ordered by (size, address) first at or above
  the request; a block of max_split_size or more serves only a request of max_split_size or more, and then only
  when it is under the request + kLargeBuffer (20 MiB);
- get_allocation_size: a new segment is kSmallBuffer (2 MiB) for the small pool, kLargeBuffer (20 MiB) for a
  request under kMinLargeAlloc (10 MiB), else the request rounded up to kRoundLarge (2 MiB);
- should_split: the remainder is at least 512 B in the small pool or under expandable segments; in the large pool
  the request is under max_split_size and the remainder above kSmallSize (1 MiB), else the whole block is handed
  out (the request counts the block's full size as allocated);
- free_block / try_merge_blocks: a freed block merges with its free neighbours of the same segment;
- out of memory (alloc_block fails): release_available_cached_blocks frees oversize (>= max_split_size) cached
  blocks of the stream, then release_cached_blocks frees every cached block that is not split (whole free
  segments; under expandable segments the wholly free pages) and the allocation is retried once; only then the
  OutOfMemoryError, whose "reserved but unallocated" is what survived;
- expandable segments (Note [Expandable Segments], find_expandable_block, map_block): one segment per stream and
  pool whose pages (2 MiB small, 20 MiB large) are mapped at the lowest address that fits, so a request maps
  only the pages it needs beyond the free tail; get_free_block ranks a free block by the size it can grow to.
Not modelled: CUDA events of recordStream (a block freed while another stream uses it returns later), CUDA graphs'
private pools, garbage_collection_threshold, per-size roundup_power2_divisions (one count for every size here).
Standard library only, no state outside one call of simulate().
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Dict, Iterable, Optional, Tuple

from .caching_fast import State, eligible
from .caching_rules import (FREE, K_LARGE_BUFFER, K_MIN_BLOCK, K_MIN_LARGE_ALLOC, K_ROUND_LARGE,  # noqa: F401
                            K_SMALL_BUFFER, K_SMALL_SIZE, MALLOC, UNLIMITED, Config, Result, allocation_size,
                            round_size, roundup_power2_next_division, should_split)


class _Block:
    __slots__ = ("ptr", "size", "key", "allocated", "prev", "next", "mapped", "expandable")

    def __init__(self, ptr, size, key, prev=None, nxt=None, mapped=True, expandable=False):
        self.ptr, self.size, self.key, self.allocated = ptr, size, key, False
        self.prev, self.next, self.mapped, self.expandable = prev, nxt, mapped, expandable


class _Allocator:
    """The allocator's working state for one simulate() call: free blocks per (stream, small) as sorted
    (size, ptr) lists, the blocks by address, and the counters torch's stats keep."""

    def __init__(self, config: Config):
        self.c = config
        self.pools: Dict[tuple, list] = {}         # (stream, small) -> sorted [(size, ptr)] of mapped free blocks
        self.blocks: Dict[int, _Block] = {}       # ptr -> block (free or allocated, mapped or not)
        self.unmapped: Dict[tuple, list] = {}     # (stream, small) -> sorted [ptr] of unmapped expandable blocks
        self.next_ptr = 0
        self.allocated = self.reserved = self.requested = 0
        self.pool_reserved = {"small": 0, "large": 0}
        self.peak_pool = {"small": 0, "large": 0}
        # peak allocated, peak reserved, allocated at the reserved peak, reserved at the allocated peak, requested
        self.peaks = [0, 0, 0, 0, 0]
        self.segments = self.retries = 0
        self.oom = False

    # -- the free lists ------------------------------------------------------------------------------------------
    def _insert(self, b: _Block):
        insort(self.pools.setdefault(b.key, []), (b.size, b.ptr))

    def _remove(self, b: _Block):
        lst = self.pools[b.key]
        del lst[bisect_left(lst, (b.size, b.ptr))]

    def _grow(self, key, amount: int):
        pool = "small" if key[1] else "large"
        self.reserved += amount
        self.pool_reserved[pool] += amount
        self.peak_pool[pool] = max(self.peak_pool[pool], self.pool_reserved[pool])

    def _peak_reserved(self):
        if self.reserved > self.peaks[1]:
            self.peaks[1], self.peaks[2] = self.reserved, self.allocated

    def _fits(self, amount: int) -> bool:
        return self.c.capacity is None or self.reserved + amount <= self.c.capacity

    # -- get_free_block ------------------------------------------------------------------------------------------
    def _get_free_block(self, key, size: int) -> Optional[_Block]:
        lst = self.pools.get(key)
        if not lst:
            return None
        i = bisect_left(lst, (size, -1))
        if i == len(lst):
            return None
        b = self.blocks[lst[i][1]]
        if b.expandable and self.c.expandable_segments:      # rank by the size the block can grow to
            def grows(x):
                return x.size + (x.next.size if x.next is not None and not x.next.mapped else 0)
            while b.expandable and i + 1 < len(lst) and grows(self.blocks[lst[i + 1][1]]) < grows(b):
                i += 1
                b = self.blocks[lst[i][1]]
        mss = self.c.max_split_size
        if size < mss <= b.size or (size >= mss and b.size >= size + K_LARGE_BUFFER):
            return None
        del lst[i]
        return b

    # -- alloc_block -------------------------------------------------------------------------------------------
    def _alloc_block(self, key, size: int) -> Optional[_Block]:
        if self.c.expandable_segments:
            return self._expandable_block(key, size)
        amount = allocation_size(size)
        if not self._fits(amount):
            return None
        b = _Block(self.next_ptr, amount, key)
        self.next_ptr += amount + K_LARGE_BUFFER          # segments never touch: no merge across them
        self.blocks[b.ptr] = b
        self.segments += 1
        self._grow(key, amount)
        return b

    def _expandable_block(self, key, size: int) -> Optional[_Block]:
        """find_expandable_block + map_block: the lowest unmapped range of the stream's segment (with the free
        block before it) that holds `size`, its pages mapped and merged with the free blocks around them."""
        page = K_SMALL_BUFFER if key[1] else K_LARGE_BUFFER
        start = None
        for ptr in self.unmapped.get(key, ()):
            c = self.blocks[ptr]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            room, x = 0, c
            while room < size and x is not None and not x.allocated:
                room, x = room + x.size, x.next
            if room >= size:
                start = c
                break
        if start is None:           # a new segment: address space for the whole GPU, page-aligned
            base = -(-self.next_ptr // K_LARGE_BUFFER) * K_LARGE_BUFFER
            start = _Block(base, 1 << 50, key, mapped=False, expandable=True)
            self.next_ptr = base + start.size + K_LARGE_BUFFER
            self.blocks[base] = start
            insort(self.unmapped.setdefault(key, []), base)
        b = start
        if b.mapped:
            self._remove(b)
        while not b.mapped or b.size < size:
            to_map = b if not b.mapped else b.next
            amount = min(-(-(size - (b.size if b.mapped else 0)) // page) * page, to_map.size)
            if not self._fits(amount):
                if b.mapped:
                    self._insert(b)
                return None
            self._map(to_map, amount, key)
            self.segments += 1
            self._grow(key, amount)
            b = to_map
            for other in (b.prev, b.next):        # try_merge_blocks with the free mapped neighbours
                if other is not None and other.mapped and not other.allocated:
                    self._absorb(b, other)
        return b

    def _absorb(self, b: _Block, other: _Block):
        """b takes in its free neighbour `other` (removed from the free lists unless already taken out)."""
        lst = self.pools.get(other.key, [])
        i = bisect_left(lst, (other.size, other.ptr))
        if i < len(lst) and lst[i] == (other.size, other.ptr):
            del lst[i]
        del self.blocks[other.ptr]
        if other is b.prev:
            del self.blocks[b.ptr]
            b.ptr, b.prev = other.ptr, other.prev
            if b.prev is not None:
                b.prev.next = b
            self.blocks[b.ptr] = b
        else:
            b.next = other.next
            if b.next is not None:
                b.next.prev = b
        b.size += other.size

    def _map(self, b: _Block, amount: int, key):
        """Maps the first `amount` bytes of unmapped block b (amount <= b.size): the rest stays unmapped."""
        lst = self.unmapped[key]
        del lst[bisect_left(lst, b.ptr)]
        if amount < b.size:
            rest = _Block(b.ptr + amount, b.size - amount, key, b, b.next, mapped=False, expandable=True)
            if b.next is not None:
                b.next.prev = rest
            b.next, b.size = rest, amount
            self.blocks[rest.ptr] = rest
            insort(lst, rest.ptr)
        b.mapped = True

    # -- release_cached_blocks -------------------------------------------------------------------------------------
    def _release(self, key=None, oversize_only=False) -> bool:
        freed = False
        for k, lst in list(self.pools.items()):
            if key is not None and k != key:
                continue
            for size, ptr in list(lst):
                b = self.blocks[ptr]
                if oversize_only and (size < self.c.max_split_size or b.expandable):
                    continue
                if b.expandable:
                    freed |= self._unmap_pages(b, k)
                elif b.prev is None and b.next is None:
                    self._remove(b)
                    del self.blocks[ptr]
                    self._grow(k, -size)
                    freed = True
        return freed

    def _unmap_pages(self, b: _Block, key) -> bool:
        """Unmaps the whole pages inside free expandable block b (ExpandableSegment::unmap)."""
        page = K_SMALL_BUFFER if key[1] else K_LARGE_BUFFER
        lo, hi = -(-b.ptr // page) * page, (b.ptr + b.size) // page * page
        if hi <= lo:
            return False
        self._remove(b)
        end, nxt = b.ptr + b.size, b.next
        pieces = [(b.ptr, lo - b.ptr, True), (lo, hi - lo, False), (hi, end - hi, True)]
        prev = b.prev
        del self.blocks[b.ptr]
        made = []
        for ptr, size, mapped in pieces:
            if size:
                made.append(_Block(ptr, size, key, mapped=mapped, expandable=True))
        for x in made:
            x.prev = prev
            if prev is not None:
                prev.next = x
            prev = x
            self.blocks[x.ptr] = x
            if x.mapped:
                self._insert(x)
            else:
                insort(self.unmapped.setdefault(key, []), x.ptr)
        prev.next = nxt
        if nxt is not None:
            nxt.prev = prev
        for x in made:                       # an unmapped range joins the unmapped ranges beside it
            if not x.mapped:
                if x.next is not None and not x.next.mapped:
                    self._merge_unmapped(x, key)
                if x.prev is not None and not x.prev.mapped:
                    self._merge_unmapped(x.prev, key)
        self._grow(key, -(hi - lo))
        return True

    def _merge_unmapped(self, first: _Block, key):
        second = first.next
        lst = self.unmapped[key]
        del lst[bisect_left(lst, second.ptr)]
        first.size += second.size
        first.next = second.next
        if second.next is not None:
            second.next.prev = first
        del self.blocks[second.ptr]

    # -- malloc / free ---------------------------------------------------------------------------------------------
    def malloc(self, orig: int, stream) -> Optional[_Block]:
        size = round_size(orig, self.c.roundup_power2_divisions)
        key = (stream, size <= K_SMALL_SIZE)
        b = self._get_free_block(key, size)
        if b is None:
            b = self._alloc_block(key, size)
            if b is None and self.c.max_split_size < UNLIMITED and self._release(key, oversize_only=True):
                b = self._alloc_block(key, size)
            if b is None:
                self.retries += 1
                self._release()
                b = self._alloc_block(key, size)
            if b is None:
                self.oom = True
                self._peak_reserved()
                return None
        if should_split(b.size, size, key[1], self.c):
            rest = _Block(b.ptr + size, b.size - size, key, b, b.next, expandable=b.expandable)
            if b.next is not None:
                b.next.prev = rest
            b.next, b.size = rest, size
            self.blocks[rest.ptr] = rest
            self._insert(rest)
        b.allocated = True
        self.allocated += b.size
        self.requested += orig
        if self.allocated > self.peaks[0]:
            self.peaks[0], self.peaks[3] = self.allocated, self.reserved
        self._peak_reserved()
        self.peaks[4] = max(self.peaks[4], self.requested)
        return b

    def free(self, b: _Block, orig: int):
        b.allocated = False
        self.allocated -= b.size
        self.requested -= orig
        for other in (b.prev, b.next):                 # free_block's try_merge_blocks
            if other is not None and not other.allocated and other.mapped == b.mapped:
                self._absorb(b, other)
        self._insert(b)


def simulate(events: Iterable[tuple], config: Config = Config(), fast: bool = True) -> Result:
    """Replays (MALLOC, tensor id, bytes, stream) and (FREE, tensor id) events (a later malloc may reuse a freed
    id) and returns what torch.cuda's memory stats would report. A malloc that fails even after the release of
    cached blocks is counted (oom) and skipped, and so is the free of its tensor. Fixed segments with no capacity
    take caching_fast.py's path (the same results; fast=False forces this one)."""
    if fast and eligible(config):
        return State(config).run(events).result()
    a = _Allocator(config)
    live: Dict[object, Tuple[_Block, int]] = {}
    for event in events:
        if event[0] == MALLOC:
            _, tid, size, stream = event
            b = a.malloc(size, stream)
            if b is not None:
                live[tid] = (b, size)
        elif event[0] == FREE:
            got = live.pop(event[1], None)
            if got is not None:
                a.free(*got)
        else:
            raise ValueError(f"unknown allocator event {event[0]!r}")
    return Result(a.peaks[0], a.peaks[1], a.peaks[2], a.peaks[3], dict(a.peak_pool), a.peaks[4], a.segments,
                  a.retries, a.oom, a.reserved, a.allocated)
