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
"""

from __future__ import annotations

from typing import List, Tuple

from ..states.optimizers import holds
from ..tables import DTYPE_BITS, PARTITIONED, SHAPED_OPTIMIZERS, bytes_of


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


def optimizer_step_items(scenario, stage: int, shape) -> List[Tuple[str, int]]:
    """The optimizer-step phase's working set of a shaped optimizer at one ZeRO stage of one rank (named parts)."""
    if scenario.offload_optimizer != "none" and stage >= 1:
        return []                 # the step runs on the host (ZeRO-Offload)
    if scenario.optimizer == "muon":
        return muon_items(scenario, stage, shape)
    if scenario.optimizer.startswith("paged-"):
        return paged_items(scenario, stage, shape)
    return []
