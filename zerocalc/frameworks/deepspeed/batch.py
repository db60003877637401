"""DeepSpeed's batch keys: train_batch_size = micro x gradient accumulation x data-parallel size.

runtime/config.py (0.19.8) reads the three raw, derives a missing one (_set_batch_related_parameters) and asserts
each > 0 and the product (_batch_assertion); so a file with all three fixes the data-parallel degree. "auto" comes
from the Trainer (transformers integrations/deepspeed.py trainer_config_process): the view's micro-batch and
accumulation, and world_size x micro x gas for train_batch_size.
"""

from __future__ import annotations

import math

from ..common import FrameworkConfigError, count

HF_SRC = "transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig"


class BatchReader:
    """Mixed into deepspeed._Reader (uses its doc, ctx, b and name)."""

    def batch(self):
        raw = {k: self.doc.get(k, default=None) for k in
               ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")}
        tb, mb, gas = (self._batch_value(k, v) for k, v in raw.items())
        if raw["train_batch_size"] == "auto":
            tb = None                      # filled as micro x gas x world: consistent by construction
            self.b.auto_key(self.name("train_batch_size"), None,
                            f"{HF_SRC}.trainer_config_process: world_size x micro x gas; the view's workers stay")
        if gas is None and raw["gradient_accumulation_steps"] is None and mb is not None and tb is None:
            gas = 1                        # runtime/config.py _set_batch_related_parameters
        if mb is not None:
            self.b.set("workload", "micro_batch", mb, self.name("train_micro_batch_size_per_gpu"))
        if gas is not None:
            self.b.set("layout", "micro_batches", gas, self.name("gradient_accumulation_steps"))
        if tb is not None:
            self._dp_from_batch(tb, mb, gas, alone=raw["train_micro_batch_size_per_gpu"] is None and
                                raw["gradient_accumulation_steps"] is None)
        if all(v is None for v in raw.values()):
            self.b.note("No batch size in the file: DeepSpeed needs train_batch_size or "
                        "train_micro_batch_size_per_gpu (runtime/config.py _set_batch_related_parameters); "
                        "the view's micro-batch is kept.")

    def _batch_value(self, key, value):
        if value is None:
            return None
        if value == "auto":
            ctx_value = {"train_micro_batch_size_per_gpu": self.ctx.micro_batch,
                         "gradient_accumulation_steps": self.ctx.gradient_accumulation_steps}.get(key)
            arg = {"train_micro_batch_size_per_gpu": "per_device_train_batch_size (default 8)",
                   "gradient_accumulation_steps": "gradient_accumulation_steps (default 1)"}.get(key)
            if key != "train_batch_size":
                who = getattr(self, "auto_how", {}).get(key)
                if who:
                    how = who + ("taken from the view" if ctx_value is not None else
                                 "unresolved; the view's value is kept")
                else:
                    how = (f"{HF_SRC}.trainer_config_process: TrainingArguments.{arg}, taken from the view"
                           if ctx_value is not None else
                           f"unresolved: TrainingArguments.{arg} decides; the view's value is kept")
                self.b.auto_key(self.name(key), ctx_value, how)
            return ctx_value
        # runtime/config.py reads these raw and asserts each > 0 (_batch_assertion): an integral float passes
        if isinstance(value, float) and math.isfinite(value) and value == int(value) and abs(value) <= 10**9:
            value = int(value)
        return count(self.name(key), value, 1, 10**9, what='a positive integer, or "auto" with the Trainer')

    def _dp_from_batch(self, tb, mb, gas, alone=False):
        key = self.name("train_batch_size")
        if alone:
            # _set_batch_related_parameters with train_batch_size only: gradient accumulation 1, micro-batch
            # train_batch_size / data-parallel size
            self.b.set("layout", "micro_batches", 1, f"{key} alone: gradient accumulation 1 "
                                                     "(_set_batch_related_parameters)")
            gas = 1
        if mb is not None and gas is not None:
            if tb % (mb * gas):
                raise FrameworkConfigError(key, tb, f"a multiple of micro-batch x gradient accumulation "
                                                    f"({mb} x {gas} = {mb * gas}): DeepSpeed asserts "
                                                    "train_batch_size == micro x gas x data-parallel size")
            self.b.set("scenario", "workers", tb // (mb * gas), f"{key} / (micro x gas)")
            return
        w = self.ctx.workers
        if alone and w is None:
            self.b.note(f"{key} = {tb} alone: DeepSpeed sets gradient accumulation to 1 and the micro-batch to "
                        f"{tb} / the data-parallel size (_set_batch_related_parameters), which the file does not "
                        "hold; the view's micro-batch is kept.")
            return
        if mb is None and gas is None:
            self.b.note(f"{key} = {tb} with neither the micro-batch nor gradient accumulation known (\"auto\" "
                        "left unresolved): the view's values are kept.")
            return
        if w is None:
            known = "micro-batch" if mb is not None else "gradient accumulation"
            self.b.note(f"{key} = {tb} with only the {known} known: DeepSpeed derives the other from the "
                        "data-parallel size, which the file does not hold; the view's value is kept.")
            return
        if tb % w:
            self.b.note(f"{key} = {tb} does not split over the view's {w} workers; DeepSpeed would stop "
                        "(_batch_assertion).")
            return
        if mb is not None:
            derived, field, part = tb // w // mb, "micro_batches", "layout"
        else:
            derived, field, part = tb // w // gas, "micro_batch", "workload"
        if derived < 1 or derived * (mb or gas) * w != tb:
            self.b.note(f"{key} = {tb} does not split over the view's {w} workers; DeepSpeed would stop "
                        "(_batch_assertion).")
            return
        self.b.set(part, field, derived, f"{key} / the view's {w} workers (_set_batch_related_parameters)")
