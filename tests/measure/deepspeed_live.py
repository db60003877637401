"""ZeRO-3's resident (gathered) parameters, read off the installed DeepSpeed's parameter coordinator (test-only;
needs torch, transformers and deepspeed 0.19.8 from requirements-validation.txt; CPU accelerator, one gloo process).

A 6-layer Llama (hidden 64, FFN 128, vocabulary 256, untied: 279,360 parameters; its largest modules, the
embedding and the head, hold 16,384) trains three steps in bf16 under ZeRO-3 with every block checkpointed
(reentrant, as the Trainer's default), stage3_param_persistence_threshold 0 (nothing persistent) and
stage3_max_reuse_distance 0, at several prefetch bucket sizes and max_live_parameters. After every
fetch_sub_module (the running module gathered, prefetches issued) the elements of every parameter not
NOT_AVAILABLE are summed; the largest sum over the third step (the trace is complete from the second) is printed
per plan with the model's sizes.

    python -m tests.measure.deepspeed_live      # prints JSON
    python -m tests.measure.deepspeed_live 2    # the same on two gloo processes (rank 0's figures, two plans)
"""

from __future__ import annotations

import json
import os

PLANS = ((0, 10**9), (20_000, 60_000), (2_000, 60_000), (20_000, 120_000), (2_000, 10**9))


def measure_one(prefetch: int, max_live: int) -> dict:
    import deepspeed
    import torch
    from deepspeed.runtime.zero import partitioned_param_coordinator as coordinator
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=256, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
    ds = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": prefetch,
                                "stage3_max_live_parameters": max_live, "stage3_max_reuse_distance": 0,
                                "stage3_param_persistence_threshold": 0, "overlap_comm": False}}
    engine, _, _, _ = deepspeed.initialize(model=model, config=ds, model_parameters=model.parameters())
    params = list(engine.module.parameters())
    resident = []
    fetch = coordinator.PartitionedParameterCoordinator.fetch_sub_module

    def counted(self, module, forward):
        out = fetch(self, module, forward)
        resident.append(sum(p.ds_numel for p in params if p.ds_status != ZeroParamStatus.NOT_AVAILABLE))
        return out

    coordinator.PartitionedParameterCoordinator.fetch_sub_module = counted
    try:
        for _ in range(3):
            resident.clear()
            tokens = torch.randint(0, 256, (1, 32))
            engine.backward(engine(input_ids=tokens, labels=tokens).loss)
            engine.step()
    finally:
        coordinator.PartitionedParameterCoordinator.fetch_sub_module = fetch
    return {"prefetch": prefetch, "max_live": max_live, "params": sum(p.ds_numel for p in params),
            "largest_module": max(p.ds_numel for p in params), "resident_peak": max(resident)}


def measure(rank: int = 0, world: int = 1, plans=PLANS) -> list:
    os.environ.setdefault("DS_BUILD_OPS", "0")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("ZEROCALC_DS_PORT", "29563"),
                      RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    return [measure_one(prefetch, max_live) for prefetch, max_live in plans]


def measure_two_plans(rank: int, world: int) -> list:
    return measure(rank, world, PLANS[:2])


def measure_ranks(world: int) -> list:
    """measure() on `world` gloo processes (the partitions are real shards), rank 0's figures."""
    from tests.measure.deepspeed_run import on_ranks

    return on_ranks(measure_two_plans, world)


if __name__ == "__main__":
    import sys

    world = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(json.dumps(measure() if world == 1 else measure_ranks(world)))
