"""Multi-token prediction's activations: what the MTP modules (model/inventory.py _mtp, on the last pipeline stage)
save for backward per micro-batch, beside the output end's terms (bits until the end).

megatron-core 0.16.1, transformer/multi_token_prediction.py MultiTokenPredictionLayer and models/gpt/gpt_model.py
_postprocess: each module rolls the input ids by one (a new int64 tensor the embedding saves), embeds them with the
shared word embedding, normalises that (enorm) and the main model's output hidden states (hnorm), concatenates the
two into [T, 2h] for eh_proj, runs one transformer block and its final norm; the shared output layer then gives its
logits and a loss of its own over the labels rolled as far. The MTP losses run before the main one, so what they
keep for backward (the head's input, the loss's saved tensor over T x V, the rolled labels) is alive while the
main logits and loss are: the logits transient itself is the main loss's (one at a time). Hugging Face's MtpLayer
(transformers 5.24 modeling_layers.py: enorm, hnorm, eh_proj, mtp_block, post_norm; an inference drafter there)
runs the same chain: tests/test_mtp.py measures it on the CPU against these terms.

Under full recompute (Megatron's uniform method, one layer per checkpoint: it asserts recompute_num_layers == 1
for MTP) the module from the concatenation to its final norm is one checkpoint (_checkpointed_forward): it keeps
the embedding output (the hidden states are the main head's input already), and the final norm's output, which
the head saves; backward rebuilds the rest (mtp_rebuilt). The block method does not checkpoint it ("not
supported for MTP yet"), nor does any other policy here: the MTP block then saves what a decoder block of its
kind saves under that recompute.
"""

from __future__ import annotations

from typing import Callable, Dict

from ..tables import INDEX_BITS


def mtp_terms(a, t, w: int, impl: str, block: Dict[str, int], vocab, loss_saved: tuple, norm: Callable,
              checkpointed: bool) -> Dict[str, int]:
    """Bits the a.mtp_layers modules save on the last stage for one micro-batch. `t`: activations.Tokens; `block`:
    one decoder block's saved terms of the modules' kind (a.mtp_kind) under the recompute; `norm(rows)`: the
    bits one norm over the hidden size saves (activations.norm_bits); `loss_saved`: the loss row's (bits per
    token and vocabulary column, name)."""
    h = a.hidden
    terms = {"MTP input ids (rolled)": INDEX_BITS * t.inside}
    if checkpointed:
        terms["MTP embedding output (checkpoint)"] = w * t.outside * h
    else:
        terms.update(mtp_module_terms(a, t, w, impl, block, norm))
    terms["MTP output projection input"] = w * t.linear_in * h
    terms["MTP labels (rolled)"] = INDEX_BITS * t.inside
    if loss_saved[0]:
        terms[f"MTP {loss_saved[1]}"] = loss_saved[0] * t.inside * vocab
    return {k: a.mtp_layers * v for k, v in terms.items()}


def mtp_module_terms(a, t, w: int, impl: str, block: Dict[str, int], norm: Callable) -> Dict[str, int]:
    """One module's terms from the concatenation to its final norm: what a checkpoint of it rebuilds."""
    h = a.hidden
    # Megatron's hnorm reads the decoder's output, which the output layer saves already: only its statistics
    # are new; Hugging Face's RMSNorm keeps an fp32 copy of its input of its own.
    hnorm = norm(t.outside) - (w * t.outside * h if impl == "megatron" else 0)
    terms = {"MTP enorm": norm(t.outside), "MTP hnorm": hnorm, "MTP eh_proj input": 2 * w * t.linear_in * h}
    terms.update({f"MTP block: {k}": v for k, v in block.items()})
    terms["MTP final norm"] = norm(t.outside)
    return terms
