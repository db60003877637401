"""Speak the frameworks' language: import DeepSpeed, accelerate and torchtitan configs as plain zerocalc fields, and
export a view back to them. Standard library only at import time (accelerate's YAML is read and written with
PyYAML, imported when needed: frameworks/accelerate/document.py); importers read text or bytes they are given,
never a path.

    imported = import_config("deepspeed", text, {"hidden_size": 4096, "workers": 8})
    imported.scenario, imported.workload, imported.layout, imported.selected_stage, imported.notes
    export_config("torchtitan", scenario_fields, workload_fields, layout_fields, stage)
"""

from .accelerate.reader import import_accelerate
from .axolotl.reader import import_axolotl
from .common import (FORMATS, IMPORT_FORMATS, LAUNCHER_FORMATS, MAX_CONFIG_BYTES, FrameworkConfigError, ImportContext,
                     ImportedConfig)
from .deepspeed.reader import import_deepspeed
from .hf_trainer.follow import follow
from .hf_trainer.reader import import_hf_trainer
from .litgpt.reader import import_litgpt
from .llamafactory.reader import import_llamafactory
from .swift.reader import import_swift
from .export import ExportError, export_accelerate, export_caveats, export_config, export_deepspeed, export_torchtitan
from .torchtitan.reader import import_torchtitan
from .torchtune.reader import import_torchtune

IMPORTERS = {"deepspeed": import_deepspeed, "accelerate": import_accelerate, "torchtitan": import_torchtitan,
             "llamafactory": import_llamafactory, "hf_trainer": import_hf_trainer, "axolotl": import_axolotl,
             "torchtune": import_torchtune, "litgpt": import_litgpt, "swift": import_swift}


SUFFIXES = {".json": "deepspeed", ".yaml": "accelerate", ".yml": "accelerate", ".toml": "torchtitan",
            ".sh": "swift"}           # a shell script: ms-swift's examples (`swift sft --model ...`)


# Keys only a launcher file holds (an accelerate YAML and a ds_config.json hold none of them): LLaMA-Factory's own
# arguments, then TrainingArguments / TRL fields.
LLAMAFACTORY_KEYS = ("finetuning_type", "cutoff_len", "lora_target", "template", "quantization_bit", "flash_attn")
SWIFT_KEYS = ("tuner_type", "train_type", "rlhf_type", "quant_bits", "attn_impl")          # ms-swift's own names
AXOLOTL_KEYS = ("base_model", "micro_batch_size", "sequence_len", "lora_target_linear")   # axolotl's own names
TRAINER_KEYS = ("per_device_train_batch_size", "output_dir", "gradient_checkpointing", "max_seq_length",
                "use_peft", "optim", "num_train_epochs", "learning_rate")     # not max_length: config.json has it


def guess_format(filename: str, data=None):
    """The format a file name suggests (for uploads), or None; with the file's bytes, a YAML or JSON whose keys are
    a launcher's (LLaMA-Factory, torchtune, ms-swift, LitGPT, axolotl, the Trainer) is recognised as one (an
    unreadable file keeps the name's guess)."""
    name = str(filename).lower()
    fmt = next((fmt for suffix, fmt in SUFFIXES.items() if name.endswith(suffix)), None)
    if data is None or fmt not in ("accelerate", "deepspeed"):
        return fmt
    try:
        from .accelerate.document import load_yaml
        from .common import parse_json
        keys = parse_json(data) if fmt == "deepspeed" else load_yaml(data)
    except (FrameworkConfigError, ImportError, ValueError, RecursionError):   # the import itself will say why
        return fmt
    if not isinstance(keys, dict) or "distributed_type" in keys or "zero_optimization" in keys:
        return fmt
    if any(k in keys for k in LLAMAFACTORY_KEYS):
        return "llamafactory"
    if isinstance(keys.get("model"), dict) and "_component_" in keys["model"]:     # torchtune's instantiate
        return "torchtune"
    if any(k in keys for k in SWIFT_KEYS):
        return "swift"
    if "checkpoint_dir" in keys and isinstance(keys.get("train"), dict):             # LitGPT's setup() arguments
        return "litgpt"
    if any(k in keys for k in AXOLOTL_KEYS):
        return "axolotl"
    return "hf_trainer" if any(k in keys for k in TRAINER_KEYS) else fmt


def import_config(fmt: str, source, context=None, read=None) -> ImportedConfig:
    """Import `source` (text or bytes) in format `fmt` (one of IMPORT_FORMATS). A launcher file's DeepSpeed config is
    followed through `read(path) -> bytes` (None: it cannot be, and a note says so): hf_trainer/follow.py."""
    if fmt not in IMPORTERS:
        raise FrameworkConfigError("format", fmt, "one of " + ", ".join(IMPORT_FORMATS))
    return follow(IMPORTERS[fmt](source, context), read, context)


__all__ = ["FORMATS", "IMPORT_FORMATS", "LAUNCHER_FORMATS", "MAX_CONFIG_BYTES", "FrameworkConfigError", "ExportError",
           "ImportContext", "ImportedConfig",
           "import_config", "guess_format", "import_deepspeed", "import_accelerate", "import_torchtitan",
           "import_llamafactory", "import_hf_trainer", "import_axolotl", "import_torchtune", "import_litgpt",
           "import_swift", "export_config",
           "export_deepspeed", "export_accelerate", "export_torchtitan", "export_caveats"]
