"""The optimizer step's own temporaries, traced op by op on the CPU (test-only): torch.optim.AdamW / Adam with
foreach=True, foreach=False (the for-loop "single-tensor" path) and fused=True, on tensors laid out as a model's
parameters or as DeepSpeed hands them (one flat fp32 partition per parameter group: stage_1_and_2.py
`param_group['params'] = [self.single_partition_of_fp32_groups[i]]`).

`step_peak(groups, impl)` builds the parameters (each group a list of (numel, dtype)), gives each a gradient, steps
once (the state exists from then on, as at every later step) and traces the second step with StepTrace: the peak of
the bytes its ops allocate, each storage counted once while a Python reference to it lives, the parameters, their
gradients and every tensor of optimizer.state excluded. What the step allocates does not depend on the values.

Version: torch 2.13.0 (torch/optim/adam.py _single_tensor_adam, _multi_tensor_adam, _fused_adam).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
IMPLS = {"foreach": dict(foreach=True), "for-loop": dict(foreach=False), "fused": dict(fused=True)}


class StepTrace(TorchDispatchMode):
    """Live bytes of the tensors the traced code allocates (storages not in `known`), and their peak."""

    def __init__(self, known):
        super().__init__()
        self.known, self.live, self.refs, self.now, self.peak = known, {}, {}, 0, 0

    def _drop(self, ptr):
        self.refs[ptr] -= 1
        if not self.refs[ptr]:
            self.now -= self.live.pop(ptr)
            del self.refs[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.known:
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.live:
                    self.live[ptr], self.refs[ptr] = t.untyped_storage().nbytes(), 0
                    self.now += self.live[ptr]
                    self.peak = max(self.peak, self.now)
                self.refs[ptr] += 1
                weakref.finalize(t, self._drop, ptr)
        return out


def _storages(opt) -> set:
    out = set()
    for group in opt.param_groups:
        for p in group["params"]:
            out.add(p.untyped_storage().data_ptr())
            out.add(p.grad.untyped_storage().data_ptr())
    for state in opt.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                out.add(value.untyped_storage().data_ptr())
    return out


def traced_step(param_groups, impl: str, optimizer: str = "adamw", weight_decay: float = 0.01) -> int:
    """Peak bytes the second step of torch's AdamW (or Adam) allocates beyond parameters, gradients and state.
    param_groups: lists of leaf tensors (each given a random gradient here), one list per parameter group."""
    torch.manual_seed(0)
    for group in param_groups:
        for p in group:
            p.grad = torch.randn_like(p)
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer]
    opt = cls([dict(params=g) for g in param_groups], lr=1e-3, weight_decay=weight_decay, **IMPLS[impl])
    opt.step()                               # the state exists from here on
    trace = StepTrace(_storages(opt))
    with trace:
        opt.step()
    return trace.peak


def step_peak(groups, impl: str, optimizer: str = "adamw", weight_decay: float = 0.01) -> int:
    """traced_step on new tensors: groups, one list per parameter group of (numel, dtype name) per parameter."""
    params = [[torch.nn.Parameter(torch.randn(n, dtype=DTYPES[d])) for n, d in group] for group in groups]
    return traced_step(params, impl, optimizer, weight_decay)


def model_step_peak(config: dict, impl: str, dtype: str = "fp32", split: str = "one", flat: int = 0) -> dict:
    """The traced step on a tiny random Hugging Face model (tests/measure/saved_tensors.build_from_config):
    split "one" steps its parameters as one group; "hf" as Hugging Face's Trainer groups them (get_decay_parameter_
    names: biases and norm weights apart, no weight decay; transformers 5.24). flat > 0: DeepSpeed's view instead, one flat fp32
    partition per group of ceil(group elements / flat) elements (stage_1_and_2.py single_partition_of_fp32_groups).
    Returns the peak and the parameter sizes in their order (numel, bytes per element)."""
    from tests.measure.saved_tensors import build_from_config

    model = build_from_config(config, DTYPES[dtype])
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if split == "hf":
        from transformers import Trainer
        decay = set(Trainer.get_decay_parameter_names(None, model))    # transformers 5.24 trainer.py
        groups = [[p for n, p in named if n in decay], [p for n, p in named if n not in decay]]
    else:
        groups = [[p for _, p in named]]
    if flat:
        groups = [[torch.zeros(-(-sum(p.numel() for p in g) // flat), dtype=torch.float32)] for g in groups]
    sizes = [(p.numel(), p.element_size()) for g in groups for p in g]
    return dict(peak=traced_step(groups, impl), sizes=sizes, groups=[[p.numel() for p in g] for g in groups])
