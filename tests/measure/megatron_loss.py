"""Measure the live bytes of Megatron-Core's own loss end on the CPU, allocation by allocation (test-only; needs
torch and megatron-core, requirements-validation.txt).

What runs is megatron-core's code, not a restatement of it: the output layer is its ColumnParallelLinear and the
loss its LanguageModule.compute_language_model_loss, called exactly as GPTModel._postprocess calls them in a
training step with labels (Megatron-LM d98e8a64, megatron/core/models/gpt/gpt_model.py):

    logits, _ = self.output_layer(hidden_states, weight=output_weight, runtime_gather_output=...)
    loss = self.compute_language_model_loss(labels, logits)
    return loss

compute_language_model_loss then runs tensor_parallel.vocab_parallel_cross_entropy (cross_entropy.py) or, with
cross_entropy_loss_fusion and the 'native' impl, fusions/fused_cross_entropy.py under its jit_fuser
(torch.compile). megatron-core 0.16.1 is the newest release that installs on Python 3.11 (0.17 and later need
3.12); its cross_entropy.py and fused_cross_entropy.py do the same tensor operations as d98e8a64 (the two differ
only in how the tensor-parallel group, rank and size are found) and its compute_language_model_loss takes the same
branches. One process, one gloo rank (tp 1), so every collective is a no-op.

Live bytes come from the profiler's allocation events (torch.profiler, profile_memory=True): each event carries
the CPU allocator's running total of what this process allocated since the profile began, as
torch.cuda.max_memory_allocated counts it on a GPU. Three numbers per run, in bytes above what was live before
the output layer ran (the hidden states, the weight and the labels):
- forward_peak: the most live at any moment of the output layer and the loss's forward;
- after_forward: live once the model's forward has returned (the logits no longer referenced by it);
- backward_peak: the most bytes alive at once, during the loss's backward (until the logits' gradient reaches the
  output layer, whose own backward is not the loss's), among the tensors that backward allocates (above what was
  live when it began, the scalar loss computed).
Run as a script it prints them as JSON (tests/test_loss_megatron.py starts it in a subprocess: the process group
and torch.compile's state stay out of the test process).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from types import SimpleNamespace

DTYPES = ("bf16", "fp16", "fp32")


def _setup(tmp: str):
    import torch
    import torch.distributed as dist

    warnings.simplefilter("ignore")                 # "Transformer Engine and Apex are not installed"
    torch.set_num_threads(1)
    torch._dynamo.config.automatic_dynamic_shapes = False     # one static graph per size, as each is measured
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(1, 1)
    return parallel_state


def _live(prof, marks):
    """The step's allocations and frees in time order as (time, live before, live after, when the tensor was
    allocated), counted from the profile's start, and each marked range's (start, end) time. The step's are those its thread allocates; their
    frees count on whichever thread they happen (gloo's thread can drop the last reference to an all-reduced
    tensor), and other threads' own allocations are not the step's tensors."""
    from torch._C._profiler import _EventType

    found, ranges, tids = [], {}, set()

    def walk(e):
        if e.tag == _EventType.Allocation:
            found.append((e.start_time_ns, len(found), e.extra_fields.alloc_size, e.start_tid, e.extra_fields.ptr))
        elif e.name in marks:
            ranges[e.name] = (e.start_time_ns, e.end_time_ns)
            tids.add(e.start_tid)
        for child in e.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    (tid,) = tids                                      # the marks run on the step's thread
    events, live, ours = [], 0, {}
    for t, _, size, thread, ptr in sorted(found):
        if size > 0 and thread == tid:
            ours[ptr] = born = t
        elif size < 0 and ptr in ours:
            born = ours.pop(ptr)
        else:
            continue
        events.append((t, live, live + size, born))
        live += size
    return events, ranges


def _at(events, t) -> int:
    """Live just before time t (before the first allocation or free at or after it)."""
    return next(before for s, before, _, _ in events if s >= t)


def _peak_new(events, t0, t1) -> int:
    """The most bytes alive at once among the tensors allocated from t0 to t1 (frees of older tensors in that
    time, such as gloo's late release of an all-reduced forward tensor, do not lower it)."""
    live = peak = 0
    for t, before, after, born in events:
        if t0 <= t <= t1 and born >= t0:
            live += after - before
            peak = max(peak, live)
    return peak


def run(dtype: str, tokens_shape=(8, 2), hidden=4, vocab=256, fused=False, parallel_state=None) -> dict:
    import torch
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.models.common.language_module.language_module import LanguageModule
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from torch.profiler import ProfilerActivity, profile, record_function

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    s, b = tokens_shape
    torch.manual_seed(0)
    cfg = ModelParallelConfig(use_cpu_initialization=True, params_dtype=dt, bf16=dt == torch.bfloat16,
                              fp16=dt == torch.float16, gradient_accumulation_fusion=False)
    head = ColumnParallelLinear(hidden, vocab, config=cfg, init_method=torch.nn.init.normal_, bias=False,
                                gather_output=False)
    model = SimpleNamespace(
        config=SimpleNamespace(cross_entropy_loss_fusion=fused, cross_entropy_fusion_impl="native"),
        pg_collection=SimpleNamespace(tp=parallel_state.get_tensor_model_parallel_group()))
    hidden_states = torch.randn(s, b, hidden, dtype=dt, requires_grad=True)     # [s, b, h], as Megatron's
    labels = torch.randint(0, vocab, (b, s))                                     # [b, s]

    def reached_the_head(grad):               # the logits' gradient is ready: the loss's backward is done
        with record_function("##loss_backward_done"):
            return grad

    def postprocess():                        # GPTModel._postprocess with labels: the lines a training step runs
        logits, _ = head(hidden_states, weight=None, runtime_gather_output=None)
        logits.register_hook(reached_the_head)
        return LanguageModule.compute_language_model_loss(model, labels, logits)

    marks = ("##forward", "##backward", "##loss_backward_done")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("##forward"):
            loss = postprocess()
        total = loss.sum()
        with record_function("##backward"):
            total.backward()
    events, ranges = _live(prof, marks)
    (f0, f1), b0, b1 = ranges["##forward"], ranges["##backward"][0], ranges["##loss_backward_done"][0]
    base, start = _at(events, f0), _at(events, b0)
    return {"dtype": dtype, "tokens": s * b, "vocab": vocab, "fused": fused,
            "forward_peak": max(v for t, _, v, _ in events if f0 <= t <= f1) - base,
            "after_forward": _at(events, f1 + 1) - base, "backward_start": start - base,
            "backward_peak": _peak_new(events, b0, b1),
            "loss_finite": bool(torch.isfinite(total).item())}


def main(argv):
    """argv: a JSON list of run() keyword dicts; prints a JSON list of results."""
    with tempfile.TemporaryDirectory() as tmp:
        ps = _setup(tmp)
        results = []
        for kwargs in json.loads(argv[0]):
            kwargs["tokens_shape"] = tuple(kwargs.get("tokens_shape", (8, 2)))
            run(**kwargs, parallel_state=ps)       # once first: torch.compile's and first calls' own buffers
            results.append(run(**kwargs, parallel_state=ps))
        print(json.dumps(results))


if __name__ == "__main__":
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "zerocalc-inductor"))
    main(sys.argv[1:])
