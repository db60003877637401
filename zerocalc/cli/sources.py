"""Where the CLI's view came from, beside the report: an imported framework config (selected stage, keys resolved
from "auto", keys ignored, notes) and a model fetched from the Hugging Face Hub (its published size beside ours)."""

from __future__ import annotations

from ..units import format_bytes


def sources_dict(args, imported) -> dict:
    """The JSON keys: selected_stage and imported{format, auto_keys, ignored_keys, notes}; hub{...}."""
    out = {}
    if imported is not None:
        data = imported.imported.to_dict()
        out["selected_stage"] = data["selected_stage"]
        out["imported"] = data["imported"]
    hub = getattr(args, "_hub", None)
    if hub is not None:
        out["hub"] = {"repo_id": hub.repo_id, "revision": hub.revision, "commit": hub.commit,
                      "safetensors_total_size": hub.safetensors_total_size, "dtype_note": hub.published_dtype_note,
                      "notes": list(hub.notes)}
    return out


def sources_text(sources: dict, units: str) -> str:
    lines = []
    if "imported" in sources:
        imp = sources["imported"]
        stage = sources.get("selected_stage")
        lines += ["", f"Imported {imp['format']} config" + (f": ZeRO stage {stage} selected" if stage is not None
                                                            else "") + " (explicit flags win):"]
        lines += [f"  auto: {a['key']} = {a['value']} ({a['how']})" for a in imp["auto_keys"]]
        lines += [f"  ignored: {i['key']} ({i['reason']})" for i in imp["ignored_keys"]]
        if imp.get("ignored_more"):
            lines.append(f"  ... and {imp['ignored_more']:,} more keys ignored")
        lines += [f"  note: {n}" for n in imp["notes"]]
    if "hub" in sources:
        hub = sources["hub"]
        lines += ["", f"From the Hub: {hub['repo_id']} at {hub['revision']}"
                  + (f" ({hub['commit'][:12]})" if hub["commit"] else "")]
        if hub["safetensors_total_size"] is not None:
            lines.append(f"  safetensors index: {format_bytes(hub['safetensors_total_size'], units)} of tensors"
                         + (f"; {hub['dtype_note']}" if hub["dtype_note"] else ""))
        lines += [f"  note: {n}" for n in hub["notes"]]
    return "\n".join(lines)
