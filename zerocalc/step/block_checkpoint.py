"""Which blocks of a rank's model chunks are checkpointed whole under full recompute, and what backward rebuilds at
once: torchtitan's one block in N (a counter across the rank's chunks) and Megatron's uniform / block methods (per
chunk, megatron_recompute.full_groups). activations() counts the model as one chunk; step/shape.py chunk by chunk.
"""

from __future__ import annotations

from typing import Dict, NamedTuple

from .megatron_recompute import full_groups


class KeptBlocks(NamedTuple):
    """Blocks that save everything under partial full recompute, by kind."""
    dense: int
    moe: int
    sliding: int


class CheckpointedBlocks(NamedTuple):
    """A chunk's blocks under partial full recompute: kept whole by kind, and checkpoint inputs."""
    dense: int
    moe: int
    sliding: int
    checkpointed: int


def split_checkpointed(a, layers, every: int, start: int = 0) -> tuple:
    """(KeptBlocks, checkpointed count) of `layers` (indices, in the order a rank builds them) when the blocks
    at running positions N, 2N, ... are checkpointed; `start`: blocks already counted before them on the rank
    (torchtitan's counter runs across a rank's model chunks)."""
    dense = moe = sliding = checkpointed = 0
    for position, i in enumerate(layers, start + 1):
        if position % every == 0:
            checkpointed += 1
            continue
        if a.is_moe_layer(i):
            moe += 1
        else:
            dense += 1
        sliding += a.is_sliding_layer(i)
    return KeptBlocks(dense, moe, sliding), checkpointed


def megatron_full_blocks(a, layers, method: str, num_layers: int, full_sizes: Dict[str, int]) -> tuple:
    """(KeptBlocks, checkpoints, rebuilt bytes) of one chunk's `layers` (indices) under Megatron's full recompute:
    the blocks kept whole by kind, the checkpoint inputs, and the largest group backward rebuilds at once (its
    blocks' whole activations, `full_sizes` by kind)."""
    layers = list(layers)
    checkpoints, _, size = full_groups(len(layers), method, num_layers)
    whole = layers[checkpoints * size:]
    groups = [layers[g * size:(g + 1) * size] for g in range(checkpoints)]
    rebuilt = max((sum(full_sizes["moe" if a.is_moe_layer(i) else "dense"] for i in g) for g in groups), default=0)
    moe = sum(1 for i in whole if a.is_moe_layer(i))
    return KeptBlocks(len(whole) - moe, moe, sum(1 for i in whole if a.is_sliding_layer(i))), checkpoints, rebuilt


def checkpointed_counts(a, spans, frozen: int, workload, full_sizes: Dict[str, int]) -> tuple:
    """([CheckpointedBlocks per chunk], rebuilt bytes): the blocks a gradient reaches (index >= frozen), chunk by
    chunk; torchtitan's running count decides across the chunks, Megatron's method within each."""
    counts, seen, rebuilt = [], 0, 0
    megatron = workload.recompute_method == "block" or workload.recompute_num_layers > 1
    for span in spans:
        live = [i for i in span if i >= frozen]
        if megatron:
            kept, checkpointed, group = megatron_full_blocks(a, live, workload.recompute_method,
                                                             workload.recompute_num_layers, full_sizes)
            rebuilt = max(rebuilt, group)
        else:
            kept, checkpointed = split_checkpointed(a, live, workload.recompute_every, seen)
        counts.append(CheckpointedBlocks(kept.dense, kept.moe, kept.sliding, checkpointed))
        seen += len(live)
    return counts, rebuilt
