"""What a 4-bit linear keeps for backward, in whichever bitsandbytes release is installed (test-only; needs torch and
bitsandbytes). Run by tests/test_versions.py in this venv (0.50.2) and, as a script, with an older release put first
on the path (bitsandbytes 0.43.1 beside torch 2.13: `pip install --no-deps --target /tmp/bnb431
bitsandbytes==0.43.1`; ZEROCALC_OLD_BNB_PATH names the folder).

A frozen 4-bit weight (requires_grad False) multiplies an input that needs a gradient, as a QLoRA block's base
linear does: bnb.matmul_4bit(x, W.t(), quant_state) -> MatMul4Bit. The input is made inside the tracker
(tests/measure/loss_peaks.py's LiveTracker, every new storage counted until freed) and dropped by the caller, so
what stays live after the forward, less the output, is what the autograd function keeps of it; what stays live after
backward while the caller still holds the output (a loop that keeps its loss), less the output and the input's
gradient, is what the graph keeps beyond backward: the function's ctx attributes (ctx.tensors), which backward does
not release as it releases saved tensors. measure_int8 does the same for Linear8bitLt (MatMul8bitLt) in the
installed release.
- 0.50.2 has a CPU backend: the weight is quantized for real (nf4, block 64).
- 0.43.1 has no CPU kernels: functional.dequantize_4bit is replaced by a dense weight of the right shape, and the
  quant state is that stand-in (it returns the weight transposed for the one-row packed B, as the release does); MatMul4Bit's own forward (what it saves in ctx.tensors) is the release's code.

    PYTHONPATH=/tmp/bnb431 python -m tests.measure.bnb_versions [tokens in out]   # prints JSON
"""

from __future__ import annotations

import json
import sys


def measure(tokens: int = 64, inp: int = 128, out: int = 256) -> dict:
    import torch
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    from tests.measure.loss_peaks import LiveTracker

    torch.manual_seed(0)
    dense = torch.randn(out, inp, dtype=torch.bfloat16)
    try:
        packed, state = F.quantize_4bit(dense, blocksize=64, quant_type="nf4")
    except Exception:                                   # no CPU kernels in this release: a stand-in dequantize
        packed, state = torch.zeros(out * inp // 2, 1, dtype=torch.uint8), dense.shape
        # the release returns the weight transposed when handed the packed data transposed (B = W.t(), one row)
        F.dequantize_4bit = lambda B, quant_state=None, *a, **k: dense.t()
    source = torch.randn(tokens, inp, dtype=torch.bfloat16, requires_grad=True)
    with LiveTracker() as tracker:
        x = source * 1.0                                # the block's activation: new storage, needs a gradient
        y = bnb.matmul_4bit(x, packed.t(), quant_state=state)
        del x
        kept = tracker.live - y.untyped_storage().nbytes()
        y.float().sum().backward()
        held = tracker.live - y.untyped_storage().nbytes() - source.grad.untyped_storage().nbytes()
    return {"bitsandbytes": bnb.__version__, "tokens": tokens, "in": inp, "out": out,
            "input_bytes": tokens * inp * 2, "kept_after_forward": kept, "held_after_backward": held,
            "input_grad_ok": source.grad is not None and tuple(source.grad.shape) == (tokens, inp)}


def measure_int8(tokens: int = 64, inp: int = 128, out: int = 256) -> dict:
    """An 8-bit base linear (bnb.nn.Linear8bitLt, frozen int8 weight, threshold 0) on an fp16 input that needs a
    gradient: what it keeps after forward and, the output still held, after backward."""
    import torch
    import bitsandbytes as bnb

    from tests.measure.loss_peaks import LiveTracker

    torch.manual_seed(0)
    linear = bnb.nn.Linear8bitLt(inp, out, bias=False, has_fp16_weights=False, threshold=0.0)
    linear.weight = bnb.nn.Int8Params(torch.randn(out, inp, dtype=torch.float16), requires_grad=False,
                                      has_fp16_weights=False)
    linear(torch.zeros(1, inp, dtype=torch.float16))      # the weight is quantized at its first forward: not kept
    source = torch.randn(tokens, inp, dtype=torch.float16, requires_grad=True)
    with LiveTracker() as tracker:
        x = source * 1.0
        y = linear(x)
        del x
        kept = tracker.live - y.untyped_storage().nbytes()
        y.float().sum().backward()
        held = tracker.live - y.untyped_storage().nbytes() - source.grad.untyped_storage().nbytes()
    return {"bitsandbytes": bnb.__version__, "input_bytes": tokens * inp * 2, "kept_after_forward": kept,
            "held_after_backward": held}


if __name__ == "__main__":
    print(json.dumps(measure(*[int(a) for a in sys.argv[1:4]])))
