"""Measure what an fp32 residual stream costs a block (zerocalc/step/fp32_stream.py) on the CPU: transformers'
LlamaForCausalLM in bf16 against the same model with embed_tokens, lm_head and every norm moved to fp32 as
axolotl's loader leaves them (axolotl-ai-cloud/axolotl src/axolotl/loaders/model.py _convert_embedding_modules_dtype:
module.to(torch.float32) for every module named "norm" and the embedding modules), both run under
torch.autocast(bfloat16) as the Trainer's bf16 mixed precision runs them, SDPA attention (test-only; needs torch
and transformers).

Saved tensors: torch.autograd.graph.saved_tensors_hooks sees every tensor autograd keeps; each storage counts once
(a view of a storage already seen adds nothing), the model's parameters are left out, and each is booked to the
decoder layer running when it was first saved (forward pre/post hooks), or to "head" after the last layer.
`frozen_norms` freezes the norms' weights (as LoRA does) while the linears train.
"""

from __future__ import annotations

from typing import Dict


def saved_bytes(fp32_parts: bool, frozen_norms: bool = False, hidden: int = 256, ffn: int = 1024,
                heads: int = 4, kv_heads: int = 4, vocab: int = 512, tokens: int = 128,
                tied: bool = False, norms_only: bool = False) -> Dict[str, int]:
    """Bytes autograd saves in the second decoder layer ("block") and after the last one ("head"). `norms_only`
    moves only the norms to fp32 (axolotl's fp32_norms, LLaMA-Factory's upcast_layernorm): the stream stays 16-bit."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=2, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=tokens,
                      tie_word_embeddings=tied)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    if fp32_parts:
        for name, module in model.named_modules():
            if "norm" in name or not norms_only and (name.endswith("embed_tokens") or name == "lm_head"):
                module.to(torch.float32)
    if frozen_norms:
        for name, p in model.named_parameters():
            if "norm" in name:
                p.requires_grad_(False)
    where = ["embedding"]
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_pre_hook(lambda _m, _a, i=i: where.__setitem__(0, f"layer {i}"))
        layer.register_forward_hook(lambda _m, _a, _o: where.__setitem__(0, "head"))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: Dict[int, tuple] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in seen and ptr not in params:
            seen[ptr] = (where[0], t.untyped_storage().nbytes())
        return t

    ids = torch.randint(0, vocab, (1, tokens))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, labels=ids).loss.backward()
    out = {"block": 0, "head": 0}
    for place, nbytes in seen.values():
        key = "block" if place == "layer 1" else "head" if place == "head" else None
        if key:
            out[key] += nbytes
    return out


def qlora_head_copies(hidden: int = 256, vocab: int = 512, tokens: int = 128) -> int:
    """Bytes of 16-bit head-weight copies autograd saves in a QLoRA step as peft's recipe runs it: a bf16 Llama
    loaded in bitsandbytes nf4 (double quantization, bf16 compute), prepare_model_for_kbit_training (the
    embedding, head and norms upcast to fp32), LoRA on every linear, under torch.autocast(bfloat16)."""
    import tempfile

    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=vocab, max_position_embeddings=tokens,
                      tie_word_embeddings=False)
    with tempfile.TemporaryDirectory() as d:
        LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                   bnb_4bit_compute_dtype=torch.bfloat16)
        model = LlamaForCausalLM.from_pretrained(d, quantization_config=quant, dtype=torch.bfloat16,
                                                 attn_implementation="sdpa")
    model = get_peft_model(prepare_model_for_kbit_training(model, use_gradient_checkpointing=False),
                           LoraConfig(r=8, target_modules="all-linear"))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    copies: Dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and t.dtype == torch.bfloat16 and tuple(t.shape) in ((vocab, hidden), (hidden, vocab)):
            copies[ptr] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, vocab, (1, tokens))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, labels=ids).loss.backward()
    return sum(copies.values())


if __name__ == "__main__":
    h, T = 256, 128
    for frozen in (False, True):
        base, wide = saved_bytes(False, frozen), saved_bytes(True, frozen)
        print(f"frozen norms {frozen}: block {base['block'] / (T * h):.2f}h -> {wide['block'] / (T * h):.2f}h, "
              f"head {base['head'] / (T * h):.2f}h -> {wide['head'] / (T * h):.2f}h bytes per token")
