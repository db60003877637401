"""The app's "Training config" uploader takes a LLaMA-Factory YAML and a TRL recipe (AppTest): the format is
recognised from the file's keys (not only its suffix, which accelerate's YAML shares), the method, rank, lengths
and batch are set, and the DeepSpeed file the YAML points to is named as not followed (an upload has no files
beside it)."""

from pathlib import Path

from tests.app_helpers import alerts, run_app, text_of
from tests.test_app_imports import messages, upload_framework
from zerocalc.frameworks import guess_format

FIX = Path(__file__).resolve().parent / "fixtures"


def test_a_llamafactory_yaml_sets_the_lora_plan_and_names_the_deepspeed_file():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, FIX / "launchers" / "llamafactory_qwen3_lora_sft_ds3.yaml")
    success = messages(at, "success")
    assert "Imported llamafactory_qwen3_lora_sft_ds3.yaml (LLaMA-Factory YAML)" in success, alerts(at, "error")
    details = text_of(at)
    assert "Model: qwen3-4b" in details
    assert "examples/deepspeed/ds_z3_config.json: not followed" in details
    query = dict(at.query_params)
    assert query["model"] == "qwen3-4b" and query["finetune"] == "lora" and query["lora_targets"] == "all-linear"
    assert query["micro_batches"] == "2" and query["base_dtype"] == "bf16"


def test_a_trl_recipe_sets_qlora():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, FIX / "launchers" / "handbook_zephyr-7b-beta_sft_config_qlora.yaml")
    success = messages(at, "success")
    assert "(Hugging Face TrainingArguments / TRL config)" in success, alerts(at, "error")
    query = dict(at.query_params)          # the plan's link: fields away from their defaults
    assert query["model"] == "mistral-7b" and query["finetune"] == "qlora" and query["lora_rank"] == "16"
    assert query["lora_targets"] == "q,k,v,o,gate,up,down" and query["double_quant"] == "false"
    assert query["micro_batch"] == "4" and query["micro_batches"] == "2"


def test_every_stored_framework_file_keeps_its_format_and_every_launcher_file_is_recognised():
    names = {"json": "deepspeed", "yaml": "accelerate", "toml": "torchtitan"}
    for path in (FIX / "frameworks").glob("*.*"):
        if path.suffix != ".source":
            assert guess_format(path.name, path.read_bytes()) == names[path.suffix[1:]], path.name
    for path in (FIX / "launchers").glob("*.y*ml"):
        prefix = path.name.split("_", 1)[0]
        want = prefix if prefix in ("llamafactory", "axolotl", "torchtune", "litgpt", "swift") else "hf_trainer"
        assert guess_format(path.name, path.read_bytes()) == want, path.name


def test_an_axolotl_yaml_sets_the_qlora_plan():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, FIX / "launchers" / "axolotl_llama3_qlora.yml")
    success = messages(at, "success")
    assert "Imported axolotl_llama3_qlora.yml (axolotl YAML)" in success, alerts(at, "error")
    query = dict(at.query_params)
    assert query["finetune"] == "qlora" and query["lora_rank"] == "32" and query["lora_targets"] == "all-linear"
    assert query["micro_batch"] == "2" and query["micro_batches"] == "4" and query["seq_len"] == "4096"


def test_a_torchtune_recipe_sets_the_distributed_lora_plan():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, FIX / "launchers" / "torchtune_llama3_1_8B_lora.yaml")
    success = messages(at, "success")
    assert "Imported torchtune_llama3_1_8B_lora.yaml (torchtune recipe YAML)" in success, alerts(at, "error")
    query = dict(at.query_params)
    assert query["model"] == "llama-3.1-8b" and query["finetune"] == "lora" and query["loss"] == "chunked"
    assert query["lora_targets"] == "q,v,o,gate,up,down" and query["micro_batches"] == "8"


def test_a_litgpt_config_sets_the_qlora_plan_on_one_gpu():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, FIX / "launchers" / "litgpt_gemma-2b_qlora.yaml")
    success = messages(at, "success")
    assert "Imported litgpt_gemma-2b_qlora.yaml (LitGPT YAML)" in success, alerts(at, "error")
    query = dict(at.query_params)
    assert query["model"] == "gemma-2b" and query["finetune"] == "qlora" and query["double_quant"] == "false"
    assert query["workers"] == "1" and query["optimizer"] == "paged-adamw"


def test_an_ms_swift_script_sets_the_qlora_plan():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, sections=["sec_load"])
    upload_framework(at, FIX / "launchers" / "swift_qlora_bnb_train.sh")
    success = messages(at, "success")
    assert "Imported swift_qlora_bnb_train.sh (ms-swift arguments)" in success, alerts(at, "error")
    query = dict(at.query_params)
    assert query["model"] == "qwen2.5-7b" and query["finetune"] == "qlora" and query["workers"] == "1"
    assert query["micro_batches"] == "16" and query["lora_targets"] == "all-linear"
