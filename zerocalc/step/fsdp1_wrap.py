"""What FSDP1's wrapping leaves in the caching allocator before the first step (issue 32), for the allocator's model
(timeline.py replays it with the model states).

FSDP1 wraps a model that exists whole on the host (the Hugging Face Trainer and accelerate load it on the CPU, rank 0
only with cpu_ram_efficient_loading / sync_module_states; Answer.AI's fsdp_qlora the same) one unit at a time, from
torch 2.13.0 (git cf30153c4c131c8164ee7798e5022d810682e2cb) torch/distributed/fsdp:
- _init_utils.py _move_module_to_device: the unit's tensors moved to the GPU, each its own allocation, in its
  storage dtype (a 4-bit base as its packed bytes);
- _flat_param.py flatten_tensors_into_flat_param: torch.cat of them, one flat tensor; the originals become views
  of it and their own storage is freed;
- FlatParamHandle.shard: the rank's chunk cloned (the shard the model states count), then the flat storage freed
  (resized to 0) and, once the views replace them, the originals.
The freed blocks stay cached on the compute stream: the next unit reuses them where sizes allow, and what remains
after the root unit (the embeddings, final norm and head, wrapped last) is there when training starts. A step whose
own transients fit in it reserves nothing new, so the reserved peak stops growing with the sequence: Answer.AI's
Llama-2-7B LoRA reserves 10.24 GiB at 512 tokens and 10.22 at 2,048, with 8.28 and 9.16 GiB allocated
(AnswerDotAI/fsdp_qlora benchmarks_03_2024.md).
The shards are the model states: timeline.py allocates each unit's where FSDP1 clones its shard.
"""

from __future__ import annotations

from typing import Tuple

from ..tables import DTYPE_BITS
from .buffers import fsdp1_flattens, tower_block


def wrap_tensors(scenario, workload, shape, stage: int) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(one decoder block's tensors, the root's tensors) in bytes as FSDP1 moves them to the GPU to flatten them, or
    ((), ()) where no FSDP1 unit is flattened on the rank (FSDP2, DeepSpeed, nothing sharded)."""
    if not fsdp1_flattens(scenario, workload, shape, stage):
        return (), ()
    kinds, root = {"all": {}, "dense": {}, "moe": {}}, []
    for group in shape.groups:
        for h in group.holdings:
            t = h.tensor
            size = -(-h.local_elements * DTYPE_BITS[t.storage or scenario.param_dtype] // 8)
            if t.place == "layer":          # rows split by layer range: one block holds the largest of them
                kinds[t.kind][t.name] = max(kinds[t.kind].get(t.name, 0), size)
            elif not tower_block(t):
                root.append(size)
    block = max((list(kinds["all"].values()) + list(kinds[k].values()) for k in ("dense", "moe")), key=sum)
    return tuple(s for s in block if s > 0), tuple(s for s in root if s > 0)
