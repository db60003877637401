"""Saved activations of Gemma 1 and the parallel-block families against the real transformers 5.24 classes on the
CPU (tests/measure/family_activations.py: tiny configs, 2 layers, hidden 256, batch 2 x 128 tokens; every tensor
autograd saves, once per storage; SDPA as the CUDA fused kernels save it, except where CUDA would run the math
kernel too). Each case is matched to the byte after two named CPU-vs-CUDA differences, both counted from the
model here, not fitted:
- torch's CPU LayerNorm keeps mean and rstd in the input dtype; CUDA's (layer_norm_kernel.cu) in fp32, which is
  what zerocalc counts: 2 x 2 bytes more per token per 16-bit LayerNorm;
- the loss's NllLossBackward also saves total_weight, one fp32 scalar (4 bytes), which zerocalc leaves out;
  Gemma 1 and 2 scale the embedding by a constant tensor (sqrt(hidden), the activation dtype): one scalar more.
Gemma 2's soft-capping is measured under eager attention (transformers refuses SDPA for it): each layer saves the
tanh of the scores (w x heads x s x s) beside the fp32 softmax and its copy, and the loss end the tanh of the
logits (w x T x V).
Needs torch and transformers (requirements-validation.txt); skipped with a reason without them.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")

from tests.measure.family_activations import BATCH, EAGER_ONLY, SEQ, TINY, build, measure  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.step.activations import activations  # noqa: E402

DTYPES = {"fp32": (torch.float32, 32), "bf16": (torch.bfloat16, 16)}
CASES = [(name, dtype, attn) for name in TINY for dtype in DTYPES for attn in ("sdpa", "eager")
         if attn == "eager" or name not in EAGER_ONLY]


def _cpu_vs_cuda(arch, name, bits):
    """(body, head) bytes the CPU run saves beyond (+) or short of (-) what CUDA saves, as the docstring says."""
    layernorms_per_block = 0 if arch.norm != "layernorm" else (1 if arch.shared_norm else 2)
    stats = 0 if bits == 32 else 2 * 2 * BATCH * SEQ          # fp32 - bf16 mean and rstd, per LayerNorm
    gemma = name.startswith("gemma")
    scalar = 4 if gemma and bits == 32 else 2 if gemma else 0
    head_stats = stats if arch.norm == "layernorm" else 0
    return -stats * layernorms_per_block * arch.layers + scalar, 4 - head_stats


@pytest.mark.parametrize("name, dtype, attn", CASES, ids=["-".join(c) for c in CASES])
def test_saved_activations_to_the_byte(name, dtype, attn):
    torch_dtype, bits = DTYPES[dtype]
    by_region = measure(build(TINY[name], torch_dtype, attn))["by_region"]
    head = by_region.get("head", 0)
    body = sum(v for k, v in by_region.items() if k != "head")
    arch = architecture_from_config(TINY[name])
    act = activations(arch, BATCH, SEQ, bits, attention="eager" if attn == "eager" else "flash")
    body_delta, head_delta = _cpu_vs_cuda(arch, name, bits)
    assert act.total - sum(act.head.values()) + body_delta == body
    assert sum(act.head.values()) + head_delta == head


def test_gemma2_refuses_sdpa_in_transformers():
    # modeling_gemma2.py: _supports_sdpa = False ("sdpa does not support softcapping")
    with pytest.raises(ValueError):
        build(TINY["gemma2"], torch.float32, "sdpa")
