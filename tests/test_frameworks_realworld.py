"""More real configs from public projects (tests/fixtures/frameworks/realworld/, each copied byte for byte with a
`.source` sidecar naming repo, path, commit and licence), each mapped to exactly what the framework would run.

The context is the one of test_frameworks_fixtures.py: a Trainer run of a hidden-4096 model, micro-batch 2, 4
accumulation steps, bf16, 8 workers on 16 GPUs (what "auto" and -1 resolve from). Each test cites the framework
source that defines the behaviour it asserts (DeepSpeed 0.19.8, accelerate 1.15.0, transformers 5.24, torchtitan
history for the older TOML names).
"""

import json
import os
import re
from pathlib import Path

import pytest

from zerocalc.frameworks import FrameworkConfigError, import_config, import_deepspeed, import_torchtitan
from zerocalc.frameworks.common import relax_json

from tests.test_frameworks_fixtures import (CONTEXT, DS_BF16, DS_DEFAULT_BUCKETS, FORMAT, FSDP2, keys,
                                            subset)
from tests.test_frameworks_fixtures import configs as _configs, load as _load

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks" / "realworld"
H = 4096


def load(name, context=CONTEXT):
    return _load(name, context, FIXTURES)


def configs():
    return _configs(FIXTURES)


def auto(r):
    return {a["key"]: a["value"] for a in r.auto_keys}


# --- every file --------------------------------------------------------------------------------------------------
def test_twenty_five_real_configs_each_with_its_source():
    names = configs()
    assert len(names) >= 25 and {FORMAT[Path(n).suffix] for n in names} == set(FORMAT.values())
    for name in names:
        source = (FIXTURES / name).with_suffix(".source").read_text()
        assert re.search(r"repo: [\w.-]+/[\w.-]+", source), name
        assert re.search(r"path: \S+", source), name
        assert re.search(r"commit: [0-9a-f]{40}", source), name
        assert re.search(r"licence: \S+", source), name


@pytest.mark.parametrize("name", configs())
def test_every_key_is_used_or_listed_and_the_result_is_json_ready(name):
    r = load(name)
    assert r.selected_stage in (0, 1, 2, 3)
    assert all(i["reason"] for i in r.ignored_keys)
    assert keys(r.ignored_keys).isdisjoint(set(r.sources.values())), name
    json.dumps(r.to_dict())


@pytest.mark.parametrize("name", [n for n in configs() if n.endswith(".yaml")])
def test_accelerates_own_loader_reads_the_same_yaml(name):
    # commands/config/config_args.py load_config_from_file: the distributed type and process count accelerate reads
    config_args = pytest.importorskip("accelerate.commands.config.config_args",
                                      reason="accelerate==1.15.0 is in requirements-validation.txt (CI installs it)")
    loaded = config_args.load_config_from_file(str(FIXTURES / name))
    ours = load(name)
    kind = loaded.distributed_type.value
    # commands/launch.py launch_command: NO runs simple_launcher, one process whatever num_processes says
    assert ours.layout["gpus"] == (1 if kind == "NO" else loaded.num_processes)
    stage = {"FSDP": 3, "MULTI_GPU": 0, "NO": 0}.get(kind, loaded.deepspeed_config.get("zero_stage"))
    assert ours.selected_stage == stage


@pytest.mark.parametrize("name", [n for n in configs() if n.endswith(".json")])
def test_deepspeeds_own_zero_config_agrees_on_stage_and_offload(name):
    # runtime/zero/config.py DeepSpeedZeroConfig (read_zero_config_deprecated for the block, "auto" dropped)
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    os.environ.setdefault("DS_BUILD_OPS", "0")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    data = json.loads((FIXTURES / name).read_text())
    theirs = DeepSpeedZeroConfig(**data.get("zero_optimization", {}))
    ours = load(name)
    assert ours.selected_stage == int(theirs.stage)
    for field, block in (("offload_optimizer", theirs.offload_optimizer), ("offload_params", theirs.offload_param)):
        device = "none" if block is None else getattr(block.device, "value", block.device)
        assert ours.scenario[field] == device


# --- DeepSpeed ---------------------------------------------------------------------------------------------------
def test_fastchat_zero2_fp16_auto_without_a_bf16_section_follows_the_trainers_bf16():
    # accelerate utils/dataclasses.py DeepSpeedPlugin.set_mixed_precision (called by AcceleratorState, which the
    # Trainer builds with --bf16): a missing "bf16" section is added {"enabled": true}, then fp16 "auto" is filled
    # false. Before the fix this read as fp32 (4 + 4 bytes per parameter instead of 2 + 2).
    r = load("fastchat_deepspeed_config_s2.json")
    assert r.selected_stage == 2
    subset(r.scenario, dict(DS_BF16, offload_optimizer="cpu", offload_params="none"))
    assert auto(r)["fp16.enabled"] is False and auto(r)["bf16.enabled"] is True
    assert "set_mixed_precision" in r.sources["scenario.param_dtype"]
    subset(r.workload, dict(DS_DEFAULT_BUCKETS, overlap_comm="on", micro_batch=2))
    assert r.layout == {"micro_batches": 4}
    # with the Trainer's --fp16 the existing section is enabled and the added bf16 one is off
    fp16 = load("fastchat_deepspeed_config_s2.json", dict(CONTEXT, precision="fp16"))
    assert fp16.scenario["param_dtype"] == "fp16" and auto(fp16)["bf16.enabled"] is False


def test_fastchat_zero3_explicit_stage3_buckets_and_both_offloads():
    r = load("fastchat_deepspeed_config_s3.json")
    assert r.selected_stage == 3
    subset(r.scenario, dict(DS_BF16, offload_optimizer="cpu", offload_params="cpu"))
    subset(r.workload, {"prefetch_bucket_size": 500_000_000, "param_persistence_threshold": 1_000_000,
                        "max_live_parameters": 1_000_000_000, "overlap_comm": "on"})
    assert {"zero_optimization.stage3_max_reuse_distance", "zero_optimization.sub_group_size",
            "zero_optimization.stage3_gather_16bit_weights_on_model_save"} <= keys(r.ignored_keys)


def test_zenflow_train_batch_and_accumulation_give_the_micro_batch():
    # runtime/config.py _set_batch_related_parameters: train_batch_size and gas -> micro = train // gas // world
    r = load("dse_zenflow_zf_config.json")
    assert r.selected_stage == 2 and r.workload["micro_batch"] == 8 // 1 // 8
    assert r.layout["micro_batches"] == 1
    subset(r.scenario, dict(DS_BF16, offload_optimizer="cpu", optimizer="adamw"))
    assert "zero_optimization.zenflow" in keys(r.ignored_keys)


def test_pipeline_example_train_and_micro_batch_give_the_accumulation():
    # _set_batch_related_parameters: train_batch_size and micro -> gas = train // micro // world (256 / 8 / 8)
    r = load("dse_pipeline_parallelism_ds_config.json")
    assert r.selected_stage == 0 and r.layout["micro_batches"] == 4 and r.workload["micro_batch"] == 8
    # no fp16/bf16 section and no ZeRO: the basic fp32 optimizer (engine.py _do_optimizer_sanity_check)
    subset(r.scenario, {"param_dtype": "fp32", "master_dtype": None, "grad_accum_dtype": None, "optimizer": "adam"})
    assert any("No fp16 or bf16 section" in n for n in r.notes)


def test_bing_bert_fp16_dynamic_loss_scale_lamb_and_a_removed_block():
    r = load("dse_bing_bert_bsz64k_lamb_seq128.json")
    assert r.selected_stage == 0                  # no zero_optimization block: stage 0
    # fp16 without ZeRO: FP16_Optimizer keeps fp32 masters (stage_1_and_2.py estimate: 2 + 2 + 4 + 4 + 8)
    subset(r.scenario, {"param_dtype": "fp16", "master_dtype": "fp32", "grad_accum_dtype": "fp32"})
    assert r.workload["micro_batch"] == 64 and r.layout["micro_batches"] == 65536 // 64 // 8
    ignored = {i["key"]: i["reason"] for i in r.ignored_keys}
    assert "_REMOVED_TOP_LEVEL_CONFIG_KEYS" in ignored["sparse_attention"]      # runtime/config.py
    assert "Lamb" in ignored["optimizer.type"] and "optimizer" not in r.scenario


def test_bf16_master_weights_and_optimizer_states_with_autocast():
    # precision_config.py DeepSpeedBF16Config bf16_master_weights_and_grads / bf16_optimizer_states; torch_autocast
    r = load("dse_bf16_master_weight_bf16_full.json")
    assert r.selected_stage == 3
    subset(r.scenario, {"param_dtype": "bf16", "master_dtype": "bf16", "grad_accum_dtype": "bf16",
                        "optimizer_dtype": "bf16", "optimizer": "adamw"})
    subset(r.workload, {"activation_dtype": "bf16", "reduce_bucket_size": 50_000_000,
                        "param_persistence_threshold": 0, "micro_batch": 4})


def test_autotuning_fp16_zero3_with_only_an_auto_micro_batch():
    # micro-batch alone: gradient accumulation 1 (_set_batch_related_parameters)
    r = load("dse_autotuning_ds_config_fp16_z3.json")
    assert r.selected_stage == 3 and r.layout == {"micro_batches": 1}
    subset(r.scenario, {"param_dtype": "fp16", "master_dtype": "fp32"})
    assert auto(r) == {"train_micro_batch_size_per_gpu": 2} and r.ignored_keys == []


def test_megatron_universal_checkpointing_zero1_bf16_fp32_accumulation():
    # engine.py _do_optimizer_sanity_check: ZeRO-1 + bf16 + grad_accum_dtype fp32 -> BF16_Optimizer
    r = load("megatron_ds_universal_checkpointing_ds_config.json")
    assert r.selected_stage == 1 and r.scenario["grad_accum_dtype"] == "fp32"
    assert any("BF16_Optimizer" in n for n in r.notes)
    # 16 = 16 x gas x 8 workers has no solution: DeepSpeed's _batch_assertion would stop; the view's values stay
    assert "micro_batches" not in r.layout and any("_batch_assertion" in n for n in r.notes)
    one = load("megatron_ds_universal_checkpointing_ds_config.json", dict(CONTEXT, workers=1))
    assert one.layout["micro_batches"] == 1 and one.workload["micro_batch"] == 16


def test_megatron_finetune_llama_no_zero_block():
    r = load("megatron_ds_finetune_hf_llama_ds_config.json")
    assert r.selected_stage == 0 and r.workload["micro_batch"] == 16 and r.layout["micro_batches"] == 2
    subset(r.scenario, DS_BF16)


def test_axolotl_zero3_param_offload_only():
    r = load("axolotl_zero3_bf16_cpuoffload_params.json")
    assert r.selected_stage == 3
    subset(r.scenario, dict(DS_BF16, offload_optimizer="none", offload_params="cpu"))
    subset(r.workload, {"reduce_bucket_size": H * H, "prefetch_bucket_size": int(0.9 * H * H),
                        "param_persistence_threshold": 10 * H, "max_live_parameters": 1})
    assert "zero_optimization.gather_16bit_weights_on_model_save" in keys(r.ignored_keys)


def test_axolotl_zero2_torch_compile_block_is_listed():
    r = load("axolotl_zero2_torch_compile.json")
    assert r.selected_stage == 2 and r.scenario["offload_optimizer"] == "cpu"
    assert "compile" in keys(r.ignored_keys)


def test_alpaca_and_llava_zero3_offload_with_trainer_autos():
    for name in ("alpaca_default_offload_opt_param.json", "llava_zero3_offload.json"):
        r = load(name)
        assert r.selected_stage == 3, name
        subset(r.scenario, dict(DS_BF16, offload_optimizer="cpu", offload_params="cpu", optimizer="adamw"))
        subset(r.workload, {"reduce_bucket_size": H * H, "prefetch_bucket_size": int(0.9 * H * H),
                            "param_persistence_threshold": 10 * H, "overlap_comm": "on"})
        assert {"scheduler", "optimizer.params"} <= keys(r.ignored_keys)


def test_llamafactory_zero0_overlap_off():
    r = load("llamafactory_ds_z0_config.json")
    assert r.selected_stage == 0 and r.workload["overlap_comm"] == "off"
    subset(r.scenario, DS_BF16)


def test_commented_config_is_read_as_deepspeeds_hjson_loader_reads_it():
    # runtime/config.py DeepSpeedConfig loads a path with hjson.load: #, // and /* */ comments are taken. The
    # HF Trainer and accelerate load with json.load (accelerate utils/deepspeed.py HfDeepSpeedConfig): a note.
    text = ('{\n  // ZeRO-3, both offloads\n  "zero_optimization": {\n    "stage": 3, # shard everything\n'
            '    "offload_param": {"device": "cpu"}, /* params */\n    "offload_optimizer": {"device": "nvme",'
            ' "nvme_path": "/local_nvme"}\n  },\n  "bf16": {"enabled": true},\n'
            '  "train_micro_batch_size_per_gpu": 1, "url": "http://x/#y"\n}\n')
    r = import_deepspeed(text, CONTEXT)
    assert r.selected_stage == 3 and r.scenario["offload_params"] == "cpu" and r.scenario["offload_optimizer"] == "nvme"
    assert any("hjson" in n and "json.load" in n for n in r.notes)
    hjson = pytest.importorskip("hjson", reason="DeepSpeed's loader; installed with deepspeed")
    assert json.loads(relax_json(text)) == json.loads(json.dumps(hjson.loads(text)))
    # strings keep their '#' and '//'
    assert json.loads(relax_json('{"a": "x//y#z"} // c')) == {"a": "x//y#z"}


def test_trailing_comma_is_still_an_error_naming_the_loaders():
    with pytest.raises(FrameworkConfigError) as err:
        import_deepspeed('{\n  "a": 1, // c\n}')
    assert err.value.field == "config" and (err.value.line, err.value.column) == (3, 1)
    assert "json.load" in err.value.allowed and "comments are read" in err.value.allowed


# --- accelerate --------------------------------------------------------------------------------------------------
def test_trl_alst_ulysses_deepspeed_with_parallelism_config():
    # parallelism_config.py ParallelismConfig._validate_accelerator accepts DEEPSPEED (and skips the total-size
    # check for sp_backend deepspeed); accelerator.py _prepare_deepspeed runs Ulysses over sp_size ranks and sets
    # train_batch_size from the data-parallel size. Before the fix this file was refused.
    r = load("trl_alst_ulysses_4gpu.yaml")
    assert r.selected_stage == 3 and r.format == "accelerate"
    subset(r.scenario, dict(DS_BF16, workers=2, offload_optimizer="none", offload_params="none"))
    subset(r.layout, {"cp": 2, "gpus": 4, "micro_batches": 4})
    assert any("Ulysses" in n for n in r.notes)
    assert {"parallelism_config.parallelism_config_sp_backend",
            "parallelism_config.parallelism_config_sp_attn_implementation",
            "deepspeed_config.seq_parallel_communication_data_type"} <= keys(r.ignored_keys)


def test_parallelism_config_under_fsdp1_is_still_refused():
    # _validate_accelerator: FSDP1 is neither fsdp2, a multi-device type nor DEEPSPEED
    text = ("distributed_type: FSDP\nnum_processes: 4\nfsdp_config:\n  fsdp_version: 1\n"
            "parallelism_config:\n  parallelism_config_dp_shard_size: 2\n  parallelism_config_tp_size: 2\n")
    with pytest.raises(FrameworkConfigError) as err:
        import_config("accelerate", text, CONTEXT)
    assert err.value.field == "parallelism_config" and "DEEPSPEED" in err.value.allowed


def test_parallelism_config_under_ddp_sets_replicas_and_tp():
    text = ("distributed_type: MULTI_GPU\nnum_processes: 8\nparallelism_config:\n"
            "  parallelism_config_dp_shard_size: 4\n  parallelism_config_tp_size: 2\n")
    r = import_config("accelerate", text, CONTEXT)
    assert r.selected_stage == 0 and r.scenario["workers"] == 4 and r.layout["tp"] == 2 and r.layout["gpus"] == 8


def test_trl_single_gpu_no_with_eight_processes_runs_one():
    # commands/launch.py launch_command: distributed_type NO -> simple_launcher, one process
    r = load("trl_single_gpu.yaml")
    assert r.selected_stage == 0 and r.scenario["workers"] == 1 and r.layout["gpus"] == 1
    assert any("num_processes 8 is not used" in n for n in r.notes)
    subset(r.scenario, dict(FSDP2, comm_dtype=None))
    assert r.workload == {"activation_dtype": "bf16"}


def test_trl_context_parallel_fsdp2_full_recompute():
    r = load("trl_context_parallel_2gpu.yaml")
    assert r.selected_stage == 3 and r.scenario["workers"] == 1
    subset(r.layout, {"cp": 2, "gpus": 2})
    assert r.workload == {"recompute": "full", "comm_buffers": "fsdp", "fsdp_version": 2}     # FSDP2: per-unit buffers


def test_trl_zero3_plugin_and_open_instruct_zero2_plugin():
    r = load("trl_zero3.yaml")
    assert r.selected_stage == 3 and r.scenario["workers"] == 8
    subset(r.scenario, DS_BF16)
    # absent gradient_accumulation_steps: "auto", filled from Accelerator(gradient_accumulation_steps)
    assert auto(r)["deepspeed_config.gradient_accumulation_steps (absent: auto)"] == 4
    r = load("open_instruct_deepspeed_zero2.yaml")
    assert r.selected_stage == 2 and r.scenario["workers"] == 8 and r.scenario["gpus_per_node"] == 8


def test_alignment_handbook_ddp_and_fsdp():
    r = load("alignment_handbook_ddp.yaml")
    assert r.selected_stage == 0 and r.workload == {"activation_dtype": "bf16"}
    subset(r.scenario, dict(FSDP2, workers=8, comm_dtype=None))
    r = load("alignment_handbook_fsdp.yaml")
    assert r.selected_stage == 3 and r.sources["selected_stage"] == "fsdp_config.fsdp_sharding_strategy"
    subset(r.scenario, dict(FSDP2, workers=8, comm_dtype="bf16", offload_params="none"))


def test_llamafactory_fsdp_offload():
    r = load("llamafactory_fsdp_config_offload.yaml")
    assert r.selected_stage == 3
    subset(r.scenario, dict(FSDP2, comm_dtype="bf16", offload_params="cpu", offload_optimizer="cpu", workers=2))


# --- torchtitan, older key names --------------------------------------------------------------------------------
# config_manager.py before #980 (2025-03-18) kept the degrees under [training] and [experimental]; #1238
# (2025-06-05) renamed training.batch_size to local_batch_size. 238fa99 refuses the old names; they are read as
# the renamed fields, with a note (the last line of each note names the new key).
def test_torchtitan_2024_llama3_8b_old_names():
    r = load("torchtitan_2024-09_llama3_8b.toml")
    assert r.selected_stage == 3
    subset(r.scenario, dict(FSDP2, comm_dtype="bf16", workers=16))
    subset(r.workload, {"micro_batch": 1, "seq_len": 8192, "recompute": "op"})      # selective_ac_option = "op"
    assert auto(r) == {"parallelism.data_parallel_shard_degree": 16}
    notes = " ".join(r.notes)
    for old in ("training.batch_size", "training.data_parallel_shard_degree", "experimental.pipeline_parallel_degree"):
        assert f"{old} is an older torchtitan name" in notes
    assert {"training.compile", "training.warmup_steps", "float8"} <= keys(r.ignored_keys)


def test_torchtitan_2024_llama3_70b_data_parallel_degree_and_tp():
    r = load("torchtitan_2024-06_llama3_70b.toml")
    subset(r.layout, {"tp": 8, "gpus": 16, "loss_parallel": True})
    subset(r.scenario, {"workers": 2})
    subset(r.workload, {"micro_batch": 8, "recompute": "full"})
    assert any("training.data_parallel_degree is an older" in n for n in r.notes)
    assert "training.fp8_linear" in keys(r.ignored_keys)


def test_torchtitan_2025_03_debug_model_moved_degrees():
    r = load("torchtitan_2025-03_debug_model.toml")
    assert r.selected_stage == 3 and r.workload["micro_batch"] == 8
    assert any("experimental.context_parallel_degree" in n for n in r.notes)


def test_torchtitan_2025_04_batch_size_only_renamed():
    r = load("torchtitan_2025-04_llama3_8b.toml")
    assert r.workload["micro_batch"] == 1 and r.layout["micro_batches"] == 1
    assert [n for n in r.notes if "older torchtitan name" in n] == [
        "training.batch_size is an older torchtitan name, read as training.local_batch_size (its name at 238fa99, "
        "which refuses the old one)."]


def test_torchtitan_old_pipeline_microbatches_and_split_points():
    # distributed/pipeline.py before #1073: n_microbatches defaults to the total number of stages and must divide
    # the batch; split points give len + 1 stages
    base = "[training]\nbatch_size = 16\n[experimental]\npipeline_parallel_degree = 4\n"
    r = import_torchtitan(base, {"gpus": 16})
    subset(r.layout, {"pp": 4, "micro_batches": 4, "schedule": "1f1b"})
    assert r.workload["micro_batch"] == 4 and r.selected_stage == 3      # was 2: the gathered copy beside the
    assert r.workload["reshard_after_forward"] == "auto"                 # shards (reshard default: not pp_enabled)
    points = ", ".join(f'"layers.{i}"' for i in range(4, 32, 4))         # 7 points: 8 stages, 2 per rank
    r = import_torchtitan(base + 'pipeline_parallel_microbatches = 8\npipeline_parallel_schedule = '
                          f'"Interleaved1F1B"\npipeline_parallel_split_points = [{points}]\n', {"gpus": 16})
    subset(r.layout, {"pp": 4, "vpp": 2, "micro_batches": 8, "schedule": "interleaved"})
    assert r.workload["micro_batch"] == 2
    with pytest.raises(FrameworkConfigError) as err:
        import_torchtitan(base + "pipeline_parallel_microbatches = 3\n", {"gpus": 16})
    assert err.value.field == "experimental.pipeline_parallel_microbatches"


def test_torchtitan_old_and_new_name_together_is_refused():
    with pytest.raises(FrameworkConfigError) as err:
        import_torchtitan("[training]\nbatch_size = 2\nlocal_batch_size = 4\n")
    assert err.value.field == "training.batch_size"


def test_torchtitan_enable_loss_parallel_is_inverted():
    r = import_torchtitan("[training]\ntensor_parallel_degree = 2\nenable_loss_parallel = false\n", {"gpus": 8})
    assert r.layout["tp"] == 2 and r.layout["loss_parallel"] is False
