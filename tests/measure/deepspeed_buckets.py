"""DeepSpeed's ipg reduce buckets, read off the installed release's ZeRO optimizer (test-only; needs torch and
deepspeed 0.19.8 from requirements-validation.txt, CPU accelerator, one gloo process).

A 4,680-parameter two-layer model in bf16 trains one step under ZeRO stages 1-3 with reduce_bucket_size 100,000:
after initialize, after forward, during backward (a gradient hook on the last weight), after backward and after the
step, the optimizer's `ipg_buckets` lists each bucket tensor's element count. The sizes are the configured
reduce_bucket_size, not the trained count (stage_1_and_2.py setup_buckets, stage3.py _setup_for_real_optimizer).

    python -m tests.measure.deepspeed_buckets      # prints JSON
"""

from __future__ import annotations

import json
import os

BUCKET = 100_000
PLANS = ((1, False), (2, False), (2, True), (3, False), (3, True))


def _buffers(zero) -> list:
    """[elements, bytes per element] of every bucket tensor the optimizer holds now."""
    out = []
    for bucket in zero.ipg_buckets.values():
        held = bucket.buffer if isinstance(bucket.buffer, list) else [bucket.buffer]
        out.extend([t.numel(), t.element_size()] for t in held if t is not None)
    return out


def measure_one(stage: int, overlap: bool) -> dict:
    import deepspeed
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": stage, "reduce_bucket_size": BUCKET, "overlap_comm": overlap,
                                    "contiguous_gradients": True}}
    engine, _, _, _ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    zero = engine.optimizer
    phases = {"init": _buffers(zero)}
    loss = engine(torch.randn(4, 64, dtype=torch.bfloat16)).float().pow(2).mean()
    phases["forward"] = _buffers(zero)
    during = []
    engine.module[1].weight.register_hook(lambda g: during.append(_buffers(zero)))
    engine.backward(loss)
    phases["backward"] = during[0]
    phases["after_backward"] = _buffers(zero)
    engine.step()
    phases["after_step"] = _buffers(zero)
    return {"stage": stage, "overlap_comm": overlap, "trained": sum(p.numel() for p in model.parameters()),
            "reduce_bucket_size": BUCKET, "buckets": phases}


def measure() -> list:
    os.environ.setdefault("DS_BUILD_OPS", "0")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("ZEROCALC_DS_PORT", "29533"),
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    return [measure_one(stage, overlap) for stage, overlap in PLANS]


if __name__ == "__main__":
    print(json.dumps(measure()))
