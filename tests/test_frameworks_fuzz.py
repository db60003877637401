"""Untrusted framework configs: random text and random dicts of real keys through every importer (and random views
through every exporter). Expected: nothing but FrameworkConfigError escapes, and every refusal names its key: the
syntax ("config", with a line) or a dotted key whose first part is in the input or is required by the format.
ZEROCALC_FUZZ_EXAMPLES raises the example count (as in test_fuzz_inputs.py)."""

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerocalc.frameworks import (FORMATS, FrameworkConfigError, export_config, import_accelerate, import_config,
                                 import_deepspeed, import_torchtitan)
from zerocalc.frameworks.accelerate.document import dump_yaml
from zerocalc.frameworks.emitters import dump_toml

EXAMPLES = int(os.environ.get("ZEROCALC_FUZZ_EXAMPLES", "0")) or None
FUZZ = settings(max_examples=EXAMPLES or 200, deadline=None, suppress_health_check=list(HealthCheck))
REQUIRED = {"distributed_type", "context"}

NASTY = st.sampled_from([0, -1, 1, 2, 3, 4, 2.5, 5e8, 1e30, float("inf"), True, False, None, "auto", "", "yes", "no",
                         "cpu", "CPU", "nvme", "none", "bf16", "fp16", "FULL_SHARD", "HYBRID_SHARD", "5", "-1",
                         "9" * 50, "\x00", "\u202e", [], [1, "a"], {}, {"device": "cpu"}, {"enabled": True},
                         {"device": "cpu", "ratio": "x"}, {"ratio": 0.2}, {"pin_memory": "maybe"},
                         {"enabled": "auto"}, {"autotp_size": "x"}, {"type": 5}, {"device": "auto"}])
DEEPSPEED_KEYS = {
    "": ["zero_optimization", "fp16", "bf16", "bfloat16", "train_batch_size", "train_micro_batch_size_per_gpu",
         "gradient_accumulation_steps", "communication_data_type", "tensor_parallel", "sequence_parallel_size",
         "optimizer", "torch_autocast", "amp", "allgather_size"],
    "zero_optimization": ["stage", "offload_optimizer", "offload_param", "reduce_bucket_size", "allgather_bucket_size",
                          "stage3_prefetch_bucket_size", "stage3_max_live_parameters", "mics_shard_size",
                          "stage3_param_persistence_threshold", "overlap_comm", "zero_hpz_partition_size",
                          "cpu_offload", "compute_grad_norm", "contiguous_gradients", "bogus"],
    "fp16": ["enabled", "loss_scale", "min_loss_scale", "fp16_master_weights_and_grads", "bogus"],
    "bf16": ["enabled", "bf16_master_weights_and_grads", "bf16_optimizer_states"],
    "tensor_parallel": ["autotp_size"], "optimizer": ["type"], "torch_autocast": ["enabled", "dtype"],
}
ACCELERATE_KEYS = {
    "": ["compute_environment", "distributed_type", "mixed_precision", "num_processes", "num_machines", "fp16",
         "fsdp_config", "deepspeed_config", "parallelism_config", "use_cpu", "bogus"],
    "fsdp_config": ["fsdp_version", "fsdp_sharding_strategy", "sharding_strategy", "fsdp_reshard_after_forward",
                    "fsdp_offload_params", "fsdp_activation_checkpointing", "fsdp_auto_wrap_policy"],
    "deepspeed_config": ["zero_stage", "offload_optimizer_device", "offload_param_device",
                         "gradient_accumulation_steps", "deepspeed_config_file", "zero3_init_flag"],
    "parallelism_config": ["parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size",
                           "parallelism_config_tp_size", "parallelism_config_cp_size", "parallelism_config_sp_size"],
}
ACCELERATE_VALUES = st.one_of(NASTY, st.sampled_from(["FSDP", "DEEPSPEED", "MULTI_GPU", "NO", "XLA", "LOCAL_MACHINE",
                                                      "AMAZON_SAGEMAKER", "SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2"]))
TORCHTITAN_KEYS = {
    "": ["training", "parallelism", "activation_checkpoint", "optimizer", "job", "model", "bogus"],
    "training": ["local_batch_size", "global_batch_size", "seq_len", "dtype", "mixed_precision_param",
                 "mixed_precision_reduce", "enable_cpu_offload", "bogus"],
    "parallelism": ["data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "pipeline_parallel_degree", "pipeline_parallel_schedule",
                    "pipeline_parallel_microbatch_size", "context_parallel_degree", "expert_parallel_degree",
                    "expert_tensor_parallel_degree", "module_fqns_per_model_part"],
    "activation_checkpoint": ["mode", "selective_ac_option"], "optimizer": ["name"], "job": ["custom_config_module"],
    "model": ["name", "flavor", "converters"],
}
TORCHTITAN_VALUES = st.one_of(NASTY, st.sampled_from(["bfloat16", "float32", "always", "never", "default", "1F1B",
                                                      "Interleaved1F1B", "selective", "full", "op", "AdamW"]),
                              st.integers(-2, 64))


def configs(schema, values):
    """Dicts built from the format's real keys, with nested sections where the format has them."""
    def section(name):
        return st.dictionaries(st.sampled_from(schema[name]), values, max_size=5)
    top = {key: (section(key) if key in schema else values) for key in schema[""]}
    return st.fixed_dictionaries({}, optional={k: st.one_of(v, values) for k, v in top.items()})


def contexts():
    return st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "hidden_size": st.integers(1, 20000), "micro_batch": st.integers(1, 64), "precision": st.sampled_from(
            ["bf16", "fp16", "fp32"]), "workers": st.integers(1, 512), "gpus": st.integers(1, 4096),
        "gradient_accumulation_steps": st.integers(1, 64)}))


def check_refusal(exc: FrameworkConfigError, data: dict):
    assert exc.field, exc
    if exc.field == "config":
        return
    head = exc.field.split(".")[0]
    assert head in data or head in REQUIRED or exc.field in data, (exc.field, data)


def run(importer, text, data=None, context=None):
    try:
        result = importer(text, context)
    except FrameworkConfigError as exc:
        if data is not None:
            check_refusal(exc, data)
        return None
    assert result.selected_stage in (None, 0, 1, 2, 3)
    json.dumps(result.to_dict())                       # plain, JSON-ready data
    return result


@FUZZ
@given(configs(DEEPSPEED_KEYS, NASTY), contexts())
def test_deepspeed_dicts_of_real_keys(data, context):
    run(import_deepspeed, json.dumps(data), data, context)


@FUZZ
@given(configs(ACCELERATE_KEYS, ACCELERATE_VALUES), contexts())
def test_accelerate_dicts_of_real_keys(data, context):
    try:
        text = dump_yaml(data)
    except TypeError:
        return
    run(import_accelerate, text, data, context)


@FUZZ
@given(configs(TORCHTITAN_KEYS, TORCHTITAN_VALUES), contexts())
def test_torchtitan_dicts_of_real_keys(data, context):
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    clean = {k: {kk: vv for kk, vv in v.items() if vv is not None and vv != {}} for k, v in tables.items()}
    try:
        text = dump_toml(clean)
    except TypeError:
        return
    run(import_torchtitan, text, clean, context)


TEXT_PIECES = st.sampled_from(['{', '}', '[', ']', '"', "'", ":", ",", "\n", "  ", "- ", "=", "#", "zero_optimization",
                               "stage", "3", "true", "null", "auto", "distributed_type: FSDP", "[parallelism]",
                               "fsdp_config:", "&a", "*a", "\\u0000", "\x00", "é", "1e999"])


@FUZZ
@given(st.one_of(st.text(max_size=200), st.lists(TEXT_PIECES, max_size=30).map("".join),
                 st.binary(max_size=200)), st.sampled_from(FORMATS))
def test_random_text_through_every_importer(text, fmt):
    try:
        import_config(fmt, text)
    except FrameworkConfigError as exc:
        assert exc.field
        if exc.field == "config" and exc.line is not None:
            assert exc.line >= 1 and exc.column >= 1


VIEW_VALUES = st.one_of(NASTY, st.integers(-3, 100), st.sampled_from(["adam", "lion", "fsdp2", "deepspeed",
                                                                      "interleaved", "full"]))
VIEWS = st.dictionaries(st.sampled_from(["workers", "shard_group", "param_dtype", "comm_dtype", "master_dtype",
                                         "offload_params", "offload_optimizer", "gpus_per_node", "convention",
                                         "optimizer", "optimizer_dtype"]), VIEW_VALUES, max_size=4)


@FUZZ
@given(VIEWS, st.dictionaries(st.sampled_from(["micro_batch", "seq_len", "recompute", "overlap_comm",
                                               "activation_dtype"]), VIEW_VALUES, max_size=3),
       st.dictionaries(st.sampled_from(["tp", "pp", "cp", "micro_batches", "schedule", "vpp"]), VIEW_VALUES,
                       max_size=3), st.sampled_from([0, 1, 2, 3, 4, True]), st.sampled_from(FORMATS))
def test_random_views_through_every_exporter(scenario, workload, layout, stage, fmt):
    try:
        export_config(fmt, scenario, workload, layout, stage)
    except FrameworkConfigError as exc:
        assert exc.field
