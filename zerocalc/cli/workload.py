"""The CLI's model and workload flags -> Architecture and Workload, and the --list-* tables."""

from __future__ import annotations

from dataclasses import replace

from ..gpus import catalog_rows
from ..layout import Layout
from ..model.architecture import Architecture
from ..model.finetune import BOOL_FIELDS, FineTune
from ..model.hf_config import architecture_from_config
from ..model.inventory import largest_layer, param_count
from ..model.presets import MODEL_PRESETS
from ..scenario import FieldError
from ..step.workload import Workload
from .batch_flags import BATCH_FLAG_NAMES, BATCH_FLAGS, batch_fields
from ..units import format_bytes
from .vision import vision_fields, vision_given, with_tower

ARCH_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")
WORKLOAD_FLAGS = ("micro_batch", "seq_len", "activation_dtype", "attention", "recompute", "op_policy",
                  "recompute_every", "recompute_modules", "recompute_method", "recompute_num_layers",
                  "implementation", "loss_fusion", "loss", "loss_chunks", "compile", "repeat_kv",
                  "activation_offload", "optimizer_in_backward", "float8", "float8_all_gather", "async_tp",
                  "reduce_bucket_size", "allgather_bucket_size", "prefetch_bucket_size", "max_live_parameters",
                  "param_persistence_threshold", "overlap_comm", "comm_buffers", "grad_lifetime", "fsdp_wrap",
                  "reshard_after_forward", "reduce_dtype", "fsdp_version", "fsdp_use_orig_params",
                  "fsdp_backward_prefetch",
                  "cuda_context_bytes", "nccl_buffsize", "nccl_nvls", "nccl_percent", "moe_dispatcher",
                  "workspace_bytes",
                  "fragmentation_percent",
                  "allocator", "allocator_units", "gpu", "gpu_memory", "moe_imbalance_percent", "moe_capacity_percent",
                  "host_memory_bytes", "model_loading")
LAYOUT_FLAGS = ("tp", "pp", "vpp", "cp", "sequence_parallel", "micro_batches", "schedule", "loss_parallel",
                "vocab_divisor", "ep", "etp", "stage_layers", "stage_split", "first_stage_layers", "last_stage_layers",
                "embedding_weight", "head_weight")
FINETUNE_FLAGS = {"finetune": "mode", "lora_rank": "lora_rank", "lora_targets": "lora_targets",
                  "lora_dropout": "lora_dropout", "adapter_dtype": "adapter_dtype",
                  "modules_to_save": "modules_to_save", "train_last_layers": "train_last_layers",
                  "train_modules": "train_modules", "base_dtype": "base_dtype", "quant_type": "quant_type",
                  "quant_block_size": "quant_block_size", "double_quant": "double_quant",
                  "kbit_prepare": "kbit_prepare", "quantize_head": "quantize_head", "fp32_parts": "fp32_parts",
                  "versions": "versions"}


class ModelFlagError(ValueError):
    """A flag combination that names no model, or two that disagree."""


def architecture_from_args(args):
    """The architecture the flags describe, or None when none is described."""
    shape = {f: getattr(args, f) for f in ARCH_FLAGS if getattr(args, f) is not None}
    named = [flag for flag, value in (("--model", args.model), ("--config", args.config),
                                      ("--hub", getattr(args, "hub", None))) if value]
    if len(named) > 1:
        raise ModelFlagError(f"{' and '.join(named)} each name a model: give one")
    if getattr(args, "revision", None) and not getattr(args, "hub", None):
        raise ModelFlagError("--revision needs --hub")
    if args.model:
        arch = MODEL_PRESETS[args.model][0]
    elif args.config:
        arch = architecture_from_config(args.config)
    elif getattr(args, "hub", None):
        from ..model.hub.fetch import fetch_config
        args._hub = fetch_config(args.hub, args.revision)
        arch = architecture_from_config(args._hub.config)
    elif shape:
        missing = [f"--{f}" for f in ("layers", "hidden", "heads", "ffn", "vocab") if f not in shape]
        if missing:
            raise ModelFlagError(f"a custom architecture needs {', '.join(missing)} (or --model / --config)")
        arch = Architecture(seq_len=args.seq_len or 2048, **shape)
    else:
        return None
    changes = dict(shape)                      # preset or config fields the flags override
    if args.tied_embeddings is not None:
        changes["tied_embeddings"] = args.tied_embeddings == "yes"
    if getattr(args, "score_head", None):          # a score head is its own Linear(h, n): never tied
        changes.update(score_head=args.score_head, tied_embeddings=False)
    if args.dropout is not None:
        changes.update(attn_dropout=args.dropout, resid_dropout=args.dropout, embd_dropout=args.dropout)
    mtp = getattr(args, "mtp_layers", None)
    if mtp is not None:                        # "config": the count the config declares (num_nextn_predict_layers)
        changes["mtp_layers"] = arch.mtp_declared if mtp == "config" else _mtp_count(mtp)
    return with_tower(args, replace(arch, **changes) if changes else arch)


def _mtp_count(text: str) -> int:
    if not text.isdigit() or len(text) > 3:
        raise FieldError("mtp_layers", text, "a whole number of MTP modules, or config")
    return int(text)


def layout_from_args(args) -> Layout:
    given = {f: getattr(args, f) for f in LAYOUT_FLAGS if getattr(args, f) is not None}
    for flag in ("sequence_parallel", "loss_parallel"):
        if flag in given:
            given[flag] = given[flag] == "yes"
    if given.get("vpp", 1) > 1 and "schedule" not in given:
        given["schedule"] = "interleaved"        # virtual stages only exist in the interleaved schedule
    return Layout(**given)


def finetune_from_args(args) -> FineTune:
    given = {field: getattr(args, flag) for flag, field in FINETUNE_FLAGS.items()
             if getattr(args, flag, None) is not None}
    for field in BOOL_FIELDS:
        if field in given:
            given[field] = given[field] == "yes"
    return FineTune(**given)


def workload_from_args(args, arch) -> Workload:
    given = {f: getattr(args, f) for f in WORKLOAD_FLAGS if getattr(args, f) is not None}
    if given.get("fragmentation_percent") == "model":      # the allocator's model (step/allocator.py simulated_reserve)
        given["fragmentation_percent"] = None
    for flag in ("compile", "repeat_kv", "activation_offload", "optimizer_in_backward", "float8_all_gather",
                 "async_tp", "nccl_nvls"):
        if flag in given:
            given[flag] = given[flag] == "yes"
    given.update(batch_fields(args))                     # cli/batch_flags.py: the batch and the router loss
    given.update(vision_fields(args, arch, given.get("seq_len", Workload.seq_len)))
    return Workload(arch, layout=layout_from_args(args), finetune=finetune_from_args(args), **given)


FLAG_NAMES = {"loss_fusion": "cross-entropy-loss-fusion", **BATCH_FLAG_NAMES}   # a field whose flag has its own name


def workload_flags_given(args) -> list:
    return [f"--{FLAG_NAMES.get(f, f.replace('_', '-'))}" for f in WORKLOAD_FLAGS + LAYOUT_FLAGS +
            tuple(FINETUNE_FLAGS) + ("mtp_layers",) + BATCH_FLAGS if getattr(args, f, None) is not None] + \
        vision_given(args)


def list_models(as_json: bool):
    rows = []
    for name, (arch, published, source) in MODEL_PRESETS.items():
        layer_name, layer = largest_layer(arch)
        rows.append({"name": name, "params": param_count(arch), "published_params": published, "source": source,
                     "largest_layer_params": layer, "largest_layer": layer_name, "layers": arch.layers,
                     "hidden": arch.hidden, "heads": arch.heads, "kv_heads": arch.n_kv_heads, "ffn": arch.ffn,
                     "vocab": arch.vocab})
    if as_json:
        return rows
    width = max(len(r["name"]) for r in rows)
    return "\n".join([f"{'model':{width}}  {'parameters':>17}  {'largest layer':>14}  source"] +
                     [f"{r['name']:{width}}  {r['params']:>17,}  {r['largest_layer_params']:>14,}  {r['source']}"
                      for r in rows])


def list_gpus(as_json: bool):
    rows = catalog_rows()
    if as_json:
        return rows
    width = max(len(r["name"]) for r in rows)
    head = (f"{'gpu':{width}}  {'PyTorch can use':>15}  {'':>10}  {'nvidia-smi':>10}  marketing name; sources\n"
            "(the verdict compares the peak, CUDA context included, with what PyTorch can use)")
    return "\n".join([head] + [
        f"{r['name']:{width}}  {format_bytes(r['capacity_bytes'], 'GiB'):>15}  {format_bytes(r['capacity_bytes'], 'GB'):>10}"
        f"  {format_bytes(r['nvidia_smi_bytes'], 'GiB'):>10}  {r['marketing_name']}; {r['capacity_source']}; "
        f"nvidia-smi {r['nvidia_smi_source']}" for r in rows])
