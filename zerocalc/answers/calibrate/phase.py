"""Which phase of the step an out-of-memory happened in, read from the traceback pasted with it (issue 33: the
explanation compared the message's lower bound with the backward peak while the traceback said the optimizer step).

Data: each phase's frames, as literal text a Python traceback prints (the function or file of the innermost frames
PyTorch, transformers, DeepSpeed and accelerate raise from). Plain substring search: linear in the paste, no regex.
The first phase of PHASE_FRAMES with a frame in the text wins: an optimizer frame means the step, whatever called
it; a backward frame means backward, a checkpoint's recomputed forward included; a loss frame the loss, at the end
of the forward.
"""

from __future__ import annotations

from typing import Optional, Tuple

PHASE_FRAMES = (
    ("optimizer_step", ("optimizer.step(", "_multi_tensor_adam", "_single_tensor_adam", "_fused_adam", "in _step",
                        "torch/optim/", "ops/adam/", "fused_adam", "cpu_adam", "optimizer_step(", "_foreach_sqrt",
                        "step_with_zero", "_optimizer_step", "zero_grad(")),
    ("backward", ("backward(", "_engine_run_backward", "torch/autograd/", "run_backward", "checkpoint.py\", line",
                  "unpack_hook", "recompute_fn")),
    ("forward", ("cross_entropy", "log_softmax", "loss_function", "ForCausalLMLoss", "logits.float()",
                 ".forward(", "in forward", "_call_impl", "model(**", "generate(")),
)
# The estimate's phases (step/peak.py): the loss is at the end of the forward.
PHASE_WORDS = {"forward": "the forward (or the loss at its end)", "backward": "backward",
               "optimizer_step": "the optimizer step"}


def failed_phase(text: str) -> Optional[Tuple[str, str]]:
    """(phase, the frame text that says so), or None when the paste has no traceback frame we know."""
    for phase, frames in PHASE_FRAMES:
        for frame in frames:
            if frame in text:
                return phase, frame
    return None
