"""LLaMA-Factory training YAML (llamafactory-cli train FILE.yaml) as zerocalc fields: reader.py."""
