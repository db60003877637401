"""Export the current view as a framework config: DeepSpeed JSON, an accelerate YAML, a torchtitan TOML fragment.

Inputs are the same plain dicts an import returns (Scenario / Workload field names, the layout keys) plus the
selected stage; missing fields take Scenario's and Workload's defaults. Each export writes what its format can say
and lists the rest as caveats (export_caveats; the YAML and TOML also carry them as comments). Importing an export
gives back every field the format expresses (tests/test_frameworks_roundtrip.py).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields

from ..scenario import FieldError, Scenario, require_choice, require_int
from ..step.activations import RECOMPUTE, RECOMPUTE_NAMES
from ..step.workload import OVERLAP_CHOICES, WORKLOAD_LIMITS, Workload
from ..tables import DTYPE_BITS
from .accelerate.document import dump_yaml
from .passthrough import over_file_of
from .common import FORMATS, FrameworkConfigError
from .deepspeed.schema import COMMUNICATION_DTYPES
from .emitters import dump_toml
from .torchtitan.export_parts import torchtitan_model, torchtitan_split as _torchtitan_split

LAYOUT_DEFAULTS = {"tp": 1, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "sequence_parallel": False, "micro_batches": 1,
                   "schedule": "1f1b", "loss_parallel": True, "gpus": None}
SCENARIO_FIELDS = ("workers", "shard_group", "param_dtype", "grad_dtype", "master_dtype", "grad_accum_dtype",
                   "optimizer", "optimizer_dtype", "comm_dtype", "offload_optimizer", "offload_params", "gpus_per_node",
                   "convention")
BUCKET_FIELDS = ("reduce_bucket_size", "allgather_bucket_size", "prefetch_bucket_size", "max_live_parameters",
                 "param_persistence_threshold")
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe"}   # torchtitan / torch names


class ExportError(FrameworkConfigError):
    """A view that cannot be written in the asked format (names the field)."""


def _defaults(cls, skip=()):
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING and f.name not in skip}


def _view(scenario, workload, layout, stage):
    for name, part in (("scenario", scenario), ("workload", workload), ("layout", layout)):
        if part is not None and not isinstance(part, dict):
            raise ExportError(name, type(part).__name__, "a dict of field names")
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise ExportError("stage", stage, "0, 1, 2 or 3")
    s = dict(_defaults(Scenario), **(scenario or {}))
    w = dict(_defaults(Workload), **(workload or {}))
    lay = dict(LAYOUT_DEFAULTS, **(layout or {}))
    for part, values in (("scenario", s), ("workload", w), ("layout", lay)):
        for key, value in values.items():   # the core's choice checks need hashable values
            if isinstance(value, (list, dict, set)):
                raise ExportError(f"{part}.{key}", value, "a number, a name or null")
    try:                                    # the core's own checks, field by field
        Scenario(params=1, **{k: s[k] for k in SCENARIO_FIELDS})
    except FieldError as exc:
        raise ExportError(f"scenario.{exc.field}", exc.value, exc.allowed) from None
    for name in ("micro_batch", "seq_len", "recompute_every") + BUCKET_FIELDS:
        lo, hi = WORKLOAD_LIMITS[name] if name in WORKLOAD_LIMITS else (1, 10**8)
        require_int(f"workload.{name}", w[name], lo, hi, ExportError)
    require_choice("workload.recompute", w["recompute"], RECOMPUTE, ExportError)
    require_choice("workload.overlap_comm", w["overlap_comm"], OVERLAP_CHOICES, ExportError)
    if w.get("activation_dtype") is not None:
        require_choice("workload.activation_dtype", w["activation_dtype"], DTYPE_BITS, ExportError)
    for name in ("tp", "pp", "vpp", "cp", "ep", "micro_batches"):
        _positive("layout." + name, lay[name])
    require_choice("layout.schedule", lay["schedule"], tuple(SCHEDULE_NAMES), ExportError)
    for name in ("sequence_parallel", "loss_parallel"):
        if not isinstance(lay[name], bool):
            raise ExportError(f"layout.{name}", lay[name], "true or false")
    if lay["gpus"] is not None:
        _positive("layout.gpus", lay["gpus"])
    if lay["gpus"] is None:
        lay["gpus"] = s["workers"] * lay["tp"] * lay["pp"] * lay["cp"]
    return s, w, lay


def _positive(key, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ExportError(key, value, "a positive integer")


def _compute_dtype(s, w=None) -> str:
    """What the model computes in: the comm dtype when set (FSDP mixed precision), else the activation dtype
    (autocast over fp32 weights), else the parameter dtype."""
    return s.get("comm_dtype") or (w or {}).get("activation_dtype") or s["param_dtype"]


# --- DeepSpeed ---------------------------------------------------------------------------------------------------
def _deepspeed_dtype(s, w) -> str:
    """A deepspeed-convention view names DeepSpeed's model dtype; any other view trains in its compute dtype (an
    fsdp2 view: fp32 shards, bf16 compute -> bf16, with DeepSpeed's fp32 master copy)."""
    model = s["param_dtype"] if s["convention"] == "deepspeed" else _compute_dtype(s, w)
    return model if model in ("fp16", "bf16") else "fp32"


def _deepspeed(scenario, workload, layout, stage):
    s, w, lay = _view(scenario, workload, layout, stage)
    notes = []
    # A deepspeed-convention view names DeepSpeed's model dtype; any other view trains in its compute dtype
    # (an fsdp2 view: fp32 shards, bf16 compute -> bf16 with DeepSpeed's fp32 master).
    dtype = _deepspeed_dtype(s, w)
    mb, gas, dp = w["micro_batch"], lay["micro_batches"], s["workers"]
    fp16, bf16 = {"enabled": dtype == "fp16"}, {"enabled": dtype == "bf16"}
    # precision_config.py: fp16.fp16_master_weights_and_grads / bf16.bf16_master_weights_and_grads keep the master
    # (and the gradients it steps from) in the model dtype, stages 1-3 only (runtime/config.py _do_error_check);
    # bf16_optimizer_states needs the bf16 master.
    low_master = dtype in ("fp16", "bf16") and stage > 0 and s["master_dtype"] == dtype
    if low_master:
        (fp16 if dtype == "fp16" else bf16)[f"{dtype}_master_weights_and_grads"] = True
        if dtype == "bf16" and s["optimizer_dtype"] == "bf16":
            bf16["bf16_optimizer_states"] = True
    written = _deepspeed_ledger(dtype, stage, low_master, bf16.get("bf16_optimizer_states", False))
    view = {k: s[k] for k in written}
    accum_written = written.pop("grad_accum_dtype")
    view_accum = view.pop("grad_accum_dtype")
    data_types = None
    if view != written:
        notes.append(f"DeepSpeed trains {dtype} with its own ledger (an fp32 master copy and fp32 gradient "
                     "partition under ZeRO: the deepspeed convention), not the view's.")
    elif view_accum != accum_written:
        if low_master and view_accum in ("fp16", "bf16", "fp32"):
            data_types = {"grad_accum_dtype": view_accum}     # engine.py get_data_types; the ZeRO optimizers
        else:
            notes.append(f"the view's gradient buffer ({view_accum or 'none'}) cannot be written: DeepSpeed keeps "
                         f"{_dtype_text(accum_written)} here"
                         + (" (data_types.grad_accum_dtype must be the model dtype without ZeRO)" if stage == 0 else
                            " (with an fp32 master the optimizer steps from an fp32 gradient partition whatever "
                            "data_types.grad_accum_dtype says)" if written["master_dtype"] == "fp32" else "") + ".")
    if low_master:
        states_on_gpu = dtype == "bf16" and bf16.get("bf16_optimizer_states") and s["offload_optimizer"] == "none"
        if not states_on_gpu:
            key = f"{dtype}.{dtype}_master_weights_and_grads"
            notes.append(f"DeepSpeed runs {key} only with the optimizer offloaded (offload_optimizer) and "
                         "DeepSpeedCPUAdam as the client optimizer (stage_1_and_2.py _enforce_cpu_offload, "
                         "stage3.py _enforce_optimizer_offload)"
                         + ("; the view offloads nothing, so DeepSpeed stops at initialisation."
                            if s["offload_optimizer"] == "none" else "."))
    zero = {"stage": stage}
    for key, field in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_params")):
        if s[field] != "none":
            zero[key] = {"device": s[field]}
    zero.update({"reduce_bucket_size": w["reduce_bucket_size"], "allgather_bucket_size": w["allgather_bucket_size"],
                 "stage3_prefetch_bucket_size": w["prefetch_bucket_size"],
                 "stage3_max_live_parameters": w["max_live_parameters"],
                 "stage3_param_persistence_threshold": w["param_persistence_threshold"]})
    if w["overlap_comm"] != "auto":
        zero["overlap_comm"] = w["overlap_comm"] == "on"
    data = {"train_batch_size": mb * gas * dp, "train_micro_batch_size_per_gpu": mb,
            "gradient_accumulation_steps": gas, "fp16": fp16, "bf16": bf16, "zero_optimization": zero}
    if data_types:
        data["data_types"] = data_types
    comm = s.get("comm_dtype")
    if comm is not None and comm != dtype:
        if comm in COMMUNICATION_DTYPES:
            data["communication_data_type"] = comm
        else:
            notes.append(f"communication dtype {comm} has no DeepSpeed communication_data_type (fp16, bf16, fp32).")
    if lay["tp"] > 1:
        data["tensor_parallel"] = {"autotp_size": lay["tp"]}
        if lay["sequence_parallel"]:
            notes.append("DeepSpeed AutoTP has no sequence parallelism: activations between layers stay whole.")
    if lay["cp"] > 1:
        data["sequence_parallel_size"] = lay["cp"]
        notes.append("sequence_parallel_size only divides the world for DeepSpeed's batch check; Ulysses sequence "
                     "parallelism itself is set up in the training code.")
    if s.get("shard_group") is not None and s["shard_group"] < dp:
        notes.append(f"hybrid sharding (shard group {s['shard_group']}) is not written: DeepSpeed 0.19.8 removed "
                     "MiCS (mics_shard_size), and hpZ shards only a secondary parameter copy.")
    if lay["pp"] > 1:
        notes.append("pipeline parallelism is set in code (PipelineModule num_stages), not in ds_config.json.")
    if w["recompute"] != "none":
        data["activation_checkpointing"] = _deepspeed_checkpointing(w, notes)
    notes.append(f"the optimizer ({s['optimizer']}) is not written: DeepSpeed then uses the client's optimizer.")
    return data, notes


def _deepspeed_checkpointing(w, notes) -> dict:
    """ds_config.json has no switch that turns recomputation on: the Trainer's gradient_checkpointing (or the
    model's own checkpoint calls) does. The activation_checkpointing block only configures
    deepspeed.checkpointing.checkpoint (runtime/activation_checkpointing/config.py), so it is written with what the
    view counts: checkpoint inputs whole (no partition_activations) and on the CPU only with activation offload."""
    kind = RECOMPUTE_NAMES[w["recompute"]]
    notes.append(f"the plan uses {kind}, which ds_config.json cannot switch on: with the "
                 "Hugging Face Trainer set gradient_checkpointing=True (TrainingArguments; it checkpoints whole "
                 "blocks), or call model.gradient_checkpointing_enable(); the activation_checkpointing block "
                 "written configures only models that call deepspeed.checkpointing.checkpoint (Megatron-DeepSpeed)."
                 + ("" if w["recompute"] == "full" else " Its policy itself is set in the training code."))
    return {"partition_activations": False, "cpu_checkpointing": bool(w["activation_offload"])}


def _deepspeed_ledger(dtype, stage, low_master, bf16_states) -> dict:
    """The ledger importing the export gives (deepspeed.py): fp32 at stage 0 has no master copy (engine.py
    _do_optimizer_sanity_check); otherwise an fp32 master and fp32 gradient partition, or the 16-bit ones."""
    if dtype == "fp32" and stage == 0:
        return {"param_dtype": "fp32", "grad_dtype": "fp32", "master_dtype": None, "grad_accum_dtype": None,
                "optimizer_dtype": "fp32"}
    master = dtype if low_master else "fp32"
    return {"param_dtype": dtype, "grad_dtype": dtype, "master_dtype": master, "grad_accum_dtype": master,
            "optimizer_dtype": "bf16" if bf16_states else "fp32"}


def _dtype_text(dtype) -> str:
    return "none" if dtype is None else dtype


def export_deepspeed(scenario: dict, workload: dict, layout: dict, stage: int) -> str:    # 2-space indented JSON
    return export_config("deepspeed", scenario, workload, layout, stage)


# --- accelerate --------------------------------------------------------------------------------------------------
def _accelerate(scenario, workload, layout, stage, backend=None):
    s, w, lay = _view(scenario, workload, layout, stage)
    if backend not in (None, "fsdp", "deepspeed"):
        raise ExportError("backend", backend, "fsdp, deepspeed or None (FSDP, and DeepSpeed for stage 1)")
    if backend == "fsdp" and stage == 1:
        raise ExportError("stage", 1, "0, 2 or 3 with FSDP (FSDP has no ZeRO-1); export with backend deepspeed")
    backend = backend or ("deepspeed" if stage == 1 else "fsdp")
    notes = []
    world = lay["gpus"]
    compute = _compute_dtype(s, w)
    precision = compute if compute in ("fp16", "bf16") else "no"
    data = {"compute_environment": "LOCAL_MACHINE"}
    machines = world // s["gpus_per_node"] if world % s["gpus_per_node"] == 0 and world >= s["gpus_per_node"] else 1
    if machines == 1 and world > s["gpus_per_node"]:
        notes.append(f"{world} processes do not fill whole nodes of {s['gpus_per_node']}: one machine is written.")
    if lay["pp"] > 1:
        notes.append("pipeline parallelism has no accelerate config key: it is not written.")
    notes.append("the micro-batch and gradient accumulation are set in the training script (batch_size, "
                 "gradient_accumulation_steps), not here" if backend == "fsdp" else
                 "the micro-batch is set in the training script (train_micro_batch_size_per_gpu is auto).")
    if backend == "deepspeed":
        data["distributed_type"] = "DEEPSPEED"
        data["deepspeed_config"] = {"zero_stage": stage, "offload_optimizer_device": s["offload_optimizer"],
                                    "offload_param_device": s["offload_params"],
                                    "gradient_accumulation_steps": lay["micro_batches"]}
        dtype = _deepspeed_dtype(s, w)
        data["mixed_precision"] = dtype if dtype != "fp32" else "no"
        if s.get("comm_dtype") not in (None, dtype):
            notes.append("accelerate's DeepSpeed plugin has no communication dtype key; use a deepspeed_config_file.")
    else:
        offload = "cpu" if "none" != s["offload_params"] or "none" != s["offload_optimizer"] else "none"
        if "nvme" in (s["offload_params"], s["offload_optimizer"]):
            notes.append("FSDP offloads to the CPU only: nvme is written as fsdp_offload_params true (CPU).")
        if s["master_dtype"] is not None or s["param_dtype"] != "fp32":
            notes.append("accelerate's FSDP keeps parameters in the dtype the model is loaded in: load it in fp32 "
                         "for the fsdp2 ledger (fp32 shards, mixed-precision compute), or in bf16 for pure bf16.")
        hybrid = s.get("shard_group") is not None and s["shard_group"] < s["workers"]
        if stage == 0:
            data["distributed_type"] = "NO" if world == 1 else "MULTI_GPU"
            if lay["tp"] * lay["cp"] > 1 or hybrid:
                notes.append("DDP (stage 0) with tp/cp or a shard group cannot be written for accelerate.")
        else:
            data["distributed_type"] = "FSDP"
            v1 = w.get("fsdp_version", 2) == 1    # FSDP1's keys (accelerate's FSDP_SHARDING_STRATEGY, FSDP1 only)
            data["fsdp_config"] = {"fsdp_version": 1 if v1 else 2, **({
                "fsdp_sharding_strategy": "FULL_SHARD" if stage == 3 else "SHARD_GRAD_OP",
                "fsdp_use_orig_params": w.get("fsdp_use_orig_params") == "yes", "fsdp_backward_prefetch": {
                    "pre": "BACKWARD_PRE", "post": "BACKWARD_POST", "none": "NO_PREFETCH"}[
                    w.get("fsdp_backward_prefetch", "pre")]} if v1 else {"fsdp_reshard_after_forward": stage == 3}),
                                   "fsdp_offload_params": offload == "cpu",
                                   "fsdp_activation_checkpointing": w["recompute"] == "full",
                                   "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}
            if w["recompute"] in ("selective", "op"):
                notes.append(f"{w['recompute']} recompute has no accelerate key (fsdp_activation_checkpointing is "
                             "full).")
            if w["recompute"] == "full" and w["recompute_every"] > 1:
                notes.append(f"one block in {w['recompute_every']} checkpointed has no accelerate key: "
                             "fsdp_activation_checkpointing checkpoints every block.")
            if hybrid or lay["tp"] > 1 or lay["cp"] > 1:
                shard = s["shard_group"] if hybrid else s["workers"]
                data["parallelism_config"] = {
                    "parallelism_config_dp_replicate_size": s["workers"] // shard,
                    "parallelism_config_dp_shard_size": shard,
                    "parallelism_config_tp_size": lay["tp"], "parallelism_config_cp_size": lay["cp"]}
        data["mixed_precision"] = precision
    if w["compile"]:                             # accelerate compiles the whole model (utils/dataclasses.py)
        data["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
    data["num_machines"] = machines
    data["num_processes"] = world
    if machines > 1:                             # accelerate/commands/config/cluster.py asks these per node
        data.update({"machine_rank": 0, "main_process_ip": None, "main_process_port": 29500,
                     "rdzv_backend": "static", "same_network": True})
        notes.append(f"{machines} machines: machine_rank 0 is written for the first node; each node launches with "
                     f"its own machine_rank (0-{machines - 1}), and main_process_ip (written null) must be set to "
                     "node 0's address.")
    return data, notes


def export_accelerate(scenario: dict, workload: dict, layout: dict, stage: int, backend=None) -> str:
    """An accelerate config YAML. backend None: FSDP (DDP at stage 0), and the DeepSpeed plugin at stage 1."""
    return export_config("accelerate", scenario, workload, layout, stage, backend=backend)


# --- torchtitan --------------------------------------------------------------------------------------------------
def _torchtitan(scenario, workload, layout, stage):
    s, w, lay = _view(scenario, workload, layout, stage)
    if stage == 1:
        raise ExportError("stage", 1, "0, 2 or 3 for torchtitan (FSDP2 has no ZeRO-1)")
    notes = []
    dp = s["workers"]
    hybrid = s.get("shard_group") is not None and s["shard_group"] < dp
    if stage == 0:
        replicate, shard = dp, 1
        if lay["cp"] > 1:
            notes.append("context parallelism turns FSDP on in torchtitan: stage 0 with cp is not expressible.")
    else:
        shard = s["shard_group"] if hybrid else dp
        replicate = dp // shard
        if shard == 1 and lay["cp"] == 1:
            notes.append("a shard degree of 1 turns FSDP off in torchtitan (stage 0 on import).")
    compute = _compute_dtype(s, w)
    pure_bf16 = s["param_dtype"] == "bf16" and s["master_dtype"] is None
    if compute == "fp16":
        notes.append("torchtitan has no fp16 mixed precision: bfloat16 is written.")
    mixed = "bfloat16" if compute in ("bf16", "fp16") else "float32"
    # job_config.py training.dtype: bfloat16 trains everything in bf16 (pure-bf16); float32 keeps fp32 parameters,
    # gradients and optimizer states (FSDP2 MixedPrecisionPolicy computes in mixed_precision_param): no other ledger.
    ledger = {k: s[k] for k in ("param_dtype", "grad_dtype", "master_dtype", "grad_accum_dtype", "optimizer_dtype")}
    written = (dict(param_dtype="bf16", grad_dtype="bf16", master_dtype=None, grad_accum_dtype=None,
                    optimizer_dtype="bf16") if pure_bf16 else
               dict(param_dtype="fp32", grad_dtype="fp32", master_dtype=None, grad_accum_dtype=None,
                    optimizer_dtype="fp32"))
    if ledger != written:
        shown = ", ".join(f"{k.replace('_dtype', '')} {_dtype_text(v)}" for k, v in ledger.items())
        notes.append(f"torchtitan keeps either everything in bf16 (training.dtype bfloat16) or fp32 parameters, "
                     "gradients and optimizer states (float32), with no separate master copy or gradient buffer; "
                     f"the view's ledger ({shown}) is written as training.dtype "
                     f"{'bfloat16' if pure_bf16 else 'float32'}.")
    m, micro_batches = w["micro_batch"], lay["micro_batches"]
    training = {"local_batch_size": m, "seq_len": w["seq_len"], "global_batch_size": m * dp * micro_batches,
                "dtype": "bfloat16" if pure_bf16 else "float32", "mixed_precision_param": mixed,
                "mixed_precision_reduce": "float32",
                "enable_cpu_offload": "none" != s["offload_params"] or "none" != s["offload_optimizer"]}
    parallelism = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
                   "tensor_parallel_degree": lay["tp"], "pipeline_parallel_degree": lay["pp"],
                   "context_parallel_degree": lay["cp"], "expert_parallel_degree": lay["ep"]}
    if stage in (2, 3):      # stage 2: torchtitan keeps the shards too, with the gathered copy beside them
        reshard = w.get("reshard_after_forward", "auto") if stage == 3 else "no"
        parallelism["fsdp_reshard_after_forward"] = {"auto": "default", "yes": "always", "no": "never"}[reshard]
        if stage == 2:
            notes.append("torchtitan has no ZeRO-2: fully_shard keeps every parameter sharded, and "
                         "fsdp_reshard_after_forward never keeps each unit's gathered bf16 copy beside its shard "
                         "(read back as ZeRO-3 with reshard_after_forward no).")
    if w.get("async_tp"):                               # tensor_parallel.py maybe_enable_async_tp
        parallelism["enable_async_tensor_parallel"] = True
    if lay["tp"] > 1 and not lay["loss_parallel"]:      # parallelize.py apply_tp(loss_parallel=not disable_...)
        parallelism["disable_loss_parallel"] = True
    fsdp = shard > 1 or lay["cp"] > 1                   # parallel_dims.py fsdp_enabled
    if not fsdp and (lay["tp"] > 1 or lay["pp"] > 1) and not pure_bf16 and mixed == "bfloat16":
        notes.append("without FSDP torchtitan turns mixed precision off under tensor or pipeline parallelism "
                     "(distributed/utils.py maybe_enable_amp): this job trains and computes in fp32, not bf16.")
    if lay["tp"] > 1 and not lay["sequence_parallel"]:
        notes.append("torchtitan's tensor parallelism always shards the norms over the sequence (apply_tp).")
    if lay["pp"] > 1:
        # one schedule run holds all micro-batches: local = micro x count, no gradient accumulation
        training["local_batch_size"] = m * micro_batches
        training["global_batch_size"] = m * micro_batches * dp
        parallelism["pipeline_parallel_microbatch_size"] = m
        parallelism["pipeline_parallel_schedule"] = SCHEDULE_NAMES.get(lay["schedule"], "1F1B")
        if lay["schedule"] == "interleaved" and lay["vpp"] != 2:
            notes.append(f"{lay['vpp']} stages per rank need pipeline_parallel_layers_per_stage for the model's "
                         "layer count; torchtitan's default is 2.")
        _torchtitan_split(lay, parallelism, notes)
    tables = {"training": training, "parallelism": parallelism,
              "activation_checkpoint": {"mode": w["recompute"]}}
    if w["recompute"] == "op":
        tables["activation_checkpoint"] = {"mode": "selective", "selective_ac_option": "op"}
        if w["op_policy"] != "torchtitan":
            notes.append(f"torchtitan's op-level policy is its own (SelectiveAC); the view's {w['op_policy']} policy "
                         "needs a subclass overriding get_save_ops.")
    elif w["recompute"] == "selective":
        tables["activation_checkpoint"] = {"mode": "none"}
        notes.append("selective recompute of the attention scores has no torchtitan option (its op-level policy "
                     "is recompute = op): written as mode none.")
    elif w["recompute"] == "full" and w["recompute_every"] > 1:   # _apply_layer_sac: one block in N
        tables["activation_checkpoint"] = {"mode": "selective", "selective_ac_option": str(w["recompute_every"])}
    if w["compile"] or w["loss"] == "compiled":
        tables["compile"] = {"enable": True, "components": [c for c, on in (("model", w["compile"]),
                                                                            ("loss", w["loss"] == "compiled")) if on]}
    if w["float8"] != "none":
        tables.setdefault("model", {})["converters"] = ["float8"]
        tables[("quantize", "linear", "float8")] = {"recipe_name": w["float8"],
                                                     "enable_fsdp_float8_all_gather": w["float8_all_gather"]}
    if w["loss"] not in ("auto", "compiled"):
        notes.append(f"the {w['loss']} loss has no torchtitan key in this schema: the default loss is written.")
    if s["optimizer"] in ("adam", "adamw"):
        tables["optimizer"] = {"name": "Adam" if s["optimizer"] == "adam" else "AdamW"}
    else:
        notes.append(f"torchtitan builds Adam or AdamW only; the view's {s['optimizer']} is not written.")
    if "nvme" in (s["offload_params"], s["offload_optimizer"]):
        notes.append("torchtitan offloads to the CPU only (enable_cpu_offload).")
    model, said = torchtitan_model(w.get("arch"))
    return ({"model": model, **tables} if model else tables), notes + said


def export_torchtitan(scenario: dict, workload: dict, layout: dict, stage: int) -> str:   # [training], [parallelism]...
    return export_config("torchtitan", scenario, workload, layout, stage)


def _comments(notes):
    head = ["written by zerocalc; what this format cannot say:"] if notes else []
    return head + [" - " + n.replace("\n", " ") for n in notes]


def _built(fmt: str, scenario: dict, workload: dict, layout: dict, stage: int, backend=None, base=None,
           auto_values=None) -> tuple:             # (the document, its notes); over `base`, the imported file
    if fmt not in FORMATS:
        raise ExportError("format", fmt, "one of " + ", ".join(FORMATS))
    if fmt == "deepspeed":
        data, notes = _deepspeed(scenario, workload, layout, stage)
    elif fmt == "accelerate":       # over a file: its own backend (a DeepSpeed plugin stays one)
        backend = backend or {"DEEPSPEED": "deepspeed", "FSDP": "fsdp"}.get((base or {}).get("distributed_type"))
        data, notes = _accelerate(scenario, workload, layout, stage, backend)
    else:
        data, notes = _torchtitan(scenario, workload, layout, stage)
    return over_file_of(fmt, data, notes, base, auto_values) if base is not None else (data, notes)


def export_caveats(fmt: str, scenario: dict, workload: dict, layout: dict, stage: int, backend=None, base=None,
                   auto_values=None) -> list:                  # what the export leaves out; over a file, what passed

    return _built(fmt, scenario, workload, layout, stage, backend, base, auto_values)[1]


def export_config(fmt: str, scenario: dict, workload: dict, layout: dict, stage: int, base=None, auto_values=None,
                  backend=None) -> str:
    """The export in `fmt` (one of FORMATS); over `base`, the imported file as data (frameworks/passthrough.py)."""
    data, notes = _built(fmt, scenario, workload, layout, stage, backend, base, auto_values)
    if fmt == "deepspeed":
        return json.dumps(data, indent=2) + "\n"
    return (dump_yaml if fmt == "accelerate" else dump_toml)(data, _comments(notes))
