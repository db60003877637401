"""Uneven and interleaved pipeline stages against torch.distributed.pipelining on the CPU (gloo, 2 processes).

tests/measure/pipeline_stages.py splits a Hugging Face Llama model into stages of the given layer counts (stage_layers)
and runs Schedule1F1B (one stage per rank) or ScheduleInterleaved1F1B (stages r and r + pp on rank r, torchtitan's
looped placement). The splits: a first stage holding only the embedding ([0, 3]), and torchtitan's own default
split of 4 and 6 layers over 2 ranks x 2 stages (generate_llm_fqn_per_model_part with the embedding and the head
counted as one layer each: (1, 2, 1, 0), the last stage the head alone, and (1, 2, 2, 1)). zerocalc predicts:
- each rank's parameter bytes exactly (its stages' layers, the embedding on stage 0, norm and head on the last);
- the micro-batches in flight per local chunk exactly: the measured peak is the sum over the rank's chunks of what
  the schedule keeps alive of each times that chunk's measured one-micro-batch bytes;
- the saved activations at the peak within 2% (the formula), or the batch's token ids: the schedule's micro-batches
  are views of one ids tensor, counted once by storage (an embedding-only stage saves nothing else).
Needs torch and transformers (requirements-validation.txt).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")

from tests.measure.pipeline_stages import measure_pp  # noqa: E402
from tests.measure.tensor_parallel import llama  # noqa: E402
from zerocalc import Scenario  # noqa: E402
from zerocalc.layout import Layout, in_flight_chunks, torchtitan_split  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.parallel.ranks import layout_report  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

TOLERANCE = 0.02
SEQ, BATCH, MICRO = 128, 4, 4
CASES = [
    dict(name="3L-[0,3]/1F1B", model=llama(layers=3), vpp=1, schedule="1F1B", stage_layers=[0, 3]),
    dict(name="4L-torchtitan/interleaved", model=llama(layers=4), vpp=2, schedule="interleaved",
         stage_layers=list(torchtitan_split(4, 4))),
    dict(name="6L-torchtitan/interleaved", model=llama(layers=6), vpp=2, schedule="interleaved",
         stage_layers=list(torchtitan_split(6, 4))),
]
for case in CASES:
    case.update(dtype="bf16", attn="sdpa", batch=BATCH, seq=SEQ, microbatches=MICRO, steps=2)


def test_torchtitans_split_of_the_measured_models():
    assert [c["stage_layers"] for c in CASES[1:]] == [[1, 2, 1, 0], [1, 2, 2, 1]]


@pytest.fixture(scope="module")
def measured():
    return dict(zip([c["name"] for c in CASES], measure_pp(CASES, 2)))


def report(case):
    arch = architecture_from_config(case["model"])
    scenario = Scenario(params=param_count(arch), param_dtype="bf16", grad_dtype="bf16", master_dtype=None,
                        optimizer="adamw", optimizer_dtype="bf16", convention="pure-bf16")
    layout = Layout(pp=2, vpp=case["vpp"], schedule=case["schedule"].lower(), micro_batches=MICRO,
                    stage_layers=tuple(case["stage_layers"]))
    return layout_report(scenario, Workload(arch, micro_batch=BATCH // MICRO, seq_len=SEQ, layout=layout))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_rank_holds_its_stages_parameters_and_activations(measured, case):
    ranks = measured[case["name"]]
    views = report(case).ranks
    ids_bytes = BATCH * SEQ * 8
    for rank, got in enumerate(ranks):
        assert "error" not in got, got.get("traceback")
        view = next(v for v in views if rank in v.rank.pp_ranks)
        assert view.stages[0].per_worker_by_category["parameters"] == got["params_bytes"]
        peak = max(got["peak_saved_per_step"])
        # the schedule: what it keeps alive of each local chunk, times what one micro-batch of that chunk saves
        weights = tuple(got["saved_one_microbatch_per_stage"])
        alive, _, _ = in_flight_chunks(case["schedule"].lower(), 2, case["vpp"], MICRO, rank, 0, 0, weights)
        assert abs(sum(a * w for a, w in zip(alive, weights)) - peak) <= ids_bytes
        want = view.shape.activation_bytes
        assert abs(want - peak) <= max(TOLERANCE * peak, ids_bytes), f"rank {rank}: predicted {want:,} vs {peak:,}"
