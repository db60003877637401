"""FSDP2 as torchtitan runs it under pipeline parallelism: what a rank keeps unsharded for the whole step.

Two facts from the frameworks' code, each a row of the table below:
- torchtitan (models/llama3/infra/parallelize.py apply_fsdp, commit 238fa9953e4aec2a62582121564273d7cbb1e9f1):
  fsdp_reshard_after_forward "default" gives `reshard_after_forward = not pp_enabled` ("For PP, by default do not
  reshard after forward to avoid per-microbatch all-gathers"), "always" True, "never" False. A unit that does not
  reshard keeps its all-gather output: FSDPParam.init_all_gather_outputs allocates, per parameter, its padded shard
  x world size elements in param_dtype (torch 2.13.0, commit cf30153c4c131c8164ee7798e5022d810682e2cb,
  torch/distributed/fsdp/_fully_shard/_fsdp_param.py), so one rank holds its stage's parameters unsharded, padded.
- torch.distributed.pipelining (stage.py, same torch commit): backward_maybe_with_nosync calls
  set_requires_gradient_sync(False) and set_reshard_after_backward(False) on every micro-batch's backward;
  perform_reduce_grad (after the last) turns both back on and runs post_backward. Until then FSDPParam keeps each
  parameter's unsharded gradient: to_accumulated_grad_if_needed casts it to reduce_dtype when that differs from
  the gradient's dtype (`unsharded_accumulated_grad`), and accumulate_unsharded_grad_if_needed adds every later
  micro-batch's gradient into it (_fsdp_param.py; _fsdp_param_group.py post_backward). Unpadded: the gradient of
  the unsharded parameter view. Because reshard_after_backward is off, each backward also leaves its units
  unsharded, whatever reshard_after_forward says.
Measured on the CPU: tests/measure/fsdp_pipeline.py (fully_shard + Schedule1F1B on gloo, pp 2 x dp 2).

Where the parts are live (one rank's forward at the loss and backward phases, step/peak.py):
- the unsharded parameters: forward and backward when the units do not reshard after forward; under pipeline
  parallelism also backward when they do (each backward leaves them unsharded until the last micro-batch's
  reduction), which counts the whole stage where its last units are still being gathered: high by at most what
  the running micro-batch frees meanwhile;
- the accumulated gradients (pipeline parallelism only, at ZeRO-2 as well: the pipelining schedule turns gradient
  sync off for any FSDPModule): backward, and forward except under GPipe (1F1B and the
  interleaved schedule run forwards after the first backward; GPipe runs every forward first). Counting them at
  the backward phase's full in-flight activations is high by one micro-batch's activations at most (the first
  backward has no accumulated gradient yet);
- each unit's own gradient in the compute dtype, before post_backward adds it to the accumulator (when
  reduce_dtype is wider): backward, the largest unit (step/buffers.py's units: a block, the embedding end, the
  output end) at once.
The unsharded stage replaces the per-unit gathered parameters (REPLACES: everything is gathered already), and the
accumulation replaces the per-unit gradient buckets: nothing is reduce-scattered until perform_reduce_grad, after
the last backward, when the micro-batches' activations are gone.
"""

from __future__ import annotations

from types import MappingProxyType

from ..tables import bytes_of
from .buffers import reduce_bits

UNSHARDED = "unsharded parameters (reshard_after_forward off)"
ACCUMULATED = "accumulated unsharded gradients (sync at the last micro-batch)"
UNIT_GRADIENT = "unit gradient before accumulation"

REPLACES = MappingProxyType({UNSHARDED: "gathered parameters", ACCUMULATED: "gradient buckets"})

# (pipeline parallel, reshard after forward) -> part -> the phases it is live in. Sources: the module docstring.
KEPT_PHASES = MappingProxyType({
    (False, True): {},
    (False, False): {UNSHARDED: ("forward", "backward")},
    (True, False): {UNSHARDED: ("forward", "backward"), ACCUMULATED: ("forward", "backward"),
                    UNIT_GRADIENT: ("backward",)},
    (True, True): {UNSHARDED: ("backward",), ACCUMULATED: ("forward", "backward"), UNIT_GRADIENT: ("backward",)},
})


def reshards_after_forward(workload, stage: int, framework: str):
    """FSDP2's reshard_after_forward for this plan, or None where the FSDP2 rule does not apply: another framework's
    buffers (step/buffers.py framework(): fsdp for the fsdp2 convention with data parallelism, as torchtitan applies
    fully_shard only when dp_shard or cp > 1), or a stage below 2. At stage 2 (FSDP's SHARD_GRAD_OP: the ledger
    already holds whole parameters) False: only the pipeline's gradient accumulation applies.
    auto: torchtitan's default, not pp_enabled."""
    if framework != "fsdp" or stage < 2:
        return None
    if stage == 2:
        return False
    choice = workload.reshard_after_forward
    return workload.layout.pp == 1 if choice == "auto" else choice == "yes"


def unsharded_elements(shape) -> tuple[int, int]:
    """(parameter elements unsharded, padded as all-gather outputs; gradient elements of the trained ones)."""
    params = sum(sum(h.fsdp_shard(g.shard) * g.shard for h in g.holdings) if g.holdings else g.params
                 for g in shape.groups)
    grads = sum(g.grad_params for g in shape.groups if not g.name.endswith("frozen"))
    return params, grads


def kept_parts(workload, stage: int, shape, framework: str) -> dict[str, list[tuple[str, int]]]:
    """Phase -> the (name, bytes) parts FSDP2 keeps unsharded on this rank at this ZeRO stage (none: {})."""
    reshard = reshards_after_forward(workload, stage, framework)
    if reshard is None:
        return {}
    pipelined = workload.layout.pp > 1
    rule = KEPT_PHASES[(pipelined, reshard)]
    if not rule:
        return {}
    compute = shape.compute_bits
    rbits = reduce_bits(workload, compute)
    params, grads = unsharded_elements(shape)
    units = shape.fsdp                             # step/buffers.py FsdpUnits, when FSDP's buffers are counted
    unit = max(units.block.grads, units.first.grads, units.last.grads) if units else shape.largest_layer_params
    sizes = {UNSHARDED: bytes_of(params, compute), ACCUMULATED: bytes_of(grads, rbits),
             UNIT_GRADIENT: bytes_of(unit, compute) if rbits != compute else 0}
    out: dict[str, list[tuple[str, int]]] = {}
    for part, phases in rule.items():
        for phase in phases:
            if part == UNSHARDED and stage == 2:          # whole parameters are the ledger's at ZeRO-2
                continue
            if part == ACCUMULATED and phase == "forward" and workload.layout.schedule == "gpipe":
                continue
            out.setdefault(phase, []).append((part, sizes[part]))
    return out
