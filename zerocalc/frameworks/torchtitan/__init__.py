"""torchtitan's training TOML read as torchtitan reads it: reader.py (the import, at commit 238fa99) and legacy.py
(the names older torchtitans used)."""
