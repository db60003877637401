"""DeepSpeed 0.19.8's config keys and their types, as data: what its pydantic models accept and refuse.

Sources (deepspeed 0.19.8, the version pinned in requirements-validation.txt; tests compare these tables with the
installed classes): deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig), zero/offload_config.py
(DeepSpeedZeroOffloadParamConfig, DeepSpeedZeroOffloadOptimizerConfig), runtime/precision_config.py
(DeepSpeedFP16Config, DeepSpeedBF16Config), runtime/config.py (_REMOVED_*_CONFIG_KEYS). All these models are
DeepSpeedConfigModel (runtime/config_utils.py): extra="forbid" (an unknown key is an error), populate_by_name
(a field may be given by name or alias, not both), and before validation every value equal to "auto" is dropped,
so the field keeps its default.

Kinds: "bool"; "optbool" (bool or null); ("int", ge) an integer >= ge (None: unbounded); ("float", lo, hi);
"path" (a string or null); "device" (none / cpu / nvme); "stage" (0-3); "model" (a nested config, checked by name).
check_value applies a kind the way pydantic's lax mode coerces it.
"""

from types import MappingProxyType

from ..common import FrameworkConfigError, boolean, count, number, one_of

# DeepSpeedZeroConfig: field name -> (alias or None, kind, default). Defaults are the class's own.
ZERO_FIELDS = MappingProxyType({
    "stage": (None, "stage", 0),
    "contiguous_gradients": (None, "bool", True),
    "reduce_scatter": (None, "bool", True),
    "reduce_bucket_size": (None, ("int", 1), 500_000_000),        # Field(pp_int(5e8), gt=0)
    "use_multi_rank_bucket_allreduce": (None, "bool", True),
    "allgather_partitions": (None, "bool", True),
    "allgather_bucket_size": (None, ("int", 0), 500_000_000),     # Field(pp_int(5e8), ge=0)
    "overlap_comm": (None, "optbool", None),                     # None: stage == 3 (validator overlap_comm_valid)
    "compute_grad_norm": (None, "bool", True),
    "load_from_fp32_weights": (None, "bool", True),
    "elastic_checkpoint": (None, "bool", False),
    "offload_param": (None, "model", None),
    "offload_optimizer": (None, "model", None),
    "zenflow": (None, "model", None),
    "sub_group_size": (None, ("int", 0), 1_000_000_000),
    "cpu_offload_param": (None, "optbool", None),                 # deprecated: -> offload_param {device: cpu}
    "cpu_offload_use_pin_memory": (None, "optbool", None),        # deprecated, sets nothing
    "cpu_offload": (None, "optbool", None),                       # deprecated: -> offload_optimizer {device: cpu}
    "prefetch_bucket_size": ("stage3_prefetch_bucket_size", ("int", 0), 50_000_000),
    "param_persistence_threshold": ("stage3_param_persistence_threshold", ("int", 0), 100_000),
    "model_persistence_threshold": ("stage3_model_persistence_threshold", ("int", 0), 2**63 - 1),
    "max_live_parameters": ("stage3_max_live_parameters", ("int", 0), 1_000_000_000),
    "max_reuse_distance": ("stage3_max_reuse_distance", ("int", 0), 1_000_000_000),
    "gather_16bit_weights_on_model_save": ("stage3_gather_16bit_weights_on_model_save", "bool", False),
    "module_granularity_threshold": ("stage3_module_granularity_threshold", ("int", None), 0),
    "use_all_reduce_for_fetch_params": ("stage3_use_all_reduce_for_fetch_params", "bool", False),
    "allgather_sequential": ("stage3_allgather_sequential", "bool", False),
    "stage3_gather_fp16_weights_on_model_save": (None, "bool", False),
    "ignore_unused_parameters": (None, "bool", True),
    "legacy_stage1": (None, "bool", False),
    "round_robin_gradients": (None, "bool", False),
    "parameter_alignment": (None, "bool", False),
    "zero_hpz_partition_size": (None, ("int", 0), 1),
    "zero_quantized_weights": (None, "bool", False),
    "zero_quantized_nontrainable_weights": (None, "bool", False),
    "zero_quantized_gradients": (None, "bool", False),
    "memory_efficient_linear": (None, "bool", True),
    "pipeline_loading_checkpoint": (None, "bool", False),
    "override_module_apply": (None, "bool", True),
    "log_trace_cache_warnings": (None, "bool", False),
    "enable_sanity_checks": (None, "bool", False),
    "save_muon_momentum_buffer_in_memory": (None, "bool", False),
    "leaf_module": (None, "model", None),
})

# Removed in 0.19.x (runtime/config.py _REMOVED_ZERO_CONFIG_KEYS): 0.19.8 refuses them; DeepSpeed 0.19.5 and earlier
# read them (zero/config.py: mics_shard_size = -1, mics_hierarchical_params_gather = False).
REMOVED_ZERO_KEYS = ("mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param")

OFFLOAD_PARAM_FIELDS = MappingProxyType({
    "device": "device", "nvme_path": "path", "buffer_count": ("int", 0), "buffer_size": ("int", 0),
    "max_in_cpu": ("int", 0), "pin_memory": "bool",
})
OFFLOAD_OPTIMIZER_FIELDS = MappingProxyType({
    "device": "device", "nvme_path": "path", "buffer_count": ("int", 0), "pin_memory": "bool",
    "pipeline_read": "bool", "pipeline_write": "bool", "fast_init": "bool", "ratio": ("float", 0.0, 1.0),
    "super_offload": "bool", "cpuadam_cores_perc": ("float", 0.0, 1.0),
})
OFFLOAD_DEVICES = ("none", "cpu", "nvme")                       # OffloadDeviceEnum

FP16_FIELDS = MappingProxyType({
    "enabled": "bool", "auto_cast": "bool", "loss_scale": ("float", 0.0, float("inf")),
    "initial_scale_power": ("int", None), "loss_scale_window": ("int", None), "hysteresis": ("int", None),
    "consecutive_hysteresis": "bool", "min_loss_scale": ("int", None), "fp16_master_weights_and_grads": "bool",
})
BF16_FIELDS = MappingProxyType({
    "enabled": "bool", "immediate_grad_update": "bool", "check_grad_overflow": "bool",
    "bf16_master_weights_and_grads": "bool", "bf16_optimizer_states": "bool",
})

# runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS: 0.19.8 refuses a file holding any of these.
REMOVED_TOP_LEVEL_KEYS = ("nebula", "compression_training", "amp", "quantize_training", "sparse_gradients",
                          "eigenvalue", "sparse_attention", "elasticity", "graph_harvesting", "curriculum_learning",
                          "progressive_layer_drop")

# runtime/config.py get_communication_data_type: lower-cased, then fp32 / fp16 / bf16, or None (each tensor's own).
COMMUNICATION_DTYPES = ("fp32", "fp16", "bf16")

# runtime/config.py DtypeEnum: the names data_types.grad_accum_dtype may take (exact spelling; engine.py
# get_data_types calls DtypeEnum(value), which refuses anything else) -> zerocalc dtype.
GRAD_ACCUM_DTYPES = MappingProxyType({
    "torch.float16": "fp16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "torch.float32": "fp32", "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "torch.int8": "int8", "int8": "int8",
    "torch.bfloat16": "bf16", "bf16": "bf16", "bfloat16": "bf16",
})

# runtime/config.py DEEPSPEED_OPTIMIZERS -> zerocalc optimizer. Adam runs as AdamW by default (ADAM_W_MODE_DEFAULT
# = True); both keep the same two fp32 moments. "muon" (MUON_OPTIMIZER) builds runtime/zero/muon/muon_optimizer.py
# MuonWithAuxAdam: Muon on the parameters tagged use_muon, Adam on the rest (engine.py _muon_param_groups). The
# others have no zerocalc ledger.
OPTIMIZER_NAMES = MappingProxyType({"adam": "adam", "adamw": "adamw", "lion": "lion", "muon": "muon"})


def check_value(key: str, value, kind):
    """One value of a DeepSpeed pydantic field, coerced as pydantic's lax mode does."""
    if kind == "any":
        return value
    if kind == "bool":
        return boolean(key, value, rule="pydantic")
    if kind == "optbool":
        return None if value is None else boolean(key, value, rule="pydantic")
    if kind == "stage":
        return count(key, value, 0, 3, lax=True, what="0, 1, 2 or 3")
    if kind == "device":
        return one_of(key, value, OFFLOAD_DEVICES)
    if kind == "path":
        if value is None or isinstance(value, str):
            return value
        raise FrameworkConfigError(key, value, "a path string or null")
    if kind == "model":
        if value is None or isinstance(value, dict):
            return value
        raise FrameworkConfigError(key, value, "an object or null")
    if kind[0] == "int":
        if key.endswith(("loss_scale_window", "min_loss_scale")) and isinstance(value, bool):
            raise FrameworkConfigError(key, value, "an integer, not a bool (DeepSpeedFP16Config)")
        bound = "" if kind[1] is None else f" of at least {kind[1]}"
        return count(key, value, kind[1], None, lax=True, what=f"an integer{bound} (DeepSpeed 0.19.8's pydantic field)")
    if kind[0] == "float":
        if isinstance(value, bool):
            raise FrameworkConfigError(key, value, "a number, not a bool")
        return number(key, value, kind[1], kind[2], lax=True)
    raise AssertionError(kind)
