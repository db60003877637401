"""The core's caches never change an answer: a report computed with every cache warm, after other worker counts
and layouts filled them, equals the one computed from scratch, byte for byte; benchmarks' uncached() empties every
one of them; and what a cache hands out cannot be changed through it."""

import json
from dataclasses import replace

import pytest

from benchmarks.model_states import _zerocalc_caches, uncached
from zerocalc import Scenario
from zerocalc.model.inventory import counts, param_count
from zerocalc.model.finetune import FineTune
from zerocalc.layout import Layout
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.answers.ranges import ranges, ranges_dict
from zerocalc.output.groups import trainable_counts
from zerocalc.output.report import full_report
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.workload import Workload

LLAMA, MIXTRAL = MODEL_PRESETS["llama-3-8b"][0], MODEL_PRESETS["mixtral-8x7b"][0]
CASES = {
    "data parallel": ("zero-paper", LLAMA, {}),
    "3D, LoRA": ("megatron", LLAMA, dict(layout=Layout(tp=2, pp=2, micro_batches=4),
                                         finetune=FineTune(mode="lora", lora_targets=("all-linear",)))),
    "experts, offload": ("deepspeed", MIXTRAL, dict(layout=Layout(ep=2))),
    "QLoRA, FSDP2": ("fsdp2", LLAMA, dict(finetune=FineTune(mode="qlora"))),
    "frozen blocks": ("pure-bf16", MIXTRAL, dict(finetune=FineTune(mode="freeze", train_last_layers=2))),
}


def _inputs(case, workers):
    convention, arch, work = CASES[case]
    offload = "cpu" if case == "experts, offload" else "none"
    s = Scenario.from_convention(convention, params=param_count(arch), workers=workers, offload_optimizer=offload)
    return s, Workload(arch, seq_len=2048, **work)


def _answers(s, w) -> str:
    return json.dumps([full_report(s, w, answers=False), full_report(s, w), ranges_dict(ranges(s, w))])


@pytest.mark.parametrize("case", CASES)
def test_a_warm_report_equals_one_from_scratch(case):
    cold = {n: uncached(lambda n=n: _answers(*_inputs(case, n)))() for n in (8, 16, 24)}
    for other in CASES:                       # fill every cache with other scenarios first
        for n in (8, 32):
            _answers(*_inputs(other, n))
    layout_report.cache_clear()               # each report rebuilt from the caches below it
    for n, expected in cold.items():
        assert _answers(*_inputs(case, n)) == expected
        assert _answers(*_inputs(case, n)) == expected      # and again, from the report cache


def test_uncached_empties_the_caches_a_fresh_worker_count_reuses():
    from zerocalc.model import inventory, placement
    from zerocalc.output import groups as output_groups
    from zerocalc.output import report
    from zerocalc.parallel import ranks
    from zerocalc.states import groups, ledger
    added = [inventory.param_count, inventory._counts, inventory.largest_layer, ledger._bytes_per_param,
             placement._pipeline_classes, groups._group_ledger, ranks._one_copy_of, report._field_names,
             report._is_dataclass_type, report._ledger_heads, report._architecture_sizes,
             report._architecture_record, output_groups._holding_counts]
    found = {id(c) for c in _zerocalc_caches()}
    assert all(id(c) in found for c in added)
    _answers(*_inputs("3D, LoRA", 8))
    assert all(c.cache_info().currsize for c in added if c is not groups._group_ledger)
    assert uncached(lambda: [c.cache_info().currsize for c in added])() == [0] * len(added)


def test_equal_architectures_echo_their_own_field_values():
    # 0 == 0.0, so a record cached by the architecture alone would hand one's values to the other
    from zerocalc.output.report import _architecture_fields, plain
    as_float, as_int = replace(LLAMA, attn_dropout=0.0), replace(LLAMA, attn_dropout=0)
    assert as_float == as_int
    for arch in (as_float, as_int) * 2:
        record = _architecture_fields(arch)
        assert record == plain(arch) and type(record["attn_dropout"]) is type(arch.attn_dropout)


def test_what_a_cache_hands_out_is_a_copy():
    s, w = _inputs("3D, LoRA", 8)
    counts(LLAMA)["params"] = -1
    trainable_counts(layout_report(s, w))["trainable_params"] = -1
    first = full_report(s, w, answers=False)
    first["architecture"]["params"] = first["ledger"][0]["bytes_per_param"] = -1
    again = full_report(s, w, answers=False)
    assert counts(LLAMA)["params"] == param_count(LLAMA) == again["architecture"]["params"]
    assert again["ledger"][0]["bytes_per_param"] > 0
    assert again["architecture"]["trainable_params"] > 0
