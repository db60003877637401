"""How a mixture-of-experts model's experts are split, as plain data for the report: experts per GPU, the expert
groups, the dense and MoE block counts, and which model-state categories each ZeRO stage shards over the expert
group. Megatron-Core's parallel folding (zerocalc.layout.Layout.expert_data_parallel): the expert layers
re-partition a pipeline stage's dp x tp x cp ranks as etp x ep x edp.

Why ep moves the model states at one stage and not at another: an expert category the stage shards is divided by
ep x etp x edp = dp x tp x cp, whatever ep is; one it does not shard is divided by ep x etp alone.
"""

from __future__ import annotations

from typing import Optional

from ..tables import CATEGORIES, PARTITIONED, STAGES


def experts_dict(report) -> Optional[dict]:
    """None for a dense model."""
    w, dp = report.workload, report.scenario.workers
    a, lay = w.arch, w.layout
    if not a.experts:
        return None
    edp = lay.expert_data_parallel(dp)
    return {"routed_experts": a.experts, "experts_per_token": a.experts_per_token,
            "shared_expert": bool(a.shared_expert_ffn), "ep": lay.ep, "etp": lay.etp,
            "expert_data_parallel": edp, "experts_per_gpu": a.experts // lay.ep,
            "moe_layers": a.moe_layers, "dense_layers": a.layers - a.moe_layers,
            "stage_ranks": dp * lay.tp * lay.cp,
            "sharded": {str(s): [c for c in CATEGORIES if c in PARTITIONED[s]] for s in STAGES},
            "split_by_ep_alone": {str(s): [c for c in CATEGORIES if c not in PARTITIONED[s]] for s in STAGES}}
