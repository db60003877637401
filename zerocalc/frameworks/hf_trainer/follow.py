"""Following the DeepSpeed config a launcher file points to (TrainingArguments.deepspeed): the DeepSpeed importer
reads it with the launcher's batch and precision as its "auto" context (transformers integrations/deepspeed.py
HfTrainerDeepSpeedConfig.trainer_config_process fills those "auto" values from the TrainingArguments), and its
stage, ledger and buckets are merged over the launcher's fields.

Importers read text, never paths: the caller passes `read(path) -> bytes` (the CLI resolves the path next to the
launcher file or in the working directory), or None where nothing can be read (an upload in the app)."""

from __future__ import annotations

import json
from dataclasses import replace

from ..common import FrameworkConfigError, ImportContext, ImportedConfig
from ..deepspeed.reader import import_deepspeed


def follow(imported: ImportedConfig, read=None, context=None) -> ImportedConfig:
    """The import with each followed DeepSpeed config merged in (or a note saying why it was not)."""
    for key, target, precision in imported.follows:
        if isinstance(target, dict):
            source, where = json.dumps(target), f"{key} (inline)"
        elif read is None:
            imported = replace(imported, notes=imported.notes + [
                f"{key} = {target}: not followed (an uploaded file cannot reach the files beside it): the ZeRO "
                "stage and precision ledger stay the view's. Load that DeepSpeed config as well, or use the CLI."])
            continue
        else:
            source, where = read(target), f"{key} ({target})"
        ctx = ImportContext.of(context)
        ctx = replace(ctx, precision=precision or "fp32", micro_batch=imported.workload.get("micro_batch"),
                      gradient_accumulation_steps=imported.layout.get("micro_batches"))
        try:
            ds = import_deepspeed(source, ctx)
        except FrameworkConfigError as exc:
            raise FrameworkConfigError(f"{where}: {exc.field}", exc.value, exc.allowed, exc.line, exc.column) \
                from None
        imported = merge(imported, ds, where)
    return imported


def merge(launcher: ImportedConfig, ds: ImportedConfig, where: str) -> ImportedConfig:
    """The DeepSpeed file decides the ledger and stage; the launcher's batch, lengths and method stay."""
    sources = dict(launcher.sources)
    sources.update({k: f"{where}: {v}" for k, v in ds.sources.items()})
    for part in ("workload", "layout"):                    # the launcher's own batch keys win over DS "auto"
        for name in getattr(launcher, part):
            sources[f"{part}.{name}"] = launcher.sources.get(f"{part}.{name}", name)
    return replace(
        launcher,
        scenario={**launcher.scenario, **ds.scenario},
        workload={**ds.workload, **launcher.workload},
        layout={**ds.layout, **launcher.layout},
        selected_stage=ds.selected_stage,
        auto_keys=launcher.auto_keys + [{**a, "key": f"{where}: {a['key']}"} for a in ds.auto_keys],
        ignored_keys=launcher.ignored_keys + [{**i, "key": f"{where}: {i['key']}"} for i in ds.ignored_keys],
        ignored_more=launcher.ignored_more + ds.ignored_more,
        notes=launcher.notes + [f"{where}: {n}" for n in ds.notes] + [
            f"{where}: followed; its ZeRO stage ({ds.selected_stage}) and precision ledger apply."],
        sources=sources, follows=())
