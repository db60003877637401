"""FSDP2 under pipeline parallelism against a real run on the CPU (4 gloo processes: pp 2 x dp 2).

tests/measure/fsdp_pipeline.py applies fully_shard as torchtitan does and runs torch.distributed.pipelining; each
rank records its live unsharded parameter and gradient bytes after every micro-batch's forward and backward. zerocalc
(step/fsdp_pipeline.py, convention fsdp2 at ZeRO-3) predicts them exactly:
- torchtitan's default (reshard_after_forward = not pp_enabled): the stage's parameters unsharded in bf16, padded as
  FSDP2 pads each shard, in forward and backward; the fp32 accumulated gradients (reduce_dtype), unpadded, from the
  first backward to the last micro-batch's reduction, so in 1F1B's forwards too;
- "always": no unsharded parameters after forward, but every backward leaves them unsharded;
- GPipe: every forward runs before the first backward, so no accumulated gradient in forward.
Needs torch and transformers (requirements-validation.txt).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")

from tests.measure.fsdp_pipeline import measure_fsdp_pp  # noqa: E402
from tests.measure.tensor_parallel import llama  # noqa: E402
from zerocalc import Scenario  # noqa: E402
from zerocalc.layout import Layout  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.parallel.ranks import layout_report  # noqa: E402
from zerocalc.step.fsdp_pipeline import ACCUMULATED, UNSHARDED  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

MODEL = llama(layers=2, hidden=64, heads=4, kv=2, ffn=172, vocab=1001, seq=32)   # odd vocabulary: padded shards
CASES = [dict(name=f"{policy}/{schedule}", model=MODEL, batch=4, seq=32, microbatches=4, schedule=schedule,
              policy=policy, steps=2)
         for policy, schedule in (("default", "1F1B"), ("always", "1F1B"), ("default", "GPipe"))]


@pytest.fixture(scope="module")
def measured():
    return dict(zip([c["name"] for c in CASES], measure_fsdp_pp(CASES, 4)))


def predict(cfg):
    arch = architecture_from_config(cfg["model"])
    scenario = Scenario.from_convention("fsdp2", params=param_count(arch), workers=2)
    layout = Layout(pp=2, schedule=cfg["schedule"].lower(), micro_batches=cfg["microbatches"])
    work = Workload(arch, micro_batch=cfg["batch"] // cfg["microbatches"], seq_len=cfg["seq"], layout=layout,
                    reduce_dtype="fp32", reshard_after_forward={"default": "auto", "always": "yes"}[cfg["policy"]])
    return layout_report(scenario, work)


@pytest.mark.parametrize("cfg", CASES, ids=[c["name"] for c in CASES])
def test_unsharded_parameters_and_accumulated_gradients_are_exact(measured, cfg):
    report = predict(cfg)
    for rank in measured[cfg["name"]]:
        assert "error" not in rank, rank.get("traceback")
        phases = report.ranks[rank["pp_rank"]].peaks[3].phases
        for phase, seen in (("forward", rank["max_after_forward"]), ("backward", rank["max_after_backward"]),
                            ("backward", rank["before_reduce"])):
            assert phases[phase].get(UNSHARDED, 0) == seen["unsharded_params"], (phase, rank["rank"])
            assert phases[phase].get(ACCUMULATED, 0) == seen["unsharded_grads"], (phase, rank["rank"])
        assert rank["after_step"] == {"unsharded_params": 0, "unsharded_grads": 0}    # the reduction frees both
        assert UNSHARDED not in phases["optimizer_step"] and ACCUMULATED not in phases["optimizer_step"]
