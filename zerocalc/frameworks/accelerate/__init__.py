"""accelerate's config read as accelerate 1.15 reads it: reader.py (the import), fsdp.py (its fsdp_config section),
document.py (the YAML, through PyYAML as accelerate reads and writes it)."""
