"""What FSDP1 shards of a bitsandbytes 4-bit base, recorded on the CPU (test-only; needs torch and bitsandbytes), for
the quantization-state rule of zerocalc/step/buffers.py (SHARDS_QUANT_STATE).

Two gloo processes each quantize the same two Linear4bit layers (nf4, double quantization, the packed codes stored
in bf16 words as fsdp_qlora and PEFT's FSDP guide set bnb_4bit_quant_storage, without which FSDP1 refuses to flatten
them) and wrap them in one FullyShardedDataParallel unit (FULL_SHARD, world 2). Rank 0 reports each weight's packed
elements, the flat parameter's shard and, after the wrap, the elements of each weight's QuantState (absmax and the
scales of absmax), which FSDP1 does not see: it flattens parameters only.

    python -m tests.measure.quant_state_fsdp1     # prints the summary as JSON
"""

from __future__ import annotations

import json
import os
import tempfile

IN_FEATURES, OUT_FEATURES, LAYERS = 256, 512, 2


def recorded(world: int = 2) -> dict:
    import torch.multiprocessing as mp
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    store = tempfile.NamedTemporaryFile(delete=False).name
    os.unlink(store)
    try:
        mp.spawn(_rank, args=(world, store, out), nprocs=world, join=True)
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def _rank(rank: int, world: int, store: str, out: str) -> None:
    import bitsandbytes as bnb
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        layers = torch.nn.Sequential(*[
            bnb.nn.Linear4bit(IN_FEATURES, OUT_FEATURES, bias=False, compute_dtype=torch.bfloat16,
                              compress_statistics=True, quant_type="nf4", quant_storage=torch.bfloat16)
            for _ in range(LAYERS)]).to("cpu")                 # Params4bit quantizes as it moves to a device
        states = [m.weight.quant_state for m in layers]
        packed = [m.weight.numel() for m in layers]
        wrapped = FSDP(layers, device_id=torch.device("cpu"), use_orig_params=False)
        got = {"packed": packed, "flat_shard": sum(p.numel() for p in wrapped.parameters()),
               "absmax": [s.absmax.numel() for s in states],
               "absmax_scales": [s.state2.absmax.numel() for s in states]}
        if rank == 0:
            with open(out, "w") as f:
                json.dump(got, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    print(json.dumps(recorded()))
