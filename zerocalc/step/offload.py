"""Activation offloading to the CPU, as torchtune's OffloadActivations does it with activation checkpointing.

torchtune 0.6.1 training/_activation_offloading.py OffloadActivations: every saved tensor of at least
min_offload_size (1,024) bytes that is not a parameter or buffer is copied to pinned host memory; with
non-reentrant checkpointing of every layer (the recipes refuse offloading without it) the saved tensors are the
layers' inputs. On the GPU stay the most recent ones in forward (max_fwd_stash_size = 5 tensor ids: about the
current and the previous layer's input) and, in backward, the current and the previous autograd node's: two block
inputs at a time, beside the rebuilt block (counted as "recompute (one block)"). The output head runs under a
NoOpManager: its tensors stay on the GPU. Each offloaded tensor takes a pinned block rounded up to a power of two
(torch's pinned-memory caching allocator), held at the step's peak.
"""

from __future__ import annotations

from typing import Tuple

ON_GPU_BLOCKS = 2


def offloaded_inputs(workload, act, in_flight_blocks: int) -> Tuple[int, int]:
    """(bytes moved off the GPU, pinned host bytes) for one rank's in-flight block inputs."""
    if not workload.activation_offload or in_flight_blocks == 0:
        return 0, 0
    per_block = act.per_layer_total            # full recompute: each block keeps only its checkpoint input
    moved = max(0, in_flight_blocks - ON_GPU_BLOCKS) * per_block
    return moved, in_flight_blocks * (1 << (per_block - 1).bit_length() if per_block else 0)
