"""FSDP1's wrapping as an allocation sequence, recorded on the CPU (test-only; needs torch and transformers), for
zerocalc/step/fsdp1_wrap.py.

One gloo process (a world of 1: FSDP1 switches to NO_SHARD and keeps the flat tensor) or `world` of them
(FULL_SHARD: the rank's shard cloned, the flat tensor freed) wraps a
Hugging Face Llama built on the meta device as Answer.AI's fsdp_qlora and accelerate's cpu_ram_efficient_loading
do on every rank but the first: FullyShardedDataParallel(model, auto_wrap_policy=transformer_auto_wrap_policy
over LlamaDecoderLayer, device_id=cpu, param_init_fn=lambda m: m.to_empty(device=cpu, recurse=False),
sync_module_states=False), so each unit's tensors are materialised as FSDP1 reaches it. A TorchDispatchMode
records every new storage an op returns as a MALLOC and its death (weakref.finalize) as a FREE, the events of
zerocalc.step.caching_allocator, from torch 2.13.0 (git cf30153c) torch/distributed/fsdp, nothing patched.

    python -m tests.measure.fsdp1_wrap     # prints the events' summary as JSON
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import weakref

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

CONFIG = dict(hidden_size=128, intermediate_size=352, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=3, vocab_size=1000, max_position_embeddings=256, tie_word_embeddings=False)


def recorded_wrap(config: dict = CONFIG, world: int = 1) -> dict:
    """{"events": rank 0's wrap allocation events, "kept": bytes alive after it, "states": its parameters' bytes}.
    world > 1 runs that many gloo processes (FULL_SHARD: each unit's shard cloned, the flat tensor freed)."""
    if world > 1:
        import torch.multiprocessing as mp
        out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
        store = tempfile.NamedTemporaryFile(delete=False).name
        os.unlink(store)
        try:
            mp.spawn(_rank, args=(world, config, store, out), nprocs=world, join=True)
            with open(out) as f:
                got = json.load(f)
            got["events"] = [tuple(e) for e in got["events"]]
            return got
        finally:
            os.unlink(out)
    store = tempfile.NamedTemporaryFile(delete=False).name
    os.unlink(store)
    return _wrap(config, 0, 1, store)


def _rank(rank: int, world: int, config: dict, store: str, out: str) -> None:
    got = _wrap(config, rank, world, store)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(got, f)


def _wrap(config: dict, rank: int, world: int, store: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from zerocalc.step.caching_allocator import FREE, MALLOC

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        with torch.device("meta"):
            model = LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16)
        events, ids, live, stores, next_id = [], {}, {}, {}, iter(range(1 << 62))

        def freed(ptr):
            tid = ids.pop(ptr, None)
            if tid is not None:
                live.pop(tid, None)
                stores.pop(ptr, None)
                events.append((FREE, tid))

        def resized():
            # FlatParamHandle.shard frees the flat tensor by resizing its storage to 0 (orig_storage._resize_(0)):
            # the storage object lives on, so its death is seen here, at the next op, not by its finalizer
            for ptr, ref in list(stores.items()):
                st = ref()
                if st is not None and st.nbytes() == 0:
                    freed(ptr)

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                resized()
                out = func(*args, **(kwargs or {}))
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                        st = t.untyped_storage()
                        ptr, n = st.data_ptr(), st.nbytes()
                        if n and ptr not in ids:
                            ids[ptr] = next(next_id)
                            live[ids[ptr]] = n
                            events.append((MALLOC, ids[ptr], n, 0))
                            stores[ptr] = weakref.ref(st)
                            weakref.finalize(st, freed, ptr)
                return out

        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
        with Record():
            wrapped = FSDP(model, auto_wrap_policy=policy, device_id=torch.device("cpu"), use_orig_params=False,
                           param_init_fn=lambda m: m.to_empty(device=torch.device("cpu"), recurse=False))
        resized()
        states = sum(p.numel() * p.element_size() for p in wrapped.parameters())
        return {"events": events, "kept": sum(live.values()), "states": states}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    for world in (1, 2):
        got = recorded_wrap(world=world)
        print(json.dumps({"world": world, "events": len(got["events"]), "kept": got["kept"],
                          "states": got["states"]}))
