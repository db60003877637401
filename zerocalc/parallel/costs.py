"""What a layout costs besides memory, per rank per optimizer step: bytes it communicates, by kind, and the extra
forward FLOPs recomputation spends. Volumes follow the ZeRO paper's convention (section 7): an all-reduce moves
2x its tensor, an all-gather or reduce-scatter 1x, a point-to-point send 1x (a ring moves (n - 1) / n of that).

Per micro-batch and layer, with T the rank's tokens (b x s / cp), h the hidden size, w the activation width:
- tensor parallel (Korthikanti et al. 2022, section 4.2.2): two all-reduces of [T, h] in forward (after attention
  and after the MLP) and two in backward; with sequence parallel each becomes an all-gather plus a
  reduce-scatter, the same volume: 8 T h w per layer, plus 4 T h w for the forward again under full recompute;
  the vocab-parallel embedding all-reduces its output (2 T h w) and the head its input gradient (2 T h w); the
  vocab-parallel cross entropy all-reduces three fp32 values per token (max, target logit, sum), gathered logits
  cost an all-gather of [T, V] instead;
- pipeline: each chunk boundary sends its output forward and its input gradient backward, [T / tp with SP, h]
  in the activation dtype (Megatron get_tensor_shapes: seq / cp, / tp with sequence parallel, pipeline_dtype
  = params dtype); with tied embeddings the first and last stage all-reduce the embedding gradient every step
  (Megatron finalize_model_grads._allreduce_word_embedding_grads);
- context parallel (Transformer Engine AttnFuncWithCPAndKVP2P): cp - 1 exchanges of the local K and V in forward,
  cp - 1 of K, V and cp - 1 of dK, dV in backward (and the forward's again under full recompute);
- expert parallel: per MoE block per micro-batch, the all-to-all dispatch and combine of the routed pairs
  [S, h] forward and again backward (4 S h w; + 2 S h w under full recompute);
- data parallel: model_states.communication_bytes over the rank's own parameters among dp x cp ranks (experts
  among the expert-data-parallel group).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, Tuple

from ..states.zero import communication_bytes
from ..step.activations import tp_local
from ..step.moe import routed_pairs
from ..step.megatron_recompute import recomputed_elements
from ..step.op_checkpoint import recomputed_matmul_elements
from ..tables import DTYPE_BITS, bytes_of

KINDS = ("data parallel", "tensor parallel", "pipeline", "context parallel", "expert parallel")


def layout_communication(scenario, workload, rank, shape) -> Dict[str, int]:
    """Bytes one rank of this class sends per step for tensor, pipeline and context parallelism."""
    layout, a = workload.layout, workload.arch
    m, w, h = layout.micro_batches, shape.act_bits, a.hidden
    T = workload.micro_batch * (workload.seq_len // layout.cp)
    rebuilt = recomputed_blocks(workload, rank.layers, rank)
    out = {"tensor parallel": 0, "pipeline": 0, "context parallel": 0, "expert parallel": 0}
    if layout.tp > 1:
        per_micro = (rank.layers * 8 + rebuilt * 4) * T * h
        per_micro += (2 * T * h if rank.first else 0) + (2 * T * h if rank.last else 0)
        extra = 0
        if rank.last:
            extra = 3 * 2 * T * 4 if layout.loss_parallel else bytes_of(T * workload.vocab_rows, w)
        out["tensor parallel"] = m * (bytes_of(per_micro, w) + extra)
    if layout.pp > 1:
        r, pp, vpp = rank.pp_ranks[0], layout.pp, layout.vpp
        sends = 2 * vpp - (1 if r == pp - 1 else 0) - (1 if r == 0 else 0)
        boundary = T // layout.tp if layout.sequence_parallel and layout.tp > 1 else T
        tied = 0
        if a.tied_embeddings and (rank.first or rank.last):
            tied = 2 * bytes_of(-(-workload.vocab_rows // layout.tp) * h, DTYPE_BITS[scenario.grad_dtype])
        out["pipeline"] = m * sends * bytes_of(boundary * h, w) + tied
    if layout.ep > 1 and rank.moe_layers:
        routed = routed_pairs(T // layout.tp if layout.sequence_parallel else T, a.experts_per_token,
                              workload.routing)
        moe_rebuilt = recomputed_blocks(workload, rank.moe_layers, rank, moe=True)   # as of all blocks
        out["expert parallel"] = m * (4 * rank.moe_layers + 2 * moe_rebuilt) * bytes_of(routed * h, w)
    if layout.cp > 1:
        kv_local = a.kv_size // layout.tp
        out["context parallel"] = m * (layout.cp - 1) * (3 * rank.layers + rebuilt) * bytes_of(2 * T * kv_local, w)
    return out


def data_parallel_communication(scenario, workload, shape, stage: int) -> int:
    """ZeRO's traffic for each parameter group among the ranks that hold it (dp x cp for dense tensors, the
    expert-data-parallel group for experts)."""
    layout = workload.layout
    edp = layout.expert_data_parallel(scenario.workers)
    return sum(communication_bytes(scenario, stage, g.params,
                                   edp if g.name.startswith("experts") else scenario.workers * layout.cp,
                                   layout.micro_batches) for g in shape.groups)


def _attention_flops(workload) -> int:
    """QK^T and attention-times-V of one layer for one micro-batch on one rank (its heads, its queries against
    the whole sequence): 2 x 2 x b x (s / cp) x s x (q / tp)."""
    layout, a = workload.layout, workload.arch
    return 4 * workload.micro_batch * (workload.seq_len // layout.cp) * workload.seq_len * (a.q_size // layout.tp)


@lru_cache(maxsize=4096)     # a pure function of the holdings, met again in every report of a layout
def _matrix_elements(holdings: tuple) -> Tuple[int, int, int]:
    """Local elements of one block's weight matrices (2-D layer tensors), of the output head, and of every
    multi-token-prediction module's matrices (their instances)."""
    block = sum(h.local_elements for h in holdings if h.tensor.place == "layer" and len(h.tensor.shape) == 2)
    head = sum(h.local_elements for h in holdings if h.tensor.role == "head")
    mtp = sum(h.local_elements * h.instances for h in holdings if h.tensor.place == "mtp" and len(h.tensor.shape) == 2)
    return block, head, mtp


def forward_flops(workload, rank) -> int:
    """Forward FLOPs per step on one rank: 2 per multiply-add of each local weight matrix per token, plus the
    attention matmuls, over its layers and the micro-batches of a step (Megatron-LM's model-FLOPs terms)."""
    layout = workload.layout
    tokens = workload.micro_batch * (workload.seq_len // layout.cp)
    block, head, mtp = _matrix_elements(rank.holdings)
    heads = 1 + (workload.arch.mtp_layers if rank.last else 0)         # each MTP module runs the head again
    mtp_attention = workload.arch.mtp_layers * _attention_flops(workload) if mtp else 0
    return layout.micro_batches * (rank.layers * (2 * tokens * block + _attention_flops(workload))
                                   + 2 * tokens * heads * head + 2 * tokens * mtp + mtp_attention)


def recomputed_blocks(workload, layers: int, rank=None, moe: bool = False) -> int:
    """Blocks (of `layers`; with moe, MoE blocks) whose forward runs again in backward under full recompute: all,
    one in N (the N-th, 2N-th... of the rank's blocks, torchtitan's layer SAC), or Megatron's block method's first
    N of each of the rank's chunks (megatron_recompute.py; uniform groups rebuild every block)."""
    if workload.recompute != "full":
        return 0
    if workload.recompute_method == "block" and rank is not None:
        n, a = workload.recompute_num_layers, workload.arch
        return sum(1 for span in rank.spans for i in list(span)[:n] if not moe or a.is_moe_layer(i))
    return layers // workload.recompute_every


def recompute_flops(workload, rank) -> int:
    """Extra forward FLOPs per step on one rank of this class: full recompute re-runs each block's forward; the
    selective recompute of eager attention re-runs only QK^T, softmax and attention-times-V (Korthikanti et al.
    section 5). Flash attention recomputes its scores in its own backward in every case."""
    if workload.recompute == "none":
        return 0
    layout = workload.layout
    if workload.recompute == "selective":
        mods = workload.recompute_modules.split(",")
        per_layer = _attention_flops(workload) if workload.attention == "eager" and "core_attn" in mods else 0
        # Megatron's other modules re-run their matmuls (megatron_recompute.recomputed_elements)
        local = tp_local(workload.arch, layout.tp)
        dense, moe = rank.layers - rank.moe_layers, rank.moe_layers
        per_token = dense * recomputed_elements(local, "dense", workload.recompute_modules) + \
            moe * recomputed_elements(local, "moe", workload.recompute_modules)
        tokens = workload.micro_batch * (workload.seq_len // layout.cp)
        return layout.micro_batches * (rank.layers * per_layer + 2 * tokens * per_token)
    if workload.recompute == "op":       # the matmuls the op-level policy did not save (op_checkpoint.py); its
        # recomputed attention (a policy that does not save it) is flash's own forward again, left out here
        local = tp_local(workload.arch, layout.tp)
        dense, moe = rank.layers - rank.moe_layers, rank.moe_layers
        policy = workload.op_policy
        per_micro = dense * recomputed_matmul_elements(local, "dense", policy) + \
            moe * recomputed_matmul_elements(local, "moe", policy)
        return layout.micro_batches * 2 * workload.micro_batch * (workload.seq_len // layout.cp) * per_micro
    tokens = workload.micro_batch * (workload.seq_len // layout.cp)
    block = _matrix_elements(rank.holdings)[0]
    return layout.micro_batches * recomputed_blocks(workload, rank.layers, rank) * (2 * tokens * block
                                                                             + _attention_flops(workload))


def bubble_fraction(layout) -> float:
    """Idle share of a pipeline step relative to its compute: (pp - 1) / (vpp x m) for 1F1B, interleaved and
    GPipe alike (Narayanan et al. 2021, section 2.2: the bubble is (p - 1) / m of the ideal time, divided by v
    with v model chunks per device)."""
    return (layout.pp - 1) / (layout.vpp * layout.micro_batches)


def time_overhead(workload, rank, flops_extra: int) -> float:
    """Extra step time as a share of the ideal step, from recomputation (a step is about three forwards: one
    forward, a backward of twice its FLOPs) and the pipeline bubble. Communication and offload are ranked
    separately: their cost depends on links this model does not know."""
    base = forward_flops(workload, rank)
    return (flops_extra / (3 * base) if base else 0.0) + bubble_fraction(workload.layout)
