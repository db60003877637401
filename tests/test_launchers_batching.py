"""The launchers' packing settings set zerocalc's batch mode (issue 37: "Launchers' packing settings are imported
where those importers exist"): packed rows (step/batches.py, varlen attention) or micro-batches padded to their
longest sample, whose worst step is seq_len. Keys and defaults as each importer's docstring cites them."""

import pytest

from zerocalc.frameworks import import_config

AXOLOTL = ("base_model: meta-llama/Meta-Llama-3-8B\nsequence_len: 4096\nmicro_batch_size: 2\n"
           "gradient_accumulation_steps: 4\n")
CASES = [
    ("axolotl", AXOLOTL + "sample_packing: true\n", "packed"),
    ("axolotl", AXOLOTL, "padded"),
    ("llamafactory", "model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\ncutoff_len: 2048\n", "padded"),
    ("llamafactory", "model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: pt\ncutoff_len: 2048\n", "packed"),
    ("llamafactory", "model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\nneat_packing: true\n", "packed"),
    ("hf_trainer", '{"per_device_train_batch_size": 2, "max_length": 2048, "packing": true}', "packed"),
    ("hf_trainer", '{"per_device_train_batch_size": 2, "max_length": 2048}', "padded"),
    ("torchtune", "model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n"
                  "  lora_attn_modules: [q_proj, v_proj]\ntokenizer:\n  max_seq_len: 2048\n"
                  "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n  packed: true\n", "packed"),
]


@pytest.mark.parametrize("fmt, text, mode", CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_packing_sets_the_batch_mode(fmt, text, mode):
    imported = import_config(fmt, text.encode())
    assert imported.workload["batch_mode"] == mode, imported.notes


def test_packing_with_eager_attention_is_one_long_row():
    text = ("base_model: meta-llama/Meta-Llama-3-8B\nsequence_len: 4096\nmicro_batch_size: 2\n"
            "gradient_accumulation_steps: 4\nsample_packing: true\nattn_implementation: eager\n")
    imported = import_config("axolotl", text.encode())
    assert imported.workload["attention"] == "eager" and imported.workload["batch_mode"] == "fixed"
    assert "eager" in imported.sources["workload.batch_mode"]
