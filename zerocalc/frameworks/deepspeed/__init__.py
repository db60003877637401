"""DeepSpeed's config (ds_config.json) read as DeepSpeed 0.19.8 reads it: reader.py (the import), precision.py (the
precision ledger and offload), batch.py (the batch keys and their "auto"), schema.py (DeepSpeed's own config models
as data)."""
