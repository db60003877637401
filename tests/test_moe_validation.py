"""Mixture-of-experts, latent-attention and Gemma-style blocks against real transformers models on the CPU.

tests/measure/moe_activations.py builds tiny Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 (MLA, q_lora_rank null),
DeepSeek-V3 (MLA with q LoRA, sigmoid router), Gemma 2 (eager: transformers refuses SDPA with soft-capping),
Gemma 3 and a Mistral whose sliding window is shorter than the sequence (2 layers, hidden 256, 8 experts, top-2, bf16) and records every tensor autograd saves, with the
CUDA kernels' semantics for SDPA. zerocalc's prediction (implementation "huggingface") must be within 2% for the
blocks with the embedding end, and for the output end. Needs torch and transformers (requirements-validation.txt).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")

from tests.measure.moe_activations import BATCH, SEQ, TINY, build, measure  # noqa: E402
from zerocalc.step.activations import activations  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402

TOLERANCE = 0.02


@pytest.fixture(scope="module")
def measured():
    return {name: measure(build(cfg)) for name, cfg in TINY.items()}


@pytest.mark.parametrize("name", list(TINY))
def test_saved_activations_within_2_percent(measured, name):
    cfg = {k: v for k, v in TINY[name].items() if not k.startswith("_")}
    attention = "eager" if TINY[name].get("_attn_implementation") == "eager" else "flash"
    arch = architecture_from_config(cfg)
    act = activations(arch, BATCH, SEQ, 16, attention=attention, implementation="huggingface")
    by_region = measured[name]["by_region"]
    head = by_region.get("head", 0)
    body = sum(v for k, v in by_region.items() if k != "head")
    ours_body = act.total - sum(act.head.values())
    for what, got, want in (("blocks + embedding end", body, ours_body), ("output end", head,
                                                                          sum(act.head.values()))):
        assert abs(want - got) <= TOLERANCE * got, f"{name} {what}: predicted {want:,} vs measured {got:,}"


@pytest.mark.parametrize("name", ["mixtral", "qwen3_moe", "deepseek_v3"])
def test_expert_terms_grow_with_tokens_times_top_k(name):
    # The experts' saved tensors are per routed (token, expert) pair: doubling the batch doubles them.
    arch = architecture_from_config({k: v for k, v in TINY[name].items() if not k.startswith("_")})
    one = activations(arch, 1, SEQ, 16).per_moe_layer
    two = activations(arch, 2, SEQ, 16).per_moe_layer
    for term in ("experts: dispatched tokens", "experts: gate/up output", "experts: down output"):
        assert two[term] == 2 * one[term]
