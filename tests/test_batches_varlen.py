"""A packed row is counted as one sequence of its tokens (zerocalc/step/batches.py, batch_mode packed): measured on
the CPU with a real Hugging Face Llama fed a packed row with position_ids restarting per sample, as
transformers' DataCollatorWithFlattening makes it.

flash-attn has no CPU kernel, so flash-attention-2's varlen path is emulated as an attention function registered
with transformers' AttentionInterface (and flash_attention_mask, which returns no mask for packed rows:
masking_utils.py): it cuts the row at each position_ids reset, as transformers' flash path does
(modeling_flash_attention_utils.py prepare_fa_kwargs_from_position_ids -> cu_seqlens), and records what CUDA's
flash kernel saves (tests/measure/saved_tensors.py gpu_semantics: query, key and value as passed, the output, an
fp32 logsumexp of heads x tokens). Everything outside the attention kernel is transformers' own code.

Also measured: the same packed row under sdpa, which builds a block-diagonal [S, S] mask and, with a mask,
expands grouped K/V to every head (integrations/sdpa_attention.py use_gqa_in_sdpa): why packed is refused with
eager attention and modelled for flash only.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.measure.saved_tensors import _Recorder, build_from_config, gpu_semantics  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.step.activations import activations  # noqa: E402

CONFIG = dict(model_type="llama", num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=256, vocab_size=512, max_position_embeddings=4096, pad_token_id=0)
SAMPLES, LENGTH = 4, 256


def _varlen_attention(rec):
    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, position_ids=None, **kw):
        # [1, heads, S, d]: cut at each position_ids reset, causal within each sample, grouped K/V unexpanded
        starts = [0] + [i for i in range(1, position_ids.shape[-1]) if position_ids[0, i] == 0] + \
            [position_ids.shape[-1]]
        was, rec.paused = rec.paused, True
        outs = [torch.nn.functional.scaled_dot_product_attention(
            query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True, scale=scaling, enable_gqa=True)
            for a, b in zip(starts, starts[1:])]
        out = torch.cat(outs, dim=2).transpose(1, 2).contiguous()      # flash's (batch, seq, heads, dim) order
        rec.paused = was
        if not rec.paused:
            for t in (query, key, value, out):
                rec.add(t)
            rec.by_region[rec.region] += 4 * query.shape[0] * query.shape[1] * query.shape[2]   # fp32 logsumexp
        return out, None
    return attention


def _measure(attention: str, packed: bool):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    model = build_from_config({**CONFIG, "attn_implementation": "sdpa"}, torch.bfloat16)
    rec = _Recorder(model)
    if attention == "varlen":
        AttentionInterface.register("zerocalc_varlen", _varlen_attention(rec))
        AttentionMaskInterface.register("zerocalc_varlen", flash_attention_mask)
        model.set_attn_implementation("zerocalc_varlen")
    base = model.base_model
    for b in base.layers:
        b.register_forward_pre_hook(lambda *_: setattr(rec, "region", "layer"))
    base.norm.register_forward_pre_hook(lambda *_: setattr(rec, "region", "head"))
    torch.manual_seed(0)
    ids = torch.randint(1, CONFIG["vocab_size"], (SAMPLES, LENGTH))
    kw = {}
    if packed:
        ids = ids.reshape(1, -1)
        kw["position_ids"] = torch.arange(LENGTH).repeat(SAMPLES).reshape(1, -1)
    elif attention == "varlen":
        kw["position_ids"] = torch.arange(LENGTH).expand(SAMPLES, -1)
    with gpu_semantics(rec):
        with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            model(input_ids=ids, labels=ids, **kw)
    return rec.by_region


def test_a_packed_row_saves_what_one_sequence_of_its_tokens_saves_under_varlen_attention():
    packed = _measure("varlen", packed=True)
    arch = architecture_from_config(CONFIG)
    predicted = activations(arch, 1, SAMPLES * LENGTH, 16, attention="flash", implementation="huggingface")
    body = sum(predicted.embed.values()) + sum(predicted.stage.values()) + arch.layers * predicted.per_layer_total
    got = packed["embed"] + packed["layer"]
    assert abs(body - got) <= 0.02 * got, (body, got)
    # the rectangle of the same samples (each LENGTH long, position_ids per row) saves exactly as much: under
    # varlen attention nothing is s x s, and the rotary tables follow the position_ids either way
    fixed = _measure("varlen", packed=False)
    assert (packed["embed"], packed["layer"]) == (fixed["embed"], fixed["layer"])
    assert packed["head"] - fixed["head"] == 8      # one int64 element of the loss's labels (measured)


def test_the_same_packed_row_under_sdpa_saves_more():
    varlen, sdpa = _measure("varlen", packed=True), _measure("sdpa", packed=True)
    head_dim, S = CONFIG["hidden_size"] // CONFIG["num_attention_heads"], SAMPLES * LENGTH
    expanded = CONFIG["num_hidden_layers"] * 2 * (CONFIG["num_attention_heads"] - CONFIG["num_key_value_heads"]) * \
        S * head_dim * 2
    assert sdpa["layer"] - varlen["layer"] == expanded       # K and V repeated to every head, each layer
