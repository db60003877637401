"""The caching allocator's model (zerocalc/step/caching_allocator.py) against torch's own rules.

Sources: c10/cuda/CUDACachingAllocator.cpp at pytorch/pytorch eb42ad6eca0ce61e7c581212b4bf32f991425571 (constants,
round_size and roundup_power2_next_division with its 1200 -> 1280 example, get_allocation_size, should_split,
get_free_block, free_block, the release-and-retry of malloc, Note [Expandable Segments]), and the scenarios of
pytorch/pytorch test/test_cuda.py (test_allocator_settings: 21 Mi floats under roundup_power2_divisions:4;
test_max_split_expandable: three 40 MiB tensors under max_split_size_mb:40 in a 120 MiB budget, a fourth fails,
then one 120 MiB tensor succeeds after the release), read as ported to other backends' copies of that file.
"""

import time

import pytest

from zerocalc.step import caching_allocator as ca
from zerocalc.step.caching_allocator import FREE, MALLOC, Config, round_size, simulate

MIB = 2**20


def run(events, **config):
    return simulate(events, Config(**config))


def test_torchs_constants():
    assert (ca.K_MIN_BLOCK, ca.K_SMALL_SIZE, ca.K_SMALL_BUFFER) == (512, 1048576, 2097152)
    assert (ca.K_LARGE_BUFFER, ca.K_MIN_LARGE_ALLOC, ca.K_ROUND_LARGE) == (20971520, 10485760, 2097152)


def test_round_size():
    assert [round_size(n) for n in (1, 511, 512, 513, 1024, 1025)] == [512, 512, 512, 1024, 1024, 1536]
    assert ca.roundup_power2_next_division(1200, 4) == 1280        # the source comment's example
    nbytes = 4 * 21 * 1024 * 1024                                  # test_allocator_settings
    assert round_size(nbytes) == nbytes
    assert round_size(nbytes, 4) == 96 * MIB                       # power2_div(nbytes, 4): 64 + 2 x 16 MiB
    assert round_size(1000, 4) == 1024 and round_size(2048, 4) == 2048    # 512 x 4 = 2048: no division below


def test_pools_and_segment_sizes():
    small = run([(MALLOC, 1, MIB, 0)])
    assert small.peak_reserved == 2 * MIB and small.peak_reserved_by_pool == {"small": 2 * MIB, "large": 0}
    assert run([(MALLOC, 1, MIB + 1, 0)]).peak_reserved_by_pool == {"small": 0, "large": 20 * MIB}
    assert run([(MALLOC, 1, 10 * MIB - 512, 0)]).peak_reserved == 20 * MIB       # under kMinLargeAlloc
    assert run([(MALLOC, 1, 10 * MIB, 0)]).peak_reserved == 10 * MIB             # rounded to 2 MiB
    assert run([(MALLOC, 1, 11 * MIB, 0)]).peak_reserved == 12 * MIB
    four = run([(MALLOC, i, 5 * MIB, 0) for i in range(5)])        # four 5 MiB requests share a 20 MiB segment
    assert (four.peak_reserved, four.segments) == (40 * MIB, 2)
    packed = run([(MALLOC, i, 4096, 0) for i in range(512)])       # 512 x 4 KiB fill one 2 MiB small segment
    assert (packed.peak_reserved, packed.peak_allocated) == (2 * MIB, 2 * MIB)


def test_the_large_pool_hands_out_a_whole_block_when_the_rest_is_1_mib_or_less():
    r = run([(MALLOC, 1, 12 * MIB, 0), (FREE, 1), (MALLOC, 2, 11 * MIB + 512, 0)])
    assert (r.peak_reserved, r.allocated_end) == (12 * MIB, 12 * MIB)      # not split: 12 MiB counted allocated
    r = run([(MALLOC, 1, 12 * MIB, 0), (FREE, 1), (MALLOC, 2, 10 * MIB, 0), (MALLOC, 3, 2 * MIB, 0)])
    assert r.peak_reserved == 12 * MIB and r.segments == 1                   # split: 2 MiB left for the next


def test_best_fit_and_merging():
    # freed neighbours merge: two 5 MiB blocks and the 10 MiB rest become one 20 MiB block again
    r = run([(MALLOC, 1, 5 * MIB, 0), (MALLOC, 2, 5 * MIB, 0), (FREE, 1), (FREE, 2), (MALLOC, 3, 20 * MIB, 0)])
    assert (r.peak_reserved, r.segments) == (20 * MIB, 1)
    # best fit: of a 30 MiB and a 14 MiB free block, a 13 MiB request takes the 14 MiB one
    r = run([(MALLOC, 1, 30 * MIB, 0), (MALLOC, 2, 14 * MIB, 0), (FREE, 1), (FREE, 2), (MALLOC, 3, 13 * MIB, 0),
             (MALLOC, 4, 30 * MIB, 0)])
    assert (r.peak_reserved, r.segments) == (44 * MIB, 2)


def test_one_pool_per_stream():
    same = run([(MALLOC, 1, 64 * MIB, 0), (FREE, 1), (MALLOC, 2, 64 * MIB, 0)])
    other = run([(MALLOC, 1, 64 * MIB, 0), (FREE, 1), (MALLOC, 2, 64 * MIB, "all-gather")])
    assert (same.peak_reserved, other.peak_reserved) == (64 * MIB, 128 * MIB)


def test_max_split_size():
    mss = 40 * MIB
    # an oversize cached block serves a large request within kLargeBuffer of it, never a small one
    assert run([(MALLOC, 1, 60 * MIB, 0), (FREE, 1), (MALLOC, 2, 45 * MIB, 0)], max_split_size=mss).segments == 1
    assert run([(MALLOC, 1, 60 * MIB, 0), (FREE, 1), (MALLOC, 2, 30 * MIB, 0)], max_split_size=mss).segments == 2
    assert run([(MALLOC, 1, 80 * MIB, 0), (FREE, 1), (MALLOC, 2, 50 * MIB, 0)], max_split_size=mss).segments == 2
    # a request of max_split_size or more is not split off a larger block: the whole block is allocated
    r = run([(MALLOC, 1, 50 * MIB, 0), (FREE, 1), (MALLOC, 2, 42 * MIB, 0)], max_split_size=mss)
    assert r.allocated_end == 50 * MIB


def test_max_split_in_a_budget_like_test_max_split_expandable():
    three = [(MALLOC, i, 40 * MIB, 0) for i in range(3)]
    assert run(three + [(MALLOC, 3, 40 * MIB, 0)], max_split_size=40 * MIB, capacity=120 * MIB).oom
    r = run(three + [(FREE, i) for i in range(3)] + [(MALLOC, 4, 120 * MIB, 0)], max_split_size=40 * MIB,
            capacity=120 * MIB)
    assert not r.oom and (r.reserved_end, r.allocated_end) == (120 * MIB, 120 * MIB)


def test_the_release_before_out_of_memory():
    # an unsplit cached block is released and the request retried: what survives is only split blocks
    r = run([(MALLOC, 1, 60 * MIB, 0), (FREE, 1), (MALLOC, 2, 70 * MIB, 0)], capacity=100 * MIB)
    assert (r.oom, r.retries, r.peak_reserved, r.reserved_end) == (False, 1, 70 * MIB, 70 * MIB)
    roomy = run([(MALLOC, 1, 60 * MIB, 0), (FREE, 1), (MALLOC, 2, 70 * MIB, 0)])
    assert roomy.peak_reserved == 130 * MIB
    # a split block partly in use cannot be released: the out-of-memory error stands
    r = run([(MALLOC, 1, 60 * MIB, 0), (FREE, 1), (MALLOC, 2, 30 * MIB, 0), (MALLOC, 3, 50 * MIB, 0)],
            capacity=100 * MIB)
    assert r.oom and r.reserved_end == 60 * MIB and r.allocated_end == 30 * MIB


def test_expandable_segments_map_pages_of_one_growing_segment():
    # 5 MiB requests map 20 MiB pages of one segment; they split at 512 bytes, not 1 MiB
    r = run([(MALLOC, i, 5 * MIB, 0) for i in range(5)], expandable_segments=True)
    assert (r.peak_reserved, r.peak_allocated) == (40 * MIB, 25 * MIB)
    small = run([(MALLOC, i, 600 * 1024, 0) for i in range(5)], expandable_segments=True)
    assert small.peak_reserved == 4 * MIB                          # 2 MiB pages in the small pool
    # Note [Expandable Segments]: sizes that grow by one batch row leave no slivers
    grow = [(MALLOC, i, 12 * MIB, 0) for i in range(30)] + [(FREE, i) for i in range(30)] + \
        [(MALLOC, 100 + i, 12 * MIB + 512 * 1024, 0) for i in range(30)]
    default, expandable = run(grow), run(grow, expandable_segments=True)
    assert default.peak_reserved == 30 * 12 * MIB + 30 * 14 * MIB
    assert expandable.peak_reserved == 380 * MIB                   # 375 MiB in 20 MiB pages
    assert run(grow, expandable_segments=True, capacity=380 * MIB).oom is False
    assert run(grow, capacity=380 * MIB).oom is True               # the 12 MiB segments cannot hold 12.5 MiB


def test_expandable_segments_unmap_free_pages_before_out_of_memory():
    events = [(MALLOC, i, 20 * MIB, 0) for i in range(4)] + [(FREE, 0), (FREE, 2)] + \
        [(MALLOC, 9, 40 * MIB, "other")]
    r = run(events, expandable_segments=True, capacity=100 * MIB)
    assert not r.oom and r.retries == 1 and r.reserved_end == 80 * MIB
    assert run(events, expandable_segments=True).reserved_end == 120 * MIB


def test_unknown_events_and_frees_of_unknown_ids():
    assert run([(FREE, 1)]).peak_reserved == 0
    with pytest.raises(ValueError):
        run([("empty_cache",)])


def test_ten_thousand_events_replay_fast():
    events = []
    for step in range(2500):
        events += [(MALLOC, step, (step % 37 + 1) * 300_000, 0), (MALLOC, -step - 1, 4096, 0)]
        if step >= 8:
            events += [(FREE, step - 8), (FREE, -step + 7)]
    start = time.perf_counter()
    r = run(events)
    assert time.perf_counter() - start < 0.5
    assert r.peak_allocated <= r.peak_reserved
