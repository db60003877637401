"""Adam / AdamW's step temporaries (issue 31 item 1: tables.ADAM_STEP, step/optimizer_step.py adam_items): the
core's rule and its choices, and the rule against every tensor torch's AdamW allocates in a step, traced op by op on
the CPU (tests/measure/optimizer_step.py; torch 2.13.0, transformers 5.24.0): foreach, for-loop and fused, on a tiny
Llama's parameters in fp32 and bf16, as one group or Hugging Face's Trainer's two, and on the flat fp32 partition
DeepSpeed hands its optimizer (stage_1_and_2.py `param_group['params'] = [single_partition_of_fp32_groups[i]]`)."""

import json

import pytest

from zerocalc import FieldError, Scenario
from zerocalc.model.hf_config import architecture_from_config
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.optimizer_step import describe
from zerocalc.step.workload import Workload
from zerocalc.tables import DTYPE_BITS

LLAMA2 = MODEL_PRESETS["llama-2-7b"][0]
TINY = dict(model_type="llama", num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=176, vocab_size=1000, max_position_embeddings=128, pad_token_id=0,
            tie_word_embeddings=False)


def step_parts(arch, convention="deepspeed", workers=8, stage=2, gpu="H100-SXM-80GB", recompute="none", **fields):
    s = Scenario.from_convention(convention, params=param_count(arch), workers=workers, **fields)
    w = Workload(arch, micro_batch=1, seq_len=1024, gpu=gpu, recompute=recompute)
    return layout_report(s, w).peaks[stage]


def adam_terms(peak) -> int:
    return sum(v for k, v in peak.phases["optimizer_step"].items() if k.startswith("AdamW"))


# --- the rule ----------------------------------------------------------------------------------------------------

def test_llamafactory_1221_zero2_on_v100_fails_in_the_step():
    """hiyouga/LlamaFactory#1221: llama-7b full fine-tune, ZeRO-2 (the README's config: no optimizer section, so
    the HF Trainer's torch AdamW is DeepSpeed's client optimizer), 8 x V100 32GB, batch size 1: OOM in Adam's denom,
    "Tried to allocate 3.14 GiB ... 28.28 GiB already allocated". The request is the flat fp32 partition:
    6,738,415,616 / 8 x 4 bytes = 3.14 GiB."""
    partition = -(-param_count(LLAMA2) // 8) * 4
    assert round(partition / 2**30, 2) == 3.14
    peak = step_parts(LLAMA2, gpu="V100-32GB", recompute="full")
    assert peak.phases["optimizer_step"]["AdamW foreach: a copy of DeepSpeed's flat partition"] == partition
    assert peak.peak_phase == "optimizer_step" and not peak.fits
    loop = step_parts(LLAMA2, gpu="V100-32GB", recompute="full", optimizer_impl="for-loop")
    assert loop.phases["optimizer_step"]["AdamW for-loop: denom of DeepSpeed's flat partition x 2"] == 2 * partition
    fused = step_parts(LLAMA2, gpu="V100-32GB", recompute="full", optimizer_impl="fused")
    assert adam_terms(fused) == 0 and fused.fits            # FusedAdam (a DeepSpeed optimizer section) fits


def test_auto_is_fused_under_megatron_and_foreach_elsewhere():
    assert describe(Scenario(params=1, optimizer="adamw"), "megatron")["implementation"] == "fused"
    for comm in ("deepspeed", "fsdp", "none"):
        assert describe(Scenario(params=1, optimizer="adamw"), comm)["implementation"] == "foreach"
    assert describe(Scenario(params=1, optimizer="adamw", optimizer_impl="for-loop"), "megatron")["why"] \
        .endswith("chosen (optimizer_impl)")
    assert describe(Scenario(params=1, optimizer="lion"), "none")["implementation"] is None
    megatron = step_parts(LLAMA2, convention="megatron", stage=1)
    assert adam_terms(megatron) == 0


def test_foreach_copies_the_ranks_second_moments_at_each_stage():
    # stage 0: every second moment; ZeRO-1/2/3: the partition (DeepSpeed's ZeRO-3 sub-group of 1e9 caps it)
    P = param_count(LLAMA2)
    assert adam_terms(step_parts(LLAMA2, convention="fsdp2", workers=1, stage=0)) == 4 * P
    assert adam_terms(step_parts(LLAMA2, convention="fsdp2", workers=8, stage=0)) == 4 * P
    assert adam_terms(step_parts(LLAMA2, workers=8, stage=1)) == 4 * -(-P // 8)
    assert adam_terms(step_parts(LLAMA2, workers=2, stage=3)) == 4 * 10**9        # sub_group_size
    pure = step_parts(LLAMA2, convention="pure-bf16", workers=1, stage=0)
    assert adam_terms(pure) == 2 * P                                              # bf16 moments


def test_for_loop_off_deepspeed_holds_two_of_the_largest_tensor_and_the_next():
    V, h = LLAMA2.vocab, LLAMA2.hidden
    parts = step_parts(LLAMA2, convention="fsdp2", workers=1, stage=0, optimizer_impl="for-loop") \
        .phases["optimizer_step"]
    assert parts["AdamW for-loop: denom of the largest tensor x 2"] == 2 * 4 * V * h    # embedding / head
    assert parts["AdamW for-loop: the previous tensor's denom"] == 4 * V * h            # the other of them


def test_an_offloaded_step_holds_no_temporaries_on_the_gpu():
    assert adam_terms(step_parts(LLAMA2, offload_optimizer="cpu")) == 0


def test_a_bad_implementation_is_refused_by_name():
    with pytest.raises(FieldError, match="optimizer_impl"):
        Scenario(params=1, optimizer_impl="cuda")


def test_cli_flag_and_report_name_the_implementation():
    from zerocalc.cli.main import main
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--model", "llama-2-7b", "--workers", "8", "--optimizer-impl", "for-loop", "--json"])
    report = json.loads(out.getvalue())
    assert report["optimizer_impl"]["implementation"] == "for-loop"


def test_importers_set_it_where_a_file_pins_it(tmp_path):
    from zerocalc.frameworks.deepspeed.reader import import_deepspeed
    from zerocalc.frameworks.torchtitan.reader import import_torchtitan
    base = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    for params, impl in (({}, "fused"), ({"torch_adam": True}, "foreach"),
                         ({"torch_adam": True, "foreach": False}, "for-loop")):
        config = {**base, "optimizer": {"type": "AdamW", "params": params}}
        assert import_deepspeed(json.dumps(config)).scenario["optimizer_impl"] == impl
    assert "optimizer_impl" not in import_deepspeed(json.dumps(base)).scenario     # client optimizer: auto
    # torchtitan's [optimizer] implementation, default "fused" (torchtitan config Optimizer.implementation)
    assert import_torchtitan("[optimizer]\nname = 'AdamW'\n").scenario["optimizer_impl"] == "fused"
    assert import_torchtitan("[optimizer]\nimplementation = 'foreach'\n").scenario["optimizer_impl"] == "foreach"


# --- against the real torch code (CPU) ---------------------------------------------------------------------------

def _measure():
    torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
    assert torch.__version__.startswith("2.13."), "measured against torch 2.13 (torch/optim/adam.py)"
    from tests.measure import optimizer_step
    return optimizer_step


def _ours(config, impl, dtype="fp32", convention=None, workers=1, stage=0) -> int:
    """Our Adam terms for the tiny model on one rank: its own dtype and no master copy, or DeepSpeed's fp32 one."""
    arch = architecture_from_config(config)
    if convention:
        s = Scenario.from_convention(convention, params=param_count(arch), workers=workers, optimizer="adamw",
                                     optimizer_impl=impl)
    else:
        s = Scenario(params=param_count(arch), workers=workers, param_dtype=dtype, grad_dtype=dtype,
                     master_dtype=None, optimizer="adamw", optimizer_dtype=dtype, optimizer_impl=impl)
    return adam_terms(layout_report(s, Workload(arch, micro_batch=1, seq_len=64)).peaks[stage])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_foreach_and_fused_equal_the_trace_to_the_byte(impl, dtype):
    measured = _measure().model_step_peak(TINY, impl, dtype)
    assert _ours(TINY, impl, dtype) == measured["peak"]
    if impl == "foreach":       # one copy of every second moment, in the parameters' dtype
        assert measured["peak"] == sum(n for n, _ in measured["sizes"]) * DTYPE_BITS[dtype] // 8


@pytest.mark.parametrize("impl", ["foreach", "for-loop"])
@pytest.mark.parametrize("stage", [1, 2])
def test_deepspeeds_flat_partition_equals_the_trace_to_the_byte(impl, stage):
    """DeepSpeed hands torch's AdamW one flat fp32 partition (4 data-parallel ranks): foreach copies it once,
    the for-loop twice (the square root and the quotient)."""
    measured = _measure().model_step_peak(TINY, impl, "fp32", flat=4)["peak"]
    assert _ours(TINY, impl, convention="deepspeed", workers=4, stage=stage) == measured
    assert measured == (1 if impl == "foreach" else 2) * -(-param_count(architecture_from_config(TINY)) // 4) * 4


@pytest.mark.parametrize("split", ["one", "hf"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_for_loop_over_tensors_is_bounded_by_two_largest_and_the_next(split, dtype):
    """_single_tensor_adam holds the previous tensor's denom while it makes the next one's square root and
    quotient: the trace is max over the loop of (previous + 2 x current), which depends on the order. Ours,
    2 x the largest + the next largest, holds for any order and is at most one largest tensor above it."""
    measured = _measure().model_step_peak(TINY, "for-loop", dtype, split)
    sizes = [n * b for n, b in measured["sizes"]]
    starts = [0] + [len(g) for g in measured["groups"]][:-1]      # a new group starts with no previous denom
    firsts = {sum(starts[:i + 1]) for i in range(len(starts))}
    exact = max((0 if i in firsts else sizes[i - 1]) + 2 * t for i, t in enumerate(sizes))
    assert measured["peak"] == exact
    ours = _ours(TINY, "for-loop", dtype)
    assert measured["peak"] <= ours <= measured["peak"] + max(sizes)


def test_hugging_face_trainers_two_groups_step_apart():
    """The HF Trainer's no-decay group (biases, norms) steps in its own call: foreach's copy is the larger group's;
    ours counts both (the safe side) and is above by the norms' second moments alone."""
    measured = _measure().model_step_peak(TINY, "foreach", "fp32", "hf")
    decay, rest = (sum(g) * 4 for g in measured["groups"])
    assert measured["peak"] == max(decay, rest) == decay
    assert _ours(TINY, "foreach") - measured["peak"] == rest


def test_foreach_buckets_by_dtype_and_two_buckets_meet():
    """_multi_tensor_adam rebinds exp_avg_sq_sqrt bucket by bucket (device, dtype): the previous bucket's copy lives
    until the next is made. Two dtypes: the whole group's second moments (ours); three: less (ours is above)."""
    step_peak = _measure().step_peak
    assert step_peak([[(1000, "bf16"), (3000, "fp32")]], "foreach") == 1000 * 2 + 3000 * 4
    assert step_peak([[(1000, "bf16"), (3000, "fp32"), (500, "fp16")]], "foreach") == 3000 * 4 + max(2000, 1000)
    assert step_peak([[(1000, "fp32")], [(3000, "fp32")]], "foreach") == 3000 * 4      # groups step apart
