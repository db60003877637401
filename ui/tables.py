"""Report -> display tables. Only unit conversion for display happens here; every byte comes from the core."""

import pandas as pd

from zerocalc.units import in_unit


def stage_table(report, unit: str) -> pd.DataFrame:
    rows = []
    for r in report.stages:
        rows.append({
            "ZeRO stage": r.stage,
            f"Parameters ({unit})": in_unit(r.per_worker_by_category["parameters"], unit),
            f"Gradients ({unit})": in_unit(r.per_worker_by_category["gradients"], unit),
            f"Optimizer ({unit})": in_unit(r.per_worker_by_category["optimizer"], unit),
            f"Per worker ({unit})": in_unit(r.per_worker_total, unit),
            f"Cluster ({unit})": in_unit(r.cluster_total, unit),
            f"Redundant ({unit})": in_unit(r.redundant_bytes, unit),
        })
    return pd.DataFrame(rows)
