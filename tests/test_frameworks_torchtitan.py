"""torchtitan import: job_config.py defaults, -1 shard degree, HSDP, pipeline schedules, batch and accumulation,
dtype, activation checkpointing, and the fields torchtitan refuses."""

import json
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
    # mode selective with selective_ac_option "2": one block in two checkpointed (_apply_layer_sac)
    assert r.workload == {"seq_len": 2048, "micro_batch": 8, "recompute": "full", "recompute_every": 2,
                          "reshard_after_forward": "auto", "reduce_dtype": "fp32",     # FSDP2's policy
                          "comm_buffers": "fsdp", "fsdp_wrap": "torchtitan"}          # its units, one at a time
    assert r.layout == {"gpus": 8, "micro_batches": 1}


def test_explicit_degrees_need_no_world_size():
    r = tt("[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\ncontext_parallel_degree = 2\n")
    assert r.scenario["workers"] == 4 and r.layout == {"tp": 2, "cp": 2, "sequence_parallel": True, "gpus": 16,
                                                       "micro_batches": 1, "loss_parallel": True}
    assert any("dp_shard x cp" in n for n in r.notes)


def test_hsdp_sets_the_shard_group():
    r = tt("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 8\n")
    assert r.scenario["workers"] == 32 and r.scenario["shard_group"] == 8


def test_replicate_only_is_ddp_stage_0():
    r = tt("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 1\n")
    assert r.selected_stage == 0 and r.scenario["comm_dtype"] is None and r.workload["activation_dtype"] == "bf16"


# ZeRO-3 throughout (was ZeRO-2 for "never" and for "default" under pp): the shards stay, and a unit that does not
# reshard keeps its gathered copy beside them (zerocalc.step.fsdp_pipeline, workload.reshard_after_forward).
@pytest.mark.parametrize("policy, pp, reshard", [("always", 1, "yes"), ("never", 1, "no"), ("default", 1, "auto"),
                                                  ("default", 2, "auto"), ("always", 2, "yes")])
def test_reshard_policy(policy, pp, reshard):
    r = tt(f"[training]\nlocal_batch_size = 4\n[parallelism]\ndata_parallel_shard_degree = 2\n"
           f"fsdp_reshard_after_forward = \"{policy}\"\npipeline_parallel_degree = {pp}\n")
    assert r.selected_stage == 3
    assert r.workload["reshard_after_forward"] == reshard and r.workload["reduce_dtype"] == "fp32"


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
    for mode in ("none", "full"):
        assert tt(f'[activation_checkpoint]\nmode = "{mode}"\n').workload["recompute"] == mode
    r = tt('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n')
    assert r.workload["recompute"] == "op"                            # SelectiveAC: op-level, step/op_checkpoint.py
    r = tt('[activation_checkpoint]\nmode = "memory_budget"\n')
    assert "recompute" not in r.workload
    assert refused('[activation_checkpoint]\nmode = "some"\n').field == "activation_checkpoint.mode"
    r = tt('[activation_checkpoint]\nmode = "full"\nselective_ac_option = "abc"\n')   # read only under selective
    assert r.workload["recompute"] == "full"
    assert "activation_checkpoint.selective_ac_option" in {i["key"] for i in r.ignored_keys}


# torchtitan distributed/activation_checkpoint.py (238fa99) _apply_ac_to_transformer_block: "op" is op-level SAC;
# option.isdigit() is _apply_layer_sac, which wraps block k (from 1) in checkpoint_wrapper when
# `not ac_freq or k % ac_freq == 0` ("0" and "1": every block); anything else raises ValueError.
@pytest.mark.parametrize("option, recompute, every", [("1", "full", None), ("0", "full", None), ("2", "full", 2),
                                                      ("3", "full", 3), ("op", "op", None)])
def test_selective_ac_option_is_what_torchtitan_checkpoints(option, recompute, every):
    r = tt(f'[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "{option}"\n')
    assert r.workload["recompute"] == recompute
    assert r.workload.get("recompute_every") == every
    note = " ".join(r.notes)
    if recompute == "full" and every is None:
        assert "every transformer block" in note and "exactly" in note
    if every:                          # N > 1: one block in N, the others keep everything
        assert f"one transformer block in {option}" in note and f"recompute_every = {option}" in note


@pytest.mark.parametrize("option", ['"abc"', '"-1"', '"2.5"', '" 2"', '"\u00b2"', '""', "2", "true"])
def test_selective_ac_options_torchtitan_rejects(option):
    e = refused(f'[activation_checkpoint]\nmode = "selective"\nselective_ac_option = {option}\n')
    assert e.field == "activation_checkpoint.selective_ac_option"


# torchtitan train.py: loss_parallel_enabled = tp_enabled and not disable_loss_parallel; parallelize.py apply_tp(
# loss_parallel=not disable_loss_parallel) keeps the output projection vocab-sharded or gathers the logits.
def test_disable_loss_parallel_gathers_the_logits():
    base = "[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 4\n"
    assert tt(base).layout["loss_parallel"] is True
    r = tt(base + "disable_loss_parallel = true\n")
    assert r.layout["loss_parallel"] is False
    assert r.sources["layout.loss_parallel"] == "parallelism.disable_loss_parallel"
    r = tt("[parallelism]\ndata_parallel_shard_degree = 2\ndisable_loss_parallel = true\n")   # no tp: no effect
    assert "loss_parallel" not in r.layout
    assert "parallelism.disable_loss_parallel" in {i["key"] for i in r.ignored_keys}
    assert refused(base + 'disable_loss_parallel = "yes"\n').field == "parallelism.disable_loss_parallel"


# torchtitan distributed/utils.py maybe_enable_amp (238fa99): with FSDP, fully_shard's MixedPrecisionPolicy; without
# it, tp or pp turn mixed precision off ("Mixed precision training is disabled"); only DDP / one device autocasts.
@pytest.mark.parametrize("degrees", ["tensor_parallel_degree = 2", "pipeline_parallel_degree = 2"])
def test_no_fsdp_with_tp_or_pp_trains_in_fp32(degrees):
    r = tt(f"[parallelism]\ndata_parallel_shard_degree = 1\n{degrees}\n")
    assert r.selected_stage == 0 and r.scenario["param_dtype"] == "fp32" and r.scenario["comm_dtype"] is None
    assert r.workload["activation_dtype"] == "fp32"
    assert any("maybe_enable_amp" in n and "no effect" in n for n in r.notes)
    r = tt(f'[training]\ndtype = "bfloat16"\n[parallelism]\ndata_parallel_shard_degree = 1\n{degrees}\n')
    assert r.scenario["param_dtype"] == "bf16" and "activation_dtype" not in r.workload   # pure bf16 model
    r = tt("[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 2\n")  # FSDP: bf16 compute
    assert r.scenario["comm_dtype"] == "bf16" and "activation_dtype" not in r.workload


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


RECIPE_TOML = """[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[compile]
enable = true
components = ["model", "loss"]

[model]
converters = ["float8"]

[quantize.linear.float8]
enable_fsdp_float8_all_gather = true
"""


def test_a_recipe_toml_imports_as_that_recipe_and_exports_back():
    # torchtitan job_config.py ActivationCheckpoint, Compile, QuantizedLinear.Float8 (238fa99)
    from zerocalc.frameworks.export import export_torchtitan
    import tomllib
    r = tt(RECIPE_TOML, {"gpus": 8})
    assert (r.workload["recompute"], r.workload["compile"], r.workload["loss"]) == ("op", True, "compiled")
    assert (r.workload["float8"], r.workload["float8_all_gather"]) == ("tensorwise", True)   # recipe_name None
    back = tomllib.loads(export_torchtitan(r.scenario, r.workload, r.layout, r.selected_stage))
    assert back["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert back["compile"] == {"enable": True, "components": ["model", "loss"]}
    assert back["model"]["converters"] == ["float8"]
    assert back["quantize"]["linear"]["float8"] == {"recipe_name": "tensorwise", "enable_fsdp_float8_all_gather": True}
    rowwise = tt(RECIPE_TOML.replace("enable_fsdp_float8_all_gather = true", 'recipe_name = "rowwise"'), {"gpus": 8})
    assert rowwise.workload["float8"] == "rowwise" and "float8_all_gather" not in rowwise.workload
    model_only = tt(RECIPE_TOML.replace('["model", "loss"]', '["model"]'), {"gpus": 8})
    assert model_only.workload["compile"] is True and "loss" not in model_only.workload
    assert refused('[compile]\nenable = true\ncomponents = ["model", "optimizer"]\n').field == "compile.components"


def test_the_export_names_its_model_and_imports_back_to_it(tmp_path):
    """Issue 35: "The torchtitan export names its model" - [model] name and flavor from the import's own flavor
    table (frameworks/torchtitan/fields.py FLAVORS), so the file imports back to the same preset; a model with no
    flavor is said, not guessed."""
    import tomllib

    from zerocalc.cli.main import run

    text = run(["--model", "qwen3-8b", "--workers", "8", "--export", "torchtitan"])
    assert tomllib.loads(text)["model"] == {"name": "qwen3", "flavor": "8B"}
    path = tmp_path / "job.toml"
    path.write_text(text)
    back = json.loads(run(["--torchtitan-config", str(path), "--json"]))
    direct = json.loads(run(["--model", "qwen3-8b", "--json"]))
    assert back["architecture"] == direct["architecture"]
    shaped = run(["--model", "llama-3-8b", "--export", "torchtitan"])        # Llama 3's shapes are llama3 8B's
    assert tomllib.loads(shaped)["model"] == {"name": "llama3", "flavor": "8B"} and "same shapes" in shaped
    other = run(["--model", "gpt2", "--export", "torchtitan"])
    assert "model" not in tomllib.loads(other) and "none of torchtitan's flavors" in other
