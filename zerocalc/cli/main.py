"""python -m zerocalc: the model-state report as a readable table, or --json for machines.

Flag names and JSON keys are a public interface. Bad arguments exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields as dataclass_fields

from ..model.hf_config import ConfigError
from ..model.hub.ids import HubError
from ..model.inventory import largest_layer, param_count
from ..output.report import report_dict
from ..output.text import render_text
from ..parallel.ranks import report_for
from ..scenario import FieldError, Scenario
from ..states.deepspeed_estimator import deepspeed_view
from ..defaults import implied, reasons
from .advice import advice_dict, advice_text
from .optimizer import OPTIMIZER_FIELDS
from .sweep import sweep_for, sweep_text
from ..tables import DEFAULT_CONVENTION
from .flags import build_parser as flags_parser
from .frameworks import (FlagError, export_from_args, export_notes, framework_error_message,
                         import_given, import_view, imported_flag,
                         model_from_import)
from .measured import measured_for, measured_text
from .sources import sources_dict, sources_text
from ..output.vision import vision_dict, vision_text
from .workload import (FLAG_NAMES, ModelFlagError, architecture_from_args, list_gpus, list_models,
                       workload_flags_given, workload_from_args)
from .types import UsageError  # noqa: F401  (callers catch it from here)


SUBCOMMANDS = """Exact training memory per GPU: model states for ZeRO 0-3 / FSDP, and with a model the peak working set,
the verdict against a GPU, the fixes and the solvers.

commands:
  python -m zerocalc FLAGS        a training plan (this page's flags, below)
  python -m zerocalc rl FLAGS     an RL post-training plan (GRPO, PPO, DPO; verl, TRL, OpenRLHF), phase by phase:
                                  python -m zerocalc rl --help
  python -m zerocalc mcp          the same answers as tools for coding agents (Model Context Protocol; needs
                                  pip install 'zerocalc[mcp]'): python -m zerocalc mcp --help

examples:
  python -m zerocalc --model llama-3-70b --gpu H100-SXM-80GB --workers 64 --micro-batch 2 --check-stage 2
  python -m zerocalc --model llama-3-8b --ds-config ds_config.json --json
"""


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser: its flags, grouped as the page's sections, live in flags.py."""
    return flags_parser(SUBCOMMANDS)


def _flag(field: str) -> str:
    return "--" + FLAG_NAMES.get(field, field.replace("_", "-"))


def scenario_from_args(args, params: int) -> Scenario:
    """The convention's ledger, then only the flags the user gave ("none" means no such tensor)."""
    given = {}
    for field in ("param_dtype", "grad_dtype", *OPTIMIZER_FIELDS, "shard_group", "master_dtype",
                  "grad_accum_dtype", "comm_dtype"):
        value = getattr(args, field)
        if value is not None:
            given[field] = None if value == "none" else value
    return Scenario.from_convention(
        args.convention or DEFAULT_CONVENTION, params=params, workers=1 if args.workers is None else args.workers,
        offload_optimizer=args.offload_optimizer or "none", offload_params=args.offload_params or "none",
        gpus_per_node=args.gpus_per_node or 8, **given)


def _deepspeed(args, params: int, arch, report, model_parallel: int = 1):
    largest = args.largest_layer_params
    if largest is None and arch is not None:
        largest = largest_layer(arch)[1]
    if largest is None:
        raise UsageError("--largest-layer-params is required with --deepspeed-estimate (or give a model)")
    if not 1 <= largest <= params:
        raise UsageError(f"--largest-layer-params: got {largest}; allowed: an integer from 1 to the parameter "
                         f"count ({params:,})")
    gpus_per_node = report.scenario.gpus_per_node
    workers = report.scenario.workers
    nodes = args.nodes if args.nodes is not None else max(1, -(-workers // gpus_per_node))
    if not 1 <= nodes <= 10**6:
        raise UsageError(f"--nodes: got {nodes}; allowed: an integer from 1 to 1,000,000")
    return deepspeed_view(params, largest, gpus_per_node, nodes, args.buffer_factor, report, model_parallel)


def _inputs(args):
    """(scenario, architecture or None, workload or None) from the flags, or a UsageError naming the flag."""
    try:
        args.model = args.model or model_from_import(args) or None     # a launcher config names its model
    except FieldError as exc:
        raise UsageError(framework_error_message(imported_flag(args), exc)) from None
    try:
        arch = architecture_from_args(args)
    except HubError as exc:
        raise UsageError(f"--{exc.field}: {exc.allowed}" if exc.field != "hub" else f"--hub: got {exc.value!r}; "
                         f"allowed: {exc.allowed}") from None
    except ConfigError as exc:
        source = "--hub" if args.hub else "--config"
        raise UsageError(f"{source}: {exc.field}: got {exc.value!r}; allowed: {exc.allowed}") from None
    except ModelFlagError as exc:
        raise UsageError(str(exc)) from None
    except FieldError as exc:
        flag = "--dropout" if exc.field.endswith("_dropout") else _flag(exc.field)
        raise UsageError(f"{flag}: got {exc.value!r}; allowed: {exc.allowed}") from None
    if arch is None:
        if workload_flags_given(args):
            raise UsageError(f"{workload_flags_given(args)[0]} needs a model: give --model, --config or "
                             "--layers/--hidden/--heads/--ffn/--vocab")
        if args.params is None:
            raise UsageError("the following arguments are required: --params (or --model / --config)")
        params = args.params
    else:
        params = param_count(arch)
        if args.params is not None and args.params != params:
            raise UsageError(f"--params: got {args.params:,}; the model has {params:,} parameters (leave it out)")
    if arch is not None and not import_given(args):      # a framework config says its own pipeline and recompute
        _apply_defaults(args)
    try:
        workload = workload_from_args(args, arch) if arch is not None else None
        if args.gpus is not None and not import_given(args):
            # with a framework config the layout is known only after the import: import_view derives dp there
            _workers_from_gpus(args, 1 if workload is None else workload.layout.model_parallel)
        scenario = scenario_from_args(args, params)
    except FieldError as exc:
        raise UsageError(f"{_flag(exc.field)}: got {exc.value!r}; allowed: {exc.allowed}") from None
    try:
        scenario, workload, imported = import_view(args, scenario, workload, arch)
    except FlagError as exc:            # --gpus / --workers against the imported layout
        raise UsageError(f"{exc.field}: got {exc.value!r}; allowed: {exc.allowed}") from None
    except FieldError as exc:
        raise UsageError(framework_error_message(imported_flag(args), exc)) from None
    return scenario, arch, workload, imported


def _apply_defaults(args) -> None:
    """The defaults policy the page applies (zerocalc/defaults.py) for the flags not given: --pp 2 alone fills its
    pipeline, QLoRA with k-bit preparation checkpoints every block. Each is said on stderr, as the page says it."""
    fields = {"pp": args.pp or 1, "micro_batches": args.micro_batches or 1, "finetune": args.finetune,
              "kbit_prepare": args.kbit_prepare != "no", "recompute": args.recompute or "none"}
    changes = implied(fields, [f for f in ("micro_batches", "recompute") if getattr(args, f) is None])
    for name, why in reasons(changes).items():
        setattr(args, name, changes[name])
        print(f"zerocalc: note: --{name.replace('_', '-')} {changes[name]} (not given: {why})", file=sys.stderr)


def _workers_from_gpus(args, model_parallel: int) -> None:
    """--gpus names the world size: dp is what is left after tp x pp x cp."""
    if args.gpus % model_parallel:
        raise UsageError(f"--gpus: got {args.gpus:,}; allowed: a multiple of tp x pp x cp ({model_parallel:,})")
    dp = args.gpus // model_parallel
    if args.workers is not None and args.workers != dp:
        raise UsageError(f"--workers: got {args.workers:,}; --gpus {args.gpus:,} with tp x pp x cp = "
                         f"{model_parallel:,} gives {dp:,} data-parallel workers (give one of the two)")
    args.workers = dp


def run(argv) -> str:
    args = build_parser().parse_args(argv)
    if args.list_models or args.list_gpus:
        listing = list_models(args.json) if args.list_models else list_gpus(args.json)
        return json.dumps(listing, indent=2) if args.json else listing
    scenario, arch, workload, imported = _inputs(args)
    try:
        return _render(args, scenario, arch, workload, imported)
    except FlagError as exc:       # an export refusal, named by --export-stage or --export
        raise UsageError(f"{exc.field}: got {exc.value!r}; allowed: {exc.allowed}") from None
    except FieldError as exc:      # a check that needs the whole view (ep against the ranks of a stage, ...)
        raise UsageError(f"{_flag(exc.field)}: got {exc.value!r}; allowed: {exc.allowed}") from None


def _render(args, scenario, arch, workload, imported) -> str:
    if args.export:
        stage = None if imported is None else imported.stage
        found = None if imported is None else imported.imported
        for note in export_notes(args, scenario, workload, _layout_dict(workload), stage, found):
            print(f"zerocalc: note: {note}", file=sys.stderr)
        return export_from_args(args, scenario, workload, _layout_dict(workload), stage, found)
    report = report_for(scenario, workload)
    measured, measured_line = measured_for(args, workload, scenario)       # a run's paste, at the checked stage
    mp = 1 if workload is None else workload.layout.model_parallel
    view = _deepspeed(args, scenario.params, arch, report, mp) if args.deepspeed_estimate else None
    sources = sources_dict(args, imported)
    advised = None if workload is None else advice_dict(scenario, workload, args.check_stage, args.units)
    swept = sweep_for(args, scenario, workload)
    if args.json:
        extra = ({} if advised is None else {"check_stage": advised["stage"], "fixes": advised["fixes"]}) | (
            {"sweep": swept} if swept else {})
        return json.dumps({**report_dict(report, view, layouts=workload is not None, sequences=True,
                                         measured=measured), **extra, **sources, **measured_line}, indent=2)
    return render_text(report, view, args.units, measured) + measured_text(measured_line) + vision_text(vision_dict(scenario, workload), args.units) + \
        (advice_text(advised) if advised else "") + sweep_text(swept, args.units) + sources_text(sources, args.units)


def _layout_dict(workload) -> dict:
    if workload is None:
        return {}
    return {f.name: getattr(workload.layout, f.name) for f in dataclass_fields(workload.layout)}


def _printable(text: str) -> str:
    """One line: a control character in an echoed argument is written as its escape (\\r, \\x1b)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rl"]:                # an RL post-training plan: its own flags (cli/rl.py)
        from .rl import main as rl_main
        return rl_main(argv[1:], lambda rest: _inputs(build_parser().parse_args(rest)))
    try:
        print(run(argv))
    except UsageError as exc:
        print(f"zerocalc: error: {_printable(str(exc))}", file=sys.stderr)
        return 2
    return 0
