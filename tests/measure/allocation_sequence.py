"""A training step's real allocation sequence, recorded on the CPU (test-only), for the caching allocator's model.

`recorded_events(config, tokens)` builds a Hugging Face Llama from `config` (a LlamaConfig dict) in bf16, loads
its parameters as the first allocations, and records two training steps (forward with labels, backward,
torch.optim.AdamW foreach step, zero_grad) op by op with a TorchDispatchMode: every new storage an op returns is
a MALLOC of its bytes, and a FREE when the storage dies (weakref.finalize on the storage, whose Python object
PyTorch keeps alive as long as the C++ storage lives: autograd's saved tensors included). Views and in-place
results share their input's storage and allocate nothing. The events are zerocalc.step.caching_allocator's, so
the recorded step replays through the same model as zerocalc's timeline (timeline.py) of the same plan.

Version: torch 2.13.0 (CPU), transformers 5.24.0. The CPU allocator hands out what the op asks; the sizes and
lifetimes are the device's (the same kernels' outputs), which is what the model needs.
"""

from __future__ import annotations

import weakref


def recorded_events(config: dict, tokens: int, steps: int = 2, seed: int = 0) -> list:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from transformers import LlamaConfig, LlamaForCausalLM

    from zerocalc.step.caching_allocator import FREE, MALLOC

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config, attn_implementation="sdpa")).to(torch.bfloat16)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    events, ids, next_id = [], {}, iter(range(1 << 62))

    def freed(ptr):
        tid = ids.pop(ptr, None)
        if tid is not None:
            events.append((FREE, tid))

    def see(t):
        st = t.untyped_storage()
        ptr, n = st.data_ptr(), st.nbytes()
        if n == 0 or ptr in ids:
            return
        ids[ptr] = next(next_id)
        events.append((MALLOC, ids[ptr], n, 0))
        weakref.finalize(st, freed, ptr)

    for p in model.parameters():
        see(p)

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    see(t)
            return out

    ids_in = torch.randint(0, config["vocab_size"], (1, tokens))
    for _ in range(steps):
        with Record():
            loss = model(input_ids=ids_in, labels=ids_in).loss
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad(set_to_none=True)
    return events
