"""FSDP2 under pipeline parallelism as torchtitan runs it, measured on CPU (test-only; needs torch, transformers).

4 gloo processes on 127.0.0.1 form a (pp 2) x (dp 2) mesh. Each builds the same random fp32 Llama model, keeps its
pipeline stage (tests/measure/pipeline_stages.split) and applies fully_shard over its dp group as torchtitan's
apply_fsdp does (models/llama3/infra/parallelize.py at 238fa99): the embedding, every decoder block, [norm, head] as
one unit (reshard_after_forward only with "always"), then the stage's root, with MixedPrecisionPolicy(param_dtype
bf16, reduce_dtype fp32). torch.distributed.pipelining's Schedule1F1B (or ScheduleGPipe) runs `steps` steps of
`microbatches` micro-batches. Around every micro-batch's forward and backward (the stage's forward_one_chunk and
backward_maybe_with_nosync) each rank records, over its FSDP parameters:
- unsharded parameter bytes: the storage of every all-gather output still allocated (FSDP frees it with resize_(0));
- unsharded gradient bytes: each parameter's `unsharded_accumulated_grad` (reduce dtype), or the gradient of its
  unsharded parameter where there is no accumulator.
The last step's largest values and those just before its gradient reduction (perform_reduce_grad) are returned per
rank, with the sharded parameters' shapes. Plain JSON-able data.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from tests.measure.pipeline_stages import split  # noqa: E402
from tests.measure.saved_tensors import build_from_config  # noqa: E402
from tests.measure.tensor_parallel import run_configs, spawn_configs  # noqa: E402


def _fsdp_params(root):
    from torch.distributed.fsdp import fully_shard

    return [p for state in fully_shard.state(root)._state_ctx.all_states
            for group in state._fsdp_param_groups for p in group.fsdp_params]


def _live(params) -> dict:
    """Bytes of the unsharded parameters (all-gather outputs still allocated) and unsharded gradients now."""
    unsharded = sum(t.untyped_storage().nbytes() for p in params for t in p.all_gather_outputs)
    grads = 0
    for p in params:
        if p.unsharded_accumulated_grad is not None:
            grads += p.unsharded_accumulated_grad.untyped_storage().nbytes()
        elif hasattr(p, "_unsharded_param") and p._unsharded_param.grad is not None:
            grads += p._unsharded_param.grad.untyped_storage().nbytes()
    return {"unsharded_params": unsharded, "unsharded_grads": grads}


def measure(cfg: dict, rank: int, mesh) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    pp_rank = mesh["pp"].get_local_rank()
    dp_mesh = mesh["dp"]
    model = build_from_config({**cfg["model"], "attn_implementation": "sdpa"}, torch.float32)
    stage_mod = split(model, pp_rank, 2)
    del model.model.layers
    policy = cfg.get("policy", "default")         # torchtitan's fsdp_reshard_after_forward
    reshard = {"always": True, "never": False, "default": False}[policy]      # default: not pp_enabled
    fsdp = {"mesh": dp_mesh, "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                               reduce_dtype=torch.float32)}
    if stage_mod.embed_tokens is not None:
        fully_shard(stage_mod.embed_tokens, **fsdp, reshard_after_forward=reshard)
    for layer in stage_mod.layers:
        fully_shard(layer, **fsdp, reshard_after_forward=reshard)
    if stage_mod.lm_head is not None:
        fully_shard([stage_mod.norm, stage_mod.lm_head], **fsdp, reshard_after_forward=policy == "always")
    fully_shard(stage_mod, **fsdp)
    shapes = [dict(name=n, shape=list(p.shape), trainable=p.requires_grad) for n, p in stage_mod.named_parameters()]

    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, model.config.vocab_size, (cfg["batch"], cfg["seq"]), generator=gen)

    def loss_fn(logits, labels):
        return model.loss_function(logits=logits.float(), labels=labels, vocab_size=model.config.vocab_size)

    pstage = PipelineStage(stage_mod, pp_rank, 2, torch.device("cpu"), group=mesh["pp"].get_group())
    schedule = {"1F1B": Schedule1F1B, "GPipe": ScheduleGPipe}[cfg.get("schedule", "1F1B")](
        pstage, n_microbatches=cfg["microbatches"], loss_fn=loss_fn)
    records: list = []

    def wrap(name):
        inner = getattr(pstage, name)

        def run(*args, **kwargs):
            out = inner(*args, **kwargs)
            records.append({"after": name, **_live(_fsdp_params(stage_mod))})
            return out
        setattr(pstage, name, run)

    wrap("forward_one_chunk")
    wrap("backward_maybe_with_nosync")
    inner_reduce = pstage.perform_reduce_grad

    def reduce(*args, **kwargs):
        records.append({"after": "before_reduce", **_live(_fsdp_params(stage_mod))})
        return inner_reduce(*args, **kwargs)
    pstage.perform_reduce_grad = reduce
    opt = torch.optim.AdamW(stage_mod.parameters(), lr=1e-3)
    for _ in range(cfg.get("steps", 2)):
        records.clear()
        if pp_rank == 0:
            schedule.step(ids)
        else:
            schedule.step(target=ids)
        opt.step()
        opt.zero_grad()
    after_reduce = _live(_fsdp_params(stage_mod))      # the root's lazy init lists its states at the 1st forward
    forwards = [r for r in records if r["after"] == "forward_one_chunk"]
    backwards = [r for r in records if r["after"] == "backward_maybe_with_nosync"]
    return {
        "name": cfg["name"], "rank": rank, "pp_rank": pp_rank, "dp_rank": dp_mesh.get_local_rank(),
        "dp": dp_mesh.size(), "shapes": shapes,
        "max_after_forward": {k: max(r[k] for r in forwards) for k in ("unsharded_params", "unsharded_grads")},
        "max_after_backward": {k: max(r[k] for r in backwards) for k in ("unsharded_params", "unsharded_grads")},
        "before_reduce": next(r for r in records if r["after"] == "before_reduce"),
        "after_step": after_reduce, "records": records,
    }


def _pp_dp_mesh(rank, world):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("pp", "dp"))


def _worker(rank, world, port, configs, out_dir):
    run_configs(rank, world, port, configs, out_dir, measure, _pp_dp_mesh)


def measure_fsdp_pp(configs: list, world: int = 4) -> list:
    """Run each config on a (pp 2) x (dp world/2) mesh; per config, the per-rank results (rank order)."""
    return spawn_configs(_worker, world, configs, "zerocalc-fsdp-pp-")


if __name__ == "__main__":
    import time

    from tests.measure.tensor_parallel import llama

    t0 = time.perf_counter()
    model = llama(layers=2, hidden=64, heads=4, kv=2, ffn=172, vocab=1001, seq=32)
    cfgs = [dict(name=f"{policy}/{sched}", model=model, batch=4, seq=32, microbatches=4, schedule=sched,
                 policy=policy, steps=2) for policy, sched in (("default", "1F1B"), ("always", "1F1B"),
                                                               ("default", "GPipe"))]
    for per_rank in measure_fsdp_pp(cfgs):
        for r in per_rank:
            if "error" in r:
                print(r["name"], r["error"], r["traceback"])
                continue
            print(r["name"], "rank", r["rank"], "pp", r["pp_rank"], "fwd", r["max_after_forward"], "bwd",
                  r["max_after_backward"], "pre-reduce", r["before_reduce"], "after", r["after_step"])
    print(f"{time.perf_counter() - t0:.1f} s")
