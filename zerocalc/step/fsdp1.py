"""FSDP1 (`FullyShardedDataParallel`) units: one FlatParameter per wrapped module, as the Hugging Face Trainer,
accelerate (fsdp_version 1, its default) and Lightning Fabric's FSDPStrategy run it.

From torch 2.13.0 (git cf30153c4c131c8164ee7798e5022d810682e2cb), torch/distributed/fsdp, and measured on the CPU
(tests/measure/fsdp1_buffers.py: FSDP1 on 2 gloo processes with `device_id=torch.device("cpu")`, nothing patched):
- One flat tensor per unit (_flat_param.py _init_flat_param_and_metadata): the unit's tensors concatenated, each
  start aligned to 16 bytes of the compute dtype under use_orig_params (_get_aligned_numel), the whole padded once
  to a multiple of the world size, and sharded in equal chunks. Gathered, a unit is its padded flat tensor in
  param_dtype (`_full_param_padded`).
- A FlatParameter requires a gradient when any of its tensors does, and its gradient is the whole flat tensor.
  With use_orig_params=False a unit must be uniformly trainable ("Must flatten tensors with uniform
  `requires_grad` when `use_orig_params=False`"), so LoRA runs wrap each trainable leaf alone (peft's
  fsdp_auto_wrap_policy, Answer.AI's get_wrapping_policy): only the adapters' units have gradients. With
  use_orig_params=True a unit may mix frozen and trainable tensors, and the gradient of the WHOLE flat parameter
  is allocated (_wrap_utils.py _validate_frozen_params: "the gradient memory usage will be higher than expected
  (<all> numel instead of <trainable> numel before sharding via reduce-scatter)"; Lightning-AI/litgpt#1538).
  Measured: a LoRA block's unsharded gradient is 1,057,280 elements, its flat size, for 8,192 trainable.
- The root (the embeddings, final norm and head under transformer_auto_wrap_policy) is not resharded after forward
  (_runtime_utils.py _post_forward_reshard: `not state._is_root`) and reshards in its own post-backward, the last:
  it stays gathered through backward, while the output end's gradients wait in autograd for the embedding's.
- A unit's post-backward (_post_backward_hook, _reduce_grad) reshards it first, then holds the gradient autograd
  computed (param_dtype), its reduce_dtype copy (`flat_param.grad.to(reduce_dtype)`, when the dtypes differ), a
  padded copy when the flat size does not divide by the world size (_get_reduce_scatter_tensors: F.pad) and the new
  sharded gradient (kept as `_saved_grad_shard`: the ledger's sharded gradient); the others are dropped when the
  hook returns (no state keeps them for the next unit, unlike FSDP2's reduce_scatter_states).
So the unit rule is the table GRADIENT below plus `flat_unit`; step/buffers.py applies FSDP2's backward windows
without the held reduce-scatter input.
"""

from __future__ import annotations

from types import MappingProxyType

ORIG_PARAMS = ("yes", "no")
# FSDP1's backward_prefetch: pre (BackwardPrefetch.BACKWARD_PRE, torch's default: the next unit gathered at the
# current unit's pre-backward), post (BACKWARD_POST: after the current unit reshards in its post-backward), none
# (each unit gathered at its own pre-backward; accelerate's and the HF Trainer's default NO_PREFETCH)
PREFETCH = ("pre", "post", "none")
# which backward windows (step/buffers.py fsdp_backward) hold the next unit's prefetched all-gather
PREFETCHED_IN = MappingProxyType({"pre": ("output end", "compute", "reduce"), "post": ("reduce",), "none": ()})
FSDP_VERSIONS = (1, 2)
ALIGN_BYTES = 16          # _flat_param.py _get_aligned_numel: ALIGNMENT = 16 bytes, under use_orig_params

# (the unit's tensors: all / some / none trainable, use_orig_params) -> what its unsharded gradient covers:
# flat: the whole flat parameter; leaf: each trainable tensor is a unit of its own (peft's fsdp_auto_wrap_policy
# wraps every leaf module with a trainable weight), gathered and reduced alone, the frozen rest a flat unit without
# a gradient (measured: one adapter gathered and one adapter gradient at a time); none
GRADIENT = MappingProxyType({
    ("all", "yes"): "flat", ("all", "no"): "flat",
    ("some", "yes"): "flat",            # a mixed FlatParameter: the frozen tensors' gradients too
    ("some", "no"): "leaf",             # refused as one unit: the trainable leaves wrapped alone
    ("none", "yes"): "none", ("none", "no"): "none",
})


def flat_elements(pieces, orig_params: str, compute_bits: int) -> int:
    """Unpadded flat size of a unit from its tensors' (elements, trainable) pieces, in module order: under
    use_orig_params each tensor starts at a 16-byte boundary of the compute dtype (the padding goes before it)."""
    align = max(1, ALIGN_BYTES * 8 // compute_bits) if orig_params == "yes" else 1
    total = 0
    for elements, _ in pieces:
        total = -(-total // align) * align + elements
    return total


def _reduce(grads: int, world: int, compute_bits: int, rbits: int) -> int:
    """The reduce tensors of a gradient, in reduce-dtype elements: its cast copy (when the reduce dtype differs)
    and its padded copy (when it does not divide by the world size). The new shard becomes `_saved_grad_shard`,
    the sharded gradient the ledger counts."""
    return (grads if rbits != compute_bits else 0) + (-(-grads // world) * world if grads % world else 0)


def unit_gradient(pieces, orig_params: str) -> str:
    """The GRADIENT row of a unit's (elements, trainable) pieces."""
    trained = sum(1 for _, t in pieces if t)
    mix = "all" if trained and trained == len(pieces) else "some" if trained else "none"
    return GRADIENT[(mix, orig_params)]


def flat_unit(pieces, world: int, orig_params: str, compute_bits: int, rbits: int):
    """(gathered elements, unsharded gradient elements, reduce elements) of one FSDP1 unit on a rank at its
    largest: `pieces` are (elements in the compute dtype, trainable) per tensor, in module order. Leaf-wrapped
    adapters: the frozen flat unit and the largest adapter gathered, that adapter's gradient."""
    covers = unit_gradient(pieces, orig_params)
    trained = [e for e, t in pieces if t]
    if covers == "leaf":
        frozen = flat_elements([p for p in pieces if not p[1]], orig_params, compute_bits)
        leaf = max(trained)
        padded = -(-frozen // world) * world + -(-leaf // world) * world
        return padded, leaf, _reduce(leaf, world, compute_bits, rbits)
    flat = flat_elements(pieces, orig_params, compute_bits)
    padded = -(-flat // world) * world
    if covers == "none":
        return padded, 0, 0
    return padded, flat, _reduce(flat, world, compute_bits, rbits)
