"""python -m zerocalc: the model-state report as a readable table, or --json for machines.

Flag names and JSON keys are a public interface. Bad arguments exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields as dataclass_fields

from .. import __version__
from ..gpus import GPU_CATALOG
from ..layout import SCHEDULES, STAGE_SPLITS
from ..model.finetune import MODES, QUANT_TYPES, SAVEABLE, TRAINABLE_MODULES
from ..model.hf_config import ConfigError
from ..model.hub.ids import HubError
from ..model.inventory import largest_layer, param_count
from ..model.presets import MODEL_PRESETS
from ..output.report import report_dict
from ..output.text import render_text
from ..parallel.ranks import report_for
from ..scenario import FieldError, Scenario
from ..versions import DEFAULTS as VERSION_DEFAULTS
from ..states.deepspeed_estimator import deepspeed_view
from ..step.activations import ATTENTION, IMPLEMENTATIONS
from ..answers.sweep import AXES
from ..defaults import implied, reasons
from .advice import advice_dict, advice_text
from .recipe_flags import add_recipe_flags
from .optimizer import OPTIMIZER_FIELDS, add_optimizer_flags
from .sweep import sweep_for, sweep_text
from ..step.allocator import ALLOCATORS
from ..step.buffers import COMM_BUFFERS, FSDP_WRAPS
from ..step.fsdp1 import FSDP_VERSIONS, ORIG_PARAMS, PREFETCH
from ..step.grad_lifetime import GRAD_LIFETIMES
from ..step.host import LOADING_CHOICES
from ..step.workload import OVERLAP_CHOICES, RESHARD_CHOICES
from ..tables import CONVENTIONS, DEFAULT_CONVENTION, DTYPE_BITS, OFFLOAD_TARGETS
from ..units import UNIT_CHOICES
from .frameworks import (FlagError, add_framework_flags, export_from_args, export_notes, framework_error_message,
                         import_given, import_view, imported_flag,
                         model_from_import)
from .sources import sources_dict, sources_text
from ..output.vision import vision_dict, vision_text
from .vision import add_vision_flags
from .workload import (FLAG_NAMES, ModelFlagError, architecture_from_args, list_gpus, list_models,
                       workload_flags_given, workload_from_args)


from .types import (UsageError, _capacity, _count, _dtype_or_none, _factor, _names, _Parser,  # noqa: F401
                    _probability, _stage_layers, _targets, _versions)


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
    p = _Parser(prog="python -m zerocalc", usage="python -m zerocalc [rl | mcp] [FLAGS ...]",
                formatter_class=argparse.RawDescriptionHelpFormatter, description=SUBCOMMANDS)
    p.add_argument("--version", action="version", version=f"zerocalc {__version__}")
    p.add_argument("--params", type=_count, help="parameter count: 1e9, 7B, 1.5T, 350M, 124439808 "
                                                 "(or give a model below)")
    p.add_argument("--workers", type=_count, help="data-parallel workers: the ZeRO / FSDP group, dp (default 1)")
    p.add_argument("--shard-group", type=_count, help="workers one sharded copy is split across (default: all)")
    p.add_argument("--convention", choices=list(CONVENTIONS),
                   help=f"preset ledger (default {DEFAULT_CONVENTION}); the dtype flags below override it")
    dtypes = list(DTYPE_BITS)
    p.add_argument("--param-dtype", choices=dtypes)
    p.add_argument("--grad-dtype", choices=dtypes)
    p.add_argument("--master-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}")
    p.add_argument("--grad-accum-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}",
                   help="an extra gradient accumulation buffer (DeepSpeed keeps an fp32 one)")
    add_optimizer_flags(p, _count)
    p.add_argument("--comm-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}",
                   help="dtype tensors are communicated in (none: their own)")
    p.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, help="default none")
    p.add_argument("--offload-params", choices=OFFLOAD_TARGETS, help="default none")
    p.add_argument("--gpus-per-node", type=_count, help="default 8")
    p.add_argument("--host-ram", dest="host_memory_bytes", type=_capacity, metavar="CAPACITY",
                   help="one node's host RAM, with its unit: 512GB, 2TiB (default: not checked; the report still "
                        "says what a node needs at start-up and in the step)")
    p.add_argument("--model-loading", choices=LOADING_CHOICES,
                   help="how a node's processes load the model at start-up (default auto: zero.Init under "
                        "DeepSpeed ZeRO-3, meta under Megatron, else every process's own fp32 copy)")
    p.add_argument("--units", choices=UNIT_CHOICES, default="decimal",
                   help="GB, GiB, TB, ... or decimal / binary: an automatic unit of that system (default decimal)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (integers are bytes)")
    p.add_argument("--deepspeed-estimate", action="store_true",
                   help="add what DeepSpeed's estimate_zero{2,3}_model_states_mem_needs return")
    p.add_argument("--largest-layer-params", type=_count, help="for the DeepSpeed ZeRO-3 rows")
    p.add_argument("--nodes", type=_count, help="for the DeepSpeed view (default: workers / gpus-per-node)")
    p.add_argument("--buffer-factor", type=_factor, default=1.5, help="DeepSpeed additional_buffer_factor (1.5)")
    _model_flags(p)
    add_framework_flags(p)
    return p


def _model_flags(p):
    m = p.add_argument_group("model and peak memory (any of these adds the peak working set and the solvers)")
    m.add_argument("--model", choices=list(MODEL_PRESETS), help="a preset (see --list-models)")
    m.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (read locally, never executed)")
    m.add_argument("--hub", metavar="ORG/NAME", help="fetch a model's config.json from the Hugging Face Hub (no "
                                                     "weights; HF_TOKEN from the environment; HF_HUB_OFFLINE honoured)")
    m.add_argument("--revision", help="with --hub: a branch, tag or commit (default main)")
    for flag in ("--layers", "--hidden", "--heads", "--kv-heads", "--ffn", "--vocab"):
        m.add_argument(flag, type=_count, help="architecture field (overrides the preset's)")
    m.add_argument("--tied-embeddings", nargs="?", const="yes", choices=("yes", "no"))
    m.add_argument("--score-head", type=int, metavar="N", help="a score head of N outputs in place of the LM head "
                   "(1: a PPO critic's value head or a reward model's; default 0: the LM head)")
    m.add_argument("--micro-batch", type=_count)
    m.add_argument("--seq-len", type=_count, help="sequence length (default 2048)")
    m.add_argument("--attention", choices=ATTENTION, help="eager keeps the s^2 scores (default flash)")
    m.add_argument("--activation-dtype", choices=list(DTYPE_BITS), help="default: the compute dtype")
    m.add_argument("--dropout", type=_probability, help="every dropout probability (default: the model's)")
    m.add_argument("--implementation", choices=IMPLEMENTATIONS, help="which kernels save activations "
                                                                      "(default huggingface)")
    m.add_argument("--cross-entropy-loss-fusion", dest="loss_fusion", action="store_const", const=True,
                   help="with --implementation megatron: Megatron's fused (native) cross entropy, whose backward "
                        "holds an fp32 copy of the softmax and a bf16 gradient (default: unfused, as Megatron)")
    add_recipe_flags(m)
    m.add_argument("--sweep", choices=tuple(AXES), help="every stage's peak along this input, the others held, "
                   "and where the --check-stage stage stops fitting")
    m.add_argument("--check-stage", type=int, choices=range(4), metavar="{0,1,2,3}",
                   help="the ZeRO stage the plan runs at, for what would make it fit (default: 3 across "
                        "workers, 0 on one GPU)")
    m.add_argument("--gpu", choices=list(GPU_CATALOG), help="default H100-SXM-80GB (see --list-gpus)")
    m.add_argument("--gpu-memory", type=_capacity, metavar="CAPACITY",
                   help="a custom capacity PyTorch can use, with its unit: 48GB, 44.4GiB, 46068MiB (overrides --gpu)")
    for flag in ("--reduce-bucket-size", "--allgather-bucket-size", "--prefetch-bucket-size",
                 "--max-live-parameters", "--param-persistence-threshold"):
        m.add_argument(flag, type=_count, help="DeepSpeed ZeRO knob, in elements")
    m.add_argument("--overlap-comm", choices=OVERLAP_CHOICES, help="auto: on for stage 3 only (DeepSpeed)")
    m.add_argument("--comm-buffers", choices=COMM_BUFFERS,
                   help="whose gradient buckets and gathered parameters the step holds: deepspeed (fixed-size "
                        "buckets), megatron (none beyond its grad buffer), fsdp (one unit at a time), none; "
                        "auto (default): from the convention (megatron, fsdp2 -> fsdp, else deepspeed), none "
                        "without data parallelism unless DeepSpeed")
    m.add_argument("--grad-lifetime", choices=GRAD_LIFETIMES, help="gradients live the whole step (a persistent "
                   "buffer) or from backward on (set_to_none); auto: backward for torch loops at one micro-batch")
    m.add_argument("--fsdp-wrap", choices=FSDP_WRAPS,
                   help="FSDP units: blocks (default: each decoder block, the ends in the root) or torchtitan "
                        "(the embedding, each block, [norm, head] kept gathered after forward)")
    m.add_argument("--fsdp-version", type=int, choices=FSDP_VERSIONS, help="which FSDP the fsdp buffers model: 2 "
                   "(default: fully_shard, per-tensor shards) or 1 (FullyShardedDataParallel: a flat parameter per "
                   "unit)")
    m.add_argument("--fsdp-use-orig-params", choices=ORIG_PARAMS, help="FSDP1's use_orig_params (default no): yes "
                   "lets a unit mix frozen and trainable weights and allocates its whole flat gradient")
    m.add_argument("--fsdp-backward-prefetch", choices=PREFETCH, help="FSDP1's backward_prefetch: pre (default, "
                   "torch's BACKWARD_PRE), post, none (accelerate's and the HF Trainer's NO_PREFETCH)")
    m.add_argument("--reshard-after-forward", choices=RESHARD_CHOICES,
                   help="FSDP2 at stage 3: yes frees each unit's gathered parameters after forward, no keeps them "
                        "(under pp: the stage unsharded for the step); auto (default): torchtitan's, no under pp")
    m.add_argument("--reduce-dtype", choices=list(DTYPE_BITS),
                   help="FSDP's reduce_dtype (default: the compute dtype; torchtitan: fp32)")
    m.add_argument("--cuda-context-bytes", type=_count, help="CUDA context and framework overhead (1 GiB)")
    m.add_argument("--workspace-bytes", type=_count,
                   help="GEMM workspaces held in PyTorch's allocator (default: by GPU and implementation: 2 cuBLAS workspaces, 32 MiB each on sm90, + Transformer Engine's under megatron)")
    m.add_argument("--fragmentation-percent", type=_count, help="allocator reserve, %% of tensors (5)")
    m.add_argument("--allocator", choices=tuple(ALLOCATORS),
                   help="which allocator the reserve's band models: caching (PyTorch's default), expandable "
                        "(expandable_segments:True), flat (0-15%%, the band before issue 20)")
    m.add_argument("--allocator-units", type=_count,
                   help="ZeRO-3 unit cycles the reserve holds beyond the percent (0; the band's high end: 2)")
    par = p.add_argument_group("parallel layout (world = dp x tp x pp x cp; needs a model)")
    par.add_argument("--gpus", type=_count, help="total GPUs, instead of --workers: dp = gpus / (tp x pp x cp)")
    par.add_argument("--tp", type=_count, help="tensor-parallel degree (default 1)")
    par.add_argument("--pp", type=_count, help="pipeline-parallel stages (default 1)")
    par.add_argument("--vpp", type=_count, help="virtual stages per pipeline rank (interleaved schedule)")
    par.add_argument("--cp", type=_count, help="context-parallel degree (default 1)")
    par.add_argument("--sequence-parallel", nargs="?", const="yes", choices=("yes", "no"),
                     help="split norms, dropout and the residual stream over tp too")
    par.add_argument("--micro-batches", type=_count, help="micro-batches per optimizer step (gradient "
                                                          "accumulation; in flight under pipeline parallel)")
    par.add_argument("--schedule", choices=SCHEDULES, help="pipeline schedule (default 1f1b)")
    par.add_argument("--stage-layers", type=_stage_layers, metavar="N,N,...",
                     help="decoder layers of each of the pp x vpp stages in schedule order (stage c on rank c mod pp)")
    par.add_argument("--stage-split", choices=STAGE_SPLITS, help="the stages' layers when --stage-layers is not "
                     "given: even (default), torchtitan (its default split), megatron")
    par.add_argument("--first-stage-layers", type=_count, help="with --stage-split megatron: "
                     "--decoder-first-pipeline-num-layers")
    par.add_argument("--last-stage-layers", type=_count, help="with --stage-split megatron: "
                     "--decoder-last-pipeline-num-layers")
    par.add_argument("--embedding-weight", type=_count, help="the embedding counted as layers in the split: "
                     "torchtitan's pipeline_parallel_first_stage_less_layers (default 1), Megatron's "
                     "--account-for-embedding-in-pipeline-split (1; default 0)")
    par.add_argument("--head-weight", type=_count, help="the head and loss counted as layers: torchtitan's "
                     "pipeline_parallel_last_stage_less_layers (default 1), Megatron's "
                     "--account-for-loss-in-pipeline-split (1; default 0)")
    par.add_argument("--loss-parallel", choices=("yes", "no"),
                     help="vocab-parallel logits and loss under tp (default yes; no: gathered logits)")
    par.add_argument("--vocab-divisor", type=_count, help="pad the vocabulary to a multiple of this x tp "
                                                         "(default: 128 for megatron kernels, 1 otherwise)")
    par.add_argument("--ep", type=_count, help="expert parallel: routed experts split over ep ranks (default 1)")
    par.add_argument("--etp", type=_count, help="expert tensor parallel: each expert's FFN over etp ranks "
                                                "(default 1; Megatron's default is tp)")
    par.add_argument("--moe-imbalance-percent", type=_count, help="pairs the busiest expert-parallel rank "
                                                                  "receives, %% of a balanced share (100)")
    par.add_argument("--moe-capacity-percent", type=_count, help="capacity factor x 100: drops pairs beyond it "
                                                                 "(0: dropless)")
    ft = p.add_argument_group("fine-tuning (needs a model)")
    ft.add_argument("--finetune", choices=MODES, help="what trains (default full)")
    ft.add_argument("--lora-rank", type=_count, help="LoRA / DoRA / QLoRA rank (default 8)")
    ft.add_argument("--lora-targets", type=_targets, help="q,k,v,o,gate,up,down (any of them) or all-linear "
                                                          "(default q,v)")
    ft.add_argument("--lora-dropout", type=_probability, help="adapter dropout (default 0)")
    ft.add_argument("--adapter-dtype", choices=list(DTYPE_BITS), help="default: peft's (fp32 on a 16-bit base)")
    ft.add_argument("--modules-to-save", type=_names(SAVEABLE), help="trained in full beside the adapters: "
                                                                     "lm_head,embed_tokens")
    ft.add_argument("--train-last-layers", type=_count, help="freeze: the last k blocks train")
    ft.add_argument("--train-modules", type=_names(TRAINABLE_MODULES), help="freeze: embed_tokens,lm_head,norms")
    ft.add_argument("--base-dtype", choices=list(DTYPE_BITS), help="frozen base weights (default: --param-dtype)")
    ft.add_argument("--quant-type", choices=QUANT_TYPES, help="qlora base: nf4, fp4 or int8 (default nf4)")
    ft.add_argument("--quant-block-size", type=_count, help="4-bit block size (default 64)")
    ft.add_argument("--double-quant", choices=("yes", "no"), help="quantize the 4-bit scales too (default yes)")
    ft.add_argument("--kbit-prepare", choices=("yes", "no"), help="qlora: peft's prepare_model_for_kbit_training "
                                                                  "(fp32 non-quantized weights; default yes)")
    ft.add_argument("--versions", type=_versions, metavar="LIB=VERSION,...",
                    help="the library releases the run used, e.g. transformers=4.45,bitsandbytes=0.43.1 (default: "
                         + ", ".join(f"{k} {v}" for k, v in VERSION_DEFAULTS.items())
                         + "); older releases keep other bytes (docs/peak-memory.md)")
    add_vision_flags(p)
    m.add_argument("--list-models", action="store_true", help="list the model presets and exit")
    m.add_argument("--list-gpus", action="store_true", help="list the GPU catalog and exit")


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
    mp = 1 if workload is None else workload.layout.model_parallel
    view = _deepspeed(args, scenario.params, arch, report, mp) if args.deepspeed_estimate else None
    sources = sources_dict(args, imported)
    advised = None if workload is None else advice_dict(scenario, workload, args.check_stage, args.units)
    swept = sweep_for(args, scenario, workload)
    if args.json:
        extra = ({} if advised is None else {"check_stage": advised["stage"], "fixes": advised["fixes"]}) | (
            {"sweep": swept} if swept else {})
        return json.dumps({**report_dict(report, view, layouts=workload is not None, sequences=True), **extra,
                           **sources}, indent=2)
    return render_text(report, view, args.units) + vision_text(vision_dict(scenario, workload), args.units) + \
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
