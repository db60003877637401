"""ms-swift's arguments (`swift sft / rlhf / pt`, as a --config YAML or JSON or as the shell script of its examples)
as zerocalc plans: reader.py, script.py (the script's words), presets.py (its shipped DeepSpeed and FSDP files)."""
