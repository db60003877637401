"""The optimizer step fused into backward (torchtune optimizer_in_bwd): no full gradient set ever lives.

torchtune 0.6.1 recipes/full_finetune_single_device.py and full_finetune_distributed.py build one optimizer per
parameter and register_post_accumulate_grad_hook on each: the hook steps that parameter's optimizer and sets its
gradient to None (optimizer.zero_grad()), so a gradient lives from its accumulation to its step, one tensor at a
time. FSDP2 calls these hooks after its reduce-scatter, so under FSDP the unit's unsharded gradient and the
reduce-scatter input stay as step/buffers.py counts them, and only the persistent sharded gradient goes. The
recipes refuse gradient accumulation ("Gradient accumulation is not supported with optimizer in bwd.") and
gradient clipping.
"""

from __future__ import annotations

from ..tables import DTYPE_BITS, PARTITIONED, bytes_of


def _grad_bits(scenario) -> int:
    bits = DTYPE_BITS[scenario.grad_dtype]
    return bits + (DTYPE_BITS[scenario.grad_accum_dtype] if scenario.grad_accum_dtype else 0)


def resident_gradient_bytes(scenario, stage: int, shape) -> int:
    """The gradient set the ledger keeps on this rank's GPU at this stage (what optimizer-in-backward frees)."""
    if scenario.offload_optimizer != "none" and "gradients" in PARTITIONED[stage]:
        return 0                                   # the partitioned gradients live on the host already
    elements = sum(g.params if "gradients" not in PARTITIONED[stage] else -(-g.params // g.shard)
                   for g in shape.groups if not g.name.endswith("frozen"))
    return bytes_of(elements, _grad_bits(scenario))


def one_gradient_bytes(scenario, shape) -> int:
    """The largest module's gradient, alive between its accumulation and its step."""
    return bytes_of(shape.largest_layer_params, DTYPE_BITS[scenario.grad_dtype])
