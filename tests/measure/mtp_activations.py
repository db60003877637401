"""Measure what a multi-token-prediction module saves for backward (test-only; torch, transformers).

transformers 5.24 builds DeepSeek-V3's MTP modules only for speculative decoding (modeling_layers.py MtpLayer,
loaded by MtpModel next to the main model); training them is what Megatron does (multi_token_prediction.py). The
harness trains one the way Megatron's GPTModel does, with Hugging Face's own modules: the main model's forward,
then MtpLayer (enorm, hnorm, eh_proj, a decoder block of the last layer's kind, post_norm) on the embedding of the
input ids rolled by one and the main model's output hidden states, the shared lm_head, and the model's own
ForCausalLM loss over the labels rolled as far, added to the main loss (Megatron's MTPLossAutoScaler scales its
gradient by mtp_loss_scaling_factor; the scale saves nothing).

What autograd packs is recorded per storage, as in saved_tensors.py (with CUDA's flash semantics for SDPA), in two
regions: "main" (the model's forward and loss) and "mtp" (from the rolled ids to the MTP loss). The rotary tables
are the main model's, passed to the MTP block as Megatron passes rotary_pos_emb.
"""

from __future__ import annotations

import torch

from tests.measure.saved_tensors import _Recorder, build_from_config, gpu_semantics


def measure_mtp(config: dict, batch: int, seq: int, dtype=torch.bfloat16) -> dict:
    """Bytes saved per region ("main", "mtp") by a Hugging Face model from `config` trained with one MTP module."""
    from transformers.modeling_layers import MtpLayer

    model = build_from_config(config, dtype)
    base = model.base_model
    layer_cls = type(base.layers[-1])
    norm_cls = type(base.norm)
    last = model.config.num_hidden_layers - 1          # the last decoder block's kind (an MoE block here)
    mtp = MtpLayer(model.config, layer_cls, norm_cls, last).to(dtype).train()
    torch.manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    position_ids = torch.arange(seq)[None]
    rec = _Recorder(model)
    rec.params |= {p.untyped_storage().data_ptr() for p in mtp.parameters()}    # weights are model state
    rec.region = "main"
    tables = {}
    def capture(module, args, kwargs):
        tables.setdefault("cos_sin", kwargs["position_embeddings"])      # returns None: the call is unchanged

    hook = base.layers[0].register_forward_pre_hook(capture, with_kwargs=True)
    with gpu_semantics(rec), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, output_hidden_states=True)
        hook.remove()
        cos_sin = tables["cos_sin"]                   # the main model's rotary tables (Megatron: rotary_pos_emb)
        rec.region = "mtp"
        rolled = torch.roll(ids, -1, dims=-1)
        hidden = mtp(inputs_embeds=base.embed_tokens(rolled), previous_hidden_state=out.hidden_states[-1],
                     position_embeddings=cos_sin, attention_mask=None, position_ids=position_ids, cache=None)
        logits = model.lm_head(hidden)
        mtp_loss = model.loss_function(logits, torch.roll(ids, -1, dims=-1), vocab_size=model.config.vocab_size)
        loss = out.loss + 0.1 * mtp_loss
    rec.paused = True
    loss.backward()
    return dict(rec.by_region)
