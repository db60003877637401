"""The CLI's batch and MoE-routing flags (issue 37): how a micro-batch is cut from samples of different lengths
(step/batches.py), Hugging Face's load-balancing loss (step/router_loss.py) and a loop that holds the model's output
(step/losses.py held_output_bytes), each a Workload field."""

from __future__ import annotations

from ..scenario import FieldError
from ..step.batches import BATCH_MODES, parse_points, points_from_csv

# field -> flag, for the errors (cli/workload.py FLAG_NAMES)
BATCH_FLAG_NAMES = {"batch_lengths": "lengths"}
BATCH_FLAGS = ("batch_mode", "lengths", "lengths_csv", "token_budget", "router_loss", "holds_output",
               "holds_graph")


def add_batch_flags(m, count) -> None:
    """The flags, on the model / peak-memory argument group; `count` the CLI's positive-integer type."""
    m.add_argument("--batch-mode", choices=BATCH_MODES, help="fixed (every sample --seq-len long; default), padded "
                   "(--micro-batch samples padded to their longest; --seq-len the longest a sample may be) or "
                   "packed (--micro-batch rows of --seq-len tokens, flash-attention varlen): the report gives the "
                   "typical and the worst step, and the verdict judges the worst")
    m.add_argument("--lengths", metavar="pN=T,...", help="the samples' lengths in tokens as percentiles, e.g. "
                   "p50=512,p90=2048,p99=6000,max=8192 (with --batch-mode padded or packed; --seq-len defaults "
                   "to max)")
    m.add_argument("--lengths-csv", metavar="FILE", help="the samples' lengths from a CSV, one length (tokens) "
                   "per row in the first column, read into percentiles")
    m.add_argument("--token-budget", type=count, metavar="TOKENS", help="packed rows of this many tokens: "
                   "--batch-mode packed with --seq-len TOKENS (the solve answers the largest budget that fits)")
    m.add_argument("--router-loss", nargs="?", const="yes", choices=("yes", "no"), help="Hugging Face's MoE "
                   "load-balancing loss (output_router_logits): every layer's router logits kept to the loss "
                   "and the loss's own tensors (default no, as every MoE config)")
    m.add_argument("--holds-output", nargs="?", const="yes", choices=("yes", "no"), help="the training loop keeps "
                   "the model's output (output = model(...); loss = output.loss; loss.backward(); "
                   "optimizer.step()): its logits stay through backward and the step (default no: the Trainer, "
                   "torchtune and torchtitan drop them first)")
    m.add_argument("--holds-graph", nargs="?", const="yes", choices=("yes", "no"), help="the training loop keeps "
                   "the last step's logits and loss until the next step's replace them (LitGPT's fit loops): "
                   "they and what the graph keeps beyond backward (bitsandbytes' base-linear inputs) stay through "
                   "the step and into the next forward (default no)")


def batch_fields(args) -> dict:
    """The Workload fields the flags give (an empty dict when none is given)."""
    out = {}
    mode = getattr(args, "batch_mode", None)
    budget = getattr(args, "token_budget", None)
    if budget is not None:
        if mode not in (None, "packed"):
            raise FieldError("batch_mode", mode, "packed with --token-budget (a packed row's budget)")
        if getattr(args, "seq_len", None) not in (None, budget):
            raise FieldError("seq_len", args.seq_len, f"{budget:,} or none with --token-budget {budget:,} (the "
                                                      "budget is the packed row's length)")
        mode, out["seq_len"] = "packed", budget
    if getattr(args, "lengths", None) and getattr(args, "lengths_csv", None):
        raise FieldError("batch_lengths", args.lengths_csv, "--lengths or --lengths-csv, not both")
    points = None
    if getattr(args, "lengths", None):
        points = parse_points(args.lengths)
    elif getattr(args, "lengths_csv", None):
        try:
            with open(args.lengths_csv, encoding="utf-8") as fh:
                text = fh.read(50_000_000)
        except (OSError, UnicodeDecodeError) as exc:
            raise FieldError("lengths_csv", args.lengths_csv, f"a readable UTF-8 CSV file ({exc.__class__.__name__})")
        points = points_from_csv(text)
    if points:
        out["batch_lengths"] = points
        mode = mode or "padded"
        if "seq_len" not in out and getattr(args, "seq_len", None) is None:
            out["seq_len"] = points[-1][1]                  # the longest sample
    if mode is not None:
        out["batch_mode"] = mode
    for flag in ("router_loss", "holds_output", "holds_graph"):
        if getattr(args, flag, None) is not None:
            out[flag] = getattr(args, flag) == "yes"
    return out
