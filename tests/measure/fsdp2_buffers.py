"""FSDP2 (`fully_shard`) communication buffers per rank on CPU: gathered units, unsharded gradients, all-gather
outputs and reduce-scatter inputs, tracked over one forward + backward.

`fsdp2_buffers(world=2, runs=[{"wrap": "blocks"}, {"wrap": "torchtitan", "config": ...}], ...)` starts `world`
gloo processes; for each run (its keys over the call's) each builds the same random Hugging Face Llama, applies
fully_shard with MixedPrecisionPolicy(param_dtype, reduce_dtype):
- blocks: every decoder layer, then the root (embeddings, final norm and head in the root);
- torchtitan: the embedding alone, [norm, lm_head] with reshard_after_forward=False (tied: all three in one
  such unit), every layer, then the root (torchtitan/distributed/fsdp.py apply_fsdp_to_decoder at b5bcd76c);
and runs one step. A TorchDispatchMode samples, after every op, the bytes of the storages FSDP itself holds (its
own state, torch 2.13 _fully_shard): each FSDPParam's unsharded parameter (`all_gather_outputs`) and unsharded
gradient, each group's pending (prefetched) all-gather output, the forward all-gather kept in
`comm_ctx.all_gather_state`, the reduce-scatter inputs kept in `comm_ctx.reduce_scatter_states`, and, while
`foreach_reduce` runs, the unsharded gradients it was handed and the reduce-scatter input it returns. Reported:
per wrap, in bytes: `at_loss` (after the model returns), `forward` (the largest sample in forward), `backward`
(the largest from the start of backward to block 0's pre-backward: the output end and blocks N-1..1), `tail`
(block 0 and the embedding end) and `backward_all` (the whole backward).
"""

from __future__ import annotations

import os
import weakref

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _storages(groups, ctx, inflight):
    seen, total = set(), 0

    def add(t):
        nonlocal total
        if t is None:
            return
        t = t.to_local() if hasattr(t, "to_local") else t
        st = t.untyped_storage()
        if st.nbytes() and st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()

    for g in groups:
        for fp in g.fsdp_params:
            for t in getattr(fp, "all_gather_outputs", ()) or ():
                add(t)
            if hasattr(fp, "_unsharded_param"):
                add(fp._unsharded_param.grad)
        if g._all_gather_result is not None:
            add(g._all_gather_result.all_gather_output)
    if ctx.all_gather_state is not None:
        add(ctx.all_gather_state.all_gather_result.all_gather_output)
    for st in ctx.reduce_scatter_states:
        add(st.reduce_scatter_input)
    for t in inflight.get("grads", ()):
        add(t)
    add(inflight.get("rs"))
    for t in list(inflight.get("waiting", ())):
        add(t)
    return total


def _measure(case):
    """One wrap on this process's rank: the marks of the module docstring."""
    import torch
    import torch.distributed.fsdp._fully_shard._fsdp_param_group as pg
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    from torch.utils._python_dispatch import TorchDispatchMode

    from tests.measure.peft_lora import DTYPES
    from tests.measure.saved_tensors import build_from_config

    model = build_from_config({**case["config"], "attn_implementation": "sdpa"}, DTYPES["fp32"])
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[case["param_dtype"]], reduce_dtype=DTYPES[case["reduce_dtype"]])
    layers = model.model.layers
    if case["wrap"] == "torchtitan" and case["config"].get("tie_word_embeddings"):
        fully_shard([model.model.embed_tokens, model.model.norm, model.lm_head], mp_policy=mp,
                    reshard_after_forward=False)
    elif case["wrap"] == "torchtitan":
        fully_shard(model.model.embed_tokens, mp_policy=mp)
        fully_shard([model.model.norm, model.lm_head], mp_policy=mp, reshard_after_forward=False)
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    states = [m._get_fsdp_state() for m in model.modules() if isinstance(m, FSDPModule)]
    groups = [g for s in dict.fromkeys(states) for g in s._fsdp_param_groups]
    ctx = states[0]._comm_ctx
    inflight, marks = {}, {"phase": None, "backward": 0, "tail": 0, "backward_all": 0, "forward": 0}

    def sample():
        phase = marks["phase"]
        if phase is None:
            return
        b = _storages(groups, ctx, inflight)
        for key in (("forward",) if phase == "forward" else ("backward_all", phase)):
            marks[key] = max(marks[key], b)

    original = pg.foreach_reduce

    def foreach_reduce(fsdp_params, unsharded_grads, *args, **kwargs):
        inflight["grads"] = list(unsharded_grads)
        out = original(fsdp_params, unsharded_grads, *args, **kwargs)
        inflight["rs"] = out[0]
        sample()
        inflight.pop("grads", None)
        inflight.pop("rs", None)
        return out

    pg.foreach_reduce = foreach_reduce
    block0 = layers[0]._get_fsdp_state()._fsdp_param_groups[0]
    original_pre_backward = block0.pre_backward

    def pre_backward(*args, **kwargs):
        if marks["phase"] == "backward":
            marks["phase"] = "tail"          # block 0 and the embedding end: after most activations are gone
        return original_pre_backward(*args, **kwargs)

    block0.pre_backward = pre_backward

    # A tied weight's head gradient waits in autograd's input buffer for the embedding's (its AccumulateGrad runs
    # once, with both): FSDP's state does not show it, so backward ops' outputs of the tied weight's full shape are
    # followed through weak references.
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    shape = (case["config"]["vocab_size"], case["config"]["hidden_size"])
    waiting = inflight.setdefault("waiting", weakref.WeakSet()) if tied else None

    class Sampler(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if tied and marks["phase"] in ("backward", "tail") and isinstance(out, torch.Tensor) \
                    and tuple(out.shape) == shape:
                waiting.add(out)
            sample()
            return out

    torch.manual_seed(1)
    ids = torch.randint(0, case["config"]["vocab_size"], (case["batch"], case["seq"]))
    with Sampler():
        marks["phase"] = "forward"
        loss = model(input_ids=ids, labels=ids).loss
        marks["at_loss"] = _storages(groups, ctx, inflight)
        marks["phase"] = "backward"
        loss.backward()
        marks["phase"] = None
    pg.foreach_reduce = original
    return dict(run={k: v for k, v in case.items() if k != "runs"}, loss=float(loss.detach()),
                **{k: marks[k] for k in ("at_loss", "forward", "backward", "tail", "backward_all")})


def _worker(rank, world, port, outdir, case):
    from tests.measure.fsdp2_lora import run_cases
    run_cases(rank, world, port, outdir, case, _measure)


def fsdp2_buffers(world: int = 2, timeout: float = 120, **case) -> list:
    """Run the measurement on `world` CPU processes; one dict per rank (see the module docstring)."""

    from tests.measure.fsdp2_lora import run_workers
    from tests.measure.peft_lora import llama_config

    case = {"param_dtype": "bf16", "reduce_dtype": "fp32", "batch": 2, "seq": 32, "config": llama_config(), **case}
    case["runs"] = case.get("runs") or [{"wrap": "blocks"}, {"wrap": "torchtitan"}]
    return run_workers("tests.measure.fsdp2_buffers", world, case, timeout)
