"""Round trip: import(export(view)) gives back every field the format expresses, for random views (hypothesis); and
the frameworks' own parsers accept the exports (DeepSpeed's config models, accelerate's config loader, tomllib with
torchtitan's field tables). Those need the validation extras and skip, with the reason, without them."""

import json
import os
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerocalc.frameworks import (ExportError, export_accelerate, export_caveats, export_deepspeed, export_torchtitan,
                                 import_accelerate, import_deepspeed, import_torchtitan)
from zerocalc.frameworks.torchtitan.fields import FIELDS, SECTIONS

os.environ.setdefault("DS_BUILD_OPS", "0")
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
FSDP2 = {"convention": "fsdp2", "param_dtype": "fp32", "grad_dtype": "fp32", "master_dtype": None,
         "grad_accum_dtype": None, "optimizer_dtype": "fp32"}
BUCKETS = {"reduce_bucket_size": st.integers(1, 10**10), "allgather_bucket_size": st.integers(1, 10**10),
           "prefetch_bucket_size": st.integers(0, 10**10), "max_live_parameters": st.integers(1, 10**12),
           "param_persistence_threshold": st.integers(0, 10**9),
           "overlap_comm": st.sampled_from(["auto", "on", "off"])}
DEVICES = st.sampled_from(["none", "cpu", "nvme"])


def subset(actual: dict, expected: dict):
    assert {k: actual.get(k, "<absent>") for k in expected} == expected


def body(text: str) -> str:
    """The export without its caveat comments (they describe the input view, not the config)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#")).strip()


# --- DeepSpeed --------------------------------------------------------------------------------------------------
@st.composite
def deepspeed_views(draw):
    stage = draw(st.integers(0, 3))
    dtype = draw(st.sampled_from(["fp16", "bf16", "fp32"]))
    # a 16-bit master (fp16/bf16 *_master_weights_and_grads, stages 1-3), its gradient buffer in the master's dtype
    # or, through data_types.grad_accum_dtype, in fp32
    master = dtype if dtype in ("fp16", "bf16") and stage > 0 and draw(st.booleans()) else "fp32"
    opt = "bf16" if master == "bf16" and draw(st.booleans()) else "fp32"
    if dtype == "fp32" and stage == 0:
        master = accum = None
    else:
        accum = draw(st.sampled_from([master, "fp32"])) if master != "fp32" else master
    scenario = {"workers": draw(st.integers(1, 64)), "param_dtype": dtype, "grad_dtype": dtype,
                "master_dtype": master, "grad_accum_dtype": accum, "optimizer_dtype": opt,
                "comm_dtype": draw(st.sampled_from([None, "fp16", "bf16", "fp32"])),
                "offload_optimizer": draw(DEVICES), "offload_params": draw(DEVICES), "convention": "deepspeed"}
    workload = {"micro_batch": draw(st.integers(1, 16)), **{k: draw(v) for k, v in BUCKETS.items()},
                "recompute": draw(st.sampled_from(["none", "selective", "op", "full"]))}
    if workload["recompute"] == "full":
        workload["activation_offload"] = draw(st.booleans())
    layout = {"micro_batches": draw(st.integers(1, 8)), "tp": draw(st.integers(1, 8)), "cp": draw(st.integers(1, 4))}
    return scenario, workload, layout, stage


@PROPERTY
@given(deepspeed_views())
def test_deepspeed_round_trip(view):
    scenario, workload, layout, stage = view
    text = export_deepspeed(scenario, workload, layout, stage)
    back = import_deepspeed(text)
    assert back.selected_stage == stage
    expected = dict(scenario, comm_dtype=None if scenario["comm_dtype"] == scenario["param_dtype"]
                    else scenario["comm_dtype"])
    subset(back.scenario, expected)
    # recomputation is not a ds_config.json setting (the export says so and writes only the checkpointing block):
    # the import keeps the view's
    unwritten = ("recompute", "activation_offload")
    subset(back.workload, {k: v for k, v in workload.items() if k not in unwritten})
    expected = {k: v for k, v in layout.items() if k == "micro_batches" or v > 1}
    subset(back.layout, dict(expected, gpus=scenario["workers"] * layout["tp"] * layout["cp"]))
    again = dict(back.workload, **{k: workload[k] for k in unwritten if k in workload})
    assert export_deepspeed(back.scenario, again, back.layout, back.selected_stage) == text


@pytest.fixture(scope="module")
def deepspeed_config_classes():
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    return DeepSpeedZeroConfig, DeepSpeedConfig


@PROPERTY
@given(deepspeed_views())
def test_deepspeed_accepts_the_export_and_resolves_the_same_values(deepspeed_config_classes, view):
    from tests.test_frameworks_deepspeed import assert_same_resolution
    zero_config, _ = deepspeed_config_classes
    data = json.loads(export_deepspeed(*view))
    assert_same_resolution(import_deepspeed(json.dumps(data)), zero_config(**data["zero_optimization"]),
                           data["zero_optimization"])


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_deepspeeds_whole_config_parser_accepts_the_export(deepspeed_config_classes, stage):
    _, ds_config = deepspeed_config_classes
    scenario = {"workers": 1, "param_dtype": "bf16", "offload_optimizer": "cpu" if stage else "none",
                "offload_params": "cpu" if stage == 3 else "none"}
    data = json.loads(export_deepspeed(scenario, {"micro_batch": 4}, {"micro_batches": 2}, stage))
    config = ds_config(data)                  # world size 1 without torch.distributed
    assert config.zero_optimization_stage == stage and config.bfloat16_config.enabled
    assert config.train_batch_size == 8 and config.gradient_accumulation_steps == 2


@pytest.mark.parametrize("recompute, offload", [("full", False), ("full", True), ("op", False)])
def test_deepspeed_export_says_how_the_plan_recomputes(deepspeed_config_classes, recompute, offload):
    # ds_config.json cannot turn recomputation on (the Trainer's gradient_checkpointing does): the export writes the
    # activation_checkpointing block DeepSpeed's checkpointing.configure reads and says so; DeepSpeed parses it
    _, ds_config = deepspeed_config_classes
    view = ({"workers": 1, "param_dtype": "bf16"}, {"recompute": recompute, "activation_offload": offload}, {}, 2)
    data = json.loads(export_deepspeed(*view))
    assert data["activation_checkpointing"] == {"partition_activations": False, "cpu_checkpointing": offload}
    config = ds_config(data)
    assert config.activation_checkpointing_config.cpu_checkpointing is offload
    assert not config.activation_checkpointing_config.partition_activations
    caveats = " ".join(export_caveats("deepspeed", *view))
    assert "gradient_checkpointing=True" in caveats
    assert ("policy itself is set in the training code" in caveats) is (recompute != "full")
    assert "activation_checkpointing" not in json.loads(export_deepspeed(view[0], {}, {}, 2))


# --- accelerate -------------------------------------------------------------------------------------------------
def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def fsdp_views(draw):
    stage = draw(st.sampled_from([0, 2, 3]))
    workers = draw(st.integers(1, 32))
    tp = cp = 1
    shard = None
    if stage:
        tp, cp = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        smaller = [d for d in _divisors(workers) if 1 < d < workers]
        if smaller and draw(st.booleans()):
            shard = draw(st.sampled_from(smaller))
    world = workers * tp * cp
    offload = draw(st.sampled_from(["none", "cpu"])) if stage else "none"
    scenario = dict(FSDP2, workers=workers, shard_group=shard, comm_dtype=draw(st.sampled_from([None, "bf16", "fp16"])),
                    gpus_per_node=draw(st.sampled_from(_divisors(world))), offload_params=offload,
                    offload_optimizer=offload)
    workload = {"recompute": draw(st.sampled_from(["none", "full"]))}
    return scenario, workload, {"tp": tp, "cp": cp}, stage


@PROPERTY
@given(fsdp_views())
def test_accelerate_fsdp_round_trip(view):
    scenario, workload, layout, stage = view
    text = export_accelerate(scenario, workload, layout, stage)
    back = import_accelerate(text)
    assert back.selected_stage == stage
    if stage:
        subset(back.scenario, scenario)
        subset(back.workload, workload)
        subset(back.layout, {k: v for k, v in layout.items() if v > 1})
    else:                       # DDP: autocast over fp32, gradients all-reduced in fp32
        subset(back.scenario, dict(scenario, comm_dtype=None))
        assert back.workload.get("activation_dtype") == scenario["comm_dtype"]
    assert back.layout["gpus"] == scenario["workers"] * layout["tp"] * layout["cp"]
    assert body(export_accelerate(back.scenario, back.workload, back.layout, back.selected_stage)) == body(text)


@PROPERTY
@given(deepspeed_views())
def test_accelerate_deepspeed_plugin_round_trip(view):
    scenario, workload, layout, stage = view
    layout = {"micro_batches": layout["micro_batches"]}
    text = export_accelerate(scenario, workload, layout, stage, backend="deepspeed")
    back = import_accelerate(text)
    assert back.selected_stage == stage
    fields = ("workers", "param_dtype", "offload_optimizer", "offload_params")
    expected = {k: scenario[k] for k in fields}
    if scenario["param_dtype"] == "fp32" or stage == 0 or scenario["master_dtype"] != "bf16":
        subset(back.scenario, expected)
    assert back.layout["micro_batches"] == layout["micro_batches"]


def test_stage_1_goes_to_the_deepspeed_plugin_and_fsdp_refuses_it():
    assert "DEEPSPEED" in export_accelerate({"param_dtype": "bf16"}, {}, {}, 1)
    with pytest.raises(ExportError) as err:
        export_accelerate({}, {}, {}, 1, backend="fsdp")
    assert err.value.field == "stage"


@pytest.fixture(scope="module")
def config_args():
    return pytest.importorskip("accelerate.commands.config.config_args",
                               reason="accelerate==1.15.0 is in requirements-validation.txt (CI installs it)")


@PROPERTY
@given(fsdp_views())
def test_accelerates_loader_reads_the_export(config_args, tmp_path_factory, view):
    path = tmp_path_factory.mktemp("acc") / "config.yaml"
    path.write_text(export_accelerate(*view))
    loaded = config_args.load_config_from_file(str(path))
    ours = import_accelerate(path.read_text())
    assert loaded.num_processes == ours.layout["gpus"]
    assert loaded.distributed_type.value == {0: "MULTI_GPU" if loaded.num_processes > 1 else "NO"}.get(
        ours.selected_stage, "FSDP")
    if ours.selected_stage:
        assert loaded.fsdp_config["fsdp_reshard_after_forward"] == (ours.selected_stage == 3)
        assert loaded.fsdp_config["fsdp_version"] == 2


# --- torchtitan -------------------------------------------------------------------------------------------------
@st.composite
def torchtitan_views(draw):
    stage = draw(st.sampled_from([0, 2, 3]))
    tp, pp, ep = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    cp = draw(st.integers(1, 4)) if stage else 1
    workers = draw(st.integers(2 if stage and cp == 1 else 1, 32))
    shard = None
    if stage:
        smaller = [d for d in _divisors(workers) if 1 < d < workers]
        if smaller and draw(st.booleans()):
            shard = draw(st.sampled_from(smaller))
    pure = draw(st.booleans())
    ledger = ({"convention": "pure-bf16", "param_dtype": "bf16", "grad_dtype": "bf16", "master_dtype": None,
               "grad_accum_dtype": None, "optimizer_dtype": "bf16", "comm_dtype": None} if pure else
              dict(FSDP2, comm_dtype=draw(st.sampled_from([None, "bf16"])) if stage else None))
    offload = draw(st.sampled_from(["none", "cpu"])) if stage else "none"
    scenario = dict(ledger, workers=workers, shard_group=shard, offload_params=offload, offload_optimizer=offload,
                    optimizer=draw(st.sampled_from(["adam", "adamw"])))
    workload = {"micro_batch": draw(st.integers(1, 8)), "seq_len": draw(st.integers(1, 65536)),
                "recompute": draw(st.sampled_from(["none", "op", "full"])),     # torchtitan has no scores-only
                **({"compile": True} if draw(st.booleans()) else {}),
                **({"float8": draw(st.sampled_from(["tensorwise", "rowwise", "rowwise_with_gw_hp"]))}
                   if draw(st.booleans()) else {})}
    if workload["recompute"] == "full" and draw(st.booleans()):   # layer SAC: selective_ac_option = "N"
        workload["recompute_every"] = draw(st.integers(2, 4))
    layout = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "micro_batches": draw(st.integers(1, 8))}
    if tp > 1:
        layout["loss_parallel"] = draw(st.booleans())
    if pp > 1:
        layout["schedule"] = draw(st.sampled_from(["1f1b", "gpipe", "interleaved"]))
        if layout["schedule"] == "interleaved":
            layout["vpp"] = 2
    return scenario, workload, layout, stage


@PROPERTY
@given(torchtitan_views())
def test_torchtitan_round_trip(view):
    scenario, workload, layout, stage = view
    text = export_torchtitan(scenario, workload, layout, stage)
    back = import_torchtitan(text)
    # torchtitan always keeps the shards: ZeRO-2 is written as "never" and read back as ZeRO-3 keeping the gathered
    # copy (reshard_after_forward "no"; zerocalc.step.fsdp_pipeline)
    assert back.selected_stage == (3 if stage == 2 else stage)
    if stage == 2:
        assert back.workload["reshard_after_forward"] == "no"
    subset(back.scenario, scenario)
    subset(back.workload, workload)
    expected = {k: v for k, v in layout.items() if k in ("vpp", "schedule", "micro_batches", "loss_parallel")
                or v > 1}
    if layout["tp"] > 1:
        expected["sequence_parallel"] = True
    subset(back.layout, dict(expected, gpus=scenario["workers"] * layout["tp"] * layout["pp"] * layout["cp"]))
    assert body(export_torchtitan(back.scenario, back.workload, back.layout, back.selected_stage)) == body(text)


@PROPERTY
@given(torchtitan_views())
def test_torchtitan_export_is_toml_torchtitan_accepts(view):
    data = tomllib.loads(export_torchtitan(*view))
    assert set(data) <= set(SECTIONS)
    for section, body in data.items():
        assert set(body) <= set(FIELDS.get(section, body)), section     # the sections whose fields zerocalc lists
    if "quantize" in data:                                          # QuantizedLinear.Float8 (238fa99)
        assert set(data["quantize"]["linear"]["float8"]) <= {"recipe_name", "enable_fsdp_float8_all_gather"}


def test_torchtitan_refuses_stage_1():
    with pytest.raises(ExportError) as err:
        export_torchtitan({}, {}, {}, 1)
    assert err.value.field == "stage"


def test_deepspeed_writes_a_16_bit_master_and_says_what_it_needs():
    # precision_config.py DeepSpeedFP16Config.fp16_master_weights_and_grads (stages 1-3, runtime/config.py
    # _do_error_check); stage_1_and_2.py _enforce_cpu_offload / stage3.py _enforce_optimizer_offload assert
    # ZeRO-Offload with DeepSpeedCPUAdam
    view = {"workers": 4, "param_dtype": "fp16", "grad_dtype": "fp16", "master_dtype": "fp16",
            "grad_accum_dtype": "fp16", "optimizer_dtype": "fp32", "convention": "deepspeed"}
    data = json.loads(export_deepspeed(view, {}, {}, 2))
    assert data["fp16"] == {"enabled": True, "fp16_master_weights_and_grads": True} and "data_types" not in data
    assert import_deepspeed(json.dumps(data)).scenario["master_dtype"] == "fp16"
    caveats = " ".join(export_caveats("deepspeed", view, {}, {}, 2))
    assert "DeepSpeedCPUAdam" in caveats and "stops at initialisation" in caveats
    caveats = " ".join(export_caveats("deepspeed", dict(view, offload_optimizer="cpu"), {}, {}, 2))
    assert "DeepSpeedCPUAdam" in caveats and "stops" not in caveats
    # engine.py get_data_types: the gradient buffer in fp32 beside the fp16 master
    data = json.loads(export_deepspeed(dict(view, grad_accum_dtype="fp32"), {}, {}, 2))
    assert data["data_types"] == {"grad_accum_dtype": "fp32"}
    assert import_deepspeed(json.dumps(data)).scenario["grad_accum_dtype"] == "fp32"
    # no 16-bit master without ZeRO: the ledger caveat
    assert any("own ledger" in c for c in export_caveats("deepspeed", view, {}, {}, 0))


def test_deepspeed_says_when_the_gradient_buffer_cannot_be_written():
    zero_paper = {"param_dtype": "fp16", "grad_dtype": "fp16", "master_dtype": "fp32", "grad_accum_dtype": None,
                  "optimizer_dtype": "fp32"}              # no fp32 gradient partition: DeepSpeed keeps one
    caveats = " ".join(export_caveats("deepspeed", zero_paper, {}, {}, 2))
    assert "gradient buffer (none) cannot be written" in caveats and "fp32 gradient partition" in caveats
    assert "data_types" not in export_deepspeed(zero_paper, {}, {}, 2)


def test_deepspeeds_whole_config_parser_accepts_a_16_bit_master_with_fp32_accumulation(deepspeed_config_classes):
    _, ds_config = deepspeed_config_classes
    view = {"workers": 1, "param_dtype": "fp16", "grad_dtype": "fp16", "master_dtype": "fp16",
            "grad_accum_dtype": "fp32", "offload_optimizer": "cpu"}
    config = ds_config(json.loads(export_deepspeed(view, {"micro_batch": 2}, {}, 2)))
    assert config.float16_config.fp16_master_weights_and_grads and config.grad_accum_dtype == "fp32"


def test_torchtitan_says_when_the_ledger_or_the_precision_cannot_be_written():
    deepspeed = {"param_dtype": "bf16", "grad_dtype": "bf16", "master_dtype": "fp32", "grad_accum_dtype": "fp32",
                 "optimizer_dtype": "fp32", "convention": "deepspeed", "workers": 4}
    caveats = " ".join(export_caveats("torchtitan", deepspeed, {}, {}, 3))
    assert "the view's ledger (param bf16, grad bf16, master fp32, grad_accum fp32, optimizer fp32)" in caveats
    assert export_caveats("torchtitan", dict(FSDP2, workers=4), {}, {}, 3) == []
    # distributed/utils.py maybe_enable_amp: no FSDP (shard degree 1) with tp -> mixed precision off
    ddp_tp = dict(FSDP2, comm_dtype="bf16", workers=4)
    assert any("maybe_enable_amp" in c for c in export_caveats("torchtitan", ddp_tp, {}, {"tp": 2}, 0))
    assert not any("maybe_enable_amp" in c for c in export_caveats("torchtitan", ddp_tp, {}, {"tp": 2}, 3))


def test_torchtitan_writes_gathered_logits():
    text = export_torchtitan(dict(FSDP2, workers=4), {}, {"tp": 2, "loss_parallel": False}, 3)
    assert tomllib.loads(text)["parallelism"]["disable_loss_parallel"] is True
    assert import_torchtitan(text).layout["loss_parallel"] is False
    assert "disable_loss_parallel" not in export_torchtitan(dict(FSDP2, workers=4), {}, {"tp": 2}, 3)


def test_multi_node_accelerate_export_has_the_per_node_fields(config_args, tmp_path):
    # accelerate's cluster config asks machine_rank, main_process_ip and main_process_port on more than one machine
    # (commands/config/cluster.py); the export writes node 0's and says the rest is per node
    view = (dict(FSDP2, workers=16, gpus_per_node=8), {}, {}, 3)
    path = tmp_path / "config.yaml"
    path.write_text(export_accelerate(*view))
    loaded = config_args.load_config_from_file(str(path))
    assert (loaded.num_machines, loaded.machine_rank, loaded.main_process_port) == (2, 0, 29500)
    assert loaded.rdzv_backend == "static" and loaded.main_process_ip is None
    caveats = " ".join(export_caveats("accelerate", *view))
    assert "machine_rank (0-1)" in caveats and "main_process_ip" in caveats
    ours = import_accelerate(path.read_text())
    assert ours.layout["gpus"] == 16 and ours.scenario["gpus_per_node"] == 8
    one = export_accelerate(dict(FSDP2, workers=8, gpus_per_node=8), {}, {}, 3)
    assert "machine_rank" not in one


def test_caveats_say_what_is_left_out():
    view = ({"workers": 8, "shard_group": 4, "optimizer": "lion", "param_dtype": "fp8_e4m3"}, {}, {"pp": 2}, 3)
    deepspeed = " ".join(export_caveats("deepspeed", *view))
    assert "hybrid sharding" in deepspeed and "pipeline" in deepspeed and "optimizer" in deepspeed
    torchtitan = export_torchtitan(*view)
    assert "# " in torchtitan and "lion" in torchtitan
    with pytest.raises(ExportError):
        export_caveats("megatron", *view)


@pytest.mark.parametrize("bad", [({"workers": 0}, {}, {}, 3), ({}, {"micro_batch": True}, {}, 3),
                                 ({"workers": 8, "shard_group": 3}, {}, {}, 3), ({}, {}, {"tp": 0}, 3),
                                 ({}, {}, {}, 4), ([], {}, {}, 3)])
def test_export_refuses_bad_views_by_field(bad):
    with pytest.raises(ExportError):
        export_deepspeed(*bad)
