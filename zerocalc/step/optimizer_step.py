"""What the optimizer step itself holds beyond the ledger for shaped optimizers (tables.SHAPED_OPTIMIZERS): a named
term of the optimizer-step phase (step/peak.py), worked out on the rank's largest matrix.

- Muon orthogonalises each matrix whole, one at a time (torch 2.13 torch/optim/_muon.py _single_tensor_muon and
  _zeropower_via_newtonschulz). For the largest of its matrices it holds the update matrix m x n in the state's
  dtype, and the Newton-Schulz iteration 2 m n + 2 r^2 elements in ns_dtype, r = min(m, n): the iterate and the
  next one, the Gram matrix X X^T and its polynomial (measured to the byte with a dispatch-mode allocation trace:
  tests/measure/optimizer_states.py muon_step_peak). The update is Nesterov's grad.lerp(buf) on one rank; where
  the state is sharded over data parallelism (ZeRO-1/2/3, FSDP) or the matrix is split over tensor parallelism
  and Muon orthogonalises it whole (Scenario.muon_tp = "full"), it is the full matrix gathered from the shards
  (Moonlight's distributed Muon, arXiv 2502.16982 section 2.3: DP-gather then compute the full update; Dion's
  reference implementation likewise assigns each whole matrix to one rank). 3-D fused experts are orthogonalised
  one expert matrix at a time.
- Paged bitsandbytes optimizers keep states of 1e5 elements or more in unified memory (the ledger puts them on the
  host); the step pages in one tensor's states at a time (bitsandbytes optimizer.py prefetch_state before each
  update): the largest tensor's paged states are on the GPU at the step.
- Adam / AdamW allocate temporaries beside their state (tables.ADAM_STEP, traced op by op on the CPU:
  tests/measure/optimizer_step.py): none fused, a copy of the second moments with foreach, two copies of one
  tensor's second moment (and the previous tensor's) in the for-loop. DeepSpeed hands the optimizer one flat
  partition per parameter group (stage_1_and_2.py `param_group['params'] = [single_partition_of_fp32_groups[i]]`;
  ZeRO-3 one sub-group of it at a time): there the loop's tensor is the partition. Which implementation runs is
  Scenario.optimizer_impl, "auto" by the framework (resolve_impl).
"""

from __future__ import annotations

from functools import lru_cache
from typing import List, Tuple

from ..states.groups import group_ledger
from ..states.ledger import build_ledger
from ..states.optimizers import holds
from ..tables import ADAM_STEP, DEEPSPEED_SUB_GROUP, DTYPE_BITS, PARTITIONED, SHAPED_OPTIMIZERS, bytes_of

# Why "auto" resolves as it does (resolve_impl), for the report.
_AUTO_WHY = {
    "fused": "Megatron-LM steps with Transformer Engine's or apex's FusedAdam (megatron/core/optimizer)",
    "foreach": "torch.optim.AdamW's default on CUDA when neither foreach nor fused is given (torch/optim/"
               "optimizer.py _default_to_fused_or_foreach), also as DeepSpeed's client optimizer when its config "
               "has no optimizer section. Fused runs hold none: Hugging Face's Trainer on torch >= 2.8 (optim "
               "adamw_torch_fused, transformers 5.24), torchtitan (implementation fused), a DeepSpeed optimizer "
               "section (FusedAdam): set optimizer_impl fused",
}


def _matrix(h, tp: str) -> Tuple[int, ...]:
    """The matrix Muon orthogonalises for a holding: its shape on the rank, or whole over tensor parallelism; one
    expert's matrix for a fused expert tensor."""
    shape = h.tensor.shape if tp == "full" else h.shape
    return tuple(shape[-2:])


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def muon_items(scenario, stage: int, shape) -> List[Tuple[str, int]]:
    trained = [(g, h) for g in shape.groups if not g.name.endswith("frozen") for h in g.holdings
               if holds("muon", h.tensor, h.shape)]
    if not trained:
        return []
    group, h = max(trained, key=lambda gh: (_numel(_matrix(gh[1], scenario.muon_tp)), gh[1].tensor.name))
    m, n = _matrix(h, scenario.muon_tp)
    r = min(m, n)
    sharded = "optimizer" in PARTITIONED[stage] and group.shard > 1
    split = _numel(_matrix(h, "local")) < m * n
    state_bits = DTYPE_BITS[scenario.optimizer_dtype]
    update = bytes_of(m * n, state_bits)
    where = "gathered" if sharded or split else "Nesterov update"
    name = f"Muon {where}: {h.tensor.name} {m:,} x {n:,} ({scenario.optimizer_dtype})"
    ns = bytes_of(2 * m * n + 2 * r * r, DTYPE_BITS[scenario.ns_dtype])
    return [(name, update),
            (f"Newton-Schulz 2 x {m:,} x {n:,} + 2 x {r:,}^2 ({scenario.ns_dtype})", ns)]


def paged_items(scenario, stage: int, shape) -> List[Tuple[str, int]]:
    """The largest tensor's paged states (its shard where the stage partitions optimizer state)."""
    paged = [(st, DTYPE_BITS[st.dtype]) for st in SHAPED_OPTIMIZERS[scenario.optimizer] if st.place == "unified"]
    best = 0
    for g in shape.groups:
        if g.name.endswith("frozen"):
            continue
        divisor = g.shard if "optimizer" in PARTITIONED[stage] else 1
        for h in g.holdings:
            best = max(best, sum(bytes_of(-(-_numel(h.shape) // divisor), bits) for st, bits in paged
                                 if holds(st.holders, h.tensor, h.shape)))
    return [("paged optimizer state (largest tensor, paged in)", best)] if best else []


def resolve_impl(scenario, comm: str) -> Tuple[str, str]:
    """The Adam / AdamW implementation the step assumes (a tables.ADAM_STEP row) and why; comm: the framework
    (step/buffers.py framework)."""
    if scenario.optimizer_impl != "auto":
        return scenario.optimizer_impl, "chosen (optimizer_impl)"
    impl = "fused" if comm == "megatron" else "foreach"
    return impl, "auto: " + _AUTO_WHY[impl]


def describe(scenario, comm: str) -> dict:
    """The implementation in words, for the report (None for an optimizer other than Adam / AdamW)."""
    if scenario.optimizer not in ("adam", "adamw"):
        return {"implementation": None, "why": f"{scenario.optimizer} steps with its own code"}
    impl, why = resolve_impl(scenario, comm)
    row = ADAM_STEP[impl]
    return {"implementation": impl, "why": f"{impl} ({row.does}; {row.source}); {why}"}


def _flat(scenario, stage: int, comm: str) -> bool:
    """Whether the optimizer sees DeepSpeed's flat partitions: its ZeRO optimizers, and at stage 0 its fp16 / bf16
    wrappers around a master copy (FP16_Optimizer, BF16_Optimizer keep one flat fp32 group each)."""
    return comm == "deepspeed" and (stage >= 1 or scenario.master_dtype is not None)


def adam_items(scenario, stage: int, shape, comm: str) -> List[Tuple[str, int]]:
    """Adam / AdamW's temporaries at the step (tables.ADAM_STEP applied to the rank's trainable tensors). A guess
    leans high: every trainable group counts as one step call (Hugging Face's Trainer splits off norms and biases,
    DeepSpeed MoE the experts), and the for-loop's previous tensor is the next largest one."""
    if scenario.optimizer not in ("adam", "adamw"):
        return []
    return list(_adam_items(scenario, stage, shape.groups, shape.largest_layer_params, comm))


@lru_cache(maxsize=1024)     # the same groups at every recompute setting a layout search tries
def _adam_items(scenario, stage: int, groups, largest_layer_params: int, comm: str) -> Tuple[Tuple[str, int], ...]:
    return tuple(_adam_parts(scenario, stage, groups, largest_layer_params, comm))


def _adam_parts(scenario, stage: int, groups, largest_layer_params: int, comm: str) -> List[Tuple[str, int]]:
    impl, _ = resolve_impl(scenario, comm)
    row = ADAM_STEP[impl]
    if not row.copies:
        return []
    ledger, split = build_ledger(scenario), "optimizer" in PARTITIONED[stage]
    moments, tensors = 0, []          # the rank's second moments (bytes); (bytes, count) of each tensor's
    for g in groups:
        if g.name.endswith("frozen"):
            continue
        bits = next(e.bits for e in group_ledger(scenario, ledger, g.name) if e.name.endswith("exp_avg_sq"))
        fsdp2 = split and scenario.convention == "fsdp2" and g.holdings
        n = sum(h.fsdp_shard(g.shard) for h in g.holdings) if fsdp2 else -(-g.params // g.shard) if split else g.params
        moments += bytes_of(n, bits)
        for h in g.holdings:
            one = h.fsdp_shard(g.shard) // h.instances if fsdp2 else -(-h.local_elements // g.shard) if split \
                else h.local_elements
            tensors.append((bytes_of(one, bits), h.instances))
    if not moments:
        return []
    flat = _flat(scenario, stage, comm)
    if flat and stage == 3:           # one sub-group of the fp32 partition per step call
        moments = min(moments, bytes_of(DEEPSPEED_SUB_GROUP, DTYPE_BITS[scenario.master_dtype or "fp32"]))
    if row.unit == "moments":
        where = "DeepSpeed's flat partition" if flat else "the second moments"
        return [(f"AdamW {impl}: a copy of {where}", moments)]
    if flat:
        return [(f"AdamW {impl}: denom of DeepSpeed's flat partition x {row.copies}", row.copies * moments)]
    if not tensors:                   # no architecture: the largest module stands in for the largest tensor
        largest = bytes_of(largest_layer_params, DTYPE_BITS[scenario.optimizer_dtype])
        tensors = [(largest, 2)]
    sizes = sorted(tensors, reverse=True)
    first = sizes[0][0]
    second = first if sizes[0][1] > 1 else (sizes[1][0] if len(sizes) > 1 else 0)
    return [(f"AdamW {impl}: denom of the largest tensor x {row.copies}", row.copies * first),
            ("AdamW for-loop: the previous tensor's denom", second)]


def optimizer_step_items(scenario, stage: int, shape, comm: str = "none") -> List[Tuple[str, int]]:
    """The optimizer-step phase's working set beyond the ledger at one ZeRO stage of one rank (named parts): a
    shaped optimizer's, or Adam / AdamW's temporaries."""
    if scenario.offload_optimizer != "none" and stage >= 1:
        return []                 # the step runs on the host (ZeRO-Offload)
    if scenario.optimizer in ("adam", "adamw"):
        return adam_items(scenario, stage, shape, comm)
    if scenario.optimizer == "muon":
        return muon_items(scenario, stage, shape)
    if scenario.optimizer.startswith("paged-"):
        return paged_items(scenario, stage, shape)
    return []
