"""answers/solve.py max_seq_len under the caching allocator's model (fragmentation_percent None): the guess from
the smooth 5 % peak, then a gallop on the model's own peak. The answer is a crossing: that length fits and the
next allowed one does not, by the model's own verdict (layout_report at that length); and _crossing_from finds
the largest true of a monotone predicate from any guess in O(log distance) evaluations."""

import math
from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.answers.solve import _crossing_from, max_seq_len, seq_len_step
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.workload import Workload


@pytest.mark.parametrize("answer", [0, 1, 2, 37, 1000, 1023, 1024])
def test_crossing_from_any_guess(answer):
    for guess in (-5, 1, 2, 36, 37, 38, 500, 1024, 4000):
        calls = []
        got = _crossing_from(lambda n: calls.append(n) or n <= answer, 1, 1024, guess)
        assert got == answer
        distance = abs(answer - min(1024, max(1, guess))) + 1
        assert len(calls) <= 2 * math.log2(distance) + 3, (guess, calls)


@pytest.mark.parametrize("gpu_memory", [24, 40])
def test_the_models_answer_fits_and_the_next_length_does_not(gpu_memory):
    arch = MODEL_PRESETS["llama-3.2-1b"][0]
    scenario = Scenario.from_convention("zero-paper", params=param_count(arch), workers=8)
    workload = Workload(arch, fragmentation_percent=None, gpu_memory=gpu_memory * 10**9)
    answers = max_seq_len(scenario, workload)
    step = seq_len_step(workload)
    assert any(answers.values())
    for s, answer in answers.items():
        if answer:
            assert layout_report(scenario, replace(workload, seq_len=answer)).peaks[s].fits
        assert not layout_report(scenario, replace(workload, seq_len=answer + step)).peaks[s].fits
