"""Fine-tuning on the page: what trains (a line under the title), why QLoRA is or is not smaller than LoRA for
this view (a line under the verdict), and each parameter group's ledger with the entries that vanish. Every byte
and sentence comes from the report (zerocalc/output/report.py: finetune, group_ledgers, finetune_comparison)."""

from __future__ import annotations

import streamlit as st

from zerocalc.units import format_bytes

from .figures import STAGE_LABELS


def active(report: dict) -> bool:
    return report.get("finetune", {}).get("mode", "full") != "full"


def summary(report: dict) -> str:
    """"LoRA rank 16 on ...: 41,943,040 of 8,072,204,288 parameters train (0.52%)", or "" for full training."""
    if not active(report):
        return ""
    a = report["architecture"]
    stored = a["trainable_params"] + a["frozen_params"]
    return (f"{report['finetune']['description']}: {a['trainable_params']:,} of {stored:,} stored parameters "
            f"train ({100 * a['trainable_params'] / stored:.2f}%)")


def qlora_line(report: dict, stage: int, unit: str) -> None:
    """The one-line answer to "why is QLoRA not smaller?" for the checked stage (litgpt#1112, torchtune#2255)."""
    cmp = report.get("finetune_comparison")
    if not cmp:
        return
    q, plain = cmp["quantized_peak_bytes"][stage], cmp["plain_peak_bytes"][stage]
    base = report["finetune"]["base_dtype"] or report["scenario"]["param_dtype"]
    against = (f"{STAGE_LABELS[stage]} peak {format_bytes(q, unit)} against {format_bytes(plain, unit)} for the "
               f"same adapters over the base in {base}")
    reasons = "; ".join(cmp["reasons"])
    if q >= plain:
        st.warning(f"QLoRA is not smaller than LoRA here: {against}. The quantized base saves "
                   f"{format_bytes(cmp['plain_model_state_bytes'][stage] - cmp['quantized_model_state_bytes'][stage], unit)}"
                   f" of model states, and costs more elsewhere: {reasons}.", icon="ℹ️")
    else:
        st.caption(f"QLoRA saves {format_bytes(plain - q, unit)}: {against}." +
                   (f" It would save more but: {reasons}." if reasons else ""))


def group_ledger_table(report: dict) -> "pandas.DataFrame":
    """Rows: the convention's ledger entries; columns: the parameter groups; cells: bytes per parameter of that
    group, or "vanishes" (a frozen group keeps no gradient, master copy or optimizer state)."""
    import pandas as pd

    ledgers = report["group_ledgers"]
    rows = []
    for entry in ledgers["entries"]:
        row = {"entry": entry}
        for g in ledgers["groups"]:
            value = g["bytes_per_param"][entry]
            row[g["label"]] = "vanishes" if value is None else f"{value:.4g}"
        rows.append(row)
    rows.append({"entry": "total", **{g["label"]: f"{g['total_bytes_per_param']:.4g}" for g in ledgers["groups"]}})
    rows.append({"entry": "parameters in the group",
                 **{g["label"]: f"{g['params']:,}" for g in ledgers["groups"]}})
    return pd.DataFrame(rows).astype(str)


def group_ledgers_heading(report: dict) -> str:
    """The heading of the group ledger table, or "" when one group holds every parameter (nothing to compare)."""
    groups = report.get("group_ledgers", {}).get("groups", [])
    if len(groups) < 2 and not active(report):
        return ""
    return ("**What each parameter group keeps** (bytes per parameter of the group, "
            f"{report['group_ledgers']['rank']}): a frozen group keeps only its stored weights; its gradient, "
            "master copy and optimizer state vanish.")
