"""When the gradient set lives (zerocalc/step/grad_lifetime.py): torch's own loops free every gradient with
zero_grad(set_to_none=True) and autograd allocates each one when backward reaches it, so the backward phase is the
larger of its start (activations, no gradient) and its end (every gradient, one block's saves); persistent buffers
(Megatron, DeepSpeed) and gradient accumulation keep them for the whole step.

Sources: torch 2.13 torch/optim/optimizer.py (zero_grad: set_to_none=True by default), torch/nn/modules/module.py
(Module.zero_grad likewise), the AccumulateGrad node (a .grad is created when backward reaches its parameter);
torchtune 0.6.1 recipes/full_finetune_single_device.py (optimizer.zero_grad(set_to_none=True) after each step);
torchtune's README table (Llama 3.2 3B, +activation checkpointing: 24.9 GiB active, TUNE-13 in docs/validation.md).
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import report_for
from zerocalc.scenario import FieldError, Scenario
from zerocalc.step.grad_lifetime import describe, lifetime
from zerocalc.step.workload import Workload
from zerocalc.layout import Layout

ARCH = MODEL_PRESETS["llama-3.2-1b"][0]


def _scenario(arch=ARCH, convention="pure-bf16", workers=1):
    return Scenario.from_convention(convention, params=param_count(arch), workers=workers)


def test_torch_frees_gradients_and_backward_creates_them_block_by_block():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()                                  # the default: set_to_none=True
    assert all(p.grad is None for p in model.parameters())
    first, last = model[0].weight, model[2].weight
    seen = []
    # when the last layer's gradient is produced, the first layer's does not exist yet
    last.register_post_accumulate_grad_hook(lambda p: seen.append(("last", first.grad is None)))
    first.register_post_accumulate_grad_hook(lambda p: seen.append(("first", last.grad is not None)))
    model(torch.randn(4, 8)).sum().backward()
    assert seen == [("last", True), ("first", True)]


def test_auto_follows_the_loop():
    one = Workload(ARCH)
    assert lifetime(one, "none") == "backward" and lifetime(one, "fsdp") == "backward"
    assert lifetime(one, "deepspeed") == "step" and lifetime(one, "megatron") == "step"
    assert lifetime(Workload(ARCH, implementation="megatron"), "none") == "step"
    accumulating = Workload(ARCH, layout=Layout(micro_batches=4))
    assert lifetime(accumulating, "fsdp") == "step"
    assert "4 micro-batches per step" in describe(accumulating, "fsdp")["why"]
    assert lifetime(Workload(ARCH, grad_lifetime="step"), "none") == "step"
    assert lifetime(Workload(ARCH, grad_lifetime="backward"), "deepspeed") == "backward"


def test_a_bad_value_is_refused_by_name():
    with pytest.raises(FieldError, match="grad_lifetime"):
        Workload(ARCH, grad_lifetime="sometimes")


def test_backward_is_the_larger_end():
    # a percent reserve: these are the tensors' phases (the allocator model's reserve is the stage's, replayed)
    s = _scenario()
    step = report_for(s, Workload(ARCH, micro_batch=2, seq_len=2048, grad_lifetime="step",
                                  fragmentation_percent=5)).peaks[0]
    back = report_for(s, Workload(ARCH, micro_batch=2, seq_len=2048, grad_lifetime="backward",
                                  fragmentation_percent=5)).peaks[0]
    grads = step.phases["backward"]["model states"] // 4          # pure bf16: 2 of 8 bytes per parameter
    start = back.phases["backward"]
    # no recompute: backward starts with every activation and no gradient
    assert start["model states"] == step.phases["backward"]["model states"] - grads
    assert start["activations"] == step.phases["backward"]["activations"]
    assert back.phase_totals["forward"] < step.phase_totals["forward"]
    assert back.phase_totals["optimizer_step"] == step.phase_totals["optimizer_step"]
    # under full recompute the end (every gradient) is the larger: the first block's saves, no loss transients
    full = report_for(s, Workload(ARCH, micro_batch=1, seq_len=512, recompute="full",
                                  grad_lifetime="backward")).peaks[0].phases["backward"]
    assert full["model states"] == step.phases["backward"]["model states"]
    assert "logits and loss" not in full and "activations (first block)" in full


def test_tune_13_within_two_percent_of_the_published_peak():
    """torchtune's table, Llama 3.2 3B + compile + chunked CE + activation checkpointing: 24.9 GiB active
    (docs/validation.md TUNE-13): the end of backward, every gradient and no activation."""
    arch = replace(ARCH, layers=28, hidden=3072, heads=24, kv_heads=8, ffn=8192)
    s = replace(_scenario(arch), optimizer_impl="fused")      # torchtune's configs: AdamW with fused: True
    w = Workload(arch, micro_batch=2, seq_len=4096, compile=True, loss="chunked", recompute="full",
                 gpu="A100-80GB")
    peak = report_for(s, w).peaks[0]
    parts = peak.phases[peak.peak_phase]
    tensors = peak.peak_bytes - parts["allocator reserve"] - parts["CUDA context"] - parts.get("NCCL buffers", 0)
    assert abs(tensors / (24.9 * 2**30) - 1) < 0.02


@settings(max_examples=40, deadline=None)
@given(mb=st.integers(1, 4), seq=st.sampled_from([256, 1024, 4096]),
       recompute=st.sampled_from(["none", "selective", "full"]), workers=st.sampled_from([1, 8]),
       convention=st.sampled_from(["pure-bf16", "fsdp2", "zero-paper"]))
def test_freeing_gradients_never_raises_a_peak(mb, seq, recompute, workers, convention):
    s = _scenario(convention=convention, workers=workers)
    # the tensors' claim, at a percent reserve (the allocator model replays each plan to its own reserve)
    kw = dict(micro_batch=mb, seq_len=seq, recompute=recompute, fragmentation_percent=5)
    step = report_for(s, Workload(ARCH, grad_lifetime="step", **kw))
    back = report_for(s, Workload(ARCH, grad_lifetime="backward", **kw))
    for a, b in zip(step.peaks, back.peaks):
        assert b.peak_bytes <= a.peak_bytes
        assert b.phase_totals["optimizer_step"] == a.phase_totals["optimizer_step"]
