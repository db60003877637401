"""accelerate's fsdp_config section: the sharding strategy (by name or number, FSDP1) or reshard_after_forward
(FSDP2), the hybrid topology, and what they mean as a ZeRO stage and shard group (utils/dataclasses.py
FullyShardedDataParallelPlugin, accelerator.py). A part of the reader (reader._Reader).
"""

from __future__ import annotations

from ..common import FrameworkConfigError, boolean, count, one_of

# utils/constants.py FSDP_SHARDING_STRATEGY; ShardingStrategy(n) is index + 1. -> (ZeRO stage, hybrid?)
STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
STRATEGY_STAGE = {"FULL_SHARD": (3, False), "SHARD_GRAD_OP": (2, False), "NO_SHARD": (0, False),
                  "HYBRID_SHARD": (3, True), "HYBRID_SHARD_ZERO2": (2, True)}
FSDP_SRC = "accelerate FullyShardedDataParallelPlugin"


class FsdpReader:
    """The fsdp_config half of reader._Reader (which supplies doc, ctx, b and the precision and process readers)."""

    # --- FSDP ------------------------------------------------------------------------------------------------
    def fsdp(self, world, precision):
        cfg = self.doc.section("fsdp_config")
        keys = {}
        for key in cfg:                                   # launch.py: x -> fsdp_x
            keys[key if key.startswith("fsdp") else "fsdp_" + key] = key
        get = lambda name, default=None: self._fsdp_get(keys, name, default)  # noqa: E731
        version = get("fsdp_version", 1)
        version = int(one_of(self._k(keys, "fsdp_version"), version, (1, 2, "1", "2"), what="1 or 2"))
        self.fsdp2 = self.parallel_ok = version == 2
        if version == 1:
            stage, hybrid = self._fsdp1_strategy(keys, get)
        else:
            stage, hybrid = self._fsdp2_reshard(keys, get), False
        self.b.stage = stage
        self.b.set("workload", "comm_buffers", "fsdp", f"FSDP{version}: one wrapped unit at a time")
        self.b.set("workload", "fsdp_version", version, self._k(keys, "fsdp_version", "default 1 (accelerate's "
                   "FullyShardedDataParallelPlugin: FSDP_VERSION defaults to 1)"))
        if version == 1:
            orig = get("fsdp_use_orig_params", False)
            orig = boolean(self._k(keys, "fsdp_use_orig_params") or "fsdp_config.fsdp_use_orig_params", orig,
                           rule="accelerate")
            self.b.set("workload", "fsdp_use_orig_params", "yes" if orig else "no",
                       self._k(keys, "fsdp_use_orig_params", "default false (the plugin's FSDP_USE_ORIG_PARAMS)"))
            self._fsdp1_prefetch(keys, get)
        elif "fsdp_use_orig_params" in keys:
            self.b.ignore(self._k(keys, "fsdp_use_orig_params"), "FSDP2 always uses the original parameters (the "
                          "plugin drops use_orig_params for fsdp_version 2)")
        comm = {"no": None, "fp8": "bf16"}.get(precision, precision)
        self.fp32_ledger(f"FSDP{version} mixed precision ({FSDP_SRC}.set_mixed_precision): fp32 shards, "
                         f"{comm or 'fp32'} gathers and compute", comm)
        if precision == "fp8":
            self.b.note("mixed_precision fp8 under FSDP uses bf16 for parameters and reductions "
                        "(set_mixed_precision maps fp8 to bfloat16); fp8 matmuls are not modelled.")
        self.b.note("FSDP keeps the parameters in the dtype the model was loaded in; zerocalc assumes fp32 (the "
                    "usual choice with mixed precision). A model loaded in bf16 trains in pure bf16.")
        offload = get("fsdp_offload_params", False)
        offload = "cpu" if boolean(self._k(keys, "fsdp_offload_params"), offload, rule="accelerate") else "none"
        for field in ("offload_params", "offload_optimizer"):
            self.b.set("scenario", field, offload, self._k(keys, "fsdp_offload_params", "default false"))
        if offload == "cpu":
            self.b.note("fsdp_offload_params moves parameters and gradients to the CPU, and with them the "
                        "optimizer step and its state (FSDP CPUOffload / CPUOffloadPolicy).")
        ac = get("fsdp_activation_checkpointing")
        if ac is not None:
            full = boolean(self._k(keys, "fsdp_activation_checkpointing"), ac, rule="accelerate")
            self.b.set("workload", "recompute", "full" if full else "none",
                       self._k(keys, "fsdp_activation_checkpointing"))
            if full:
                self.b.note("fsdp_activation_checkpointing wraps each transformer layer in checkpoint_wrapper: "
                            "zerocalc's full recompute.")
        self._fsdp_topology(world, hybrid, keys)

    def _k(self, keys, name, default=None):
        """The key as written in the file (maybe without its fsdp_ prefix), dotted; or default."""
        return f"fsdp_config.{keys[name]}" if name in keys else default

    def _fsdp_get(self, keys, name, default=None):
        if name not in keys:
            return default
        return self.doc.get("fsdp_config", keys[name])

    def _strategy(self, key, value) -> str:
        allowed = "one of " + ", ".join(STRATEGIES) + " (any case) or 1-5"
        if isinstance(value, str) and value.upper() in STRATEGIES:
            return value.upper()
        if isinstance(value, str) and not value.isascii():
            raise FrameworkConfigError(key, value, allowed)
        # the plugin reads a number (or its text, int(value)) as the FSDP_SHARDING_STRATEGY position
        return STRATEGIES[count(key, value.strip() if isinstance(value, str) else value, 1, len(STRATEGIES),
                                lax=isinstance(value, str), what=allowed) - 1]

    def _fsdp1_strategy(self, keys, get):
        key = self._k(keys, "fsdp_sharding_strategy")
        strategy = self._strategy(key, get("fsdp_sharding_strategy")) if key else "FULL_SHARD"
        if "fsdp_reshard_after_forward" in keys:
            rkey = self._k(keys, "fsdp_reshard_after_forward")
            reshard = get("fsdp_reshard_after_forward")
            if isinstance(reshard, bool):
                self.b.ignore(rkey, "FSDP1 takes a strategy name here, not a bool; accelerate launch passes "
                                    "fsdp_sharding_strategy, which the plugin prefers, so it is unused")
            elif self._strategy(rkey, reshard) != strategy:
                self.b.ignore(rkey, f"accelerate launch passes fsdp_sharding_strategy ({strategy}; its default "
                                    "is FULL_SHARD), which FSDP1 prefers over reshard_after_forward")
                self.b.note(f"{rkey} = {reshard} is overridden: under FSDP1 accelerate applies "
                            f"fsdp_sharding_strategy = {strategy} (accelerator.py: sharding_strategy or "
                            "reshard_after_forward). Set fsdp_sharding_strategy to change it.")
        stage, hybrid = STRATEGY_STAGE[strategy]
        self.b.sources["selected_stage"] = key or "default FULL_SHARD (accelerate launch --fsdp_sharding_strategy)"
        return stage, hybrid

    def _fsdp1_prefetch(self, keys, get):
        """fsdp_backward_prefetch: BACKWARD_PRE / BACKWARD_POST / NO_PREFETCH, by name or number (the plugin's
        FSDP_BACKWARD_PREFETCH order); absent, the plugin's NO_PREFETCH (backward_prefetch None)."""
        key = self._k(keys, "fsdp_backward_prefetch")
        value = get("fsdp_backward_prefetch", "NO_PREFETCH")
        names = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
        text = str(value).upper()
        if text.isdigit() and 1 <= int(text) <= 2:
            text = names[int(text) - 1]
        if text not in names:
            raise FrameworkConfigError(key, value, "one of " + ", ".join(names) + " (any case) or 1-2")
        self.b.set("workload", "fsdp_backward_prefetch", {"BACKWARD_PRE": "pre", "BACKWARD_POST": "post"}.get(
            text, "none"), key or "default NO_PREFETCH (the plugin's backward_prefetch None)")

    def _fsdp2_reshard(self, keys, get):
        if "fsdp_sharding_strategy" in keys:
            self.doc.get("fsdp_config", keys["fsdp_sharding_strategy"])
            self.b.ignore(self._k(keys, "fsdp_sharding_strategy"),
                          "FSDP2 reads only fsdp_reshard_after_forward (the plugin converts sharding_strategy "
                          "for fsdp_version 1 only); hybrid sharding needs parallelism_config")
        key = self._k(keys, "fsdp_reshard_after_forward")
        value = get("fsdp_reshard_after_forward", True)
        reshard = boolean(key or "fsdp_config.fsdp_reshard_after_forward", value, rule="accelerate")
        self.b.sources["selected_stage"] = key or "default true (FSDP2 reshard_after_forward)"
        if not reshard:
            self.b.note("FSDP2 with reshard_after_forward false keeps the gathered parameters from forward to "
                        "backward: ZeRO-2 (SHARD_GRAD_OP) in zerocalc's terms (pytorch/PiPPy#1105, awgu).")
        return 3 if reshard else 2

    def _fsdp_topology(self, world, hybrid, keys):
        par = self._parallelism(world) if self.fsdp2 else None
        if par:
            return
        if world is None:
            return
        self.b.set("scenario", "workers", world, "num_processes")
        if hybrid:
            per_node = world // self.machines if world % self.machines == 0 else None
            key = self._k(keys, "fsdp_sharding_strategy")
            if per_node is None:
                self.b.note("HYBRID_SHARD shards within a node; num_processes does not split over num_machines.")
            elif per_node < world:
                self.b.set("scenario", "shard_group", per_node, f"{key}: shard within a node (num_processes / "
                                                                "num_machines), replicate across nodes")
            else:
                self.b.note("HYBRID_SHARD on one machine shards over all processes (one node: no replicas).")
