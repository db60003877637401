"""What DeepSpeed ZeRO-3 partitions of a bitsandbytes 4-bit base, on the CPU (test-only; needs torch, bitsandbytes and
deepspeed 0.19.8 from requirements-validation.txt; CPU accelerator, two gloo processes), for the quantization-state
rule of zerocalc/step/buffers.py (SHARDS_QUANT_STATE).

Each rank quantizes the same two frozen Linear4bit layers (nf4, double quantization, codes stored in bf16 words as
PEFT's QLoRA + ZeRO-3 guide sets bnb_4bit_quant_storage) beside a trained bf16 Linear, and deepspeed.initialize
takes the model at ZeRO-3 in bf16. Rank 0 reports each 4-bit weight's elements, its ZeRO-3 partition on the rank
(ds_tensor) and the elements of its QuantState (absmax, the scales of absmax), which ZeRO-3 does not partition.

    python -m tests.measure.quant_state_zero3     # prints the summary as JSON
"""

from __future__ import annotations

import json
import os

IN_FEATURES, OUT_FEATURES, LAYERS = 256, 512, 2


def measure(rank: int = 0, world: int = 2) -> dict:
    os.environ.setdefault("DS_BUILD_OPS", "0")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("ZEROCALC_DS_PORT", "29571"),
                      RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import bitsandbytes as bnb
    import deepspeed
    import torch

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    base = [bnb.nn.Linear4bit(IN_FEATURES, OUT_FEATURES if i == 0 else IN_FEATURES, bias=False,
                              compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4",
                              quant_storage=torch.bfloat16) for i in range(LAYERS)]
    model = torch.nn.Sequential(base[0], torch.nn.Linear(OUT_FEATURES, IN_FEATURES, bias=False), *base[1:]).to("cpu")
    for m in base:
        m.weight.requires_grad_(False)
    model[1].to(torch.bfloat16)
    states = [m.weight.quant_state for m in base]
    packed = [m.weight.numel() for m in base]
    ds = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine, _, _, _ = deepspeed.initialize(model=model, config=ds,
                                           model_parameters=[p for p in model.parameters() if p.requires_grad])
    weights = [engine.module[0].weight, engine.module[2].weight]
    return {"packed": packed, "full": [w.ds_numel for w in weights],
            "partition": [w.ds_tensor.numel() for w in weights],
            "absmax": [s.absmax.numel() for s in states], "absmax_scales": [s.state2.absmax.numel() for s in states],
            "attached": [getattr(w, "quant_state", None) is s for w, s in zip(weights, states)], "world": world}


def measure_ranks(world: int = 2) -> dict:
    """measure() on `world` gloo processes (the partitions are real shards), rank 0's figures."""
    from tests.measure.deepspeed_run import on_ranks

    return on_ranks(measure, world)


if __name__ == "__main__":
    print(json.dumps(measure_ranks()))
