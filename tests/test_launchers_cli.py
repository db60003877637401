"""--llamafactory-config / --hf-trainer-config end to end: `python -m zerocalc` reads the file, takes its model
preset, follows its DeepSpeed file (from the working directory, as the launcher opens it), and explicit flags win."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zerocalc.cli.main import run
from zerocalc.cli.types import UsageError

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "launchers"


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A LLaMA-Factory checkout's layout: the example YAML and examples/deepspeed/ds_z3_config.json."""
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    shutil.copy(FIX / "llamafactory_ds_z3_config.json", tmp_path / "examples" / "deepspeed" / "ds_z3_config.json")
    shutil.copy(FIX / "llamafactory_qwen3_full_sft.yaml", tmp_path / "examples" / "full.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_python_m_zerocalc_reads_a_llamafactory_yaml(checkout):
    out = subprocess.run([sys.executable, "-m", "zerocalc", "--llamafactory-config", "examples/full.yaml",
                          "--gpus", "8", "--json"], cwd=checkout, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["imported"]["format"] == "llamafactory"
    assert report["selected_stage"] == 3 and report["workers"] == 8
    assert report["finetune"]["mode"] == "full"
    assert report["workload"]["seq_len"] == 2048 and report["workload"]["recompute"] == "full"
    assert report["layout"]["micro_batches"] == 2
    assert report["architecture"]["layers"] == 36                # the qwen3-4b preset the file's model names


def test_explicit_flags_win_over_the_file(checkout):
    shutil.copy(FIX / "llamafactory_qwen3_lora_sft.yaml", checkout / "lora.yaml")
    report = json.loads(run(["--llamafactory-config", "lora.yaml", "--lora-rank", "32", "--seq-len", "1024",
                             "--model", "qwen3-8b", "--json"]))
    assert report["finetune"]["mode"] == "lora" and report["finetune"]["lora_rank"] == 32
    assert report["workload"]["seq_len"] == 1024 and report["architecture"]["layers"] == 36
    assert report["architecture"]["hidden"] == 4096              # qwen3-8b, not the file's qwen3-4b


def test_hf_trainer_config_with_its_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = json.loads(run(["--hf-trainer-config", str(FIX / "handbook_zephyr-7b-beta_sft_config_qlora.yaml"),
                             "--json"]))
    assert report["imported"]["format"] == "hf_trainer"
    assert report["finetune"]["mode"] == "qlora" and report["finetune"]["lora_rank"] == 16
    assert report["workload"]["micro_batch"] == 4


def test_a_deepspeed_path_that_cannot_be_found_is_refused_by_flag_and_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(FIX / "llamafactory_qwen3_full_sft.yaml", tmp_path / "full.yaml")
    with pytest.raises(UsageError) as exc:
        run(["--llamafactory-config", "full.yaml", "--json"])
    assert str(exc.value).startswith("--llamafactory-config: deepspeed: got 'examples/deepspeed/ds_z3_config.json'")


def test_a_refused_value_names_the_flag_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("model_name_or_path: Qwen/Qwen3-8B\nlora_rank: -3\n")
    with pytest.raises(UsageError) as exc:
        run(["--llamafactory-config", "bad.yaml"])
    assert "--llamafactory-config: lora_rank: got" in str(exc.value)


def test_the_deepspeed_path_is_also_found_from_a_folder_above_the_yaml(checkout, monkeypatch):
    # LLaMA-Factory's examples name examples/deepspeed/... from the repository root; run from elsewhere, the path
    # is looked up from the YAML's folder and each folder above it
    elsewhere = checkout / "runs"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    report = json.loads(run(["--llamafactory-config", str(checkout / "examples" / "full.yaml"), "--json"]))
    assert report["selected_stage"] == 3
    assert any("followed" in n for n in report["imported"]["notes"])


def test_python_m_zerocalc_reads_an_axolotl_yaml_and_follows_its_deepspeed_file(tmp_path):
    (tmp_path / "deepspeed_configs").mkdir()
    shutil.copy(FIX / "axolotl_zero3_bf16_cpuoffload_all.json",
                tmp_path / "deepspeed_configs" / "zero3_bf16_cpuoffload_all.json")
    shutil.copy(FIX / "axolotl_alst_llama3_8b_deepspeed.yaml", tmp_path / "alst.yaml")
    out = subprocess.run([sys.executable, "-m", "zerocalc", "--axolotl-config", "alst.yaml", "--seq-len", "8192",
                          "--gpus", "8", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["imported"]["format"] == "axolotl"
    assert report["selected_stage"] == 3 and report["workers"] == 8
    assert report["finetune"]["mode"] == "full" and report["workload"]["seq_len"] == 8192   # the flag wins
    assert report["architecture"]["layers"] == 32                # llama-3.1-8b, the file's base_model


def test_an_axolotl_refusal_names_the_flag_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("base_model: x\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\n"
                                       "adapter: qlora\nlora_r: 8\n")
    with pytest.raises(UsageError) as exc:
        run(["--axolotl-config", "bad.yaml"])
    assert "--axolotl-config: load_in_4bit: got" in str(exc.value)


def test_a_torchtune_recipe_runs_on_one_device_and_takes_its_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = json.loads(run(["--torchtune-config", str(FIX / "torchtune_llama3_1_8B_qlora_single_device.yaml"),
                             "--seq-len", "2048", "--json"]))
    assert report["imported"]["format"] == "torchtune" and report["workers"] == 1
    assert report["finetune"]["mode"] == "qlora" and report["finetune"]["kbit_prepare"] is False
    assert report["architecture"]["layers"] == 32 and report["workload"]["loss"] == "chunked"


def test_a_torchtune_refusal_names_the_flag_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("dtype: fp16\n")
    with pytest.raises(UsageError) as exc:
        run(["--torchtune-config", "bad.yaml"])
    assert "--torchtune-config: dtype: got" in str(exc.value)


def test_a_litgpt_config_sets_its_world_size_and_an_explicit_gpus_flag_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    full = str(FIX / "litgpt_llama-3-8b_full.yaml")
    report = json.loads(run(["--litgpt-config", full, "--json"]))
    assert report["imported"]["format"] == "litgpt" and report["workers"] == 4
    assert report["selected_stage"] == 3 and report["finetune"]["mode"] == "full"
    assert json.loads(run(["--litgpt-config", full, "--gpus", "8", "--json"]))["workers"] == 8


def test_an_ms_swift_script_runs_its_two_processes_over_the_shipped_zero3(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = json.loads(run(["--swift-config", str(FIX / "swift_multi_gpu_deepspeed_train_zero3.sh"), "--json"]))
    assert report["imported"]["format"] == "swift" and report["workers"] == 2
    assert report["selected_stage"] == 3 and report["finetune"]["mode"] == "lora"
    assert report["layout"]["micro_batches"] == 8 and report["architecture"]["layers"] == 28   # qwen2.5-7b
