"""Async tensor parallelism (zerocalc/step/async_tp.py): torchtitan's parallelism.enable_async_tensor_parallel.
Its fused all-gather matmul and matmul reduce-scatter run through one symmetric-memory workspace per TP group, the
largest request two output chunks of the reduce-scatter (torch 2.13 torch/distributed/_symmetric_memory/
__init__.py: _pipelined_produce_and_all2all asks out_chunks[0].numel() * element_size() * 2 of
get_symm_mem_workspace; _pipelined_multi_all_gather_and_consume asks the input shard, half that), allocated
outside PyTorch's caching allocator: counted with the CUDA context. torchtitan 238fa99 distributed/
tensor_parallel.py refuses it without the model compiled. The kernels are CUDA-only: nothing here runs them."""

import tomllib

import pytest

from zerocalc.frameworks import FrameworkConfigError, import_torchtitan
from zerocalc.frameworks.export import export_torchtitan
from zerocalc.layout import Layout
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.answers.ranges import ranges
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError, Scenario
from zerocalc.step.async_tp import workspace_bytes
from zerocalc.step.peak import tensor_bytes
from zerocalc.step.workload import Workload

ARCH = MODEL_PRESETS["llama-3.1-70b"][0]
TP = Layout(tp=8, sequence_parallel=True, loss_parallel=True)


def _workload(**changes):
    return Workload(ARCH, **{"micro_batch": 16, "seq_len": 8192, "recompute": "full", "compile": True,
                             "layout": TP, **changes})


def test_the_workspace_is_two_chunks_of_the_largest_reduce_scatter():
    # TT-12's job: local batch 16 x 8,192 tokens over tp 8, hidden 8,192, bf16 output: 2 x 16,384 x 8,192 x 2 bytes
    assert workspace_bytes(_workload(async_tp=True), 16) == 2 * (16 * 8192 // 8) * 8192 * 2 == 2**29
    assert workspace_bytes(_workload(async_tp=True, micro_batch=1, seq_len=2048), 8) == 2 * 256 * 8192 * 1
    assert workspace_bytes(_workload(), 16) == 0


def test_it_is_outside_the_allocator_with_the_cuda_context():
    s = Scenario.from_convention("fsdp2", params=param_count(ARCH), workers=32)
    off, on = layout_report(s, _workload()), layout_report(s, _workload(async_tp=True))
    for a, b in zip(off.peaks, on.peaks):
        assert tensor_bytes(a) == tensor_bytes(b)                      # no tensor of the allocator moves
        assert b.phases[b.peak_phase]["CUDA context"] - a.phases[a.peak_phase]["CUDA context"] == 2**29
        assert b.peak_bytes - a.peak_bytes == 2**29
    low = ranges(s, _workload(async_tp=True)).bands[3]
    assert low.low_bytes - ranges(s, _workload()).bands[3].low_bytes == 2**29      # at the context's low end too


@pytest.mark.parametrize("changes, why", [
    ({"layout": Layout(tp=1)}, "tensor parallelism"), ({"layout": Layout(tp=8)}, "sequence-parallel"),
    ({"compile": False}, "compiled"), ({"implementation": "megatron", "compile": False}, "compiled")])
def test_refused_where_torchtitan_cannot_run_it(changes, why):
    with pytest.raises(FieldError, match=why) as e:
        _workload(async_tp=True, **changes)
    assert e.value.field == "async_tp"


TOML = """[parallelism]
tensor_parallel_degree = 8
enable_async_tensor_parallel = true

[compile]
enable = true
components = ["model", "loss"]
"""


def test_torchtitan_imports_and_exports_it():
    r = import_torchtitan(TOML, {"gpus": 64})
    assert r.workload["async_tp"] is True
    back = tomllib.loads(export_torchtitan(r.scenario, r.workload, r.layout, r.selected_stage))
    assert back["parallelism"]["enable_async_tensor_parallel"] is True
    with pytest.raises(FrameworkConfigError) as e:
        import_torchtitan(TOML.replace("enable = true", "enable = false"), {"gpus": 64})
    assert e.value.field == "parallelism.enable_async_tensor_parallel"
    alone = import_torchtitan(TOML.replace("tensor_parallel_degree = 8", "tensor_parallel_degree = 1"),
                              {"gpus": 64})
    assert "async_tp" not in alone.workload
    assert any(i["key"] == "parallelism.enable_async_tensor_parallel" for i in alone.ignored_keys)
