"""The imported file as the base an export is written over (frameworks/passthrough.py): the same file read by its
format's own loader, and what its "auto" keys resolved to. The CLI (--export after an import) and the page (its
Export tab after an upload) both take it from here."""

from __future__ import annotations

from .accelerate.document import load_yaml
from .common import parse_relaxed_json
from .torchtitan.reader import parse_toml

LOADERS = {"deepspeed": lambda text: parse_relaxed_json(text)[0], "accelerate": load_yaml, "torchtitan": parse_toml}


def file_base(fmt: str, source, imported=None) -> dict:
    """{"base": the file as data, "auto_values": {key: what its "auto" resolved to}} for an export in `fmt` over a
    file of that format (`source`: its bytes or text; `imported`: its ImportedConfig); {} for a format no export
    writes over."""
    if fmt not in LOADERS:
        return {}
    auto = {a["key"]: a["value"] for a in (imported.auto_keys if imported is not None else ())}
    return {"base": LOADERS[fmt](source), "auto_values": auto}


def import_with_base(fmt: str, source, context=None) -> tuple:
    """(the import of `source`, its file_base): the page's upload reads both in one worker call."""
    from . import import_config

    imported = import_config(fmt, source, context)
    return imported, file_base(fmt, source, imported)
