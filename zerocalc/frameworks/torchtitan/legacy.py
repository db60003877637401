"""torchtitan's older TOML names: keys that moved between sections or were renamed before commit 238fa99, read as
their new fields with a note, and the older pipeline keys (a micro-batch count, split points) turned into
today's. A part of the reader (reader._Reader), kept apart because it only concerns files written for older
torchtitans.
"""

from __future__ import annotations

from ..common import FrameworkConfigError, count
from .fields import COMMIT, LIMIT

# Older torchtitan names (config_manager.py before #980, 2025-03-18, which moved the degrees into [parallelism];
# training.batch_size until #1238, 2025-06-05; training.data_parallel_degree until HSDP, 2024-09) -> the name at
# 238fa99. Those torchtitans read them; 238fa99 refuses them, so zerocalc reads them as their renamed fields, with
# a note. (section, key) -> (section, key), or None: removed, no bearing on the bytes (listed as ignored).
PARALLEL_MOVED = ("data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                  "disable_loss_parallel", "fsdp_reshard_after_forward", "enable_async_tensor_parallel")
EXPERIMENTAL_MOVED = ("pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
                      "context_parallel_degree", "context_parallel_rotate_method", "enable_async_tensor_parallel")
LEGACY = {("training", "batch_size"): ("training", "local_batch_size"),
          ("training", "data_parallel_degree"): ("parallelism", "data_parallel_shard_degree"),
          **{("training", k): ("parallelism", k) for k in PARALLEL_MOVED},
          **{("experimental", k): ("parallelism", k) for k in EXPERIMENTAL_MOVED},
          **{(sec, k): None for sec, k in (
              ("training", "compile"), ("training", "warmup_steps"), ("training", "seed"),
              ("training", "deterministic"), ("optimizer", "fused"), ("experimental", "enable_compiled_autograd"),
              ("parallelism", "enable_compiled_autograd"), ("experimental", "pipeline_parallel_split_mode"))}}
# pipeline keys removed by #1073 (2025-04-07): a count of micro-batches (default: the number of stages, pipeline.py)
# and split points (len + 1 stages); they exist under [experimental] and, after #980, [parallelism].
LEGACY_PIPELINE = ("pipeline_parallel_microbatches", "pipeline_parallel_split_points")


class LegacyReader:
    """The older-names half of reader._Reader (which supplies doc, ctx, b and the section readers)."""

    # --- older torchtitan names ------------------------------------------------------------------------------
    def legacy(self):
        """Rewrite older key names (LEGACY) into their 238fa99 places before anything is checked."""
        data = self.doc.data
        self.legacy_pipeline, self.pre_1073, older = {}, False, False
        for (section, key), new in LEGACY.items():
            block = data.get(section)
            if not isinstance(block, dict) or key not in block:
                continue
            value, older = block.pop(key), True
            old = f"{section}.{key}"
            if new is None:
                self.b.ignore(old, "a field of an older torchtitan JobConfig, since removed (238fa99 refuses it); "
                                   "no effect on the bytes zerocalc counts")
                continue
            target = data.setdefault(new[0], {})
            if not isinstance(target, dict) or new[1] in target:
                raise FrameworkConfigError(old, value, f"absent when {'.'.join(new)} is given (the older name of it)")
            target[new[1]] = value
            self.pre_1073 = self.pre_1073 or section == "experimental" or key in PARALLEL_MOVED
            self.b.note(f"{old} is an older torchtitan name, read as {'.'.join(new)} (its name at {COMMIT[:7]}, "
                        "which refuses the old one).")
        older = self._legacy_loss_parallel(data) or older
        for section in ("experimental", "parallelism"):
            block = data.get(section)
            for key in LEGACY_PIPELINE:
                if isinstance(block, dict) and key in block:
                    self.legacy_pipeline[key] = (f"{section}.{key}", block.pop(key))
                    self.pre_1073 = True
        if self._legacy_float8(data) or older or self.pre_1073:
            # every torchtitan that read these names repeated K and V to the query heads before SDPA (repeat_kv),
            # until pytorch/torchtitan#2259 (2026-01-27, enable_gqa): step/repeated_kv.py
            self.b.set("workload", "repeat_kv", True, "an older torchtitan's names: its attention repeated K and V "
                                                      "to every query head (repeat_kv, until #2259 in January 2026)")

    def _legacy_loss_parallel(self, data):
        # config_manager.py before Oct 2024: training.enable_loss_parallel (default true), later inverted as
        # disable_loss_parallel
        block = data.get("training")
        if not isinstance(block, dict) or "enable_loss_parallel" not in block:
            return False
        value = block.pop("enable_loss_parallel")
        if not isinstance(value, bool):
            raise FrameworkConfigError("training.enable_loss_parallel", value, "true or false")
        target = data.setdefault("parallelism", {})
        if isinstance(target, dict) and "disable_loss_parallel" not in target:
            target["disable_loss_parallel"] = not value
        self.b.note("training.enable_loss_parallel is an older torchtitan name, read as "
                    f"parallelism.disable_loss_parallel = {str(not value).lower()}.")
        return True

    def _legacy_float8(self, data):
        # [float8] (2024-07 to 2025-09) and training.fp8_linear (2024-06): since model.converters / [quantize]
        found = [k for k in ("float8",) if k in data]
        training = data.get("training")
        if isinstance(training, dict) and "fp8_linear" in training:
            found.append("training.fp8_linear")
            if training.pop("fp8_linear"):
                self.b.note("training.fp8_linear: low-precision matmuls are not modelled.")
        for key in found:
            if key == "float8":
                block = data.pop("float8")
                if isinstance(block, dict) and block.get("enable_float8_linear") is True:
                    self.b.note("float8.enable_float8_linear: low-precision matmuls are not modelled.")
            self.b.ignore(key, "an older torchtitan float8 setting (238fa99 has [quantize] and model.converters); "
                               "float8 matmuls are not modelled")
        return bool(found)

    def _legacy_era(self) -> bool:
        """A file written for torchtitan before #1073 (2025-04): its pipeline keys or pre-#980 degree names."""
        return self.pre_1073

    def _legacy_micro_count(self, dims) -> int:
        if "pipeline_parallel_microbatches" in self.legacy_pipeline:
            key, value = self.legacy_pipeline["pipeline_parallel_microbatches"]
            return count(key, value, 1, LIMIT)
        return dims["pp"] * self._legacy_stages_per_rank(dims)   # pipeline.py: n_microbatches = total stages

    def _legacy_stages_per_rank(self, dims) -> int:
        if "pipeline_parallel_split_points" in self.legacy_pipeline:
            key, points = self.legacy_pipeline["pipeline_parallel_split_points"]
            if not isinstance(points, list) or (len(points) + 1) % dims["pp"]:
                raise FrameworkConfigError(key, points, f"a list of split points giving a multiple of "
                                                        f"pipeline_parallel_degree ({dims['pp']}) stages")
            return (len(points) + 1) // dims["pp"]
        return 1

    def _legacy_microbatch(self, local, dims) -> int:
        """pipeline.py before #1073: the local batch is split into pipeline_parallel_microbatches micro-batches
        (default: the number of stages), and a batch they do not divide raises ValueError."""
        if self.doc.has("parallelism", "pipeline_parallel_microbatch_size"):
            return self.int_field("parallelism", "pipeline_parallel_microbatch_size", 1)
        micros = self._legacy_micro_count(dims)
        given = "pipeline_parallel_microbatches" in self.legacy_pipeline
        key = self.legacy_pipeline["pipeline_parallel_microbatches"][0] if given else "pipeline_parallel_microbatches"
        if local % micros:
            raise FrameworkConfigError(key, micros, f"a divisor of the batch size ({local}): older torchtitan's "
                                                   "pipeline.py raises 'Batch size must be divisible by number of "
                                                   "microbatches'")
        self.b.note(f"Older torchtitan pipeline: the local batch of {local} is split into {micros} micro-batches "
                    f"({key if given else 'default: one per stage'}) of "
                    f"{local // micros}.")
        return local // micros
