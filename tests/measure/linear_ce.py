"""Measure torchtune's LinearCrossEntropyLoss on the CPU, to check the torchtune importer's mapping of it to
zerocalc's "chunked" loss row (CEWithChunkedOutputLoss: forward peak w + 4 + 4/n, saved 4, backward peak 4 + 8/n
bytes per T x V, tests/measure/loss_peaks.py). Test-only; needs torch.

The loss is torchtune/modules/loss/cross_entropy_loss.py at pytorch/torchtune bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1
(`git show bd2a0fc7:torchtune/modules/loss/cross_entropy_loss.py > FILE`, path in TORCHTUNE_CE_FILE), loaded by
path and run unchanged; its two package imports (loss_types.SFTLoss, an ABC, and utils.get_logger) are stood in
for in sys.modules, as `import torchtune` fails beside torchao 0.18. The head is an nn.Linear(h, V) in bf16 set as
loss.linear_projection (what set_model_output does with model.output); the step is loss_peaks._step (the same
dispatch-mode live-bytes tracker and saved-tensor hooks).

Result (T=256, V=4096, h=64, bf16, batch 2; bytes per T x V): n = 8: saved 4.00, forward peak 4.73, backward peak
4.99; n = 1: saved 4.00, forward peak 9.96, backward peak 11.94. Against the chunked row at n = 8 (6.5 / 4 / 5):
the same saved log-softmax and backward peak, a forward peak 1.77 lower (no bf16 logits alive beyond one chunk).

Run: TORCHTUNE_CE_FILE=/tmp/cross_entropy_loss.py python -m tests.measure.linear_ce
"""

from __future__ import annotations

import abc
import importlib.util
import json
import logging
import os
import sys
import types

from tests.measure import loss_peaks as LP


def load_linear_ce(path: str):
    stubs = {name: types.ModuleType(name) for name in ("torchtune", "torchtune.modules", "torchtune.modules.loss",
                                                        "torchtune.modules.loss.loss_types", "torchtune.utils")}
    stubs["torchtune.modules.loss.loss_types"].SFTLoss = type("SFTLoss", (abc.ABC,), {})
    stubs["torchtune.utils"].get_logger = lambda *a: logging.getLogger("torchtune")
    for name, module in stubs.items():
        sys.modules.setdefault(name, module)
    spec = importlib.util.spec_from_file_location("torchtune_cross_entropy_loss", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LinearCrossEntropyLoss


def linear_ce(path: str, T=256, V=4096, h=64, dtype="bf16", num_output_chunks=8, batch=2):
    import torch
    loss_fn = load_linear_ce(path)(num_output_chunks=num_output_chunks)
    ignore = torch.full((batch, 1), loss_fn.ignore_index)

    def forward(hidden, head, labels):
        loss_fn.linear_projection = head
        labels = torch.hstack((labels[..., 1:], ignore))     # the recipes' label shift
        return loss_fn(hidden, labels), None

    out = LP._step(T, V, h, dtype, batch, forward)
    out.update(impl="torchtune LinearCrossEntropyLoss", num_output_chunks=num_output_chunks)
    return out


if __name__ == "__main__":
    file = os.environ.get("TORCHTUNE_CE_FILE", "/tmp/cross_entropy_loss.py")
    for n in (1, 8):
        r = linear_ce(file, num_output_chunks=n)
        print(json.dumps({"n": n, **{k: round(r[k] / r["TV"], 3) for k in ("saved", "forward_peak",
                                                                            "after_forward", "backward_peak")}}))
