"""accelerate import: FSDP strategies by name and number, hybrid sharding, FSDP2, parallelism_config, the DeepSpeed
section, and what accelerate refuses. The key tables are compared with the installed accelerate 1.15.0 when present."""

import pytest

from zerocalc.frameworks import FrameworkConfigError, import_accelerate
from zerocalc.frameworks.accelerate import fsdp
from zerocalc.frameworks.accelerate import reader as A


def acc(text, context=None):
    return import_accelerate(text, context)


def refused(text, context=None):
    with pytest.raises(FrameworkConfigError) as err:
        acc(text, context)
    return err.value


FSDP = "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 16\nnum_machines: 2\nfsdp_config:\n"


@pytest.mark.parametrize("strategy, stage", [
    ("FULL_SHARD", 3), ("full_shard", 3), ("1", 3), (1, 3), ("SHARD_GRAD_OP", 2), ("2", 2), ("NO_SHARD", 0),
    (3, 0), ("HYBRID_SHARD", 3), (4, 3), ("HYBRID_SHARD_ZERO2", 2), ("5", 2)])
def test_fsdp1_strategy_by_name_or_number(strategy, stage):
    value = f"'{strategy}'" if isinstance(strategy, str) and strategy.isdigit() else strategy
    r = acc(FSDP + f"  fsdp_sharding_strategy: {value}\n")
    assert r.selected_stage == stage and r.scenario["workers"] == 16
    hybrid = str(strategy).upper().startswith("HYBRID") or strategy in (4, "5")
    assert r.scenario["shard_group"] == (8 if hybrid else None)     # shard within a node of 16 / 2 processes


def test_bad_strategy_is_refused_by_key():
    e = refused(FSDP + "  fsdp_sharding_strategy: ZERO3\n")
    assert e.field == "fsdp_config.fsdp_sharding_strategy" and "HYBRID_SHARD" in e.allowed
    assert refused(FSDP + "  fsdp_sharding_strategy: 6\n").field == "fsdp_config.fsdp_sharding_strategy"


def test_fsdp1_default_is_full_shard_and_keys_without_prefix_get_it():
    r = acc(FSDP + "  offload_params: true\n")
    assert r.selected_stage == 3 and r.scenario["offload_params"] == r.scenario["offload_optimizer"] == "cpu"


def test_fsdp1_reshard_after_forward_is_overridden_by_the_strategy():
    r = acc(FSDP + "  fsdp_reshard_after_forward: SHARD_GRAD_OP\n")
    assert r.selected_stage == 3
    assert "fsdp_config.fsdp_reshard_after_forward" in {i["key"] for i in r.ignored_keys}
    assert any("overridden" in n for n in r.notes)


@pytest.mark.parametrize("value, stage", [("true", 3), ("false", 2), ("'no'", 2), ("'yes'", 3)])
def test_fsdp2_reshard_after_forward(value, stage):
    r = acc(FSDP + f"  fsdp_version: 2\n  fsdp_reshard_after_forward: {value}\n  fsdp_sharding_strategy: NO_SHARD\n")
    assert r.selected_stage == stage and r.scenario["shard_group"] is None
    assert "fsdp_config.fsdp_sharding_strategy" in {i["key"] for i in r.ignored_keys}


def test_fsdp2_hsdp_through_parallelism_config():
    r = acc(FSDP + "  fsdp_version: 2\nparallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
                   "  parallelism_config_dp_shard_size: 4\n  parallelism_config_tp_size: 2\n")
    assert r.scenario["workers"] == 8 and r.scenario["shard_group"] == 4 and r.layout["tp"] == 2
    e = refused(FSDP + "  fsdp_version: 2\nparallelism_config:\n  parallelism_config_dp_shard_size: 4\n")
    assert e.field == "parallelism_config"                          # 4 != num_processes 16
    e = refused(FSDP + "  fsdp_version: 1\nparallelism_config:\n  parallelism_config_dp_shard_size: 16\n")
    assert e.field == "parallelism_config"


def test_activation_checkpointing_and_precisions():
    r = acc(FSDP + "  fsdp_activation_checkpointing: true\n")
    assert r.workload["recompute"] == "full" and r.scenario["comm_dtype"] == "bf16"
    r = acc(FSDP.replace("bf16", "'no'") + "  fsdp_version: 1\n")
    assert r.scenario["comm_dtype"] is None and r.scenario["param_dtype"] == "fp32"
    r = acc(FSDP.replace("bf16", "fp8") + "  fsdp_version: 1\n")
    assert r.scenario["comm_dtype"] == "bf16"
    assert refused(FSDP.replace("bf16", "int8") + "  fsdp_version: 1\n").field == "mixed_precision"


def test_ddp_autocast_and_single_process():
    r = acc("distributed_type: MULTI_GPU\nmixed_precision: fp16\nnum_processes: 4\n")
    assert r.selected_stage == 0 and r.scenario["workers"] == 4 and r.workload["activation_dtype"] == "fp16"
    assert r.scenario["master_dtype"] is None and r.scenario["param_dtype"] == "fp32"
    r = acc("distributed_type: 'NO'\n")
    assert r.scenario["workers"] == 1 and r.layout["gpus"] == 1


def test_num_processes_minus_one_is_given_at_launch():
    r = acc("distributed_type: MULTI_GPU\n")
    assert "workers" not in r.scenario and r.auto_keys[0]["key"] == "num_processes"
    r = acc("distributed_type: MULTI_GPU\nnum_processes: -1\n", {"gpus": 32})
    assert r.scenario["workers"] == 32


def test_deepspeed_plugin_section_uses_deepspeed_defaults():
    r = acc("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 8\ndeepspeed_config:\n"
            "  zero_stage: 3\n  offload_optimizer_device: cpu\n  gradient_accumulation_steps: 4\n"
            "  zero3_init_flag: true\n")
    assert r.format == "accelerate" and r.selected_stage == 3
    assert r.scenario["param_dtype"] == "bf16" and r.scenario["convention"] == "deepspeed"
    assert r.scenario["offload_optimizer"] == "cpu" and r.scenario["offload_params"] == "none"
    assert r.scenario["workers"] == 8 and r.layout["micro_batches"] == 4
    assert r.workload["overlap_comm"] == "auto" and r.workload["reduce_bucket_size"] == 500_000_000
    assert r.sources["scenario.offload_optimizer"] == "deepspeed_config.offload_optimizer_device"
    r = acc("distributed_type: DEEPSPEED\nnum_processes: 2\n")
    assert r.selected_stage == 2                                    # DeepSpeedPlugin's zero_stage default
    e = refused("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 5\n")
    assert e.field == "deepspeed_config.zero_stage"


def test_deepspeed_plugin_without_accumulation_leaves_it_to_the_script():
    # accelerate 1.15 utils/dataclasses.py DeepSpeedPlugin.__post_init__: gradient_accumulation_steps None ->
    # ACCELERATE_GRADIENT_ACCUMULATION_STEPS or "auto"; accelerator.py _prepare_deepspeed fills "auto" from
    # Accelerator(gradient_accumulation_steps) (default 1): the view's micro-batches, not a hard 1
    text = "distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n  zero_stage: 2\n"
    r = acc(text, {"gradient_accumulation_steps": 4})
    assert r.layout["micro_batches"] == 4
    auto = {a["key"]: a for a in r.auto_keys}["deepspeed_config.gradient_accumulation_steps (absent: auto)"]
    assert auto["value"] == 4 and "Accelerator._prepare_deepspeed" in auto["how"]
    assert "TrainingArguments" not in auto["how"]
    r = acc(text)                                           # no view value: left alone, said so
    assert "micro_batches" not in r.layout
    r = acc(text + "  gradient_accumulation_steps: 2\n", {"gradient_accumulation_steps": 4})
    assert r.layout["micro_batches"] == 2
    assert r.sources["layout.micro_batches"] == "deepspeed_config.gradient_accumulation_steps"


def test_deepspeed_config_file_with_plugin_fields_is_refused():
    base = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
    assert refused(base + "  zero_stage: 2\n").field == "deepspeed_config.zero_stage"
    assert refused(base + "mixed_precision: bf16\n").field == "mixed_precision"


def test_what_accelerate_refuses():
    assert refused("num_processes: 2\n").field == "distributed_type"
    assert refused("distributed_type: FSDP\nfsdp_confg: {}\n").field == "fsdp_confg"
    assert refused("distributed_type: GPU\n").field == "distributed_type"
    assert refused("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n").field == "fsdp_config.fsdp_version"
    assert refused("- a\n").field == "config"


def test_sagemaker_configs_are_read_but_not_modelled():
    r = acc("compute_environment: AMAZON_SAGEMAKER\ndistributed_type: DATA_PARALLEL\nec2_instance_type: p4d\n")
    assert r.selected_stage is None and "ec2_instance_type" in {i["key"] for i in r.ignored_keys}
    assert refused("compute_environment: AMAZON_SAGEMAKER\ndistributed_type: FSDP\n").field == "distributed_type"


def test_legacy_fp16_flag():
    r = acc("distributed_type: MULTI_GPU\nnum_processes: 2\nfp16: true\n")
    assert r.workload["activation_dtype"] == "fp16"


def test_yaml_errors_carry_line_and_column():
    e = refused("distributed_type: FSDP\nfsdp_config:\n  a: &x 1\n")
    assert (e.line, e.column) == (3, 6)


def test_key_tables_match_accelerate():
    config_args = pytest.importorskip("accelerate.commands.config.config_args",
                                      reason="accelerate==1.15.0 is in requirements-validation.txt (CI installs it)")
    assert set(A.CLUSTER_KEYS) == set(config_args.ClusterConfig.__dataclass_fields__)
    assert set(A.SAGEMAKER_KEYS) == set(config_args.SageMakerConfig.__dataclass_fields__)
    from accelerate.utils import DistributedType
    from accelerate.utils.constants import FSDP_SHARDING_STRATEGY
    assert set(A.DISTRIBUTED_TYPES) == {t.value for t in DistributedType}
    from accelerate.utils import SageMakerDistributedType
    assert set(A.SAGEMAKER_TYPES) == {t.value for t in SageMakerDistributedType}
    assert tuple(FSDP_SHARDING_STRATEGY) == fsdp.STRATEGIES


def test_dynamo_inductor_compiles_the_model_and_its_loss():
    # accelerate utils/dataclasses.py DynamoBackend; accelerator.prepare compiles the whole model (the loss in it)
    from zerocalc.frameworks import import_accelerate
    from zerocalc.frameworks.export import export_accelerate
    base = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\nnum_processes: 8\n"
    r = import_accelerate(base + "dynamo_config:\n  dynamo_backend: INDUCTOR\n")
    assert (r.workload["compile"], r.workload["loss"]) == (True, "compiled")
    assert "compile" not in import_accelerate(base + "dynamo_config:\n  dynamo_backend: NO\n").workload
    eager = import_accelerate(base + "dynamo_config:\n  dynamo_backend: AOT_EAGER\n")
    assert "compile" not in eager.workload and any("Inductor" in n for n in eager.notes)
    back = import_accelerate(export_accelerate(r.scenario, r.workload, r.layout, 0))
    assert back.workload["compile"] is True
