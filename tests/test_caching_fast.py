"""caching_fast.py (the fast path of zerocalc/step/caching_allocator.simulate) against the reference allocator it
replaces (caching_allocator._Allocator, read from c10/cuda/CUDACachingAllocator.cpp at pytorch/pytorch
eb42ad6eca0ce61e7c581212b4bf32f991425571): every Result field equal on random event sequences and on real steps."""

import random

import pytest

from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.caching_allocator import FREE, MALLOC, Config, simulate
from zerocalc.step.caching_fast import State
from zerocalc.step.timeline import ALL_GATHER, events, plan_of, replay
from zerocalc.step.workload import Workload

MIB = 2**20


def random_events(seed: int, n: int = 3000) -> list:
    rng = random.Random(seed)
    out, live = [], []
    sizes = [1, 511, 512, 513, 4096, MIB - 1, MIB, MIB + 1, 3 * MIB, 10 * MIB - 7, 10 * MIB, 25 * MIB + 3, 64 * MIB]
    for i in range(n):
        if live and rng.random() < 0.45:
            out.append((FREE, live.pop(rng.randrange(len(live)))))
        else:
            size = rng.choice(sizes) if rng.random() < 0.5 else rng.randrange(1, 80 * MIB)
            out.append((MALLOC, i, size, rng.choice((0, 0, 0, ALL_GATHER))))
            live.append(i)
    out.append((FREE, "never allocated"))
    return out


@pytest.mark.parametrize("config", [Config(), Config(max_split_size=40 * MIB), Config(roundup_power2_divisions=4),
                                    Config(max_split_size=8 * MIB, roundup_power2_divisions=8)])
@pytest.mark.parametrize("seed", range(6))
def test_random_sequences_give_the_reference_result(seed, config):
    ev = random_events(seed)
    assert simulate(ev, config) == simulate(ev, config, fast=False)


def test_real_steps_and_a_forked_prefix_give_the_reference_result():
    for name, stage in (("llama-2-7b", 0), ("llama-2-7b", 3)):
        arch = MODEL_PRESETS[name][0]
        scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
        report = layout_report(scenario, Workload(arch, micro_batch=2))
        plan = plan_of(report.peaks[stage], report.ranks[0].shape, report.peaks[stage].cycle_unit_bytes)
        ev = events(plan, 6)
        assert simulate(ev, Config()) == simulate(ev, Config(), fast=False)
        cut = len(ev) // 3                       # a copied state goes on exactly as the one it was copied from
        prefix = State().run(ev[:cut])
        fork = prefix.copy()
        assert fork.run(ev[cut:]).result() == simulate(ev, Config(), fast=False)
        assert prefix.result() == simulate(ev[:cut], Config(), fast=False)
        for _ in range(2):                       # timeline.replay: the cached states' copy, twice
            assert replay(plan, 6) == simulate(ev, Config(), fast=False)


def test_addresses_beyond_2_to_the_64_give_the_reference_result():
    """A solver's probe at a 10^8-token sequence makes tensors of ~10^17 bytes: addresses pass 2^64 (the first
    encoding, size << 64 | ptr, lost the address's high bits there and failed with a KeyError)."""
    huge = 3 * 10**17 + 12345
    ev = [(MALLOC, i, huge + i * MIB, 0) for i in range(120)] + [(FREE, i) for i in range(0, 120, 3)] + \
        [(MALLOC, 1000 + j, huge + (100 + j) * MIB, 0) for j in range(10)] + [(FREE, i) for i in range(1, 120, 3)]
    assert simulate(ev, Config()) == simulate(ev, Config(), fast=False)


def test_expandable_and_capacity_keep_the_reference_path():
    ev = random_events(1, 400)
    for config in (Config(expandable_segments=True), Config(capacity=300 * MIB)):
        assert simulate(ev, config) == simulate(ev, config, fast=False)
