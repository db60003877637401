"""DeepSpeed import: defaults by stage, "auto", what DeepSpeed ignores (a note) and what it refuses (an error named by
key). The schema and refusal tests compare with the installed deepspeed 0.19.8 when present (CI installs it)."""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerocalc.frameworks import FrameworkConfigError, import_deepspeed
from zerocalc.frameworks.deepspeed import schema as S


def ds(config, context=None):
    return import_deepspeed(json.dumps(config), context)


def refused(config, context=None):
    with pytest.raises(FrameworkConfigError) as err:
        ds(config, context)
    return err.value


BATCH = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}


@pytest.mark.parametrize("stage, overlap", [(0, "auto"), (1, "auto"), (2, "auto"), (3, "auto")])
def test_absent_keys_take_deepspeed_defaults(stage, overlap):
    r = ds({"zero_optimization": {"stage": stage}, **BATCH})
    assert r.selected_stage == stage
    assert r.workload["overlap_comm"] == overlap            # DeepSpeed: on at stage 3 only
    assert r.workload["reduce_bucket_size"] == 500_000_000 and r.workload["prefetch_bucket_size"] == 50_000_000
    assert r.workload["max_live_parameters"] == 1_000_000_000
    assert r.workload["param_persistence_threshold"] == 100_000
    assert r.scenario["offload_optimizer"] == r.scenario["offload_params"] == "none"
    assert r.layout["micro_batches"] == 4 and r.workload["micro_batch"] == 2


def test_no_zero_section_is_stage_0_and_fp32_without_master():
    r = ds({"train_micro_batch_size_per_gpu": 1})
    assert r.selected_stage == 0
    assert r.scenario["param_dtype"] == "fp32" and r.scenario["master_dtype"] is None
    assert r.layout["micro_batches"] == 1                   # gas derived as 1 (_set_batch_related_parameters)


def test_fp16_ledger_is_the_deepspeed_convention():
    r = ds({"fp16": {"enabled": True}, "zero_optimization": {"stage": 2}})
    assert {k: r.scenario[k] for k in ("param_dtype", "grad_dtype", "master_dtype", "grad_accum_dtype",
                                      "optimizer_dtype", "convention")} == {
        "param_dtype": "fp16", "grad_dtype": "fp16", "master_dtype": "fp32", "grad_accum_dtype": "fp32",
        "optimizer_dtype": "fp32", "convention": "deepspeed"}


def test_bf16_master_and_optimizer_states_in_bf16():
    r = ds({"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True},
            "zero_optimization": {"stage": 1}})
    assert r.scenario["master_dtype"] == "bf16" and r.scenario["optimizer_dtype"] == "bf16"
    e = refused({"bf16": {"enabled": True, "bf16_optimizer_states": True}, "zero_optimization": {"stage": 1}})
    assert e.field == "bf16.bf16_optimizer_states"


def test_legacy_bfloat16_name():
    assert ds({"bfloat16": {"enabled": True}}).scenario["param_dtype"] == "bf16"


def test_both_fp16_and_bf16_on_is_refused():
    e = refused({"fp16": {"enabled": True}, "bf16": {"enabled": True}})
    assert e.field == "bf16.enabled" and "simultaneously" in e.allowed


def test_unknown_key_inside_fp16_is_refused_by_name():
    e = refused({"fp16": {"enabled": True, "loss_scael": 0}})
    assert e.field == "fp16.loss_scael"


def test_unknown_zero_key_is_refused_but_auto_on_it_is_dropped():
    assert refused({"zero_optimization": {"stage": 2, "bucket": 5}}).field == "zero_optimization.bucket"
    r = ds({"zero_optimization": {"stage": 2, "bucket": "auto"}})
    assert "zero_optimization.bucket" in {i["key"] for i in r.ignored_keys}


@pytest.mark.parametrize("zero, key", [
    ({"stage": 4}, "zero_optimization.stage"),
    ({"stage": 2, "reduce_bucket_size": 0}, "zero_optimization.reduce_bucket_size"),
    ({"stage": 2, "allgather_bucket_size": -1}, "zero_optimization.allgather_bucket_size"),
    ({"stage": 2, "reduce_bucket_size": 5.5}, "zero_optimization.reduce_bucket_size"),
    ({"stage": 2, "overlap_comm": 2}, "zero_optimization.overlap_comm"),
    ({"stage": 3, "offload_param": {"device": "CPU"}}, "zero_optimization.offload_param.device"),
    ({"stage": 3, "offload_param": "cpu"}, "zero_optimization.offload_param"),
    ({"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}, "zero_optimization.offload_optimizer.ratio"),
    ({"stage": 0, "compute_grad_norm": False}, "zero_optimization.compute_grad_norm"),
    ({"stage": 3, "prefetch_bucket_size": 1, "stage3_prefetch_bucket_size": 2},
     "zero_optimization.prefetch_bucket_size"),
    ({"stage": 2, "cpu_offload": True, "offload_optimizer": {"device": "cpu"}}, "zero_optimization.cpu_offload"),
])
def test_out_of_range_values_are_refused_by_key(zero, key):
    assert refused({"zero_optimization": zero}).field == key


def test_lax_values_pydantic_accepts():
    r = ds({"zero_optimization": {"stage": "3", "reduce_bucket_size": "1_000", "overlap_comm": "yes",
                                  "stage3_max_live_parameters": 2e9}})
    assert r.selected_stage == 3 and r.workload["reduce_bucket_size"] == 1000
    assert r.workload["overlap_comm"] == "on" and r.workload["max_live_parameters"] == 2_000_000_000


def test_settings_deepspeed_ignores_import_with_a_note():
    r = ds({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"},
                                  "stage3_prefetch_bucket_size": 1000, "stage3_max_live_parameters": 5}})
    assert r.scenario["offload_params"] == "cpu" and r.workload["prefetch_bucket_size"] == 1000
    text = " ".join(r.notes)
    assert "offload_param (cpu) has no effect at stage 2" in text
    assert "stage3_prefetch_bucket_size is a ZeRO-3 setting" in text
    assert "stage3_max_live_parameters is a ZeRO-3 setting" in text


def test_deprecated_cpu_offload_flags():
    r = ds({"zero_optimization": {"stage": 3, "cpu_offload": True, "cpu_offload_param": True}})
    assert r.scenario["offload_optimizer"] == "cpu" and r.scenario["offload_params"] == "cpu"


def test_deprecated_boolean_zero_optimization():
    r = ds({"zero_optimization": True, "allgather_size": 1234})
    assert r.selected_stage == 1 and r.workload["allgather_bucket_size"] == 1234


def test_hidden_size_autos_follow_transformers():
    zero = {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto"}
    r = ds({"zero_optimization": zero}, {"hidden_size": 5120})
    assert r.workload["reduce_bucket_size"] == 5120 * 5120
    assert r.workload["prefetch_bucket_size"] == int(0.9 * 5120 * 5120)
    assert r.workload["param_persistence_threshold"] == 51200
    assert all("5,120" in a["how"] for a in r.auto_keys)


def test_batch_autos_come_from_the_view():
    r = ds({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto", "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}},
           {"micro_batch": 3, "gradient_accumulation_steps": 2, "precision": "fp16", "workers": 4})
    assert r.workload["micro_batch"] == 3 and r.layout["micro_batches"] == 2
    assert r.scenario["param_dtype"] == "fp16" and "workers" not in r.scenario
    r = ds({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}})
    assert "micro_batch" not in r.workload and "param_dtype" not in r.scenario
    assert all(a["value"] is None for a in r.auto_keys)


def test_train_batch_size_determines_the_data_parallel_degree():
    r = ds({"train_batch_size": 64, **BATCH})
    assert r.scenario["workers"] == 8 and r.layout["gpus"] == 8
    assert refused({"train_batch_size": 63, **BATCH}).field == "train_batch_size"
    r = ds({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, {"workers": 8})
    assert r.layout["micro_batches"] == 4                    # gas = train / micro / world
    r = ds({"train_batch_size": 64, "gradient_accumulation_steps": 2}, {"workers": 8})
    assert r.workload["micro_batch"] == 4


def test_train_batch_size_alone_sets_accumulation_1():
    # runtime/config.py _set_batch_related_parameters, train_batch_size only: gas = 1, micro = train / world
    r = ds({"train_batch_size": 64})
    assert r.layout["micro_batches"] == 1 and "micro_batch" not in r.workload
    note = " ".join(r.notes)
    assert "train_batch_size = 64 alone" in note and "only one of" not in note
    r = ds({"train_batch_size": 64}, {"workers": 8})
    assert r.layout["micro_batches"] == 1 and r.workload["micro_batch"] == 8
    r = ds({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2})
    assert any("with only the micro-batch known" in n for n in r.notes)


def test_batch_values_are_positive_integers():
    assert refused({"train_micro_batch_size_per_gpu": 0}).field == "train_micro_batch_size_per_gpu"
    assert refused({"gradient_accumulation_steps": "4"}).field == "gradient_accumulation_steps"


def test_communication_dtype_and_activations():
    r = ds({"bf16": {"enabled": True}, "communication_data_type": "FP32"})
    assert r.scenario["comm_dtype"] == "fp32" and r.workload["activation_dtype"] == "bf16"
    assert refused({"communication_data_type": "int8"}).field == "communication_data_type"


def test_mics_shard_size_is_the_shard_group_at_stage_3():
    r = ds({"zero_optimization": {"stage": 3, "mics_shard_size": 8}, "train_batch_size": 32,
            "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1})
    assert r.scenario["shard_group"] == 8 and r.scenario["workers"] == 32
    assert any("0.19.8 removed MiCS" in n for n in r.notes)
    r = ds({"zero_optimization": {"stage": 2, "mics_shard_size": 8}})
    assert r.scenario["shard_group"] is None
    assert refused({"zero_optimization": {"stage": 3, "mics_shard_size": 3}, "train_batch_size": 8,
                    **BATCH}).field == "zero_optimization.mics_shard_size"


def test_hpz_is_listed_not_modelled():
    r = ds({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})
    assert r.scenario["shard_group"] is None
    assert "zero_optimization.zero_hpz_partition_size" in {i["key"] for i in r.ignored_keys}


def test_parallel_degrees_and_optimizer():
    r = ds({"tensor_parallel": {"autotp_size": 4}, "sequence_parallel_size": 2, "optimizer": {"type": "Lion"}})
    assert r.layout["tp"] == 4 and r.layout["cp"] == 2 and r.scenario["optimizer"] == "lion"
    r = ds({"optimizer": {"type": "OneBitAdam"}})
    assert "optimizer" not in r.scenario and "optimizer.type" in {i["key"] for i in r.ignored_keys}


def test_autotp_auto_is_resolved_as_deepspeed_drops_it():
    # DeepSpeedConfigModel (runtime/config_utils.py) drops "auto": TPTrainingConfig.autotp_size keeps 0, AutoTP off
    r = ds({"tensor_parallel": {"autotp_size": "auto"}})
    assert "tp" not in r.layout
    assert [(a["key"], a["value"]) for a in r.auto_keys] == [("tensor_parallel.autotp_size", 0)]
    assert "tensor_parallel.autotp_size" not in {i["key"] for i in r.ignored_keys}


# runtime/config.py reads data_types.grad_accum_dtype; engine.py get_data_types (None: the model dtype) and
# _do_optimizer_sanity_check (stage 0: it must be the model dtype; stage 1 + bf16 + fp32: BF16_Optimizer); the ZeRO
# optimizers accumulate gradient partitions in it (stage_1_and_2.py / stage3.py gradient_accumulation_dtype).
def test_grad_accum_dtype_follows_deepspeed_per_stage():
    base = {"bf16": {"enabled": True}}
    e = refused({**base, "zero_optimization": {"stage": 0}, "data_types": {"grad_accum_dtype": "fp32"}})
    assert e.field == "data_types.grad_accum_dtype" and "unsupported mix" in e.allowed
    r = ds({**base, "zero_optimization": {"stage": 0}, "data_types": {"grad_accum_dtype": "bfloat16"}})
    assert r.scenario["grad_accum_dtype"] == "fp32"          # FP16_Optimizer's fp32 copies, as without the key
    r = ds({**base, "zero_optimization": {"stage": 1}, "data_types": {"grad_accum_dtype": "fp32"}})
    assert r.scenario["grad_accum_dtype"] == "fp32" and any("BF16_Optimizer" in n for n in r.notes)
    # a bf16 master keeps its gradients in bf16 unless the accumulation dtype says fp32
    master = {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}, "zero_optimization": {"stage": 2}}
    assert ds(master).scenario["grad_accum_dtype"] == "bf16"
    r = ds({**master, "data_types": {"grad_accum_dtype": "torch.float32"}})
    assert r.scenario["grad_accum_dtype"] == "fp32" and r.scenario["master_dtype"] == "bf16"
    assert r.sources["scenario.grad_accum_dtype"] == "data_types.grad_accum_dtype"
    # an fp32 master steps from an fp32 gradient partition whatever the accumulation dtype: said in a note
    r = ds({**base, "zero_optimization": {"stage": 3}, "data_types": {"grad_accum_dtype": "bf16"}})
    assert r.scenario["grad_accum_dtype"] == "fp32" and any("accumulates the gradient partitions in bf16" in n
                                                             for n in r.notes)
    assert "data_types.grad_accum_dtype" not in {i["key"] for i in r.ignored_keys}
    e = refused({**base, "zero_optimization": {"stage": 1, "compute_grad_norm": False},
                 "data_types": {"grad_accum_dtype": "fp32"}})
    assert e.field == "zero_optimization.compute_grad_norm"
    for bad in ("FP32", "auto", 32, "float64"):
        assert refused({"data_types": {"grad_accum_dtype": bad}}).field == "data_types.grad_accum_dtype"
    r = ds({**base, "zero_optimization": {"stage": 2}, "data_types": {"grad_accum_dtype": "int8", "x": 1}})
    assert {"data_types.grad_accum_dtype", "data_types.x"} <= {i["key"] for i in r.ignored_keys}


def test_activation_checkpointing_block_configures_only():
    # runtime/activation_checkpointing/config.py: read by deepspeed.checkpointing.configure; partition_activations
    # splits the checkpoint inputs over the model-parallel ranks, cpu_checkpointing moves them to the CPU
    r = ds({"activation_checkpointing": {"partition_activations": True, "cpu_checkpointing": False,
                                         "number_checkpoints": 4}})
    ignored = {i["key"]: i["reason"] for i in r.ignored_keys}
    assert "does not turn recomputation on" in ignored["activation_checkpointing.partition_activations"]
    assert "activation_checkpointing.number_checkpoints" in ignored and "recompute" not in r.workload
    assert any("partition_activations" in n and "does not model" in n for n in r.notes)
    r = ds({"activation_checkpointing": {"contiguous_memory_optimization": True}})
    assert not any("does not model" in n for n in r.notes)
    assert "activation_checkpointing" in {i["key"] for i in ds({"activation_checkpointing": {}}).ignored_keys}


def test_removed_top_level_key_is_listed():
    r = ds({"amp": {"enabled": True}})
    assert "amp" in {i["key"] for i in r.ignored_keys}


@pytest.mark.parametrize("text, line, col", [('{\n  "a": 1,\n}', 3, 1), ('{"a": tru}', 1, 7), ("[1]", None, None)])
def test_json_errors_name_line_and_column(text, line, col):
    with pytest.raises(FrameworkConfigError) as err:
        import_deepspeed(text)
    assert err.value.line == line and err.value.column == col


def test_duplicate_keys_and_size_cap():
    with pytest.raises(FrameworkConfigError) as err:
        import_deepspeed('{"fp16": {}, "fp16": {}}')
    assert err.value.field == "fp16"
    with pytest.raises(FrameworkConfigError):
        import_deepspeed(b"{" + b" " * 1_000_001 + b"}")
    with pytest.raises(FrameworkConfigError):
        import_deepspeed(b"\xff\xfe")


# --- against the installed DeepSpeed ---------------------------------------------------------------------------
os.environ.setdefault("DS_BUILD_OPS", "0")


@pytest.fixture(scope="module")
def deepspeed_models():
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                       DeepSpeedZeroOffloadParamConfig)
    return {"zero": DeepSpeedZeroConfig, "fp16": DeepSpeedFP16Config, "bf16": DeepSpeedBF16Config,
            "offload_param": DeepSpeedZeroOffloadParamConfig, "offload_optimizer": DeepSpeedZeroOffloadOptimizerConfig}


def _names(model):
    out = set()
    for name, info in model.model_fields.items():
        out.add(name)
        if info.alias:
            out.add(info.alias)
    return out


def test_grad_accum_names_are_deepspeeds_dtype_enum():
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    from deepspeed.runtime.config import DtypeEnum
    names = {k for k in DtypeEnum._value2member_map_ if isinstance(k, str)}
    assert names == set(S.GRAD_ACCUM_DTYPES)
    for name, ours in S.GRAD_ACCUM_DTYPES.items():
        assert DtypeEnum(name).name == ours


def test_schema_tables_match_deepspeed(deepspeed_models):
    ours = {n for n, (alias, _, _) in S.ZERO_FIELDS.items()} | {a for a, _, _ in S.ZERO_FIELDS.values() if a}
    assert ours == _names(deepspeed_models["zero"])
    assert set(S.FP16_FIELDS) == _names(deepspeed_models["fp16"])
    assert set(S.BF16_FIELDS) == _names(deepspeed_models["bf16"])
    assert set(S.OFFLOAD_PARAM_FIELDS) == _names(deepspeed_models["offload_param"])
    assert set(S.OFFLOAD_OPTIMIZER_FIELDS) == _names(deepspeed_models["offload_optimizer"])
    defaults = deepspeed_models["zero"]()
    for name, (_, _, default) in S.ZERO_FIELDS.items():
        if S.ZERO_FIELDS[name][1] != "model" and name != "overlap_comm":
            assert getattr(defaults, name) == default, name
    from deepspeed.runtime import config as ds_config
    assert set(S.REMOVED_TOP_LEVEL_KEYS) == set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS)
    assert set(S.REMOVED_ZERO_KEYS) == set(ds_config._REMOVED_ZERO_CONFIG_KEYS)


def test_the_refused_real_configs_are_refused_by_deepspeed_too(deepspeed_models):
    from pathlib import Path
    fixtures = Path(__file__).parent / "fixtures" / "frameworks"
    zero3 = json.loads((fixtures / "transformers_ds_config_zero3.json").read_text())
    with pytest.raises(Exception):
        deepspeed_models["zero"](**zero3["zero_optimization"])
    alst = json.loads((fixtures / "llamafactory_ds_z3_alst_config.json").read_text())
    with pytest.raises(Exception):
        deepspeed_models["bf16"](**alst["bf16"])


ZERO_KEYS = ["stage", "reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients",
             "stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_param_persistence_threshold",
             "prefetch_bucket_size", "zero_hpz_partition_size", "offload_optimizer", "offload_param",
             "compute_grad_norm", "cpu_offload", "unknown_key"]
VALUES = st.one_of(st.sampled_from([0, 1, 2, 3, 4, -1, 2.0, 2.5, 5e8, True, False, None, "auto", "2", "yes", "off",
                                    "x", "", [], {}]),
                   st.fixed_dictionaries({}, optional={"device": st.sampled_from(["none", "cpu", "nvme", "CPU", 1]),
                                                       "ratio": st.sampled_from([1.0, 0.5, 2.0]),
                                                       "pin_memory": st.sampled_from([True, "yes", 3])}))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(ZERO_KEYS), VALUES, max_size=6))
def test_we_refuse_a_zero_block_exactly_when_deepspeed_does(deepspeed_models, zero):
    if zero.get("stage") == "auto":
        zero["stage"] = 2               # accelerate's plugin fills 2; raw DeepSpeed would drop it (stage 0)
    try:
        deepspeed_models["zero"](**zero)
        theirs = None
    except Exception as exc:                     # pydantic ValidationError or the deprecation AssertionError
        theirs = exc
    try:
        imported = ds({"zero_optimization": zero})
        ours = None
    except FrameworkConfigError as exc:
        ours = exc
    assert (ours is None) == (theirs is None), (zero, ours, theirs)
    if ours is None:
        assert_same_resolution(imported, deepspeed_models["zero"](**zero), zero)


def assert_same_resolution(imported, config, given):
    """What DeepSpeed resolved (stage, offload devices, buckets, overlap) is what we imported. "auto" differs on
    purpose: the Trainer fills it (stage 2 via accelerate, buckets from the hidden size), raw DeepSpeed drops it."""
    if given.get("stage") != "auto":
        assert imported.selected_stage == int(config.stage)
    for field, block in (("offload_optimizer", config.offload_optimizer), ("offload_params", config.offload_param)):
        assert imported.scenario[field] == (block.device if block else "none")
    w = imported.workload
    for ours, theirs in (("reduce_bucket_size", config.reduce_bucket_size),
                         ("allgather_bucket_size", max(config.allgather_bucket_size, 1)),
                         ("prefetch_bucket_size", config.prefetch_bucket_size),
                         ("max_live_parameters", max(config.max_live_parameters, 1)),
                         ("param_persistence_threshold", config.param_persistence_threshold)):
        if ours in w:
            assert w[ours] == theirs, ours
    if given.get("stage") != "auto":
        assert (w["overlap_comm"] == "on" or (w["overlap_comm"] == "auto" and config.stage == 3)) == \
            config.overlap_comm
