"""Import a DeepSpeed config (ds_config.json): the ZeRO stage, precision ledger, offload, buckets and batch.

Read as DeepSpeed 0.19.8 reads it (deepspeed/runtime/config.py DeepSpeedConfig and the pydantic models in
schema.py): what it refuses is an error named by key; what it ignores imports with a note. "auto" exists
only through the Hugging Face integration, so it is resolved as transformers 5.24 (integrations/deepspeed.py,
HfTrainerDeepSpeedConfig.trainer_config_process / trainer_config_finalize) and accelerate 1.15 (utils/dataclasses.py
DeepSpeedPlugin, accelerator.py _prepare_deepspeed) fill it, from an ImportContext; unresolved "auto" leaves the
field to the current view and says so.
"""

from __future__ import annotations

from ...step.workload import WORKLOAD_LIMITS
from ..common import (
    Builder,
    Doc,
    FrameworkConfigError,
    ImportContext,
    ImportedConfig,
    count,
    parse_relaxed_json,
)
from . import schema as S
from .batch import HF_SRC, BatchReader
from .precision import ACC_SRC, PrecisionReader

ZERO_SRC = "DeepSpeedZeroConfig default (deepspeed/runtime/zero/config.py, 0.19.8)"
# zero field -> Workload field (DeepSpeed's names, in elements: workload.py)
BUCKETS = (("reduce_bucket_size", "reduce_bucket_size"), ("allgather_bucket_size", "allgather_bucket_size"),
           ("prefetch_bucket_size", "prefetch_bucket_size"), ("max_live_parameters", "max_live_parameters"),
           ("param_persistence_threshold", "param_persistence_threshold"))


def import_deepspeed(source, context=None) -> ImportedConfig:
    """A ds_config.json (text or bytes) -> ImportedConfig. Raises FrameworkConfigError naming the key."""
    data, relaxed = parse_relaxed_json(source)
    b = from_dict(data, context)
    if relaxed:
        b.note("The file has comments, so it is not strict JSON: DeepSpeed reads a config path with hjson "
               "(runtime/config.py DeepSpeedConfig) and takes them, but the HF Trainer and accelerate load the file "
               "with json.load (accelerate utils/deepspeed.py HfDeepSpeedConfig) and refuse it.")
    return b.build()


def from_dict(data: dict, context=None, builder: Builder = None, names: dict = None, auto_how: dict = None) -> Builder:
    """Read a DeepSpeed config dict into a Builder. `names` renames keys in sources and messages (accelerate
    writes some of them from its own keys); `auto_how` says who fills a batch key's "auto" when it is not the
    Trainer (accelerate's DeepSpeedPlugin)."""
    b = builder or Builder("deepspeed")
    reader = _Reader(Doc(data), ImportContext.of(context), b, names or {})
    reader.auto_how = auto_how or {}
    reader.run()
    return b


class _Reader(BatchReader, PrecisionReader):
    def __init__(self, doc: Doc, ctx: ImportContext, b: Builder, names: dict):
        self.doc, self.ctx, self.b, self.names = doc, ctx, b, names

    def name(self, key: str) -> str:
        return self.names.get(key, key)

    def run(self):
        self.removed_top_level()
        dtype = self.precision()
        zero = self.zero()
        stage = zero["stage"]
        self.b.stage = stage
        self.ledger(stage, dtype, zero)
        self.offload(stage, zero)
        self.workload(stage, zero)
        self.batch()
        self.parallel()
        self.optimizer()
        self.activation_checkpointing()
        self.leftovers()

    # --- precision -----------------------------------------------------------------------------------------
    def removed_top_level(self):
        for key in S.REMOVED_TOP_LEVEL_KEYS:
            if self.doc.has(key):
                self.doc.get(key)
                self.b.ignore(key, "removed from DeepSpeed: 0.19.8 refuses a config holding it "
                                   "(runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS); delete it to run 0.19.8")

    def section(self, key, fields):
        """A pydantic-validated block: every key known, every value of its kind; "auto" dropped."""
        block = self.doc.section(key)
        values = {}
        for name, value in block.items():
            path = f"{key}.{name}"
            if name not in fields:
                if value == "auto":      # dropped before validation, so DeepSpeed never sees the unknown key
                    self.doc.mark(key, name)
                    self.b.ignore(path, '"auto" on a key DeepSpeed does not know: dropped by DeepSpeedConfigModel')
                    continue
                raise FrameworkConfigError(self.name(path), f"an unknown key (= {value!r})",
                                           f"a key of DeepSpeed 0.19.8's {key} block, which refuses others: "
                                           + ", ".join(f for f in fields if fields[f] != "any"))
            self.doc.mark(key, name)
            values[name] = value if value == "auto" else S.check_value(self.name(path), value, fields[name])
        return values

    def precision(self) -> str:
        """The model dtype DeepSpeed trains in: fp16, bf16 or fp32 (runtime/config.py: "bf16", else "bfloat16")."""
        fp16 = self.section("fp16", S.FP16_FIELDS)
        bf16_key = "bf16" if self.doc.has("bf16") or not self.doc.has("bfloat16") else "bfloat16"
        bf16 = self.section(bf16_key, S.BF16_FIELDS)
        if bf16_key == "bf16" and self.doc.has("bfloat16"):
            self.doc.get("bfloat16")
            self.b.ignore("bfloat16", 'the legacy name is read only when "bf16" is absent')
        self._fp16_validator(fp16)
        self.added = self._sections_the_integration_adds(fp16, bf16, bf16_key)
        on = {"fp16": self._enabled("fp16", fp16), "bf16": self._enabled(bf16_key, bf16)}
        if on["fp16"] and on["bf16"]:
            raise FrameworkConfigError(self.name(f"{bf16_key}.enabled"), True,
                                       "false while fp16.enabled is true: DeepSpeed asserts 'bfloat16 and fp16 "
                                       "modes cannot be simultaneously enabled'")
        self.fp16, self.bf16, self.bf16_key = fp16, bf16, bf16_key
        added = " (absent: added by accelerate's set_mixed_precision)"
        if on["bf16"]:
            self.dtype_key, dtype = f"{bf16_key}.enabled" + (added if bf16_key in self.added else ""), "bf16"
        elif on["fp16"]:
            self.dtype_key, dtype = "fp16.enabled" + (added if "fp16" in self.added else ""), "fp16"
        elif None in on.values():
            self.dtype_key, dtype = None, None
        else:
            self.dtype_key, dtype = "fp16.enabled and bf16.enabled false (default)", "fp32"
            if not self.doc.has("fp16") and not self.doc.has(bf16_key):
                self.b.note("No fp16 or bf16 section: DeepSpeed trains in fp32. Launched through accelerate or the "
                            "Trainer with --fp16/--bf16, accelerate's DeepSpeedPlugin.set_mixed_precision adds that "
                            "section first; set it (or \"auto\") in the file to say so.")
        return dtype

    def _fp16_validator(self, fp16):
        # precision_config.py DeepSpeedFP16Config._validate_dynamic_loss_scale_params
        if fp16.get("enabled") is True and fp16.get("loss_scale", 0) == 0:
            for key in ("loss_scale_window", "min_loss_scale"):
                if key in fp16 and fp16[key] != "auto" and fp16[key] <= 0:
                    raise FrameworkConfigError(self.name(f"fp16.{key}"), fp16[key],
                                               "above 0 when dynamic loss scaling is on (loss_scale 0)")

    def _sections_the_integration_adds(self, fp16, bf16, bf16_key) -> set:
        """A precision "auto" means the file runs through the Trainer or accelerate, whose AcceleratorState calls
        DeepSpeedPlugin.set_mixed_precision (accelerate utils/dataclasses.py): it adds the section of the run's
        mixed precision when the file lacks it ({"enabled": true}; {"enabled": false} for the other), then fills
        "auto". So an absent fp16 or bf16 section beside an "auto" one follows the view's precision too."""
        present = {"fp16": self.doc.has("fp16"), "bf16": self.doc.has("bf16") or self.doc.has("bfloat16")}
        blocks = {"fp16": fp16, "bf16": bf16}
        added = set()
        for want, other in (("fp16", "bf16"), ("bf16", "fp16")):
            if not present[want] and present[other] and blocks[other].get("enabled") == "auto":
                blocks[want]["enabled"] = "auto"
                added.add("fp16" if want == "fp16" else bf16_key)
        return added

    def _enabled(self, key, block):
        """True/False, or None when "auto" cannot be resolved (the Trainer's --fp16/--bf16 decide)."""
        value = block.get("enabled", False)
        if value != "auto":
            return value
        want = "fp16" if key == "fp16" else "bf16"
        if key in self.added:
            return self._added_section(key, want)
        if self.ctx.precision is None:
            self.b.auto_key(self.name(f"{key}.enabled"), None,
                            f"unresolved: {HF_SRC} fills it from TrainingArguments.{want} (default false); "
                            "the view's precision is kept")
            return None
        resolved = self.ctx.precision == want
        self.b.auto_key(self.name(f"{key}.enabled"), resolved,
                        f"{HF_SRC}.trainer_config_process: TrainingArguments.{want}, taken from the view's "
                        f"compute dtype {self.ctx.precision}")
        return resolved

    def _added_section(self, key, want):
        """The section set_mixed_precision adds: enabled when the run's mixed precision is `want`."""
        path = self.name(f"{key}.enabled")
        how = (f"absent beside an \"auto\" {'bf16' if want == 'fp16' else 'fp16'} section: accelerate "
               f"DeepSpeedPlugin.set_mixed_precision adds {{\"enabled\": true}} when the run's mixed precision is "
               f"{want} (the Trainer's --{want}), else {{\"enabled\": false}}")
        if self.ctx.precision is None:
            self.b.auto_key(path, None, f"unresolved: {how}; the view's precision is kept")
            return None
        resolved = self.ctx.precision == want
        self.b.auto_key(path, resolved, f"{how}; taken from the view's compute dtype {self.ctx.precision}")
        return resolved

    # --- zero_optimization ---------------------------------------------------------------------------------
    def zero(self) -> dict:
        raw = self.doc.get("zero_optimization", default=None)
        if isinstance(raw, bool):           # the deprecated form: read_zero_config_deprecated
            allgather = self.doc.get("allgather_size", default=500_000_000)
            self.b.note('"zero_optimization": true/false is DeepSpeed\'s deprecated form: stage 1 when true, '
                        '0 when false (zero/config.py read_zero_config_deprecated).')
            raw = {"stage": 1, "allgather_bucket_size": allgather} if raw else {"stage": 0}
            self.doc.data = dict(self.doc.data, zero_optimization=raw)
            self.doc.seen.discard(("zero_optimization",))
        fields = {k: "any" for k in S.REMOVED_ZERO_KEYS}       # read by _removed below
        for name, (alias, kind, _) in S.ZERO_FIELDS.items():
            fields[name] = kind
            if alias:
                fields[alias] = kind
        block = self.section("zero_optimization", fields)
        removed = {k: block[k] for k in S.REMOVED_ZERO_KEYS if k in block}
        zero = {}
        for name, (alias, kind, default) in S.ZERO_FIELDS.items():
            given = [k for k in (name, alias) if k and k in block]
            if len(given) == 2 and "auto" in (block[name], block[alias]):
                # DeepSpeedConfigModel drops "auto" before it checks the pair: the other spelling stands
                given = [k for k in given if block[k] != "auto"] or given[:1]
            if len(given) == 2:
                raise FrameworkConfigError(self.name(f"zero_optimization.{name}"), block[name],
                                           f"absent: {alias} is given too (DeepSpeed takes one of the two)")
            if given:
                zero[name] = block[given[0]]
                zero["_key_" + name] = given[0]
        for key, nested in (("offload_optimizer", S.OFFLOAD_OPTIMIZER_FIELDS), ("offload_param", S.OFFLOAD_PARAM_FIELDS)):
            if isinstance(zero.get(key), dict):
                zero[key] = self._offload_block(f"zero_optimization.{key}", zero[key], nested)
        zero.setdefault("stage", 0)
        if zero["stage"] == "auto":
            zero["stage"] = 2
            self.b.auto_key(self.name("zero_optimization.stage"), 2,
                            f"{ACC_SRC}.__post_init__ fills it from zero_stage (ACCELERATE_DEEPSPEED_ZERO_STAGE, "
                            "default 2)")
        stage = zero["stage"]
        self._zero_validators(zero, stage)
        self._removed(removed, stage)
        return zero

    def _zero_validators(self, zero, stage):
        if zero.get("compute_grad_norm") is False and stage not in (1, 2):
            raise FrameworkConfigError(self.name("zero_optimization.compute_grad_norm"), False,
                                       "true unless the stage is 1 or 2 (DeepSpeedZeroConfig.compute_grad_norm_valid)")
        for old, new in (("cpu_offload", "offload_optimizer"), ("cpu_offload_param", "offload_param")):
            if old in zero and new in zero and "auto" not in (zero[old], zero[new]):
                raise FrameworkConfigError(self.name(f"zero_optimization.{old}"), zero[old],
                                           f"absent when {new} is given (a deprecated alias of it)")
        opt = zero.get("offload_optimizer")
        if isinstance(opt, dict):
            ratio = opt.get("ratio", 1.0)
            if ratio != "auto" and ratio < 1.0 and stage != 3:
                raise FrameworkConfigError(self.name("zero_optimization.offload_optimizer.ratio"), ratio,
                                           "1.0 below stage 3 (partial offload is ZeRO-3 only)")

    def _removed(self, removed, stage):
        for key, value in removed.items():
            path = f"zero_optimization.{key}"
            if value == "auto":
                self.b.ignore(self.name(path), '"auto": dropped by DeepSpeedConfigModel; removed in DeepSpeed 0.19.8')
                continue
            if key == "mics_shard_size":
                size = count(self.name(path), value, None, None, lax=True, what="an integer (-1 or 0: MiCS off)")
                if size > 0 and stage == 3:
                    self.b.set("scenario", "shard_group", size, self.name(path))
                    self.b.note(f"MiCS: model states are sharded within groups of {size} workers and replicated "
                                "across groups (DeepSpeed 0.19.5 engine.py _configure_zero_optimizer). DeepSpeed "
                                "0.19.8 removed MiCS and refuses this key (runtime/config.py "
                                "_REMOVED_ZERO_CONFIG_KEYS).")
                    continue
                reason = "MiCS is off (size <= 0)" if size <= 0 else "MiCS applies at stage 3 only"
            else:
                reason = "not modelled"
            self.b.ignore(self.name(path), f"{reason}; removed in DeepSpeed 0.19.8, which refuses the key")

    # --- buckets and overlap -------------------------------------------------------------------------------
    def workload(self, stage, zero):
        for ds_name, field in BUCKETS:
            key = zero.get("_key_" + ds_name, ds_name)
            path = self.name(f"zero_optimization.{key}")
            value = zero.get(ds_name, S.ZERO_FIELDS[ds_name][2])
            source = path if ds_name in zero else ZERO_SRC
            if value == "auto":
                value, source = self._hidden_auto(key, ds_name, path)
                if value is None:
                    continue
            lo, hi = WORKLOAD_LIMITS[field]
            if value < lo or value > hi:
                clamped = min(max(value, lo), hi)
                self.b.note(f"{path} = {value:,} is outside zerocalc's range for {field}; {clamped:,} is used, "
                            "which gives the same bytes (the gathered set is never below the largest layer, and "
                            "no tensor is that large).")
                value = clamped
            self.b.set("workload", field, value, source)
            if ds_name in zero and stage < 3 and ds_name in ("prefetch_bucket_size", "max_live_parameters",
                                                             "param_persistence_threshold"):
                self.b.note(f"{path} is a ZeRO-3 setting: DeepSpeed ignores it at stage {stage}; it applies to "
                            "the stage-3 comparison only.")
        overlap = zero.get("overlap_comm")
        key = self.name("zero_optimization.overlap_comm")
        if overlap == "auto":
            self.b.auto_key(key, "auto", "dropped by DeepSpeedConfigModel, so the default applies: on at stage 3 "
                                         "only (DeepSpeedZeroConfig.overlap_comm_valid)")
            overlap = None
        self.b.set("workload", "overlap_comm", "auto" if overlap is None else "on" if overlap else "off",
                   key if overlap is not None else "default: on at stage 3 only (overlap_comm_valid)")
        self.b.set("workload", "comm_buffers", "deepspeed", "DeepSpeed's reduce and all-gather buckets")
        if zero.get("contiguous_gradients") is False:
            self.b.note("contiguous_gradients is false: zerocalc still counts the reduce buckets.")
        hpz = zero.get("zero_hpz_partition_size", 1)
        if hpz not in ("auto", 0, 1):
            self.b.ignore(self.name("zero_optimization.zero_hpz_partition_size"),
                          f"ZeRO++ hpZ keeps a secondary copy of the parameters, sharded over {hpz} ranks "
                          f"(params / {hpz} elements in the parameter dtype per rank, partition_parameters.py "
                          "_partition_param_sec) on top of the full-world shards; that copy is not modelled")
            self.b.note(f"ZeRO++ hpZ ({hpz}): add params / {hpz} parameter-dtype elements per rank for the "
                        "secondary copy; gradients and optimizer state stay sharded over all workers.")
        for name in zero:
            if not name.startswith("_key_") and name not in ("stage", "offload_optimizer", "offload_param",
                                                             "overlap_comm", "cpu_offload", "cpu_offload_param",
                                                             "zero_hpz_partition_size") + tuple(n for n, _ in BUCKETS):
                key = zero.get("_key_" + name, name)
                self.b.ignore(self.name(f"zero_optimization.{key}"), "no effect on the bytes zerocalc counts")

    def _hidden_auto(self, key, ds_name, path):
        """transformers trainer_config_finalize / accelerate _prepare_deepspeed: reduce_bucket_size = h * h,
        stage3_prefetch_bucket_size = int(0.9 * h * h), stage3_param_persistence_threshold = 10 * h."""
        h = self.ctx.hidden_size
        formula = {"reduce_bucket_size": "hidden * hidden", "prefetch_bucket_size": "int(0.9 * hidden * hidden)",
                   "param_persistence_threshold": "10 * hidden"}.get(ds_name)
        if formula is None:     # "auto" on a key no integration fills: dropped, the default applies
            value = S.ZERO_FIELDS[ds_name][2]
            self.b.auto_key(path, value, f"dropped by DeepSpeedConfigModel: the default {value:,} applies")
            return value, ZERO_SRC
        if h is None:
            self.b.auto_key(path, None, f"unresolved: {formula} of the model's hidden size ({HF_SRC}."
                                        "trainer_config_finalize); give a model to resolve it")
            return None, None
        value = {"reduce_bucket_size": h * h, "prefetch_bucket_size": int(0.9 * h * h),
                 "param_persistence_threshold": 10 * h}[ds_name]
        self.b.auto_key(path, value, f"{formula} with hidden = {h:,} ({HF_SRC}.trainer_config_finalize; "
                                     "accelerate _prepare_deepspeed fills the same)")
        return value, f"{path} (auto: {formula})"

    # --- parallelism and optimizer -------------------------------------------------------------------------
    def parallel(self):
        tp = self.doc.get("tensor_parallel", "autotp_size", default=None)
        if tp == "auto":
            self.b.auto_key(self.name("tensor_parallel.autotp_size"), 0,
                            "dropped by DeepSpeedConfigModel (TPTrainingConfig), so the default 0 applies: AutoTP "
                            "off, as when absent (the view's tp is kept). No integration fills it: transformers' "
                            "deepspeed_init and accelerate's _prepare_deepspeed compare it with 1 and fail on the "
                            "string")
        elif tp is not None:
            tp = count(self.name("tensor_parallel.autotp_size"), tp, 0, 10**6, lax=True)
            if tp > 1:
                self.b.set("layout", "tp", tp, self.name("tensor_parallel.autotp_size"))
                self.b.set("layout", "sequence_parallel", False, "AutoTP splits the linear layers only; "
                                                                 "activations between them stay whole")
        sp = self.doc.get("sequence_parallel_size", default=None)
        if sp is not None:
            sp = count(self.name("sequence_parallel_size"), sp, 1, 10**6, lax=True)
            if sp > 1:
                self.b.set("layout", "cp", sp, self.name("sequence_parallel_size"))
                self.b.note("sequence_parallel_size (DeepSpeed-Ulysses) is modelled as context parallelism: the "
                            "sequence is split across those ranks, and ZeRO shards over data x sequence ranks "
                            "(engine.py dp_process_group = seq_data_parallel_group).")
        dp = self.b.get("scenario", "workers")
        if dp is not None:
            world = dp * self.b.get("layout", "tp", 1) * self.b.get("layout", "cp", 1)
            self.b.set("layout", "gpus", world, "workers x tp x cp (DeepSpeed's pipeline degree is set in code)")

    def optimizer(self):
        kind = self.doc.get("optimizer", "type", default=None)
        if kind is None:
            return
        name = S.OPTIMIZER_NAMES.get(str(kind).lower())
        if name is None:
            self.b.ignore(self.name("optimizer.type"), f"{kind!r} has no zerocalc ledger (adam, adamw, lion, "
                                                       "muon); the view's optimizer is kept")
            return
        self.b.set("scenario", "optimizer", name, self.name("optimizer.type"))
        if name in ("adam", "adamw"):     # engine.py get_optimizer_configuration: FusedAdam unless torch_adam
            torch_adam = self.doc.get("optimizer", "params", "torch_adam", default=False) is True
            foreach = self.doc.get("optimizer", "params", "foreach", default=None) if torch_adam else None
            self.b.set("scenario", "optimizer_impl", "fused" if not torch_adam else
                       "for-loop" if foreach is False else "foreach",
                       self.name("optimizer.params.torch_adam" if torch_adam else "optimizer.type"))
        if name == "muon":
            self.b.note("optimizer.type muon: DeepSpeed's MuonWithAuxAdam steps the parameters the model tags "
                        "use_muon with Muon and the rest with Adam; zerocalc tags Moonlight's set (2-D and up, not "
                        "embeddings or head). DeepSpeed 0.19.8 keeps a Muon matrix that spans ZeRO partitions whole "
                        "on each of them (stage_1_and_2.py muon_copy_ranks) and gathers in buffers of 64 MiB: "
                        "zerocalc shards its momentum evenly and counts the gather of the largest matrix.")

    def activation_checkpointing(self):
        """The top-level block configures deepspeed.checkpointing (runtime/activation_checkpointing/config.py,
        read by checkpointing.configure): how a model that calls deepspeed.checkpointing.checkpoint saves its
        checkpoint inputs. It never turns checkpointing on."""
        if not self.doc.has("activation_checkpointing"):
            return
        block = self.doc.section("activation_checkpointing")
        reason = ("configures deepspeed.checkpointing, used only by a model that calls "
                  "deepspeed.checkpointing.checkpoint; it does not turn recomputation on (zerocalc's recompute "
                  "stays the view's)")
        if not block:
            self.doc.get("activation_checkpointing")
            self.b.ignore(self.name("activation_checkpointing"), reason)
            return
        for name in block:
            self.doc.get("activation_checkpointing", name)
            self.b.ignore(self.name(f"activation_checkpointing.{name}"), reason)
        on = [name for name in ("partition_activations", "cpu_checkpointing") if block.get(name)]
        if on:
            self.b.note(f"activation_checkpointing {' and '.join(on)}: in a model that checkpoints through "
                        "deepspeed.checkpointing, the saved checkpoint inputs are split across the model-parallel "
                        "ranks (partition_activations) or kept in CPU memory (cpu_checkpointing) "
                        "(activation_checkpointing/checkpointing.py); zerocalc does not model either and counts "
                        "them whole, on the GPU.")

    def leftovers(self):
        for key in self.doc.leftovers():
            value = self.doc.get(*key.split("."), default=None)
            auto = ' ("auto": filled by the Trainer)' if value == "auto" else ""
            self.b.ignore(self.name(key), "no effect on the bytes zerocalc counts" + auto)


