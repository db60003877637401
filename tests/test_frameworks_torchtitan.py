"""torchtitan import: job_config.py defaults, -1 shard degree, HSDP, pipeline schedules, batch and accumulation,
dtype, activation checkpointing, and the fields torchtitan refuses."""

import pytest

from zerocalc.frameworks import FrameworkConfigError, import_torchtitan


def tt(text, context=None):
    return import_torchtitan(text, context)


def refused(text, context=None):
    with pytest.raises(FrameworkConfigError) as err:
        tt(text, context)
    return err.value


def test_an_empty_file_is_torchtitans_defaults():
    r = tt("", {"gpus": 8})
    assert r.selected_stage == 3                                    # dp_shard -1 -> 8 ranks: FSDP, resharded
    assert r.scenario["workers"] == 8 and r.scenario["comm_dtype"] == "bf16" and r.scenario["optimizer"] == "adamw"
    assert r.workload == {"seq_len": 2048, "micro_batch": 8, "recompute": "selective"}
    assert r.layout == {"gpus": 8, "micro_batches": 1}


def test_explicit_degrees_need_no_world_size():
    r = tt("[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\ncontext_parallel_degree = 2\n")
    assert r.scenario["workers"] == 4 and r.layout == {"tp": 2, "cp": 2, "sequence_parallel": True, "gpus": 16,
                                                       "micro_batches": 1}
    assert any("dp_shard x cp" in n for n in r.notes)


def test_hsdp_sets_the_shard_group():
    r = tt("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 8\n")
    assert r.scenario["workers"] == 32 and r.scenario["shard_group"] == 8


def test_replicate_only_is_ddp_stage_0():
    r = tt("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 1\n")
    assert r.selected_stage == 0 and r.scenario["comm_dtype"] is None and r.workload["activation_dtype"] == "bf16"


@pytest.mark.parametrize("policy, pp, stage", [("always", 1, 3), ("never", 1, 2), ("default", 1, 3),
                                                ("default", 2, 2), ("always", 2, 3)])
def test_reshard_policy(policy, pp, stage):
    r = tt(f"[training]\nlocal_batch_size = 4\n[parallelism]\ndata_parallel_shard_degree = 2\n"
           f"fsdp_reshard_after_forward = \"{policy}\"\npipeline_parallel_degree = {pp}\n")
    assert r.selected_stage == stage


def test_pipeline_micro_batches_and_schedules():
    base = ("[training]\nlocal_batch_size = 8\nglobal_batch_size = 64\n[parallelism]\ndata_parallel_shard_degree = 4"
            "\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 2\n")
    r = tt(base)
    assert r.workload["micro_batch"] == 2 and r.layout["micro_batches"] == 2 * 4     # gas 2 x 4 pipeline chunks
    assert r.layout["schedule"] == "1f1b" and "vpp" not in r.layout
    r = tt(base + 'pipeline_parallel_schedule = "Interleaved1F1B"\n')
    assert r.layout["schedule"] == "interleaved" and r.layout["vpp"] == 2
    r = tt(base + 'pipeline_parallel_schedule = "ZBVZeroBubble"\n')
    assert r.layout["schedule"] == "interleaved" and any("approximated" in n for n in r.notes)
    e = refused(base + 'pipeline_parallel_schedule = "Zigzag"\n')
    assert e.field == "parallelism.pipeline_parallel_schedule"
    e = refused(base.replace("microbatch_size = 2", "microbatch_size = 3"))
    assert e.field == "parallelism.pipeline_parallel_microbatch_size"


def test_global_batch_size():
    r = tt("[training]\nlocal_batch_size = 2\nglobal_batch_size = 32\n[parallelism]\ndata_parallel_shard_degree = 4\n")
    assert r.layout["micro_batches"] == 4
    e = refused("[training]\nlocal_batch_size = 2\nglobal_batch_size = 30\n[parallelism]\n"
                "data_parallel_shard_degree = 4\n")
    assert e.field == "training.global_batch_size"


def test_bfloat16_training_is_pure_bf16_and_offload():
    r = tt('[training]\ndtype = "bfloat16"\nenable_cpu_offload = true\n[parallelism]\ndata_parallel_shard_degree = 2\n')
    assert r.scenario["convention"] == "pure-bf16" and r.scenario["optimizer_dtype"] == "bf16"
    assert r.scenario["offload_params"] == r.scenario["offload_optimizer"] == "cpu"


def test_activation_checkpoint_modes():
    for mode in ("none", "full", "selective"):
        assert tt(f'[activation_checkpoint]\nmode = "{mode}"\n').workload["recompute"] == mode
    r = tt('[activation_checkpoint]\nmode = "memory_budget"\n')
    assert "recompute" not in r.workload
    assert refused('[activation_checkpoint]\nmode = "some"\n').field == "activation_checkpoint.mode"


def test_unknown_fields_are_refused_unless_a_custom_module_extends_the_config():
    assert refused("[parallelism]\ndata_parallel_shard = 2\n").field == "parallelism.data_parallel_shard"
    assert refused("[sharding]\nx = 1\n").field == "sharding"
    r = tt('[job]\ncustom_config_module = "my.config"\n[sharding]\nx = 1\n[training]\nmy_knob = 2\n')
    assert {"sharding", "training.my_knob"} <= {i["key"] for i in r.ignored_keys}


@pytest.mark.parametrize("text, key", [
    ("[parallelism]\ndata_parallel_shard_degree = 0\n", "parallelism.data_parallel_shard_degree"),
    ("[parallelism]\ntensor_parallel_degree = -1\n", "parallelism.tensor_parallel_degree"),
    ("[parallelism]\ntensor_parallel_degree = 2.0\n", "parallelism.tensor_parallel_degree"),
    ('[training]\nmixed_precision_param = "float16"\n', "training.mixed_precision_param"),
    ('[training]\nmixed_precision_reduce = "bfloat16"\n', "training.mixed_precision_reduce"),
    ('[optimizer]\nname = "Lion"\n', "optimizer.name"),
    ("[training]\nglobal_batch_size = 0\n", "training.global_batch_size"),
    ("parallelism = 3\n", "parallelism"),
])
def test_values_torchtitan_refuses(text, key):
    assert refused(text).field == key


def test_toml_errors_carry_line_and_column():
    e = refused("[training]\nseq_len = = 3\n")
    assert e.field == "config" and e.line == 2 and e.column is not None
