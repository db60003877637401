"""Op-level selective activation checkpointing (torchtitan's default, activation_checkpoint.mode = "selective" with
selective_ac_option = "op"): what one checkpointed block keeps, from the policy's own rules.

torchtitan 0.3.0, torchtitan/distributed/activation_checkpoint.py (SelectiveAC._wrap_block, _get_default_save_ops;
the same rule since pytorch/torchtitan's 2024 `_save_list`): each block runs under
torch.utils.checkpoint.create_selective_checkpoint_contexts with a policy that
- saves (MUST_SAVE) the outputs of torch's compute-intensive ops (torch._functorch.partitioners
  get_default_op_list: mm, addmm, bmm, _scaled_mm, the flash / memory-efficient attention ops) and of SDPA's other
  kernels, aten.max (float8 amax), topk, flex attention, and the reduce-scatter / all-to-all collectives;
- recomputes every second aten.mm (or aten.linear) of the block: a counter per block call, saved when odd;
- never saves the MoE router's matmul (force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]), uncounted;
- recomputes everything else: norms, rotary, activations, the gate product, torch._grouped_mm (the routed experts),
  the all-gathers.
A linear with a bias runs as aten.addmm (torch's linear on a 2-D view of a contiguous input), which is saved and
not counted; one without runs as aten.mm. Eager attention's two matmuls are bmm, saved (the s x s scores among
them); flash attention saves its output and fp32 logsumexp. The block's input is the checkpoint's input.
Backward re-runs the block's forward, so one block's other activations live again while its gradient is computed
(ActivationReport.recompute_working). Measured on CPU models: tests/test_op_checkpoint.py.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple

from ..model.architecture import Architecture
from ..tables import INDEX_BITS, STAT_BITS



class OpPolicy(NamedTuple):
    """A selective-checkpoint policy as data (torch.utils.checkpoint.create_selective_checkpoint_contexts: MUST_SAVE
    or PREFER_RECOMPUTE per op): which bias-free matmuls (aten.mm) it saves ("every-other": the 1st, 3rd, 5th...
    of a block call; "all"; "none"), whether it saves the biased ones (aten.addmm), the attention kernels' outputs
    and the collectives' outputs."""
    mm: str
    addmm: bool
    attention: bool
    collectives: bool
    about: str


OP_POLICIES = {
    "torchtitan": OpPolicy("every-other", True, True, True,
                           "torchtitan's SelectiveAC: compute-intensive ops saved, every second mm recomputed"),
    "matmuls": OpPolicy("all", True, True, True, "every compute-intensive op saved (torch's default op list)"),
    "attention": OpPolicy("none", False, True, False, "only the attention kernels saved; every matmul recomputed"),
}
# A user's own policy, written "save:" and the op kinds its policy function returns MUST_SAVE for (the others
# PREFER_RECOMPUTE): mm (every bias-free matmul) or mm/2 (every second one, torchtitan's counter), addmm (biased
# linears), attention (the SDPA / flash kernels, or eager attention's bmm), collectives (reduce-scatter and
# all-to-all outputs, aten.max and topk). "save:mm/2,addmm,attention,collectives" is torchtitan's; "save:" alone
# saves nothing but the block input.
USER_POLICY_PREFIX = "save:"
USER_POLICY_OPS = ("mm", "mm/2", "addmm", "attention", "collectives")
USER_POLICY_HINT = ("torchtitan, matmuls, attention, or a policy of your own: save: followed by a comma list of "
                    "mm (every matmul) or mm/2 (every second), addmm, attention, collectives")


def op_rule(policy: str) -> OpPolicy:
    """The rule a policy name or a user's "save:..." policy stands for; ValueError naming what is wrong."""
    if policy in OP_POLICIES:
        return OP_POLICIES[policy]
    if not isinstance(policy, str) or not policy.startswith(USER_POLICY_PREFIX) or len(policy) > 80:
        raise ValueError(USER_POLICY_HINT)
    ops = [op.strip() for op in policy[len(USER_POLICY_PREFIX):].split(",") if op.strip()]
    unknown = [op for op in ops if op not in USER_POLICY_OPS]
    if unknown or len(set(ops)) < len(ops) or {"mm", "mm/2"} <= set(ops):
        raise ValueError(f"{', '.join(unknown) or 'a repeated or contradictory op'} in {policy!r}: "
                         + USER_POLICY_HINT)
    mm = "all" if "mm" in ops else "every-other" if "mm/2" in ops else "none"
    return OpPolicy(mm, "addmm" in ops, "attention" in ops, "collectives" in ops,
                    "your policy: saves " + (", ".join(ops) or "nothing but the block input"))


class Linear(NamedTuple):
    name: str
    width: int            # output features on this rank
    fan_in: int           # input features on this rank
    bias: bool            # addmm: always saved, not counted
    row_parallel: bool    # its output is a partial sum over tp (o / down projections)


def block_linears(a: Architecture, kind: str) -> List[Linear]:
    """A block's matmuls in forward order (the order the policy's counter sees them), on one tensor-parallel rank
    (`a` is already the rank's split, activations.tp_local). The MoE router is left out (never saved, uncounted);
    routed experts run as grouped GEMMs (never saved)."""
    attn_bias = a.bias or a.attn_bias
    qkv_bias = attn_bias or a.qkv_bias
    out = []
    if a.mla:
        if a.q_lora_rank:
            out += [Linear("q down-projection", a.q_lora_rank, a.hidden, False, False),
                    Linear("q up-projection", a.heads * a.qk_head_dim, a.q_lora_rank, False, False)]
        else:
            out.append(Linear("q projection", a.heads * a.qk_head_dim, a.hidden, False, False))
        out += [Linear("kv down-projection", a.kv_lora_rank + a.qk_rope_dim, a.hidden, False, False),
                Linear("kv up-projection", a.heads * (a.qk_nope_dim + a.v_head_dim), a.kv_lora_rank, False,
                       False)]
    elif a.fused_qkv:
        out.append(Linear("qkv projection", a.q_size + 2 * a.kv_size, a.hidden, qkv_bias, False))
    else:
        out += [Linear(name, width, a.hidden, qkv_bias, False)
                for name, width in (("q projection", a.q_size), ("k projection", a.kv_size),
                                    ("v projection", a.kv_size))]
    v_width = a.heads * a.v_head_dim if a.mla else a.q_size
    out.append(Linear("attention out-projection", a.hidden, v_width, attn_bias, True))
    mlp_bias = a.bias or a.mlp_bias
    if kind == "moe":
        f = a.shared_expert_ffn
        prefix = "shared expert "
        if not f:
            return out
    else:
        f, prefix = a.ffn, "mlp "
    if a.fused_gate_up:
        out.append(Linear(prefix + "gate/up projection", 2 * f, a.hidden, mlp_bias, False))
    elif a.gated_mlp:
        out += [Linear(prefix + part, f, a.hidden, mlp_bias, False) for part in ("gate projection", "up projection")]
    else:
        out.append(Linear(prefix + "fc1", f, a.hidden, mlp_bias, False))
    out.append(Linear(prefix + "down projection", a.hidden, f, mlp_bias, True))
    return out


def saved_flags(linears: List[Linear], policy: str = "torchtitan") -> List[bool]:
    """Which of a block's matmuls the policy saves (torchtitan's: every addmm; of the mm ops the 1st, 3rd...)."""
    rule = op_rule(policy)
    flags, count = [], 0
    for lin in linears:
        if lin.bias:
            flags.append(rule.addmm)
            continue
        count += 1
        flags.append(rule.mm == "all" or rule.mm == "every-other" and count % 2 == 1)
    return flags


def recomputed_matmul_elements(a: Architecture, kind: str = "dense", policy: str = "torchtitan") -> int:
    """Weight elements (on this rank) of the matmuls a block re-runs in backward: 2 FLOPs each per token."""
    linears = block_linears(a, kind)
    return sum(lin.width * lin.fan_in for lin, saved in zip(linears, saved_flags(linears, policy)) if not saved)


def op_saved_terms(a: Architecture, t, w: int, attention: str, kind: str = "dense", routed_pairs: int = 0,
                   tp: int = 1, sequence_parallel: bool = False, ep: int = 1,
                   policy: str = "torchtitan") -> Dict[str, int]:
    """Bits one block keeps under an op-level policy (OP_POLICIES): its checkpoint input and the saved op outputs.
    `t`: activations.Tokens; `a`: the rank's tensor-parallel split; `routed_pairs`: (token, expert) pairs this
    rank's experts receive (all-to-all outputs saved under expert parallelism)."""
    terms = {"block input (checkpoint)": w * t.outside * a.hidden}
    rule = op_rule(policy)
    linears = block_linears(a, kind)
    for lin, saved in zip(linears, saved_flags(linears, policy)):
        if lin.name == "attention out-projection" and rule.attention:
            terms.update(_attention_saves(a, t, w, attention))
        if saved:
            terms[f"{lin.name} output"] = w * t.inside * lin.width
        if lin.row_parallel and tp > 1 and sequence_parallel and rule.collectives:
            terms[f"{lin.name} reduce-scatter"] = w * t.outside * a.hidden   # the collective's output is saved
    if kind == "moe" and rule.collectives:        # topk and the all-to-alls: in torchtitan's save list
        terms["router top-k (fp32 scores, int64 ids)"] = (STAT_BITS + INDEX_BITS) * t.outside * a.experts_per_token
        if ep > 1:
            terms["experts: all-to-all dispatch and combine"] = 2 * w * routed_pairs * a.hidden
    return terms


def _attention_saves(a: Architecture, t, w: int, attention: str) -> Dict[str, int]:
    v_width = a.heads * a.v_head_dim if a.mla else a.q_size
    if attention == "flash":
        return {"attention output (flash)": w * t.inside * v_width,
                "attention logsumexp": STAT_BITS * t.b * a.heads * t.s}
    return {"attention scores (QK^T, bmm)": w * t.b * a.heads * t.s * t.s,
            "attention output (bmm)": w * t.inside * v_width}
