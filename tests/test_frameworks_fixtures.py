"""Real configs from public projects (tests/fixtures/frameworks/, each with its source repo, path and commit) map to
the expected zerocalc view. The context is a Trainer run of a hidden-4096 model, micro-batch 2, 4 accumulation
steps, bf16, 8 workers on 16 GPUs: what "auto" and -1 resolve from."""

import re
from pathlib import Path

import pytest

from zerocalc.frameworks import FrameworkConfigError, import_config

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
CONTEXT = {"hidden_size": 4096, "micro_batch": 2, "gradient_accumulation_steps": 4, "precision": "bf16",
           "workers": 8, "gpus": 16}
FORMAT = {".json": "deepspeed", ".yaml": "accelerate", ".toml": "torchtitan"}
DS_BF16 = {"convention": "deepspeed", "param_dtype": "bf16", "grad_dtype": "bf16", "master_dtype": "fp32",
           "grad_accum_dtype": "fp32", "optimizer_dtype": "fp32", "comm_dtype": None}
FSDP2 = {"convention": "fsdp2", "param_dtype": "fp32", "grad_dtype": "fp32", "master_dtype": None,
         "grad_accum_dtype": None, "optimizer_dtype": "fp32"}
DS_DEFAULT_BUCKETS = {"reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000,
                      "prefetch_bucket_size": 50_000_000, "max_live_parameters": 1_000_000_000,
                      "param_persistence_threshold": 100_000}


def load(name, context=CONTEXT, folder=FIXTURES):
    path = folder / name
    return import_config(FORMAT[path.suffix], path.read_bytes(), context)


def configs(folder=FIXTURES):
    return sorted(p.name for p in folder.iterdir() if p.suffix in FORMAT)


def subset(actual: dict, expected: dict):
    assert {k: actual.get(k, "<absent>") for k in expected} == expected


def keys(items):
    return {i["key"] for i in items}


def test_at_least_twelve_real_configs_each_with_its_source():
    names = configs()
    assert len(names) >= 12 and {FORMAT[Path(n).suffix] for n in names} == set(FORMAT.values())
    for name in names:
        path = FIXTURES / name
        source = (path.with_suffix(".source").read_text() if path.suffix == ".json" else
                  "\n".join(path.read_text().splitlines()[:3]))
        assert re.search(r"repo: [\w.-]+/[\w.-]+", source), name
        assert re.search(r"path: \S+", source), name
        assert re.search(r"commit: [0-9a-f]{40}", source), name


def test_transformers_zero2_offload_with_trainer_auto():
    r = load("transformers_ds_config_zero2.json")
    assert r.selected_stage == 2 and r.format == "deepspeed"
    subset(r.scenario, dict(DS_BF16, offload_optimizer="cpu", offload_params="none", optimizer="adamw",
                            shard_group=None))
    subset(r.workload, {"reduce_bucket_size": 200_000_000, "allgather_bucket_size": 200_000_000,
                        "overlap_comm": "on", "micro_batch": 2})
    assert r.layout["micro_batches"] == 4 and "workers" not in r.scenario     # train_batch_size "auto"
    auto = {a["key"]: a["value"] for a in r.auto_keys}
    assert auto["bf16.enabled"] is True and auto["fp16.enabled"] is False
    assert auto["train_micro_batch_size_per_gpu"] == 2 and auto["gradient_accumulation_steps"] == 4
    assert {"scheduler", "optimizer.params", "gradient_clipping",
            "zero_optimization.contiguous_gradients"} <= keys(r.ignored_keys)


def test_transformers_zero3_is_refused_as_deepspeed_0_19_8_refuses_it():
    # "reduce_bucket_size": 0 fails DeepSpeedZeroConfig's Field(gt=0); test_frameworks_deepspeed checks DeepSpeed agrees.
    with pytest.raises(FrameworkConfigError) as err:
        load("transformers_ds_config_zero3.json")
    assert err.value.field == "zero_optimization.reduce_bucket_size" and err.value.value == 0


def test_axolotl_zero1_keeps_deepspeed_defaults_for_absent_keys():
    r = load("axolotl_zero1.json")
    assert r.selected_stage == 1
    subset(r.scenario, dict(DS_BF16, offload_optimizer="none", offload_params="none", optimizer="adamw"))
    subset(r.workload, dict(DS_DEFAULT_BUCKETS, overlap_comm="on"))
    assert r.sources["workload.reduce_bucket_size"].startswith("DeepSpeedZeroConfig default")


def test_axolotl_zero3_offload_resolves_hidden_size_autos():
    r = load("axolotl_zero3_bf16_cpuoffload_all.json")
    assert r.selected_stage == 3
    subset(r.scenario, dict(DS_BF16, offload_optimizer="cpu", offload_params="cpu"))
    h = 4096
    subset(r.workload, {"reduce_bucket_size": h * h, "prefetch_bucket_size": int(0.9 * h * h),
                        "param_persistence_threshold": 10 * h, "max_live_parameters": 1, "overlap_comm": "on"})
    assert any("max_live_parameters = 0" in n for n in r.notes)      # 0 -> 1 gives the same bytes
    assert {"zero_optimization.sub_group_size", "zero_optimization.max_reuse_distance",
            "zero_force_ds_cpu_optimizer"} <= keys(r.ignored_keys)


def test_hidden_size_autos_stay_unresolved_without_a_model():
    r = load("llamafactory_ds_z3_config.json", dict(CONTEXT, hidden_size=None))
    assert "reduce_bucket_size" not in r.workload and "prefetch_bucket_size" not in r.workload
    unresolved = [a for a in r.auto_keys if a["key"] == "zero_optimization.reduce_bucket_size"]
    assert unresolved[0]["value"] is None and "hidden" in unresolved[0]["how"]


def test_llamafactory_zero3_overlap_off_and_monitor_blocks_ignored():
    r = load("llamafactory_ds_z3_config.json")
    assert r.selected_stage == 3
    subset(r.workload, {"overlap_comm": "off", "max_live_parameters": 1_000_000_000,
                        "reduce_bucket_size": 4096 * 4096})
    assert {"comms_config", "monitor_config", "zero_optimization.stage3_max_reuse_distance"} <= keys(r.ignored_keys)


def test_llamafactory_zero2_offload():
    r = load("llamafactory_ds_z2_offload_config.json")
    assert r.selected_stage == 2
    subset(r.scenario, {"offload_optimizer": "cpu", "offload_params": "none"})
    subset(r.workload, {"overlap_comm": "off", "reduce_bucket_size": 500_000_000})


def test_llamafactory_autotp_sets_tensor_parallel():
    r = load("llamafactory_ds_z2_autotp_config.json")
    assert r.selected_stage == 2 and r.layout["tp"] == 2 and r.layout["sequence_parallel"] is False
    assert "_comment" in keys(r.ignored_keys)


def test_llamafactory_alst_bf16_block_with_fp16_keys_is_refused():
    # DeepSpeedBF16Config has no auto_cast / loss_scale: extra="forbid" refuses them.
    with pytest.raises(FrameworkConfigError) as err:
        load("llamafactory_ds_z3_alst_config.json")
    assert err.value.field == "bf16.auto_cast"


def test_deepspeedexamples_autotp_4():
    r = load("deepspeedexamples_tensor_parallel_ds_config.json")
    assert r.selected_stage == 2 and r.layout["tp"] == 4
    subset(r.workload, {"overlap_comm": "auto"})        # absent: on at stage 3 only, as DeepSpeed


def test_accelerate_fsdp_template():
    r = load("accelerate_fsdp.yaml")
    assert r.selected_stage == 3 and r.format == "accelerate"
    subset(r.scenario, dict(FSDP2, comm_dtype="bf16", workers=2, offload_params="none", offload_optimizer="none",
                            shard_group=None))
    # FSDP1 (accelerate's default fsdp_version), the file's use_orig_params, BACKWARD_PRE prefetch (tests/test_fsdp1.py)
    assert r.workload == {"recompute": "none", "comm_buffers": "fsdp", "fsdp_version": 1, "fsdp_use_orig_params": "yes",
                          "fsdp_backward_prefetch": "pre"} and r.layout["gpus"] == 2


def test_accelerate_deepspeed_template_points_at_a_file_it_does_not_read():
    r = load("accelerate_deepspeed.yaml")
    assert r.selected_stage is None and r.scenario["workers"] == 2
    assert "deepspeed_config.deepspeed_config_file" in keys(r.ignored_keys)
    assert "deepspeed_config.zero3_init_flag" in keys(r.ignored_keys)


def test_accelerate_multi_node_ddp():
    r = load("accelerate_multi_node.yaml")
    assert r.selected_stage == 0
    subset(r.scenario, dict(FSDP2, comm_dtype=None, workers=8, gpus_per_node=4))
    assert {"main_process_ip", "machine_rank", "rdzv_backend"} <= keys(r.ignored_keys)


def test_llamafactory_fsdp_offload_fp16():
    r = load("llamafactory_fsdp_config.yaml")
    assert r.selected_stage == 3
    subset(r.scenario, dict(FSDP2, comm_dtype="fp16", offload_params="cpu", offload_optimizer="cpu", workers=2))


def test_llamafactory_fsdp2_reshard():
    r = load("llamafactory_fsdp2_config.yaml")
    assert r.selected_stage == 3 and r.sources["selected_stage"] == "fsdp_config.fsdp_reshard_after_forward"
    subset(r.scenario, dict(FSDP2, comm_dtype="bf16", workers=2))


def test_llamafactory_fsdp_two_nodes():
    r = load("llamafactory_fsdp_config_multiple_nodes.yaml")
    assert r.selected_stage == 3
    subset(r.scenario, {"workers": 16, "gpus_per_node": 8, "shard_group": None})


def test_llamafactory_deepspeed_multi_nodes():
    r = load("llamafactory_ds_multi_nodes.yaml")
    assert r.selected_stage is None and r.scenario["workers"] == 16
    assert "deepspeed_config.deepspeed_multinode_launcher" in keys(r.ignored_keys)


def test_torchtitan_llama3_8b_resolves_shard_degree_from_the_world():
    r = load("torchtitan_llama3_8b.toml")
    assert r.selected_stage == 3 and r.format == "torchtitan"
    subset(r.scenario, dict(FSDP2, comm_dtype="bf16", workers=16, shard_group=None, optimizer="adamw"))
    subset(r.workload, {"seq_len": 8192, "micro_batch": 1, "recompute": "op"})      # selective_ac_option = "op"
    assert r.layout == {"gpus": 16, "micro_batches": 1}
    assert {"parallelism.data_parallel_shard_degree": 16} == {a["key"]: a["value"] for a in r.auto_keys}


def test_torchtitan_llama3_8b_without_a_world_size():
    r = load("torchtitan_llama3_8b.toml", None)
    assert "workers" not in r.scenario and r.selected_stage == 3
    assert any("assumed" in n for n in r.notes)


def test_torchtitan_llama3_405b_tp8_full_ac():
    r = load("torchtitan_llama3_405b.toml")
    subset(r.layout, {"tp": 8, "sequence_parallel": True, "gpus": 16})
    subset(r.scenario, {"workers": 2})
    subset(r.workload, {"micro_batch": 2, "recompute": "full"})
    # converters = ["float8"], [quantize.linear.float8] enable_fsdp_float8_all_gather = true, no recipe_name
    subset(r.workload, {"float8": "tensorwise", "float8_all_gather": True})


def test_torchtitan_llama3_70b():
    r = load("torchtitan_llama3_70b.toml")
    subset(r.layout, {"tp": 8})
    subset(r.workload, {"micro_batch": 8, "seq_len": 8192, "recompute": "full"})


def test_torchtitan_deepseek_v3_expert_parallel():
    r = load("torchtitan_deepseek_v3_16b.toml")
    assert r.layout["ep"] == 8 and "pp" not in r.layout and r.selected_stage == 3
    subset(r.workload, {"micro_batch": 4, "seq_len": 4096})


def test_torchtitan_llama4_pipeline_keeps_its_stage_gathered():
    r = load("torchtitan_llama4_17bx128e.toml", dict(CONTEXT, gpus=64))
    # reshard_after_forward = not pp_enabled: ZeRO-3 keeping the stage's gathered copy (was ZeRO-2)
    assert r.selected_stage == 3 and r.workload["reshard_after_forward"] == "auto"
    subset(r.layout, {"pp": 4, "tp": 8, "schedule": "1f1b", "micro_batches": 1, "gpus": 64})
    subset(r.scenario, {"workers": 2})


@pytest.mark.parametrize("name", configs())
def test_every_key_of_every_real_config_is_used_or_listed(name):
    path = FIXTURES / name
    try:
        r = load(name)
    except FrameworkConfigError:
        return                                      # the refused ones are asserted above
    ignored = keys(r.ignored_keys)
    assert all(i["reason"] for i in r.ignored_keys)
    assert r.selected_stage in (None, 0, 1, 2, 3)
    assert ignored.isdisjoint(set(r.sources.values())), name
    assert path.stat().st_size < 10_000


@pytest.mark.parametrize("name", [n for n in configs() if n.endswith(".yaml")])
def test_accelerates_own_loader_agrees_on_the_real_yaml(name):
    config_args = pytest.importorskip("accelerate.commands.config.config_args",
                                      reason="accelerate==1.15.0 is in requirements-validation.txt (CI installs it)")
    loaded = config_args.load_config_from_file(str(FIXTURES / name))
    ours = load(name)
    assert loaded.num_processes == ours.layout["gpus"]
    stage_of = {"FSDP": 3, "MULTI_GPU": 0, "DEEPSPEED": None}
    assert stage_of[loaded.distributed_type.value] == ours.selected_stage
