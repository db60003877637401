"""python -m zerocalc: the model-state report as a readable table, or --json for machines.

Flag names and JSON keys are a public interface. Bad arguments exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from . import __version__
from .deepspeed_estimator import deepspeed_view
from .model_states import model_states
from .report import report_dict
from .scenario import FieldError, Scenario
from .tables import CONVENTIONS, DEFAULT_CONVENTION, DTYPE_BITS, OFFLOAD_TARGETS, OPTIMIZERS
from .text_report import render_text
from .units import UNIT_CHOICES, parse_count


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, never the usage block
        raise UsageError(message)


def _count(text: str) -> int:
    try:
        return parse_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a number above 0 and at most 100")
    return value


def _dtype_or_none(text: str):
    if text == "none":
        return "none"
    if text not in DTYPE_BITS:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: none, {', '.join(DTYPE_BITS)}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m zerocalc", description="Exact ZeRO model-state memory per worker, stages 0-3.")
    p.add_argument("--version", action="version", version=f"zerocalc {__version__}")
    p.add_argument("--params", type=_count, required=True, help="parameter count: 1e9, 7B, 1.5T, 350M, 124439808")
    p.add_argument("--workers", type=_count, default=1, help="data-parallel workers (default 1)")
    p.add_argument("--shard-group", type=_count, help="workers one sharded copy is split across (default: all)")
    p.add_argument("--convention", choices=list(CONVENTIONS), default=DEFAULT_CONVENTION,
                   help=f"preset ledger (default {DEFAULT_CONVENTION}); the dtype flags below override it")
    dtypes = list(DTYPE_BITS)
    p.add_argument("--param-dtype", choices=dtypes)
    p.add_argument("--grad-dtype", choices=dtypes)
    p.add_argument("--master-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}")
    p.add_argument("--grad-accum-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}",
                   help="an extra gradient accumulation buffer (DeepSpeed keeps an fp32 one)")
    p.add_argument("--optimizer", choices=list(OPTIMIZERS))
    p.add_argument("--optimizer-dtype", choices=dtypes)
    p.add_argument("--comm-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}",
                   help="dtype tensors are communicated in (none: their own)")
    p.add_argument("--factored-dim", type=_count, help="Adafactor: side of the assumed square matrices (4096)")
    p.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, default="none")
    p.add_argument("--offload-params", choices=OFFLOAD_TARGETS, default="none")
    p.add_argument("--gpus-per-node", type=_count, default=8)
    p.add_argument("--units", choices=UNIT_CHOICES, default="decimal",
                   help="GB, GiB, TB, ... or decimal / binary: an automatic unit of that system (default decimal)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (integers are bytes)")
    p.add_argument("--deepspeed-estimate", action="store_true",
                   help="add what DeepSpeed's estimate_zero{2,3}_model_states_mem_needs return")
    p.add_argument("--largest-layer-params", type=_count, help="for the DeepSpeed ZeRO-3 rows")
    p.add_argument("--nodes", type=_count, help="for the DeepSpeed view (default: workers / gpus-per-node)")
    p.add_argument("--buffer-factor", type=_factor, default=1.5, help="DeepSpeed additional_buffer_factor (1.5)")
    return p


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def scenario_from_args(args) -> Scenario:
    """The convention's ledger, then only the flags the user gave ("none" means no such tensor)."""
    given = {}
    for field in ("param_dtype", "grad_dtype", "optimizer", "optimizer_dtype", "factored_dim", "shard_group",
                  "master_dtype", "grad_accum_dtype", "comm_dtype"):
        value = getattr(args, field)
        if value is not None:
            given[field] = None if value == "none" else value
    return Scenario.from_convention(
        args.convention, params=args.params, workers=args.workers, offload_optimizer=args.offload_optimizer,
        offload_params=args.offload_params, gpus_per_node=args.gpus_per_node, **given)


def _deepspeed(args, report):
    if args.largest_layer_params is None:
        raise UsageError("--largest-layer-params is required with --deepspeed-estimate")
    if not 1 <= args.largest_layer_params <= args.params:
        raise UsageError(f"--largest-layer-params: got {args.largest_layer_params}; "
                         f"allowed: an integer from 1 to --params ({args.params:,})")
    gpus_per_node = args.gpus_per_node
    nodes = args.nodes if args.nodes is not None else max(1, -(-args.workers // gpus_per_node))
    if not 1 <= nodes <= 10**6:
        raise UsageError(f"--nodes: got {nodes}; allowed: an integer from 1 to 1,000,000")
    return deepspeed_view(args.params, args.largest_layer_params, gpus_per_node, nodes, args.buffer_factor, report)


def run(argv) -> str:
    args = build_parser().parse_args(argv)
    try:
        scenario = scenario_from_args(args)
    except FieldError as exc:
        raise UsageError(f"{_flag(exc.field)}: got {exc.value!r}; allowed: {exc.allowed}") from None
    report = model_states(scenario)
    view = _deepspeed(args, report) if args.deepspeed_estimate else None
    if args.json:
        return json.dumps(report_dict(report, view), indent=2)
    return render_text(report, view, args.units)


def main(argv=None) -> int:
    try:
        print(run(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"zerocalc: error: {exc}", file=sys.stderr)
        return 2
    return 0
