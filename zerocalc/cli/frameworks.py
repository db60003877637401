"""The CLI side of framework configs, for cli.py to call: flags, reading a file, applying an import, exporting.

    add_framework_flags(parser)                              # in build_parser()
    found = import_from_args(args, context_for(scenario, workload, arch))   # None without an import flag
    applied = apply_import(found.imported, scenario, workload, keep=explicit_fields)
    text = export_from_args(args, applied.scenario, applied.workload, applied.layout, applied.stage)

Errors are FrameworkConfigError (a FieldError); framework_error_message(flag, exc) is the one line for stderr.
FlagError (also a FieldError) names a CLI flag instead: --gpus or --workers against the imported layout,
--export-stage or --export for a view the export refuses.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import NamedTuple, Optional

from ..frameworks import (FORMATS, LAUNCHER_FORMATS, MAX_CONFIG_BYTES, FrameworkConfigError, ImportContext,
                          ImportedConfig, import_config)
from ..frameworks.base_file import file_base
from ..frameworks.export import ExportError, export_caveats, export_config
from ..scenario import FieldError

IMPORT_FLAGS = (("--ds-config", "ds_config", "deepspeed", "a DeepSpeed ds_config.json"),
                ("--accelerate-config", "accelerate_config", "accelerate", "an accelerate config YAML"),
                ("--torchtitan-config", "torchtitan_config", "torchtitan", "a torchtitan train config TOML"),
                ("--llamafactory-config", "llamafactory_config", "llamafactory",
                 "a LLaMA-Factory training YAML (its deepspeed file is followed)"),
                ("--hf-trainer-config", "hf_trainer_config", "hf_trainer",
                 "Hugging Face TrainingArguments / TRL SFTConfig as JSON or YAML (its deepspeed file is followed)"),
                ("--axolotl-config", "axolotl_config", "axolotl",
                 "an axolotl training YAML (its deepspeed file is followed)"),
                ("--torchtune-config", "torchtune_config", "torchtune",
                 "a torchtune recipe YAML (the recipe named in its header comment)"),
                ("--litgpt-config", "litgpt_config", "litgpt", "a LitGPT finetune_lora / finetune_full YAML"),
                ("--swift-config", "swift_config", "swift",
                 "ms-swift arguments: a swift sft --config YAML / JSON, or a swift sft|rlhf|pt shell script"))


class FoundImport(NamedTuple):
    flag: str
    imported: ImportedConfig


class AppliedImport(NamedTuple):
    scenario: object            # zerocalc.scenario.Scenario
    workload: object            # zerocalc.step.workload.Workload or None
    layout: dict
    stage: Optional[int]
    imported: ImportedConfig


class FlagError(FieldError):
    """A CLI flag that does not fit the imported view (`field` is the flag itself, as "--gpus")."""


def add_framework_flags(parser):
    """--ds-config / --accelerate-config / --torchtitan-config PATH (one of them), --export FORMAT, --export-stage."""
    group = parser.add_argument_group("load a config: framework configs, read as data, never executed (the page's "
                                      "Load a config)")
    exclusive = group.add_mutually_exclusive_group()
    for flag, _, fmt, what in IMPORT_FLAGS:
        exclusive.add_argument(flag, metavar="PATH", help=f"import {what}; explicit flags override it")
    group.add_argument("--export", choices=FORMATS, help="print the view as that framework's config")
    group.add_argument("--export-stage", type=int, choices=(0, 1, 2, 3),
                       help="ZeRO stage to export (default: the imported file's, else 3)")
    return group


def read_config_file(path: str, flag: str) -> bytes:
    """The file's bytes, size-capped. Only read: nothing in it runs."""
    p = Path(path)
    if not p.is_file():
        raise FrameworkConfigError(flag, path, "a path to a readable file")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise FrameworkConfigError(flag, path, f"a file of at most {MAX_CONFIG_BYTES:,} bytes")
    return p.read_bytes()


def context_for(scenario=None, workload=None, arch=None, layout=None, gpus=None) -> ImportContext:
    """What "auto" resolves from: the model's hidden size and the current view. The world size is `gpus` when
    given (the CLI's --gpus), else a "gpus" entry of `layout` (Layout itself has none: the caller adds it)."""
    precision = None if scenario is None else (scenario.comm_dtype or scenario.param_dtype)
    gas = None if not layout else layout.get("micro_batches")
    if gpus is None:
        gpus = None if not layout else layout.get("gpus")
    return ImportContext(hidden_size=getattr(arch, "hidden", None),
                         micro_batch=getattr(workload, "micro_batch", None), gradient_accumulation_steps=gas,
                         precision=precision, workers=getattr(scenario, "workers", None), gpus=gpus)


def import_from_args(args, context=None) -> Optional[FoundImport]:
    for flag, dest, fmt, _ in IMPORT_FLAGS:
        path = getattr(args, dest, None)
        if path is not None:
            return FoundImport(flag, import_config(fmt, read_config_file(path, flag), context,
                                                   read=_follower(path)))
    return None


def _follower(config_path: str):
    """read(path) for the files a launcher config points to: as the launcher opens it, from the working directory;
    else from the config's folder or a folder above it (LLaMA-Factory's examples name examples/deepspeed/... from
    the repository root)."""
    def read(target: str) -> bytes:
        here = Path(config_path).resolve().parent
        for base in (Path.cwd(), here, *here.parents):
            candidate = base / target
            if candidate.is_file():
                return read_config_file(str(candidate), "deepspeed")
        raise FrameworkConfigError("deepspeed", target, "a DeepSpeed config path found from the working directory "
                                                        f"or from {here} (or a folder above it)")
    return read


def model_from_import(args) -> str:
    """The preset a launcher config's model (or a torchtitan file's [model] flavor) names ("" when none, or when
    the view names its own model)."""
    if any(getattr(args, name, None) for name in ("model", "config", "hub")):
        return ""
    for flag, dest, fmt, _ in IMPORT_FLAGS:
        path = getattr(args, dest, None)
        if path is not None and (fmt in LAUNCHER_FORMATS or fmt == "torchtitan"):
            return import_config(fmt, read_config_file(path, flag)).model
    return ""


def apply_import(imported: ImportedConfig, scenario, workload=None, keep=()) -> AppliedImport:
    """The view with the file's fields applied, except those in `keep` (fields the user set explicitly).
    A combination the core refuses is reported against the file's key that set it."""
    s_changes = {k: v for k, v in imported.scenario.items() if k not in keep}
    try:
        new_scenario = scenario.with_changes(**s_changes)
        new_workload = workload
        if workload is not None:
            known = {f.name for f in fields(workload)}
            w_changes = {k: v for k, v in imported.workload.items() if k in known and k not in keep}
            f_changes = {k: v for k, v in imported.finetune.items() if FINETUNE_DESTS.get(k, k) not in keep}
            if f_changes:
                w_changes["finetune"] = replace(workload.finetune, **f_changes)
            new_workload = replace(workload, **w_changes)
    except FrameworkConfigError:
        raise
    except FieldError as exc:
        source = imported.sources.get(f"scenario.{exc.field}") or imported.sources.get(f"workload.{exc.field}") \
            or imported.sources.get(f"finetune.{exc.field}") or exc.field
        raise FrameworkConfigError(source, exc.value, f"{exc.allowed} (zerocalc's {exc.field})") from None
    layout = {k: v for k, v in imported.layout.items() if k not in keep}
    return AppliedImport(new_scenario, new_workload, layout, imported.selected_stage, imported)


def _plain(obj) -> dict:
    return {} if obj is None else {f.name: getattr(obj, f.name) for f in fields(obj)}


def imported_file(args, fmt: str, imported=None) -> dict:
    """{"base": the imported file as data, "auto_values": what its "auto" keys resolved to} when --export writes
    the format the file was imported from (the export then goes over it: frameworks/passthrough.py); else {}."""
    found = next(((flag, getattr(args, dest)) for flag, dest, f, _ in IMPORT_FLAGS
                  if f == fmt and getattr(args, dest, None) is not None), None)
    if found is None:
        return {}
    return file_base(fmt, read_config_file(found[1], found[0]), imported)


def export_from_args(args, scenario, workload=None, layout=None, stage=None, imported=None) -> Optional[str]:
    """The --export text (caveats included as comments for YAML / TOML), or None without --export; over the
    imported file when it is of the exported format."""
    fmt = getattr(args, "export", None)
    if fmt is None:
        return None
    stage = _export_stage(args, stage)
    with _export_errors(args):
        return export_config(fmt, _plain(scenario), _plain(workload), dict(layout or {}), stage,
                             **imported_file(args, fmt, imported))


def export_notes(args, scenario, workload=None, layout=None, stage=None, imported=None) -> list:
    """What the --export leaves out (for stderr, since JSON has no comments), and what it passed through."""
    fmt = getattr(args, "export", None)
    if fmt is None:
        return []
    stage = _export_stage(args, stage)
    with _export_errors(args):
        return export_caveats(fmt, _plain(scenario), _plain(workload), dict(layout or {}), stage,
                              **imported_file(args, fmt, imported))


def _export_stage(args, stage):
    chosen = getattr(args, "export_stage", None)
    return chosen if chosen is not None else (3 if stage is None else stage)


@contextmanager
def _export_errors(args):
    """An export refusal names the flag that chose what is refused: the stage is --export-stage's (or the
    imported file's, which --export-stage overrides); anything else is the view, named under --export."""
    try:
        yield
    except ExportError as exc:
        if exc.field == "stage":
            chosen = getattr(args, "export_stage", None) is not None
            raise FlagError("--export-stage", exc.value, exc.allowed + ("" if chosen else
                            " (the stage came from the imported file; give --export-stage)")) from None
        raise FlagError(f"--export {args.export}", f"{exc.field} = {exc.value!r}", exc.allowed) from None


# Scenario / Workload / Layout fields a CLI flag of the same name sets (args attribute = field name).
EXPLICIT_FLAGS = ("workers", "shard_group", "convention", "param_dtype", "grad_dtype", "master_dtype",
                  "grad_accum_dtype", "optimizer", "optimizer_dtype", "comm_dtype", "offload_optimizer",
                  "offload_params", "gpus_per_node", "micro_batch", "seq_len", "activation_dtype", "attention",
                  "recompute", "implementation", "reduce_bucket_size", "allgather_bucket_size",
                  "prefetch_bucket_size", "max_live_parameters", "param_persistence_threshold", "overlap_comm",
                  "comm_buffers", "grad_lifetime", "fsdp_wrap", "fsdp_version", "fsdp_use_orig_params",
                  "fsdp_backward_prefetch",
                  "cuda_context_bytes", "nccl_buffsize", "nccl_nvls", "nccl_percent", "moe_dispatcher",
                  "workspace_bytes", "fragmentation_percent", "allocator", "allocator_units", "gpu", "gpu_memory",
                  "tp", "pp", "vpp", "cp", "ep", "etp", "sequence_parallel", "micro_batches", "schedule", "loss_parallel", "vocab_divisor")


# FineTune field -> the CLI dest that sets it, where the two differ (cli/workload.py FINETUNE_FLAGS)
FINETUNE_DESTS = {"mode": "finetune"}
FINETUNE_EXPLICIT = ("finetune", "lora_rank", "lora_targets", "lora_dropout", "adapter_dtype", "modules_to_save",
                     "train_last_layers", "train_modules", "base_dtype", "quant_type", "quant_block_size",
                     "double_quant", "kbit_prepare", "quantize_head", "fp32_parts")


def explicit_fields(args) -> set:
    """Fields the user set with a flag: an imported file never overrides them."""
    given = {f for f in EXPLICIT_FLAGS + FINETUNE_EXPLICIT if getattr(args, f, None) is not None}
    if getattr(args, "gpus", None) is not None:
        given.add("workers")
    if getattr(args, "dropout", None) is not None:
        given.add("attn_dropout")
    return given


def imported_flag(args) -> str:
    return next((flag for flag, dest, _, _ in IMPORT_FLAGS if getattr(args, dest, None) is not None), "--config")


def import_given(args) -> bool:
    """Whether one of the import flags (IMPORT_FLAGS) was given."""
    return any(getattr(args, dest, None) is not None for _, dest, _, _ in IMPORT_FLAGS)


def import_view(args, scenario, workload, arch):
    """(scenario, workload, AppliedImport or None): the view with an imported framework config applied, explicit
    flags kept. The file's layout (tp, pp, cp, ep, micro-batches, schedule, world size) applies to the workload.

    --gpus is the world size: the importers get it (torchtitan's data_parallel_shard_degree -1, accelerate's
    num_processes -1), and the workers are derived from it only once the layout is final (the file's tp, pp and cp,
    explicit --tp/--pp/--cp winning): dp = gpus / (tp x pp x cp). The file is then read again with that
    data-parallel size, for the batch arithmetic and "auto" keys that need it."""
    layout_now = {} if workload is None else {f.name: getattr(workload.layout, f.name)
                                               for f in fields(workload.layout)}
    world = getattr(args, "gpus", None)
    context = context_for(scenario, workload, arch, layout_now, gpus=world)
    if world is not None:
        context = replace(context, workers=None)     # unknown until the file's layout is
    found = import_from_args(args, context)
    if found is None:
        return scenario, workload, None
    keep = explicit_fields(args)
    if world is not None:
        layout = None if workload is None else _layout_after(found, workload, keep)
        mp = 1 if layout is None else layout.model_parallel
        if world % mp:
            raise FlagError("--gpus", world, f"a multiple of tp x pp x cp = {mp:,} (the layout after "
                                             f"{found.flag}: {_layout_text(layout)})")
        dp = world // mp
        if getattr(args, "workers", None) is not None and args.workers != dp:
            raise FlagError("--workers", args.workers, f"{dp:,}: --gpus {world:,} over tp x pp x cp = {mp:,} "
                                                       f"after {found.flag} (give one of the two)")
        try:
            scenario = scenario.with_changes(workers=dp)
        except FieldError as exc:                    # --shard-group against the derived workers
            raise FlagError("--" + exc.field.replace("_", "-"), exc.value,
                            f"{exc.allowed} (--gpus {world:,} gives {dp:,} workers)") from None
        found = import_from_args(args, replace(context, workers=dp))   # batch and "auto" keys that need dp
    return _apply(found, scenario, workload, keep)


def _layout_text(layout) -> str:
    return "no model, so no layout" if layout is None else f"tp {layout.tp}, pp {layout.pp}, cp {layout.cp}"


def _layout_changes(found, workload, keep) -> dict:
    """The file's layout fields that apply to the workload (those not set by an explicit flag)."""
    known = {f.name for f in fields(workload.layout)}
    changes = {k: v for k, v in found.imported.layout.items() if k in known and k not in keep}
    if changes.get("schedule") == "interleaved" and "vpp" not in changes and workload.layout.vpp < 2:
        changes["vpp"] = 2
    return changes


def _layout_after(found, workload, keep):
    try:
        return replace(workload.layout, **_layout_changes(found, workload, keep))
    except FieldError as exc:
        source = found.imported.sources.get(f"layout.{exc.field}", exc.field)
        raise FrameworkConfigError(source, exc.value, f"{exc.allowed} (zerocalc's {exc.field})") from None


def _apply(found, scenario, workload, keep):
    applied = apply_import(found.imported, scenario, workload, keep=keep)
    scenario, workload = applied.scenario, applied.workload
    gpus = applied.layout.get("gpus")
    if workload is not None:
        workload = replace(workload, layout=_layout_after(found, workload, keep))
    if gpus and "workers" not in keep and "workers" not in found.imported.scenario:
        mp = 1 if workload is None else workload.layout.model_parallel
        if gpus % mp:
            raise FrameworkConfigError(found.imported.sources.get("layout.gpus", "gpus"), gpus,
                                       f"a multiple of tp x pp x cp ({mp:,})")
        scenario = scenario.with_changes(workers=gpus // mp, shard_group=None)
    return scenario, workload, applied._replace(scenario=scenario, workload=workload)


def framework_error_message(flag: str, exc: FieldError) -> str:
    """One line naming the flag, the key and what is allowed (the CLI's UsageError text)."""
    return f"{flag}: {exc.field}: got {exc.value!r}; allowed: {exc.allowed}"
