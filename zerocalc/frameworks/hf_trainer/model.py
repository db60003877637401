"""The model a launcher file names -> a zerocalc preset (matched by name: frameworks/presets.py preset_for)."""

from __future__ import annotations

from ..common import Builder, Doc, text


def read_model(doc: Doc, b: Builder, key: str) -> None:
    if not doc.has(key):
        b.note(f"{key}: absent; give the model with --model, --config or --hub.")
        return
    from ..presets import preset_for
    name = text(key, doc.get(key), what="a model id or path")
    preset = preset_for(name)
    if preset:
        b.model = preset
        b.note(f"{key} = {name}: the {preset} preset, matched by name (give --model, --config or --hub to use "
               "another architecture).")
    else:
        b.note(f"{key} = {name}: no preset matches its name; give the architecture with --model, --config (its "
               "config.json) or --hub.")
