"""Hugging Face's MoE load-balancing loss: a library term outside the layers (issue 37). With output_router_logits
on (False in every MoE family's config; a training script sets it to add router_aux_loss_coef x the loss), the
model keeps every MoE layer's router logits [T, E] in its output until the loss, and load_balancing_loss_func
(transformers models/qwen3_moe/modeling_qwen3_moe.py; Mixtral, Qwen2-MoE and the others carry copies) runs at the
loss over all of them.

- transformers >= 5.16 (huggingface/transformers PR #48131): one layer at a time; each layer's softmax [T, E] in
  the logits' dtype is saved for backward, the .float() copy [T, E] and top-k [T, k] are transient.
- before 5.16: the layers concatenated [L T, E], a softmax of that, top-k, then one_hot [L T, k, E] int64 and its
  .float(): 12 bytes per L x T x k x E. The PR's Qwen3-30B-A3B at 131K tokens per device: a 48 GiB one-hot.

Bytes (w the router logits' width: the compute dtype, fp32 for routers that run in fp32), L the MoE layers, T the
rank's tokens, E experts, k per token:
  kept logits: L T E w (the forward phase, at the loss; the Trainer drops the output before backward)
  forward, >= 5.16: L T E w (the saved softmaxes) + T E 4 + T k (w + 8)
  forward, < 5.16:  2 L T E w (concatenation, softmax) + L T k (w + 8) + 12 L T k E
  backward: L T E w (the saved softmaxes, until the loss's backward)
Measured on the CPU with transformers 5.24.0 and the 5.15.1 function from its wheel (tests/measure/router_loss.py,
tests/test_moe_imbalance.py): L=4, T=512, E=16, k=4, bf16: forward 118,976 bytes (formula 118,784), 5.15.1
1,786,112 (1,785,856), kept logits and saved softmaxes 65,536 each (65,536).

Megatron's aux losses (moe_utils.py switch_load_balancing_loss_func, z_loss_func) are computed in each layer's
router on that layer's [T, E] scores: no tensor outside the layers, so none is counted here (docs/batches.md).
"""

from __future__ import annotations

from typing import Dict

from ..tables import STAT_BITS
from ..versions import applies

INDEX_BYTES = 8


def router_loss_bytes(workload, shape) -> Dict[str, int]:
    """{"forward": bytes, "backward": bytes} of the load-balancing loss on a rank that computes the loss."""
    a = workload.arch
    if not workload.router_loss or not shape.logits_elements or not a.moe_layers:
        return {"forward": 0, "backward": 0}
    L, E, k = a.moe_layers, a.experts, a.experts_per_token
    T = shape.logits_elements // workload.vocab_columns
    w = (STAT_BITS if a.router_fp32 else shape.act_bits) // 8
    kept = saved = L * T * E * w
    if applies(workload.finetune.versions, "router loss one-hot"):
        loss = 2 * L * T * E * w + L * T * k * (w + INDEX_BYTES) + 12 * L * T * k * E
    else:
        loss = saved + T * E * 4 + T * k * (w + INDEX_BYTES)
    return {"forward": kept + loss, "backward": saved}
