"""Megatron's recompute modules and full-recompute methods (zerocalc/step/megatron_recompute.py) against Hugging
Face blocks checkpointed with megatron-core 0.16.1's own checkpoint functions at Megatron's module boundaries
(tests/measure/megatron_recompute.py), bf16, flash semantics for SDPA.

Exact to the byte: every module row on Llama (GQA), Qwen3-MoE and DeepSeek-V2 / -V3-style blocks, alone and
joined, and full recompute's uniform / block methods. DeepSeek's plain blocks are 8,192 / 16,384 bytes over
zerocalc's MoE router terms already (inside test_moe_validation's 2%); the difference each module makes is exact,
so the check there is against that baseline. core_attn is zerocalc's selective recompute, unchanged: measured, it
also frees flash's logsumexp and keeps Hugging Face's eager 4-D mask once (both asserted exactly). The gradients
equal a plain run's: the checkpoints change what is kept, not what is computed.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
pytest.importorskip("megatron.core", reason="megatron-core not installed: pip install -r requirements-validation.txt")

from tests.measure.megatron_recompute import measure  # noqa: E402
from tests.measure.moe_activations import TINY  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.step.activations import activations  # noqa: E402

B, S = 2, 128
LLAMA = dict(model_type="llama", num_hidden_layers=2, hidden_size=256, num_attention_heads=8, num_key_value_heads=2,
             intermediate_size=1024, vocab_size=1000, max_position_embeddings=S, pad_token_id=0)
MODELS = {"llama": LLAMA, "llama4": {**LLAMA, "num_hidden_layers": 4}, "llama-mha": {**LLAMA, "num_key_value_heads": 8},
          "qwen3_moe": TINY["qwen3_moe"], "deepseek_v2": TINY["deepseek_v2"], "deepseek_v3": TINY["deepseek_v3"]}


def predicted(model, attention="sdpa", **recompute):
    act = activations(architecture_from_config(MODELS[model]), B, S, 16,
                      attention="eager" if attention == "eager" else "flash", **recompute)
    return act.total - sum(act.head.values()), sum(act.head.values())


def measured(model, attention="sdpa", modules=(), full=None):
    got, grad_diff = measure({**MODELS[model], "attn_implementation": attention}, B, S, modules, full)
    assert grad_diff == 0.0, "the checkpointed run's gradients differ from a plain run's"
    return got["embed"] + got["layer"], got["head"]


@pytest.fixture(scope="module")
def plain():
    """(predicted - measured) of the blocks without recompute: 0 for Llama and Qwen3-MoE, DeepSeek's router gap."""
    return {m: predicted(m)[0] - measured(m)[0] for m in ("llama", "qwen3_moe", "deepseek_v2", "deepseek_v3")}


CASES = [("llama", "layernorm"), ("llama", "mlp"), ("llama", "layernorm,mlp"), ("qwen3_moe", "moe"),
         ("qwen3_moe", "moe_act"), ("qwen3_moe", "layernorm,moe_act"), ("deepseek_v2", "mla_up_proj"),
         ("deepseek_v2", "shared_experts"), ("deepseek_v2", "moe_act,shared_experts"),
         ("deepseek_v2", "layernorm,mla_up_proj,mlp,moe"), ("deepseek_v3", "mla_up_proj"),
         ("deepseek_v3", "layernorm,mla_up_proj")]


@pytest.mark.parametrize("model, modules", CASES, ids=[f"{m}-{mods}" for m, mods in CASES])
def test_recompute_modules_exact(plain, model, modules):
    want, head = predicted(model, recompute="selective", recompute_modules=modules)
    got, got_head = measured(model, modules=tuple(modules.split(",")))
    residual = plain[model] if "moe" not in modules.split(",") else 0     # the router gap goes with the layer
    assert want - got == residual, f"predicted {want:,} vs measured {got:,} (plain blocks: {plain[model]:+,})"
    assert abs(head - got_head) <= 4                                       # the loss's own scalar


def test_core_attn_is_selective_and_its_measured_differences():
    # flash: the checkpoint of core attention also drops flash's fp32 logsumexp (4 b a s per layer) that
    # zerocalc's selective keeps; eager: HF's 4-D additive mask becomes a checkpoint input, kept once (w b s^2).
    a = architecture_from_config(LLAMA)
    for attention, gap in (("sdpa", 2 * 4 * B * a.heads * S), ("eager", -2 * B * S * S)):
        want = predicted("llama", attention, recompute="selective", recompute_modules="core_attn")[0]
        assert want == predicted("llama", attention, recompute="selective")[0]
        if attention == "eager":          # MHA here: eager GQA would also keep K, V unrepeated
            want = predicted("llama-mha", attention, recompute="selective")[0]
            got = measured("llama-mha", attention, modules=("core_attn",))[0]
        else:
            got = measured("llama", attention, modules=("core_attn",))[0]
        assert want - got == gap


@pytest.mark.parametrize("method, n", [("uniform", 2), ("uniform", 4), ("block", 1), ("block", 3), ("block", 5)])
def test_full_recompute_methods_exact(method, n):
    want, _ = predicted("llama4", recompute="full", recompute_method=method, recompute_num_layers=n)
    got, _ = measured("llama4", full=(method, n))
    assert want == got
