"""When the gradient set lives: across the whole step, or only from the backward that produces it.

- step: a persistent gradient buffer holds every gradient from the step's start. Megatron-Core's DDP keeps its
  contiguous grad buffer for the run (param_and_grad_buffer.py) and zeroes it in place; DeepSpeed keeps its
  gradient partitions and buckets; and with gradient accumulation (more than one micro-batch per step, or a
  pipeline schedule) the first micro-batch's gradients are alive before every later backward starts.
- backward: torch's own loops free the gradients after each step: `Optimizer.zero_grad()` and `Module.zero_grad()`
  default to set_to_none=True since torch 2.0 (torch/optim/optimizer.py), and autograd's AccumulateGrad allocates
  each `.grad` when backward reaches its parameter. FSDP2 likewise assigns each sharded gradient from its unit's
  reduce-scatter output as backward passes the unit (torch 2.13 _fully_shard/_fsdp_collectives.py foreach_reduce).
  So at backward's start, when every activation is still saved, no gradient exists yet, and at its end every
  gradient exists while the activations are gone: the backward phase is the larger of the two ends. (Between
  them gradients grow and activations shrink block by block, so neither end is passed.) torchtune's recipes,
  torchtitan and the Hugging Face Trainer without DeepSpeed run this way.
auto: backward where the step's buffers are torch's own (step/buffers.py framework fsdp or none), Hugging Face's
or torchtitan's loop runs it (implementation huggingface), and one micro-batch makes the step without a pipeline
schedule; step otherwise.
Measured on the CPU against torch 2.13 (tests/test_grad_lifetime.py): after zero_grad() every .grad is None, and a
gradient hook sees each parameter's gradient appear during backward, the last block's first.
"""

from __future__ import annotations

GRAD_LIFETIMES = ("auto", "step", "backward")

COUNTS = {
    "step": "the whole step: a persistent gradient buffer (Megatron's grad buffer, DeepSpeed's partitions) or "
            "gradient accumulation keeps every gradient alive before backward starts",
    "backward": "from backward on: zero_grad(set_to_none=True) frees them after each step, so backward's start "
                "holds no gradient and its end every gradient (the larger end is the phase)",
}


def lifetime(workload, framework_row: str) -> str:
    """The lifetime that applies: Workload.grad_lifetime, or for auto the framework's (module docstring)."""
    chosen = workload.grad_lifetime
    if chosen != "auto":
        return chosen
    torch_loop = framework_row in ("fsdp", "none") and workload.implementation == "huggingface"
    one_micro_batch = workload.layout.micro_batches == 1 and workload.layout.pp == 1
    return "backward" if torch_loop and one_micro_batch else "step"


def describe(workload, framework_row: str) -> dict:
    """Which lifetime applied and why: {"chosen", "counted", "why"} (the report and the page say it)."""
    counted = lifetime(workload, framework_row)
    why = COUNTS[counted]
    if workload.grad_lifetime == "auto":
        layout = workload.layout
        if counted == "backward":
            reason = "torch's own loop, one micro-batch per step"
        elif framework_row not in ("fsdp", "none") or workload.implementation != "huggingface":
            reason = f"{'Megatron' if workload.implementation == 'megatron' else framework_row}'s gradient buffers"
        else:
            reason = (f"{layout.micro_batches} micro-batches per step" if layout.micro_batches > 1 else
                      "a pipeline schedule") + ": gradients accumulate"
        why += f" (auto: {reason})"
    return {"chosen": workload.grad_lifetime, "counted": counted, "why": why}


def first_block_bytes(shape) -> int:
    """What the first block a gradient reaches still saves while backward runs it, the step's last: one block's
    activations (under full recompute, its checkpoint input; the rebuilt block is counted apart)."""
    act = shape.act
    one = max(act.per_layer_total if act.layers else 0, act.per_moe_layer_total if act.moe_layers else 0)
    return min(shape.activation_bytes, one)
