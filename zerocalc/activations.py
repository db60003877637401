"""Activation bytes saved for backward, per layer and for the embedding and output ends.

Start: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.1:
per layer sbh(34 + 5as/h) bytes with 16-bit activations and 1-byte dropout masks (Megatron's fused kernels):
attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh. We keep their terms and generalise each one:
any activation width w, grouped-query K/V, any FFN width, gated MLPs, dropout on or off, flash attention, and a
second implementation, "huggingface", whose modules save more (derived below and checked against real
transformers models in tests/test_activation_validation.py):
- RMSNorm (LlamaRMSNorm) upcasts its input to fp32, saves it, the fp32 rsqrt, and the normalised copy cast back;
- rotary embeddings produce new q and k tensors; the cos/sin tables (batch 1) are saved once per model;
- eager Llama attention runs softmax in fp32 and saves that and the copy cast back; GPT-2 keeps softmax in w;
- eager attention with fewer KV heads saves K and V repeated to every query head (repeat_kv copies);
- MLP activations save what their autograd formulas need (gelu_new: 4 tensors of the FFN width; see
  architecture.ACTIVATION_SAVES);
- the loss upcasts logits to fp32 and log_softmax saves its fp32 output.
Flash / memory-efficient attention (CUDA) saves q, k, v as passed, the output and an fp32 logsumexp (b x a x s)
(PyTorch derivatives.yaml, _scaled_dot_product_flash_attention): no s^2 term.
Dropout masks are 1 byte per element, as CUDA's fused dropout saves them.

All sizes are in bits until the end, so fp8 or 4-bit widths stay exact.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict, NamedTuple

from .architecture import ACTIVATION_SAVES, Architecture

ATTENTION = ("eager", "flash")
RECOMPUTE = ("none", "selective", "full")
IMPLEMENTATIONS = ("huggingface", "megatron")
MASK_BITS = 8          # CUDA dropout masks are bool
STAT_BITS = 32         # norm statistics, logsumexp and the loss's log-softmax are fp32
INDEX_BITS = 64        # token ids and labels are int64

class ActivationReport(NamedTuple):
    per_layer: Dict[str, int]     # term -> bytes for one transformer block
    embed: Dict[str, int]         # before the first block
    head: Dict[str, int]          # final norm, output projection, loss
    layers: int
    recompute_working: int        # one block's full activations, rebuilt during backward under full recompute
    stage: Dict[str, int] = {}    # what every pipeline stage (model chunk) saves once: its rotary tables

    @property
    def per_layer_total(self) -> int:
        return sum(self.per_layer.values())

    @property
    def total(self) -> int:
        return (self.layers * self.per_layer_total + sum(self.embed.values()) + sum(self.stage.values())
                + sum(self.head.values()))


def _norm(a: Architecture, T: int, w: int, impl: str) -> int:
    if a.norm == "layernorm":
        return w * T * a.hidden + 2 * STAT_BITS * T                   # input + mean and rstd
    if impl == "huggingface":
        return (STAT_BITS + w) * T * a.hidden + STAT_BITS * T         # fp32 input copy + normalised copy + rsqrt
    return w * T * a.hidden + STAT_BITS * T                           # fused RMSNorm: input + rstd


class Tokens(NamedTuple):
    """One rank's share of a micro-batch, in tokens, for each kind of term (Korthikanti et al. section 4.2):
    inside the tensor-parallel region (heads and FFN split over tp), outside it (the full hidden size: norms,
    residual dropout, the block input; split over tp only with sequence parallel), and the saved input of a
    column-parallel linear (q/k/v, gate/up, head): Megatron's sequence-parallel linear saves its local shard and
    all-gathers again in backward (LinearWithGradAccumulationAndAsyncCommunication), while a DTensor plan saves
    the all-gathered input its matmul ran on (torch.distributed.tensor.parallel: the redistribute to Replicate is
    its own autograd op). Context parallelism gives each rank s / cp of the sequence."""
    b: int
    s: int              # this rank's sequence length (s / cp)
    inside: int
    outside: int
    linear_in: int


def tokens(micro_batch: int, seq_len: int, tp: int = 1, cp: int = 1, sequence_parallel: bool = False,
           implementation: str = "huggingface") -> Tokens:
    s = seq_len // cp
    inside = micro_batch * s
    outside = inside // tp if sequence_parallel and tp > 1 else inside
    linear_in = outside if implementation == "megatron" else inside
    return Tokens(micro_batch, s, inside, outside, linear_in)


def _mlp(a: Architecture, t: Tokens, w: int, impl: str) -> Dict[str, int]:
    f, T = a.ffn, t.inside
    terms = {"mlp input": w * t.linear_in * a.hidden}
    if impl == "megatron":
        terms["mlp fc1 output"] = w * T * f * (2 if a.gated_mlp else 1)   # GeLU / SwiGLU input (Korthikanti: 8sbh)
    else:
        terms["mlp activation"] = ACTIVATION_SAVES[a.activation] * w * T * f
        if a.gated_mlp:
            terms["mlp gate product"] = 2 * w * T * f                       # act(gate) and up, saved by the product
    terms["mlp fc2 input"] = w * T * f                                      # Korthikanti: 8sbh
    return terms


def _qkv(a: Architecture, T: int, w: int, attention: str, hf: bool) -> int:
    """Bits of Q, K and V saved by the attention (views of one storage count once)."""
    q, kv = a.q_size, a.kv_size
    if not hf:
        return w * T * (q + 2 * kv)
    repeated = attention == "eager" and a.n_kv_heads < a.heads     # repeat_kv copies to every query head
    fused = q + 2 * kv
    if a.positions == "rotary":                                    # new q and k tensors after the rotation
        v = q if repeated else (fused if a.fused_qkv else kv)      # v stays a view of the projection output
        return w * T * (q + (q if repeated else kv) + v)
    if a.fused_qkv:
        return w * T * (fused + (2 * q if repeated else 0))
    return w * T * (q + (2 * q if repeated else 2 * kv))


def _attention(a: Architecture, t: Tokens, w: int, attention: str, impl: str, recompute: str) -> Dict[str, int]:
    hf = impl == "huggingface"
    b, s = t.b, t.s
    terms = {"attention input": w * t.linear_in * a.hidden, "q, k, v": _qkv(a, t.inside, w, attention, hf)}
    if attention == "flash":
        terms["attention logsumexp"] = STAT_BITS * b * a.heads * s
    elif recompute != "selective":                                 # selective recompute drops the s^2 terms
        scores = a.heads * s * s * b
        dropout = a.attn_dropout > 0
        if hf and a.softmax_fp32:
            # fp32 output saved by softmax; its copy cast back to w is saved by attn @ V only without dropout
            # (with dropout, attn @ V saves the dropped probabilities instead).
            terms["attention softmax"] = STAT_BITS * scores + (w * scores if w != STAT_BITS and not dropout else 0)
        else:
            terms["attention softmax"] = w * scores
        if dropout:
            terms["attention dropout"] = (MASK_BITS + w) * scores  # mask + dropped probabilities
    terms["attention output"] = w * t.inside * a.q_size            # out-projection input (= flash output)
    if a.resid_dropout > 0:
        terms["attention output dropout mask"] = MASK_BITS * t.outside * a.hidden
    return terms


def _layer(a, t: Tokens, w, attention, impl, recompute) -> Dict[str, int]:
    terms = {"input norm": _norm(a, t.outside, w, impl)}
    terms.update(_attention(a, t, w, attention, impl, recompute))
    terms["post-attention norm"] = _norm(a, t.outside, w, impl)
    terms.update(_mlp(a, t, w, impl))
    if a.resid_dropout > 0:
        terms["mlp output dropout mask"] = MASK_BITS * t.outside * a.hidden
    return terms


def _bytes(terms: Dict[str, int]) -> Dict[str, int]:
    return {k: -(-v // 8) for k, v in terms.items() if v}


@lru_cache(maxsize=256)
def tp_local(a: Architecture, tp: int) -> Architecture:
    """The block one tensor-parallel rank runs: heads, KV heads and the FFN split over tp, hidden size whole."""
    if tp == 1:
        return a
    return replace(a, heads=a.heads // tp, kv_heads=a.n_kv_heads // tp, head_dim=a.d_head, ffn=a.ffn // tp)


def activations(a: Architecture, micro_batch: int, seq_len: int, bits: int, attention: str = "flash",
                recompute: str = "none", implementation: str = "huggingface", tp: int = 1, cp: int = 1,
                sequence_parallel: bool = False, loss_vocab: int = None) -> ActivationReport:
    """Bytes saved for backward by one rank for one micro-batch: its tensor-parallel split of the heads and FFN,
    its share of the tokens (tokens()), and `loss_vocab` vocabulary columns of the fp32 loss (default: all of
    them; vocab-parallel cross entropy keeps the padded vocabulary / tp)."""
    t = tokens(micro_batch, seq_len, tp, cp, sequence_parallel, implementation)
    local = tp_local(a, tp)
    w = bits
    hf = implementation == "huggingface"
    full_layer = _layer(local, t, w, attention, implementation, "none")
    if recompute == "full":
        per_layer = {"block input (checkpoint)": w * t.outside * a.hidden}
    elif recompute == "selective":
        per_layer = _layer(local, t, w, attention, implementation, "selective")
    else:
        per_layer = full_layer

    embed = {"token ids": INDEX_BITS * t.inside}
    stage = {}
    if a.positions == "learned":
        embed["position ids"] = INDEX_BITS * t.s
    elif hf:
        # Batch-1 tables shared by a module's layers; each pipeline stage runs the rotary embedding itself.
        stage["rotary cos/sin"] = 2 * w * t.s * a.d_head
        if recompute == "full":
            stage["position ids (checkpoint input)"] = INDEX_BITS * t.s   # each checkpointed block's input
    if recompute == "full" and hf and attention == "eager":
        embed["causal mask (checkpoint input)"] = w * t.b * t.s * t.s  # HF's 4-D additive mask, kept for recompute
    if a.embd_dropout > 0:
        embed["embedding dropout mask"] = MASK_BITS * t.outside * a.hidden
    head = {
        "final norm": _norm(a, t.outside, w, implementation),
        "output projection input": w * t.linear_in * a.hidden,
        "loss log-softmax (fp32)": STAT_BITS * t.inside * (a.vocab if loss_vocab is None else loss_vocab),
        "labels": INDEX_BITS * t.inside,
    }
    return ActivationReport(_bytes(per_layer), _bytes(embed), _bytes(head), a.layers,
                            sum(_bytes(full_layer).values()) if recompute == "full" else 0, _bytes(stage))
