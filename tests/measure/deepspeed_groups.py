"""The process groups a DeepSpeed ZeRO step runs its collectives on (test-only; needs torch, transformers and
deepspeed 0.19.8 from requirements-validation.txt; CPU accelerator, gloo).

NCCL gives each process group its own communicator and buffers (step/nccl.py), so what counts is how many distinct
groups carry collectives. DeepSpeed's data-parallel group is a clone of the world group (utils/groups.py
_clone_world_group), while zero.Init partitions on torch's WORLD itself (runtime/zero/partition_parameters.py:1094):
two groups of every rank. A small Llama trains two steps under ZeRO-3 built inside zero.Init (as accelerate's
zero3_init_flag builds it) and under ZeRO-2; every torch.distributed collective is recorded with its group (the
wrappers go in before DeepSpeed's backend takes its references), setup and step apart.

Found (2 gloo ranks): at ZeRO-3 the step's all-gathers, reduce-scatters and all-reduces all run on WORLD and the
clone carries nothing; at ZeRO-2 they all run on the clone. One communicator of every rank carries a step, as
step/nccl.py counts (one dp row); the other holds at most the launcher's small gathers and barriers.

    python -m tests.measure.deepspeed_groups [world]      # prints JSON (rank 0's record)
"""

from __future__ import annotations

import json
import os

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "reduce_scatter",
               "broadcast", "_all_gather_base", "_reduce_scatter_base", "all_to_all_single", "barrier")


SEEN = {}


def record_collectives() -> None:
    """Wrap torch.distributed's collectives before DeepSpeed's backend takes its references to them."""
    import torch.distributed as dist

    def recording(name, fn):
        def call(*args, group=None, **kwargs):
            g = group if group is not None else dist.group.WORLD
            entry = SEEN.setdefault(id(g), {"world": g is dist.group.WORLD, "ranks": dist.get_world_size(g),
                                            "ops": set()})
            entry["ops"].add(name)
            return fn(*args, group=group, **kwargs)
        return call
    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, recording(name, getattr(dist, name)))


def measure_one(stage: int) -> dict:
    import deepspeed
    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=256, tie_word_embeddings=False)
    ds = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    torch.manual_seed(0)
    SEEN.clear()
    if stage == 3:
        with deepspeed.zero.Init(config_dict_or_path=ds):
            model = LlamaForCausalLM(config)
    else:
        model = LlamaForCausalLM(config)
    engine, _, _, _ = deepspeed.initialize(model=model, config=ds, model_parameters=model.parameters())
    setup = _groups()
    SEEN.clear()                      # the step's collectives
    for _ in range(2):
        tokens = torch.randint(0, 256, (1, 16))
        engine.backward(engine(input_ids=tokens, labels=tokens).loss)
        engine.step()
    dp = engine.optimizer.dp_process_group
    return {"stage": stage, "setup": setup, "step": _groups(), "dp_group_is_world": dp is dist.group.WORLD}


def _groups() -> list:
    return sorted(({"world": e["world"], "ranks": e["ranks"], "ops": sorted(e["ops"])} for e in SEEN.values()),
                  key=lambda e: (not e["world"], e["ops"]))


def measure(rank: int = 0, world: int = 1) -> list:
    os.environ.setdefault("DS_BUILD_OPS", "0")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("ZEROCALC_DS_PORT", "29571"),
                      RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    record_collectives()
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    return [measure_one(3), measure_one(2)]


def measure_ranks(world: int) -> list:
    from tests.measure.deepspeed_run import on_ranks

    return on_ranks(measure, world)


if __name__ == "__main__":
    import sys

    world = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(json.dumps(measure() if world == 1 else measure_ranks(world)))
