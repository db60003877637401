"""Extreme but valid scenarios: 10^15 parameters, 10^6 workers, sequence 10^6, vocabulary 10^6, every dtype and
optimizer combination. Numbers stay exact integers, finite, and print without overflow or scientific notation."""

import itertools
import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from zerocalc import Scenario
from zerocalc.states.zero import model_states
from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import param_count
from zerocalc.output.report import full_report
from zerocalc.tables import DTYPE_BITS, OPTIMIZERS
from zerocalc.output.text import render_text
from zerocalc.units import format_bytes
from zerocalc.step.workload import Workload

SCI = re.compile(r"\d[eE][+-]?\d")


def all_ints(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from all_ints(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from all_ints(v)
    elif isinstance(obj, int) and not isinstance(obj, bool):
        yield obj


def test_a_quadrillion_parameters_on_a_million_workers_is_exact():
    s = Scenario(params=10**15, workers=10**6)
    r = model_states(s)
    assert r.stage(0).per_worker_total == 16 * 10**15
    assert r.stage(3).per_worker_total == 16 * 10**9                 # 10^15 / 10^6 elements x 16 bytes
    assert r.stage(0).cluster_total == 16 * 10**21
    text = render_text(r, units="decimal")
    assert "16.00 PB" in text and "16.00 GB" in text and not SCI.search(text)   # each cell in its own unit


def test_million_token_sequences_and_million_word_vocabularies():
    arch = Architecture(layers=4, hidden=1024, heads=8, ffn=4096, vocab=10**6, seq_len=10**6)
    s = Scenario(params=param_count(arch), workers=10**6)
    for attention in ("eager", "flash"):
        w = Workload(arch, seq_len=10**6, attention=attention, micro_batch=1)
        report = full_report(s, w)
        json.dumps(report)                                            # serialisable
        assert all(p["peak_bytes"] > 0 and p["headroom_bytes"] < 0 for p in report["peak"])
        assert all(isinstance(v, int) for v in all_ints(report["peak"]))
        peak = report["peak"][3]["peak_bytes"]
        assert isinstance(peak, int) and not SCI.search(format_bytes(peak, "decimal"))
        assert report["solve"]["max_micro_batch"]["3"] == 0               # nothing fits, said exactly
    eager = full_report(s, Workload(arch, seq_len=10**6, attention="eager"))["activation_bytes_per_layer"]
    assert eager > 8 * 10**12 * 2                                     # 8 heads x 10^12 scores x 2 bytes


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_every_dtype_and_optimizer_combination_is_finite_and_exact(optimizer):
    for param, grad, state in itertools.product(DTYPE_BITS, repeat=3):
        s = Scenario(params=10**15 + 7, workers=999_983, param_dtype=param, grad_dtype=grad,
                     optimizer=optimizer, optimizer_dtype=state)
        r = model_states(s)
        for stage in r.stages:
            assert stage.per_worker_total > 0 and stage.redundant_bytes >= 0
            assert stage.cluster_total == s.workers * stage.per_worker_total


def test_formatting_never_uses_scientific_notation():
    for exponent in range(0, 31):
        for unit in ("decimal", "binary", "GB", "GiB", "TB", "B"):
            assert not SCI.search(format_bytes(10**exponent, unit))


def test_an_extreme_link_renders_in_the_app():
    at = AppTest.from_file("../app.py", default_timeout=120)
    for key, value in {"model": "params-only", "params": "1000000000000000", "workers": "1000000",
                       "seq_len": "1000000", "vocab": "1000000"}.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception
    # the app's units are GB or GiB: a quadrillion-parameter model reads in whole GB, never as 1.6e+07
    assert at.metric[0].value == "16,000,000.00 GB" and at.metric[3].value == "16.00 GB"
    big = AppTest.from_file("../app.py", default_timeout=120)
    for key, value in {"model": "llama-3.1-405b", "workers": "1000000", "seq_len": "1000000", "vocab": "1000000",
                       "attention": "eager"}.items():
        big.query_params[key] = value
    big.run()
    assert not big.exception and not big.warning
