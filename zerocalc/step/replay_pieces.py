"""What the allocator's replay (timeline.py) takes beyond a stage's named parts, from the plan itself: the parts
that are several tensors or several lifetimes, where the report keeps one sum (timeline.Pieces)."""

from __future__ import annotations

from .buffers import framework, fsdp_gathers
from .fsdp1_wrap import wrap_tensors
from .losses import loss_tensors
from .timeline import Pieces


def pieces_of(scenario, workload, shape, stage: int) -> Pieces:
    """A stage's Pieces (a timeline.plan_of argument): FSDP1's wrapping, the loss's transients, FSDP1's units, and
    whether DeepSpeed's ZeRO-3 window stays resident (buffers.zero3_live_params: the prefetcher keeps it)."""
    loss = loss_tensors(workload, shape, scenario.grad_dtype)
    resident = stage == 3 and framework(scenario, workload, shape) == "deepspeed"
    return Pieces(*wrap_tensors(scenario, workload, shape, stage), loss["forward"], loss["backward"],
                  fsdp_gathers(scenario, workload, shape, stage), resident)
