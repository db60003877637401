"""FSDP1 (FullyShardedDataParallel's flat parameters, zerocalc/step/fsdp1.py): the unit rule from torch 2.13.0's
code (torch/distributed/fsdp/_flat_param.py, _runtime_utils.py, _wrap_utils.py at git cf30153c), the flags, the
accelerate keys, and the per-rank buffers against FSDP1 itself on 2 and 3 gloo processes
(tests/measure/fsdp1_buffers.py, `device_id=torch.device("cpu")`, nothing patched), exactly.
"""

import json

import pytest

from zerocalc import Scenario
from zerocalc.frameworks import import_accelerate
from zerocalc.layout import Layout
from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.fsdp1 import GRADIENT, flat_elements, flat_unit
from zerocalc.step.workload import Workload

LLAMA = MODEL_PRESETS["llama-3-8b"][0]


# --- the rule -------------------------------------------------------------------------------------------------

def test_a_mixed_unit_allocates_the_whole_flat_gradient_only_with_use_orig_params():
    """_wrap_utils.py _validate_frozen_params: with use_orig_params "the gradient memory usage will be higher than
    expected (<all> numel instead of <trainable> numel ...)"; without it _flat_param.py refuses the unit ("Must
    flatten tensors with uniform `requires_grad`"), so peft's fsdp_auto_wrap_policy wraps each trainable leaf."""
    pieces = [(4096, False), (64, True), (4096, False), (32, True)]      # a frozen base, two LoRA factors
    padded, grads, reduce = flat_unit(pieces, 2, "yes", 16, 32)
    assert padded == grads == 8288                                      # every element has a gradient
    assert reduce == 8288                                               # its fp32 copy
    padded, grads, reduce = flat_unit(pieces, 2, "no", 16, 32)
    assert grads == 64 and padded == 8192 + 64                          # the frozen unit + the largest adapter
    assert reduce == 64
    assert flat_unit([(10, False)], 2, "yes", 16, 32) == (10, 0, 0)     # a frozen unit has no gradient
    assert set(GRADIENT) == {(m, o) for m in ("all", "some", "none") for o in ("yes", "no")}


def test_alignment_and_padding():
    """use_orig_params aligns each tensor's start to 16 bytes (_get_aligned_numel: 8 bf16 elements); the flat
    tensor is padded once to the world size, and a gradient that does not divide is padded again (F.pad in
    _get_reduce_scatter_tensors); the reduce dtype equal to the compute dtype makes no copy."""
    assert flat_elements([(68, True), (68, True)], "yes", 16) == 72 + 68
    assert flat_elements([(68, True), (68, True)], "no", 16) == 136
    assert flat_elements([(68, True), (68, True)], "yes", 32) == 68 + 68   # 4 fp32 elements: 68 is aligned
    padded, grads, reduce = flat_unit([(7, True)], 3, "no", 16, 16)
    assert (padded, grads, reduce) == (9, 7, 9)


def test_flags_are_checked():
    for field, value in (("fsdp_version", 3), ("fsdp_version", True), ("fsdp_use_orig_params", "maybe")):
        with pytest.raises(FieldError) as e:
            Workload(LLAMA, **{field: value})
        assert e.value.field == field
    for field, value in (("fsdp_wrap", "torchtitan"), ("reshard_after_forward", "no"), ("float8_all_gather", True)):
        with pytest.raises(FieldError) as e:
            Workload(LLAMA, fsdp_version=1, float8="tensorwise", **{field: value})
        assert e.value.field == field and "fsdp_version 1" in e.value.allowed


def _peak(**work):
    sc = Scenario.from_convention("fsdp2", params=param_count(LLAMA), workers=8)
    return layout_report(sc, Workload(LLAMA, micro_batch=1, seq_len=1024, reduce_dtype="fp32",
                                      **work)).ranks[0].peaks[3].phases


def test_llama_3_8b_lora_under_fsdp1():
    """Llama-3-8B LoRA (q, v, rank 8) on 8 ranks. With use_orig_params a block's gradient is its whole flat
    parameter (218,112,000 + 2 x 8 x (4096 + 4096) + 2 x 8 x (4096 + 1024) elements): bf16 and its fp32 copy,
    far above FSDP2's adapters-only gradient; without it the adapters are their own units (the largest,
    8 x 4096, gathered and reduced alone)."""
    lora = FineTune("lora", lora_rank=8, lora_targets=("q", "v"))
    block = 218_112_000 + 8 * (4096 + 4096) + 8 * (4096 + 1024)
    mixed = _peak(finetune=lora, fsdp_version=1, fsdp_use_orig_params="yes")["backward"]
    assert mixed["gradient buckets"] == 2 * block + 4 * block
    leaf = _peak(finetune=lora, fsdp_version=1, fsdp_use_orig_params="no")["backward"]
    # the largest window gathers the block's frozen unit: its one adapter's bf16 gradient
    assert leaf["gradient buckets"] == 2 * 8 * 4096
    fsdp2 = _peak(finetune=lora)["backward"]
    assert leaf["gradient buckets"] < fsdp2["gradient buckets"] < mixed["gradient buckets"]


def test_backward_prefetch_windows():
    """_runtime_utils.py: BACKWARD_PRE prefetches the next unit in each pre-backward (_pre_backward_hook), so it is
    gathered while a block computes and reduces; BACKWARD_POST after the block reshards (_post_backward_reshard), so
    only while it reduces; without prefetch each unit is gathered at its own pre-backward."""
    def backward(prefetch):
        p = _peak(fsdp_version=1, fsdp_backward_prefetch=prefetch)["backward"]
        return p["gathered parameters"] + p["gradient buckets"]
    block = 2 * 218_112_000
    assert backward("pre") - backward("none") == block
    assert backward("none") < backward("post") <= backward("pre")
    with pytest.raises(FieldError) as e:
        Workload(LLAMA, fsdp_backward_prefetch="none")          # FSDP2 has no such choice
    assert e.value.field == "fsdp_backward_prefetch"


def test_the_cli_flags(capsys):
    from zerocalc.cli.main import main

    def peak(*flags):
        main(["--model", "llama-3-8b", "--workers", "8", "--convention", "fsdp2", "--finetune", "lora", "--json",
              *flags])
        return json.loads(capsys.readouterr().out)["peak"]

    assert peak("--fsdp-version", "2") == peak()
    assert peak("--fsdp-version", "1", "--fsdp-use-orig-params", "yes") != peak("--fsdp-version", "1")
    assert peak("--fsdp-version", "1", "--fsdp-backward-prefetch", "none") != peak("--fsdp-version", "1")


def test_accelerate_sets_the_version_and_use_orig_params():
    """accelerate 1.15 utils/dataclasses.py: fsdp_version defaults to 1 (FSDP_VERSION), use_orig_params to False
    for FSDP1 (FSDP_USE_ORIG_PARAMS) and is dropped for FSDP2, backward_prefetch to NO_PREFETCH (None)."""
    base = "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\nfsdp_config:\n"
    r = import_accelerate(base + "  fsdp_sharding_strategy: FULL_SHARD\n")
    assert r.workload["fsdp_version"] == 1 and r.workload["fsdp_use_orig_params"] == "no"
    assert r.workload["fsdp_backward_prefetch"] == "none"                  # the plugin's NO_PREFETCH
    r = import_accelerate(base + "  fsdp_use_orig_params: true\n  fsdp_backward_prefetch: BACKWARD_PRE\n")
    assert r.workload["fsdp_use_orig_params"] == "yes" and r.workload["fsdp_backward_prefetch"] == "pre"
    assert import_accelerate(base + "  backward_prefetch: 2\n").workload["fsdp_backward_prefetch"] == "post"
    from zerocalc.frameworks import FrameworkConfigError
    with pytest.raises(FrameworkConfigError) as e:
        import_accelerate(base + "  fsdp_backward_prefetch: EARLY\n")
    assert e.value.field == "fsdp_config.fsdp_backward_prefetch"
    r = import_accelerate(base + "  fsdp_version: 2\n  fsdp_use_orig_params: true\n")
    assert r.workload["fsdp_version"] == 2 and "fsdp_use_orig_params" not in r.workload
    assert "fsdp_config.fsdp_use_orig_params" in {i["key"] for i in r.ignored_keys}


# --- measured on gloo ------------------------------------------------------------------------------------------

try:
    import torch
except ImportError:                  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed: pip install -r requirements-validation.txt")

# (measurement run, zerocalc's convention, finetune, use_orig_params, reduce dtype). head_dim 34 and hidden 68:
# the norms (68 elements) and the embedding (1001 x 68) are not 8-aligned, so use_orig_params pads.
RUNS = [({"finetune": "full", "use_orig_params": False}, "fsdp2", "full", "no", "fp32"),
        ({"finetune": "full", "use_orig_params": True}, "fsdp2", "full", "yes", "fp32"),
        ({"finetune": "lora", "use_orig_params": True}, "fsdp2", "lora", "yes", "fp32"),
        ({"finetune": "lora", "use_orig_params": False, "wrap": "peft", "dtype": "bf16", "param_dtype": None,
          "autocast_adapter_dtype": False}, "pure-bf16", "lora", "no", None),
        ({"finetune": "full", "use_orig_params": False, "backward_prefetch": "none"}, "fsdp2", "full", "no", "fp32",
         "none"),
        ({"finetune": "full", "use_orig_params": False, "backward_prefetch": "post"}, "fsdp2", "full", "no", "fp32",
         "post")]
REFUSED = {"finetune": "lora", "use_orig_params": False}
OFFLOAD = {"finetune": "full", "use_orig_params": False, "offload": True}


def _config():
    from tests.measure.peft_lora import llama_config
    return llama_config(layers=3, hidden=68, heads=2, kv_heads=1, intermediate=176, vocab=1001, seq=32)


@pytest.fixture(scope="module")
def measured():
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from tests.measure.fsdp1_buffers import fsdp1_buffers
    return fsdp1_buffers(runs=[r[0] for r in RUNS] + [REFUSED, OFFLOAD], config=_config(), timeout=400)


def _plan(convention, finetune, orig, reduce, prefetch="pre", workers=2, **offload):
    from zerocalc.model.hf_config import architecture_from_config
    arch = architecture_from_config(_config())
    sc = Scenario.from_convention(convention, params=param_count(arch), workers=workers, **offload)
    ft = FineTune("lora", lora_rank=8, lora_targets=("q", "v")) if finetune == "lora" else FineTune()
    work = Workload(arch, micro_batch=2, seq_len=32, comm_buffers="fsdp", fsdp_version=1, fsdp_use_orig_params=orig,
                    reduce_dtype=reduce, layout=Layout(), finetune=ft, fsdp_backward_prefetch=prefetch)
    return sc, work, layout_report(sc, work)


def _predicted(*args, **kw):
    return _plan(*args, **kw)[2].ranks[0].peaks[3].phases


def _check(got, phases):
    assert got["at_loss"] == phases["forward"]["gathered parameters"]             # the root kept
    assert got["backward"] == phases["backward"]["gathered parameters"] + phases["backward"]["gradient buckets"]


@needs_torch
@pytest.mark.parametrize("i", range(len(RUNS)))
def test_fsdp1_buffers_are_exact(measured, i):
    phases = _predicted(*RUNS[i][1:])
    for rank in measured:
        _check(rank["results"][i], phases)


@needs_torch
def test_the_measured_mixed_unit_and_the_refusal(measured):
    got = measured[0]["results"]
    blocks = [u for u in got[2]["units"] if not u["root"]]
    assert all(u["grad"][0] == u["numel"] > 10 * u["trainable"] for u in blocks)   # the whole flat gradient
    assert "uniform `requires_grad`" in got[len(RUNS)]["refused"]


@needs_torch
def test_offload_keeps_every_gradient_shard_on_the_device_until_backward_ends(measured):
    """CPUOffload(offload_params=True): _offload_grad copies each unit's new shard into `_cpu_grad`, yet the device
    shard stays as `_saved_grad_shard` (cast to the flat parameter's fp32) until the final callback's
    prepare_gradient_for_optim: at the end of backward every unit's is held. zerocalc's "backward end" term is the
    trained parameters' shards unpadded (each unit pads its flat parameter to the world size: 1 element at most)."""
    from zerocalc.step.fsdp_offload import HELD_SHARDS, offload_parts
    sc, work, report = _plan(*RUNS[0][1:], offload_params="cpu", offload_optimizer="cpu")
    term = dict(offload_parts(sc, work, 3, report.ranks[0].shape, "fsdp")["backward end"])[HELD_SHARDS]
    for rank in measured:
        shards = rank["results"][len(RUNS) + 1]["saved_grad_shards"]
        assert len(shards) == 4 and all(s["beside_cpu_grad"] and s["dtype"] == "float32" for s in shards)
        assert 0 <= sum(s["bytes"] for s in shards) - term <= 4 * len(shards)


@needs_torch
def test_three_ranks_pad_the_flat_parameter_and_its_gradient():
    """A 3-rank world: the 49,912-element block and 136,204-element root pad to multiples of 3, and the fp32
    gradient is padded again before its reduce-scatter."""
    pytest.importorskip("transformers")
    from tests.measure.fsdp1_buffers import fsdp1_buffers
    runs = fsdp1_buffers(world=3, runs=[RUNS[0][0]], config=_config(), timeout=400)
    phases = _predicted(*RUNS[0][1:], workers=3)
    for rank in runs:
        got = rank["results"][0]
        assert [u["padded"] % 3 for u in got["units"]] == [0] * 4 and got["units"][1]["numel"] % 3
        _check(got, phases)
