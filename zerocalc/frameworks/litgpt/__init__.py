"""LitGPT fine-tuning YAMLs (`litgpt finetune_lora / finetune_full --config FILE.yaml`) as zerocalc plans:
reader.py."""
