"""Hugging Face TrainingArguments / TRL SFTConfig (JSON or YAML) as zerocalc fields: reader.py; arguments.py holds
the TrainingArguments keys LLaMA-Factory shares, follow.py the DeepSpeed config either points to."""
