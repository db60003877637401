"""cli_frameworks: the flags, reading a file, applying an import to a Scenario / Workload (explicit flags win), the
export text, and an imported view running through the core's report."""

import argparse
import json

import pytest
from hypothesis import HealthCheck, given, settings

from tests.test_frameworks_fuzz import ACCELERATE_KEYS, ACCELERATE_VALUES, DEEPSPEED_KEYS, NASTY, configs
from zerocalc.cli.frameworks import (add_framework_flags, apply_import, context_for, export_from_args, export_notes,
                                     framework_error_message, import_from_args, read_config_file)
from zerocalc.frameworks import FrameworkConfigError, import_accelerate, import_deepspeed
from zerocalc.frameworks.accelerate.document import dump_yaml
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.states.zero import model_states
from zerocalc.scenario import FieldError, Scenario
from zerocalc.step.workload import Workload

ARCH = MODEL_PRESETS["llama-2-7b"][0]


def parser():
    p = argparse.ArgumentParser()
    add_framework_flags(p)
    return p


def test_flags_are_registered_and_exclusive(capsys):
    args = parser().parse_args(["--ds-config", "a.json", "--export", "torchtitan", "--export-stage", "2"])
    assert args.ds_config == "a.json" and args.export == "torchtitan" and args.export_stage == 2
    with pytest.raises(SystemExit):
        parser().parse_args(["--ds-config", "a.json", "--accelerate-config", "b.yaml"])
    assert import_from_args(parser().parse_args([])) is None


def test_import_from_a_file_with_context(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"},
                                "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}))
    scenario, workload = Scenario(params=10**9, workers=8), Workload(ARCH, micro_batch=2)
    found = import_from_args(parser().parse_args(["--ds-config", str(path)]), context_for(scenario, workload, ARCH))
    assert found.flag == "--ds-config" and found.imported.workload["reduce_bucket_size"] == 4096 * 4096
    assert found.imported.scenario["param_dtype"] == "fp16"            # the view computes in fp16


def test_files_are_size_capped_and_must_exist(tmp_path):
    with pytest.raises(FrameworkConfigError) as err:
        read_config_file(str(tmp_path / "missing.json"), "--ds-config")
    assert err.value.field == "--ds-config"
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 1_000_001)
    with pytest.raises(FrameworkConfigError):
        read_config_file(str(big), "--ds-config")


def test_apply_keeps_explicit_fields_and_reports_core_refusals_by_file_key():
    imported = import_deepspeed(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                                            "train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                            "gradient_accumulation_steps": 4}))
    scenario, workload = Scenario(params=10**9, workers=4), Workload(ARCH)
    applied = apply_import(imported, scenario, workload, keep={"offload_optimizer"})
    assert applied.scenario.workers == 8 and applied.scenario.offload_optimizer == "none"
    assert applied.workload.micro_batch == 2 and applied.stage == 2 and applied.layout["micro_batches"] == 4
    assert applied.scenario.convention == "deepspeed" and applied.scenario.grad_accum_dtype == "fp32"
    model_states(applied.scenario)                                      # the core accepts it
    hsdp = import_accelerate("distributed_type: FSDP\nnum_processes: 16\nnum_machines: 2\nfsdp_config:\n"
                             "  fsdp_sharding_strategy: HYBRID_SHARD\n")
    with pytest.raises(FrameworkConfigError) as err:
        apply_import(hsdp, Scenario(params=10**9, workers=6), keep={"workers"})   # 8 does not divide 6
    assert err.value.field.startswith("fsdp_config.fsdp_sharding_strategy")


def test_export_from_args_and_notes():
    args = parser().parse_args(["--export", "deepspeed"])
    scenario, workload = Scenario(params=10**9, workers=8, shard_group=4), Workload(ARCH, micro_batch=2)
    data = json.loads(export_from_args(args, scenario, workload, {"micro_batches": 2}, stage=2))
    assert data["zero_optimization"]["stage"] == 2 and data["train_batch_size"] == 32
    assert any("hybrid" in n for n in export_notes(args, scenario, workload, {}, 2))
    assert export_from_args(parser().parse_args([]), scenario) is None
    args = parser().parse_args(["--export", "accelerate", "--export-stage", "3"])
    assert "fsdp_reshard_after_forward: true" in export_from_args(args, scenario, workload)


def test_error_message_is_one_line():
    try:
        import_deepspeed('{"fp16": {"enabled": true}, "bf16": {"enabled": true}}')
    except FieldError as exc:
        line = framework_error_message("--ds-config", exc)
    assert line.startswith("--ds-config: bf16.enabled: got True; allowed: ") and "\n" not in line


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(configs(DEEPSPEED_KEYS, NASTY), configs(ACCELERATE_KEYS, ACCELERATE_VALUES))
def test_any_accepted_import_applies_or_is_refused_by_key(ds_data, acc_data):
    scenario, workload = Scenario(params=10**9, workers=8), Workload(ARCH)
    for importer, text in ((import_deepspeed, json.dumps(ds_data)), (import_accelerate, _yaml(acc_data))):
        if text is None:
            continue
        try:
            applied = apply_import(importer(text), scenario, workload)
        except FrameworkConfigError as exc:
            assert exc.field
            continue
        model_states(applied.scenario)


def _yaml(data):
    try:
        return dump_yaml(data)
    except TypeError:
        return None


# --- python -m zerocalc with a framework config, as a user runs it ------------------------------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "frameworks"


def zerocalc(*args):
    return subprocess.run([sys.executable, "-m", "zerocalc", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_cli_imports_a_deepspeed_config_and_says_what_it_did(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
                                "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 2,
                                "gradient_accumulation_steps": 4, "train_batch_size": 64, "flops_profiler": {}}))
    done = zerocalc("--model", "llama-3-8b", "--ds-config", str(path), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["selected_stage"] == 2 and out["workers"] == 8 and out["workload"]["micro_batch"] == 2
    assert out["layout"]["micro_batches"] == 4 and out["scenario"]["param_dtype"] == "bf16"
    assert out["workload"]["reduce_bucket_size"] == 4096 * 4096
    assert out["imported"]["format"] == "deepspeed"
    assert any(a["key"] == "zero_optimization.reduce_bucket_size" for a in out["imported"]["auto_keys"])
    assert any(i["key"] == "flops_profiler" for i in out["imported"]["ignored_keys"])
    # an explicit flag wins over the file
    out = json.loads(zerocalc("--model", "llama-3-8b", "--ds-config", str(path), "--micro-batch", "1",
                              "--json").stdout)
    assert out["workload"]["micro_batch"] == 1


def test_cli_exports_the_view_and_refuses_a_broken_file_by_key(tmp_path):
    done = zerocalc("--model", "llama-3-8b", "--workers", "8", "--micro-batch", "2", "--export", "deepspeed",
                    "--export-stage", "3")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["zero_optimization"]["stage"] == 3
    bad = tmp_path / "bad.json"
    bad.write_text('{"fp16": {"enabled": true}, "bf16": {"enabled": true}}')
    done = zerocalc("--model", "llama-3-8b", "--ds-config", str(bad))
    assert done.returncode == 2 and "--ds-config" in done.stderr and "Traceback" not in done.stderr
    torchtitan = next(FIXTURES.glob("*.toml"))
    done = zerocalc("--model", "llama-3-8b", "--gpus", "64", "--torchtitan-config", str(torchtitan), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["imported"]["format"] == "torchtitan"


def _world(done):
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return out["workers"], out["layout"]["tp"], out["layout"]["world_size"]


def test_gpus_is_the_world_size_of_the_imported_layout():
    # --gpus is the world: dp = gpus / (tp x pp x cp) of the layout after the import (torchtitan parallel_dims.py
    # resolves data_parallel_shard_degree -1 the same way), not a dp that the file's tp then multiplies
    titan = str(FIXTURES / "torchtitan_llama3_70b.toml")                            # tp 8, shard degree -1
    assert _world(zerocalc("--model", "llama-3-70b", "--gpus", "64", "--torchtitan-config", titan,
                           "--json")) == (8, 8, 64)
    autotp = str(FIXTURES / "deepspeedexamples_tensor_parallel_ds_config.json")     # AutoTP 4
    assert _world(zerocalc("--model", "llama-3-8b", "--gpus", "16", "--ds-config", autotp, "--json")) == (4, 4, 16)
    # an explicit --tp still wins over the file, and the world stays --gpus
    assert _world(zerocalc("--model", "llama-3-70b", "--gpus", "64", "--tp", "4", "--torchtitan-config", titan,
                           "--json")) == (16, 4, 64)
    # --workers given (without --gpus) still wins: the file's tp multiplies it
    assert _world(zerocalc("--model", "llama-3-8b", "--workers", "4", "--ds-config", autotp, "--json")) == (4, 4, 16)
    assert _world(zerocalc("--model", "llama-3-70b", "--workers", "4", "--torchtitan-config", titan,
                           "--json")) == (4, 8, 32)


def test_gpus_resolves_torchtitan_and_accelerate_minus_one(tmp_path):
    done = zerocalc("--model", "llama-3-70b", "--gpus", "64", "--torchtitan-config",
                    str(FIXTURES / "torchtitan_llama3_70b.toml"), "--json")
    auto = {a["key"]: a["value"] for a in json.loads(done.stdout)["imported"]["auto_keys"]}
    assert auto["parallelism.data_parallel_shard_degree"] == 8
    path = tmp_path / "acc.yaml"
    path.write_text("distributed_type: MULTI_GPU\nnum_processes: -1\n")
    done = zerocalc("--model", "llama-3-8b", "--gpus", "16", "--accelerate-config", str(path), "--json")
    out = json.loads(done.stdout)
    assert out["workers"] == 16 and {a["key"]: a["value"] for a in out["imported"]["auto_keys"]}["num_processes"] == 16


def test_gpus_that_the_imported_layout_does_not_divide_is_a_usage_error():
    titan = str(FIXTURES / "torchtitan_llama3_70b.toml")
    done = zerocalc("--model", "llama-3-70b", "--gpus", "60", "--torchtitan-config", titan)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("zerocalc: error: --gpus: got 60; allowed: a multiple of tp x pp x cp = 8")
    done = zerocalc("--model", "llama-3-70b", "--gpus", "64", "--workers", "4", "--torchtitan-config", titan)
    assert done.returncode == 2 and done.stderr.startswith("zerocalc: error: --workers: got 4; allowed: 8")


def test_export_stage_errors_name_export_stage():
    done = zerocalc("--model", "llama-3-8b", "--export", "torchtitan", "--export-stage", "1")
    assert done.returncode == 2
    assert done.stderr.startswith("zerocalc: error: --export-stage: got 1; allowed: 0, 2 or 3 for torchtitan")
    done = zerocalc("--model", "llama-3-8b", "--ds-config", str(FIXTURES / "axolotl_zero1.json"), "--export",
                    "torchtitan")
    assert done.returncode == 2 and "--export-stage: got 1" in done.stderr and "--stage:" not in done.stderr
