"""The recipe changes a fix may propose, and a fix's workload changes applied (answers/fixes.py, combined.py): each
change is a flat dict whose keys are the page's fields and the CLI's flags; FINETUNE_CHANGES among them are
FineTune fields."""

from __future__ import annotations

from dataclasses import replace

FINETUNE_CHANGES = ("fp32_parts",)    # fix changes that are FineTune fields


def with_changes(workload, changes: dict):
    """The workload with a fix's workload changes; FINETUNE_CHANGES go to its FineTune (a change's dict stays flat:
    its keys are the page's fields and the CLI's flags)."""
    ft = {k: v for k, v in changes.items() if k in FINETUNE_CHANGES}
    rest = {k: v for k, v in changes.items() if k not in ft}
    if ft:
        rest["finetune"] = replace(workload.finetune, **ft)
    return replace(workload, **rest) if rest else workload


def recipe_changes(workload):
    """The recipes a workload could add (step/compiled.py, losses.py, optimizer_in_backward.py, offload.py, and
    fp32_stream.py: a launcher that keeps the embeddings and norms in fp32, told to cast them back)."""
    full_training = workload.finetune.mode == "full"
    if not workload.compile and full_training:
        yield "recipe", {"compile": True}
    if workload.loss == "auto" and workload.implementation == "huggingface":
        yield "recipe", {"loss": "chunked"}
    if not workload.optimizer_in_backward and workload.layout.micro_batches == 1:
        yield "recipe", {"optimizer_in_backward": True}
    if not workload.activation_offload and workload.recompute == "full" and workload.recompute_every == 1:
        yield "activation_offload", {"activation_offload": True}
    if workload.finetune.fp32_parts != "none":      # the launcher's fp32 copies cast back (step/fp32_stream.py)
        yield "recipe", {"fp32_parts": "none"}
