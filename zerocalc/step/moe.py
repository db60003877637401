"""What a mixture-of-experts block saves for backward, per rank and micro-batch (bits until the end).

Derived from transformers 5.x's experts path (integrations/moe.py, grouped_mm: sort the (token, expert) pairs,
gather the hidden states, grouped matmuls over fused 3-D weights, combine with the routing weights) and measured
on tiny Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and -V3 models (tests/measure/moe_activations.py,
tests/test_moe_validation.py). With T tokens on the rank, k experts per token and S = T k (x the load factor)
routed pairs:
- router: the block input (once: the router's and the shared expert's input are one tensor), an fp32 copy when
  the router runs in fp32 (DeepSeek), the fp32 softmax or sigmoid scores [T, E], the top-k indices (int64) and,
  when top-k weights are renormalised, the top-k values and their sum (fp32);
- experts: the dispatched tokens [S, h], the gate/up output [S, 2f], the activation and its product [S, f] each,
  the down output [S, h] (the combine multiplies it by the weights), the routing weights [S] (fp32 for Mixtral
  and DeepSeek, cast to the activation dtype by Qwen), three int64 index vectors [S] (pair order, its inverse,
  token of each pair) and the int32 group offsets [E];
- shared experts: a dense MLP of their width (its input is the block input above); Qwen2-MoE's sigmoid gate saves
  the shared output and the gate value.
Under expert parallelism each rank runs E / ep experts (FFN / etp wide) on the pairs routed to them: S with
balanced routing, S x the load factor with a worst-case imbalance (capped by a capacity factor).
"""

from __future__ import annotations

from typing import Callable, Dict, NamedTuple

from ..model.architecture import ACTIVATION_SAVES
from ..tables import INDEX_BITS, STAT_BITS

OFFSET_BITS = 32


class Routing(NamedTuple):
    ep: int = 1
    etp: int = 1
    load_percent: int = 100   # pairs a rank's experts receive, % of the balanced share (imbalance, capped)


def routed_pairs(tokens: int, experts_per_token: int, routing: Routing) -> int:
    if routing.load_percent == 100:                 # balanced: the same number, and a cleaner formula on the page
        return tokens * experts_per_token
    return -(-tokens * experts_per_token * routing.load_percent // 100)


def moe_terms(a, t, w: int, impl: str, routing: Routing, mlp_terms: Callable) -> Dict[str, int]:
    """Bits of one MoE block's MLP part (router, routed experts, shared experts) on one rank."""
    routing = routing or Routing()
    h, E, k = a.hidden, a.experts, a.experts_per_token
    T = t.outside                                   # the tokens this rank routes (its sequence share under SP)
    S = routed_pairs(T, k, routing)
    f = a.moe_ffn // routing.etp
    terms: Dict[str, int] = {}
    if not a.router_fp32 or a.shared_expert_ffn:
        terms["moe input"] = w * t.linear_in * h
    if a.router_fp32:
        terms["router input (fp32 copy)"] = STAT_BITS * T * h
    if a.router == "topk-softmax":
        terms["router top-k softmax"] = w * T * k           # gpt-oss: softmax in the logits' dtype
    else:
        terms["router scores (fp32)"] = STAT_BITS * T * E
    terms["router top-k indices"] = INDEX_BITS * T * k
    if a.norm_topk and a.router != "topk-softmax":
        terms["router top-k renormalisation (fp32)"] = STAT_BITS * T * k + STAT_BITS * T
    up = 2 * f if a.gated_mlp else f
    terms["experts: dispatched tokens"] = w * S * h
    terms["experts: gate/up output"] = w * S * up
    saves = ACTIVATION_SAVES[a.activation] + (1 if a.gated_mlp else 0)      # the activation's, then the product
    terms["experts: activation and product"] = saves * w * S * f
    terms["experts: down output"] = w * S * h
    terms["experts: routing weights"] = (STAT_BITS if a.route_weights_fp32 else w) * S
    # pair order, its inverse, token of each pair; with expert biases also the expert of each pair (bias gather)
    terms["experts: dispatch indices"] = (4 if a.expert_bias else 3) * INDEX_BITS * S
    terms["experts: group offsets"] = OFFSET_BITS * (E // routing.ep)
    if a.shared_expert_ffn:
        terms.update(mlp_terms(a, t, w, impl, f=a.shared_expert_ffn, prefix="shared expert", with_input=False))
        if a.shared_expert_gate:
            terms["shared expert gate"] = w * T * h + w * T
    return terms
