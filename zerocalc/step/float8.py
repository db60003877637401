"""float8 training with torchao's Float8Linear (torchao 0.18.0 torchao/float8/), per recipe, as data.

Measured on the CPU with Float8LinearConfig(emulate=True) (the harness kept for the next round: it reruns each
number below; emulation changes no saved tensor, only the matmul itself):
- saved for backward: the same as a plain linear, for every recipe: the high-precision input and a view of the
  weight (float8_linear.py matmul_with_hp_or_float8_args.forward: ctx.save_for_backward(input_hp, weight_hp_t),
  before any cast). No float8 tensor and no scale is saved, so the activations do not change;
- transients, eager: one dynamic cast of n elements with k scale elements peaks at 9n + 4k bytes above what was
  live (the fp32 scaled copy, its clamp and the float8 result, and the fp32 scale), and its float8 data and scale
  (n + 4k) stay until the autograd function returns. Forward casts the input, then the weight; backward casts
  grad_output, the weight, grad_output again and the input (rowwise_with_gw_hp: grad_output and the weight only;
  its weight gradient is a plain high-precision matmul). Measured = formula, byte for byte, at 3 sizes x 2 dtypes
  x 3 recipes;
- scales: tensorwise one per tensor; rowwise one per row of the cast's axis (input and grad_output: T; weight: out
  in forward, in for grad_input; rowwise_with_gw_hp's weight for grad_input: one);
- no persistent buffer (delayed scaling is gone: config.py ScalingType has DYNAMIC and DISABLED only);
- FSDP2's float8 all-gather (enable_fsdp_float8_all_gather, tensorwise only; fsdp_utils.py
  WeightWithDynamicFloat8CastTensor): each linear weight is cast on its shard and gathered at 1 byte per element
  plus a 4-byte scale (run on gloo over uint8 views: half the bf16 gather).
Under torch.compile the casts fuse into the kernels that write the float8 data (from the code, not measured): the
transient is the float8 copies alone. Not covered: the real _scaled_mm's layout copies and rowwise's fp32 output
buffer with fast accumulation off (float8_ops.py), Transformer Engine's FP8 (weight and transpose caches, amax
history), MXFP8.
"""

from __future__ import annotations

from typing import Dict, NamedTuple

from .op_checkpoint import block_linears

FLOAT8_RECIPES = ("none", "tensorwise", "rowwise", "rowwise_with_gw_hp")


class Casts(NamedTuple):
    """Scale elements of each cast, as (rows of T, in, out, one) multipliers: forward input, forward weight,
    backward grad_output (for grad_input), weight (for grad_input), grad_output (for grad_weight), input (for
    grad_weight); None: the cast does not run (a high-precision matmul)."""
    fwd_input: str
    fwd_weight: str
    bwd_grad_out: str
    bwd_weight: str
    bwd_grad_out_w: object
    bwd_input: object


RECIPE_CASTS = {   # config.py Float8LinearConfig.from_recipe_name; float8_scaling_utils get_maybe_axiswise_dim
    "tensorwise": Casts("one", "one", "one", "one", "one", "one"),
    "rowwise": Casts("T", "out", "T", "in", "out", "in"),
    "rowwise_with_gw_hp": Casts("T", "out", "T", "one", None, None),
}


def _cast(n: int, k: int) -> int:
    return 9 * n + 4 * k            # fp32 scaled copy + clamp + float8 result + fp32 scale


def linear_transients(recipe: str, T: int, fan_in: int, out: int, compiled: bool) -> Dict[str, int]:
    """Bytes above what was live during one Float8Linear's forward and backward (the casts; the output and the
    gradients it returns are counted elsewhere)."""
    c = RECIPE_CASTS[recipe]
    size = {"one": 1, "T": T, "in": fan_in, "out": out}
    nx, nw, ng = T * fan_in, fan_in * out, T * out
    if compiled:                    # the fused casts write the float8 data directly
        backward = ng + nw + (ng + nx if c.bwd_input else 0)
        return {"forward": nx + nw, "backward": backward}
    kx, kw = size[c.fwd_input], size[c.fwd_weight]
    forward = max(_cast(nx, kx), nx + 4 * kx + _cast(nw, kw))
    k1, k2 = size[c.bwd_grad_out], size[c.bwd_weight]
    a = ng + 4 * k1
    b = a + nw + 4 * k2
    steps = [_cast(ng, k1), a + _cast(nw, k2)]
    if c.bwd_input is not None:
        k3, k4 = size[c.bwd_grad_out_w], size[c.bwd_input]
        steps += [b + _cast(ng, k3), b + ng + 4 * k3 + _cast(nx, k4)]
    return {"forward": forward, "backward": max(steps)}


def cast_transients(workload, local_arch, tokens: int) -> Dict[str, int]:
    """The largest float8 cast working set among a block's linears on one rank (`local_arch`: its tensor-parallel
    split; the output head is not converted: torchtitan's float8 converter filters "output")."""
    if workload.float8 == "none":
        return {"forward": 0, "backward": 0}
    kinds = ("dense", "moe") if local_arch.experts else ("dense",)
    out = {"forward": 0, "backward": 0}
    for kind in kinds:
        for lin in block_linears(local_arch, kind):
            t = linear_transients(workload.float8, tokens, lin.fan_in, lin.width, workload.compile)
            out = {p: max(out[p], t[p]) for p in out}
    return out
