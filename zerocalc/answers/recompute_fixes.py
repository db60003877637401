"""Megatron's recompute as changes a user could make (answers/fixes.py offers them): more of its selective modules,
cheapest recompute first, and its block method with the fewest blocks per chunk that fit; each fix says the forward
FLOPs it re-runs as a share of the step (parallel/costs.py recompute_flops, priced per module's matmuls).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Optional, Tuple

from ..layout import chunk_layers, stage_sizes
from ..parallel.costs import forward_flops
from ..parallel.ranks import layout_report
from ..scenario import FieldError
from ..step.megatron_recompute import check_modules, modules_text, parse_modules

# Cheapest first: elementwise work (the activation, the norms), then matmuls of growing size.
MODULE_COST_ORDER = ("moe_act", "layernorm", "mla_up_proj", "shared_experts", "mlp", "moe")


def _applies(module: str, arch) -> bool:
    if module in ("moe", "moe_act"):
        return bool(arch.experts)
    if module == "shared_experts":
        return bool(arch.experts and arch.shared_expert_ffn)
    if module == "mlp":
        return any(not arch.is_moe_layer(i) for i in range(arch.layers))
    return not check_modules(module, arch)


def module_changes(workload) -> Iterator[dict]:
    """Workload changes adding Megatron's modules one more at a time, in MODULE_COST_ORDER, to the selective
    recompute (or to none: core_attn joins under eager attention only, where it saves anything)."""
    if workload.recompute not in ("none", "selective") or workload.compile or workload.finetune.mode != "full":
        return
    have = parse_modules(workload.recompute_modules) if workload.recompute == "selective" else \
        (("core_attn",) if workload.attention == "eager" else ())
    added = [m for m in MODULE_COST_ORDER if m not in have and _applies(m, workload.arch)]
    for k in range(1, len(added) + 1):
        yield {"recompute": "selective", "recompute_modules": modules_text(",".join(have + tuple(added[:k])))}


def _longest_chunk(workload) -> int:
    lay, layers = workload.layout, workload.arch.layers
    if lay.stage_layers is not None or lay.stage_split != "even":
        return max(stage_sizes(lay, layers))
    return max(c for r in chunk_layers(layers, lay.pp, lay.vpp) for c in r)


def fewest_block_layers(scenario, workload, stage: int, peak) -> Optional[Tuple[dict, int]]:
    """(change, peak) of Megatron's block method with the fewest checkpointed blocks per chunk that fit (fewer
    than every block: that is full recompute, offered apart), or None. The peak falls as N grows: each more block
    checkpointed keeps its input only, and backward rebuilds one block whatever N is."""
    if workload.recompute == "full" and (workload.recompute_every > 1 or workload.recompute_method == "uniform"
                                         and workload.recompute_num_layers > 1):
        return None
    if workload.finetune.mode != "full" or workload.activation_offload:
        return None
    top = _longest_chunk(workload) - 1
    start = workload.recompute_num_layers if workload.recompute_method == "block" else 0

    def change(n):
        return {"recompute": "full", "recompute_method": "block", "recompute_num_layers": n, "recompute_every": 1,
                "op_policy": "torchtitan", "recompute_modules": "core_attn"}

    def fits(n):
        try:
            p = peak(scenario, replace(workload, **change(n)), stage)
        except FieldError:
            return None
        return p if p is not None and p <= workload.capacity_bytes else None

    if top <= start or fits(top) is None:
        return None
    lo, hi = start, top                    # fits(hi); not fits(lo) (lo = start: the plan as it is)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid) is None:
            lo = mid
        else:
            hi = mid
    return {k: v for k, v in change(hi).items() if getattr(workload, k) != v}, fits(hi)


def compute_share(scenario, workload) -> float:
    """The forward FLOPs recompute re-runs, as a share of a step (about three forwards), on the worst rank."""
    report = layout_report(scenario, workload)
    return max((v.recompute_flops / (3 * forward_flops(workload, v.rank)) if forward_flops(workload, v.rank) else 0)
               for v in report.ranks)


def change_text(kind: str, w: dict) -> str:
    if kind == "recompute_modules":
        return "Megatron's selective recompute of " + w["recompute_modules"].replace(",", ", ")
    n = w["recompute_num_layers"]
    return f"full recompute of the first {n} block{'s' if n > 1 else ''} of each chunk (Megatron's block method)"


