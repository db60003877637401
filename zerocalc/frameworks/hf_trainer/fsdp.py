"""TrainingArguments.fsdp / fsdp_config, as transformers 5.24 reads them (training_args.py _process_fsdp_args,
_apply_legacy_fsdp_to_config) before handing them to accelerate's FSDP plugin:

- fsdp: true, or the legacy string / list of options (full_shard, shard_grad_op, no_shard, hybrid_shard,
  hybrid_shard_zero2, offload, auto_wrap); any other option is refused ("Unknown `fsdp` option");
- fsdp_config: a dict (a path to a JSON file is named, not followed), keys with an "fsdp_" prefix read without it;
  version 2 (default) takes reshard_after_forward as a bool (default true; full_shard sets true, shard_grad_op
  false, the other strategies are FSDP1 only and refused); version 1 takes a strategy name (default full_shard);
  cpu_offload (or the offload option) moves parameters, gradients and the optimizer step to the CPU;
  activation_checkpointing is FSDP's own checkpoint_wrapper (zerocalc's full recompute).

The ledger is accelerate's FSDP mixed precision (accelerate/fsdp.py): fp32 shards, compute-dtype gathers.
"""

from __future__ import annotations

from ..accelerate.fsdp import STRATEGY_STAGE
from ..common import Builder, Doc, FrameworkConfigError, boolean, count, one_of

OPTIONS = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2", "offload", "auto_wrap")
STRATEGIES = tuple(s.lower() for s in STRATEGY_STAGE)


def fsdp_items(doc: Doc) -> list:
    """The legacy options the fsdp key gives ([] for true); None when FSDP is off."""
    raw = doc.get("fsdp", default=None)
    if raw is None or raw is False or raw == "" or raw == []:
        return None
    if raw is True:
        return []
    items = raw.split() if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise FrameworkConfigError("fsdp", raw, "true, or FSDP options as a string or a list")
    for item in items:
        one_of("fsdp", item, OPTIONS, what="an FSDP option (transformers FSDPOption)")
    return items


def read_fsdp(doc: Doc, b: Builder, compute) -> bool:
    """True when the file turns FSDP on (its stage, ledger, offload and checkpointing then set)."""
    items = fsdp_items(doc)
    if items is None:
        return False
    raw_cfg = doc.data.get("fsdp_config")
    if isinstance(raw_cfg, str):
        doc.get("fsdp_config")
        b.note(f"fsdp_config = {raw_cfg}: a JSON file, not followed; its defaults are assumed (version 2, "
               "reshard_after_forward true).")
        raw_cfg = {}
    cfg = doc.section("fsdp_config") if isinstance(raw_cfg, dict) or raw_cfg is None else raw_cfg
    if not isinstance(cfg, dict):
        raise FrameworkConfigError("fsdp_config", raw_cfg, "a mapping of FSDP settings, or a path to a JSON file")
    keys = {(k[5:] if k.startswith("fsdp_") else k): k for k in cfg}

    def get(name, default=None):
        return doc.get("fsdp_config", keys[name]) if name in keys else default

    def key(name):
        return f"fsdp_config.{keys[name]}" if name in keys else f"fsdp_config.{name}"

    version = count(key("version"), get("version", 2), 1, 2)
    strategies = [i for i in items if i in STRATEGIES]
    if version == 2:
        for item in strategies:
            if item not in ("full_shard", "shard_grad_op"):
                raise FrameworkConfigError("fsdp", item, "full_shard or shard_grad_op under FSDP2 (transformers: "
                                                         f"'`fsdp={item}` is only available with FSDP1')")
        legacy = None if not strategies else strategies[0] == "full_shard"
        reshard = get("reshard_after_forward", True if legacy is None else legacy)
        stage = 3 if boolean(key("reshard_after_forward"), reshard, rule="accelerate") else 2
        hybrid = False
    else:
        strategy = get("reshard_after_forward", strategies[0] if strategies else "full_shard")
        strategy = one_of(key("reshard_after_forward"), str(strategy).lower(), STRATEGIES,
                          what="an FSDP1 sharding strategy")
        stage, hybrid = STRATEGY_STAGE[strategy.upper()]
    b.stage = stage
    b.sources["selected_stage"] = "fsdp / fsdp_config"
    src = f"fsdp (FSDP{version} mixed precision: fp32 shards, {compute or 'fp32'} gathers)"
    for field, value in (("convention", "fsdp2"), ("param_dtype", "fp32"), ("grad_dtype", "fp32"),
                         ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", "fp32"),
                         ("comm_dtype", compute)):
        b.set("scenario", field, value, src)
    b.set("workload", "activation_dtype", compute or "fp32", "bf16 / fp16")
    b.set("workload", "comm_buffers", "fsdp", f"FSDP{version}: one wrapped unit at a time")
    offload = get("cpu_offload", "offload" in items)
    offload = "cpu" if boolean(key("cpu_offload"), offload, rule="accelerate") else "none"
    for field in ("offload_params", "offload_optimizer"):
        b.set("scenario", field, offload, key("cpu_offload") if "cpu_offload" in keys else "fsdp")
    if "activation_checkpointing" in keys and boolean(key("activation_checkpointing"),
                                                      get("activation_checkpointing"), rule="accelerate"):
        b.set("workload", "recompute", "full", key("activation_checkpointing"))
    if hybrid:
        b.note("hybrid_shard shards within a node and replicates across nodes: the node size is not in this file "
               "(zerocalc shards over every data-parallel worker; give --shard-group).")
    b.note("FSDP keeps the parameters in the dtype the model was loaded in; zerocalc assumes fp32 (the usual choice "
           "with mixed precision).")
    return True
