"""FSDP with its parameters offloaded to the CPU: the copies that still pass through the GPU.

The ledger puts an offloaded shard on the CPU (tables.OFFLOADED_CATEGORIES), and step/buffers.py counts the
gathered units (the root kept from forward to the end of backward, the running unit, the prefetched one). What
offload adds on the GPU, per unit being gathered or reduced (torch 2.13.0, commit
cf30153c4c131c8164ee7798e5022d810682e2cb):
- FSDP1 (torch/distributed/fsdp/_flat_param.py, units from step/fsdp1.py): pre_unshard ->
  _use_low_precision_shard copies the pinned CPU shard to the device (`_local_shard.to(self.device)`, the
  parameter dtype) into `_mp_shard` (param_dtype), which post_unshard frees after the all-gather; without mixed
  precision flat_param_to(device) moves the shard itself.
  After the reduce-scatter, _runtime_utils.py _offload_grad copies the sharded gradient to `_cpu_grad`
  (non_blocking) and record_stream keeps the device copy until that copy is done; _accumulate_sharded_grad first
  casts the new shard to the flat parameter's dtype (_cast_grad_to_param_dtype). That device shard stays as
  `_saved_grad_shard` until the final callback's prepare_gradient_for_optim deletes it: each reduced unit's, so the
  end of backward holds every trained unit's ("backward end": the trained parameters' shards in the stored dtype,
  unpadded; measured on the CPU, tests/test_fsdp1.py); at the backward windows counted while every activation is
  saved (the output end, the last blocks) that is the running unit's, counted in the copies.
- FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param.py all_gather_inputs): with CPUOffloadPolicy each
  parameter's shard is copied to the device and cast to param_dtype; the casts of the unit's parameters are
  collected before the copy into the all-gather buffer (_fsdp_collectives.py _get_param_all_gather_inputs: no
  foreach copy under offload); foreach_reduce moves the reduce-scatter output to the CPU
  (`new_sharded_grad.to(torch.device("cpu"), non_blocking=...)`).
So during backward, beside the prefetched unit's all-gather and the previous unit's reduction, the GPU holds at
most one unit's shard in the parameter dtype and in the compute dtype, and one unit's gradient shard in the reduce
dtype: one FSDP1 flat shard exactly; for FSDP2 an upper bound (its parameter-dtype copies live one tensor at a
time). The copies are code only: on the CPU both FSDPs' device copies are the CPU tensors themselves (FSDP1 runs
there given device_id=torch.device("cpu"), tests/measure/fsdp1_buffers.py, but those copies cannot be told apart).
"""

from __future__ import annotations

from ..tables import DTYPE_BITS, bytes_of
from .buffers import reduce_bits

OFFLOAD_COPIES = "CPU offload: a unit's shard and gradient shard on the GPU"
HELD_SHARDS = "FSDP1 offload: every unit's gradient shard on the GPU until backward ends"


def offload_parts(scenario, workload, stage: int, shape, framework: str) -> dict[str, list[tuple[str, int]]]:
    """Phase -> the (name, bytes) copies an offloaded FSDP unit makes on the GPU ({} where none: another
    framework's buffers, a stage below 3, parameters not offloaded, or no FSDP units on the rank)."""
    units = shape.fsdp
    if framework != "fsdp" or stage != 3 or scenario.offload_params == "none" or units is None:
        return {}
    shard_group = min(g.shard for g in shape.groups)          # the smallest group shards the largest piece
    unit = units.block
    shard, grad_shard = -(-unit.params // shard_group), -(-unit.reduce // shard_group)
    if workload.fsdp_version == 1:         # the flat gradient's shard (unit.reduce also counts FSDP1's copies)
        grad_shard = -(-unit.grads // shard_group)
    compute, stored = shape.compute_bits, DTYPE_BITS[scenario.param_dtype]
    # FSDP1 casts the new shard to the flat parameter's dtype before the copy to _cpu_grad (_cast_grad_to_param_dtype)
    grad_bits = stored if workload.fsdp_version == 1 else reduce_bits(workload, compute)
    bits = shard * stored + (shard * compute if compute != stored else 0) + grad_shard * grad_bits
    parts = {"backward": [(OFFLOAD_COPIES, bytes_of(bits, 1))]}
    if workload.fsdp_version == 1:         # _saved_grad_shard, deleted by the final callback only
        held = sum(-(-g.grad_params // g.shard) for g in shape.groups if not g.name.endswith("frozen"))
        parts["backward end"] = [(HELD_SHARDS, bytes_of(held, stored))]
    return parts
