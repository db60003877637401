"""Import a DeepSpeed config (ds_config.json): the ZeRO stage, precision ledger, offload, buckets and batch.

Read as DeepSpeed 0.19.8 reads it (deepspeed/runtime/config.py DeepSpeedConfig and the pydantic models in
deepspeed_schema.py): what it refuses is an error named by key; what it ignores imports with a note. "auto" exists
only through the Hugging Face integration, so it is resolved as transformers 5.24 (integrations/deepspeed.py,
HfTrainerDeepSpeedConfig.trainer_config_process / trainer_config_finalize) and accelerate 1.15 (utils/dataclasses.py
DeepSpeedPlugin, accelerator.py _prepare_deepspeed) fill it, from an ImportContext; unresolved "auto" leaves the
field to the current view and says so.
"""

from __future__ import annotations

from ..step.workload import WORKLOAD_LIMITS
from . import deepspeed_schema as S
from .common import (
    Builder,
    Doc,
    FrameworkConfigError,
    ImportContext,
    ImportedConfig,
    choice,
    lax_int,
    parse_relaxed_json,
)
from .deepspeed_batch import HF_SRC, BatchReader

ZERO_SRC = "DeepSpeedZeroConfig default (deepspeed/runtime/zero/config.py, 0.19.8)"
ACC_SRC = "accelerate DeepSpeedPlugin"
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


class _Reader(BatchReader):
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
                size = lax_int(self.name(path), value, what="an integer (-1 or 0: MiCS off)")
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

    # --- the ledger ----------------------------------------------------------------------------------------
    def ledger(self, stage, dtype, zero):
        b, S_ = self.b, "scenario"
        b.set(S_, "convention", "deepspeed", "format: DeepSpeed")
        accum_dtype = self._grad_accum_setting(stage, dtype, zero)
        if dtype is None:
            b.note("Precision is left to the Trainer (fp16/bf16 \"auto\" without a view precision): the dtypes "
                   "are the view's; DeepSpeed adds an fp32 master copy and fp32 gradients under ZeRO.")
        plain_fp32 = dtype == "fp32" and stage == 0
        if dtype is not None:
            b.set(S_, "param_dtype", dtype, self._precision_source())
            b.set(S_, "grad_dtype", dtype, self._precision_source())
        if plain_fp32:
            # engine.py _do_optimizer_sanity_check: fp32 without ZeRO runs the client optimizer as is.
            for field, value in (("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", "fp32")):
                b.set(S_, field, value, "DeepSpeed fp32 without ZeRO: the basic optimizer, no wrapper (engine.py)")
            b.note("fp32 at stage 0: DeepSpeed runs the optimizer directly on the fp32 parameters (no master copy).")
        else:
            # stage_1_and_2.py estimate_zero2_model_states_mem_needs: 2 params16 + 2 grads16 + 4 grads32 + 4
            # params32 + 8 optimizer32; FP16_Optimizer / BF16_Optimizer keep the same fp32 copies at stage 0.
            src = "DeepSpeed ZeRO / FP16_Optimizer: fp32 master and fp32 gradient partition"
            master, accum, opt = "fp32", "fp32", "fp32"
            master, accum, opt = self._low_precision_masters(stage, dtype, master, accum, opt)
            accum_src = src if accum == "fp32" else self._master_source()
            if accum_dtype is not None and stage > 0:
                accum, accum_src = self._zero_grad_accum(stage, dtype, master, accum, accum_src, accum_dtype)
            b.set(S_, "master_dtype", master, src if master == "fp32" else self._master_source())
            b.set(S_, "grad_accum_dtype", accum, accum_src)
            b.set(S_, "optimizer_dtype", opt, "DeepSpeed optimizers keep fp32 states" if opt == "fp32"
                  else self.name(f"{self.bf16_key}.bf16_optimizer_states"))
        comm = self.doc.get("communication_data_type", default=None)
        if comm is not None:
            comm = choice(self.name("communication_data_type"), comm.lower() if isinstance(comm, str) else comm,
                          S.COMMUNICATION_DTYPES)
        b.set(S_, "comm_dtype", comm, self.name("communication_data_type") if self.doc.has("communication_data_type")
              else "default None: each tensor in its own dtype (runtime/config.py get_communication_data_type)")
        if comm is not None and dtype is not None and comm != dtype:
            # peak.py takes comm_dtype as the compute dtype; activations stay in the model dtype.
            b.set("workload", "activation_dtype", dtype, self._precision_source())
        self._autocast(dtype)

    def _precision_source(self) -> str:
        return self.name(self.dtype_key)

    def _master_source(self) -> str:
        key = (f"{self.bf16_key}.bf16_master_weights_and_grads" if self.bf16.get("bf16_master_weights_and_grads")
               else "fp16.fp16_master_weights_and_grads")
        return self.name(key)

    def _low_precision_masters(self, stage, dtype, master, accum, opt):
        flags = (("bf16", self.bf16_key, self.bf16.get("bf16_master_weights_and_grads") is True),
                 ("fp16", "fp16", self.fp16.get("fp16_master_weights_and_grads") is True))
        for want, key, on in flags:
            if not on:
                continue
            if stage == 0:
                raise FrameworkConfigError(self.name(f"{key}.{want}_master_weights_and_grads"), True,
                                           "false at stage 0 (DeepSpeed: only supported with ZeRO stage 1, 2 or 3)")
            if dtype == want:
                master, accum = want, want
        if self.bf16.get("bf16_optimizer_states") is True:
            if stage == 0 or self.bf16.get("bf16_master_weights_and_grads") is not True:
                raise FrameworkConfigError(self.name(f"{self.bf16_key}.bf16_optimizer_states"), True,
                                           "false unless bf16_master_weights_and_grads is on at stage 1-3")
            if dtype == "bf16":
                opt = "bf16"
        return master, accum, opt

    def _grad_accum_setting(self, stage, dtype, zero):
        """data_types.grad_accum_dtype, as zerocalc dtype or None (absent, null, or not modelled). engine.py
        get_data_types: None means the model dtype; _do_optimizer_sanity_check refuses any other value without
        ZeRO, and at stage 1 with bf16, fp32 accumulation and no CPU offload picks BF16_Optimizer, which refuses
        compute_grad_norm false."""
        block = self.doc.section("data_types")
        for name in block:
            if name != "grad_accum_dtype":
                self.doc.get("data_types", name)
                self.b.ignore(self.name(f"data_types.{name}"), "DeepSpeed 0.19.8 reads only "
                                                                "data_types.grad_accum_dtype (runtime/config.py)")
        value = self.doc.get("data_types", "grad_accum_dtype", default=None)
        if value is None:
            return None
        key = self.name("data_types.grad_accum_dtype")
        if not isinstance(value, str) or value not in S.GRAD_ACCUM_DTYPES:
            raise FrameworkConfigError(key, value, "null (the model dtype) or a DtypeEnum name: "
                                       + ", ".join(S.GRAD_ACCUM_DTYPES) + " (engine.py get_data_types calls "
                                       "DtypeEnum(value), which refuses others)")
        accum = S.GRAD_ACCUM_DTYPES[value]
        if dtype is not None and stage == 0 and accum != dtype:
            raise FrameworkConfigError(key, value, f"null or the model dtype ({dtype}) without ZeRO: engine.py "
                                       "_do_optimizer_sanity_check raises NotImplementedError 'unsupported mix of "
                                       "model_dtype and grad_accum_dtype' at stage 0")
        opt = zero.get("offload_optimizer")
        cpu = (isinstance(opt, dict) and opt.get("device") == "cpu") or zero.get("cpu_offload") is True
        bf16_optimizer = stage == 1 and dtype == "bf16" and accum == "fp32" and not cpu
        if bf16_optimizer and zero.get("compute_grad_norm") is False:
            raise FrameworkConfigError(self.name("zero_optimization.compute_grad_norm"), False,
                                       "true with ZeRO stage 1, bf16 and data_types.grad_accum_dtype fp32 "
                                       "(engine.py _do_optimizer_sanity_check: BF16_Optimizer)")
        if accum == "int8":
            self.b.ignore(key, f"{value}: gradients accumulated in int8 are not modelled; the ledger keeps "
                               "DeepSpeed's default (the model dtype)")
            return None
        if bf16_optimizer:
            self.b.note("ZeRO stage 1 with bf16 and fp32 gradient accumulation runs DeepSpeed's BF16_Optimizer "
                        "(engine.py _do_optimizer_sanity_check): a full-size fp32 gradient buffer beside the "
                        "sharded fp32 master and optimizer states, as zerocalc's stage 1 counts it.")
        return accum

    def _zero_grad_accum(self, stage, dtype, master, accum, src, accum_dtype):
        """zerocalc's gradient buffer under ZeRO: DeepSpeed reduces and accumulates gradient partitions in
        grad_accum_dtype (stage_1_and_2.py / stage3.py gradient_accumulation_dtype; a separate buffer when it is
        not the model dtype) and hands the optimizer a partition in the master's dtype. With an fp32 master that
        fp32 partition is the buffer zerocalc counts whatever the accumulation dtype; with a 16-bit master
        (*_master_weights_and_grads) the buffer is in the accumulation dtype."""
        key = self.name("data_types.grad_accum_dtype")
        if master == "fp32":
            if accum_dtype != "fp32":
                self.b.note(f"{key} = {accum_dtype}: DeepSpeed reduces and accumulates the gradient partitions in "
                            f"{accum_dtype}, then builds the fp32 gradient partition the fp32 master steps from; "
                            "zerocalc counts that fp32 partition as the gradient buffer.")
            return accum, src
        if accum_dtype != accum:
            self.b.note(f"{key} = {accum_dtype} with a {master} master: the gradient partitions are accumulated in "
                        f"{accum_dtype} (a separate buffer beside the {dtype} gradients).")
        return accum_dtype, key

    def _autocast(self, dtype):
        block = self.doc.section("torch_autocast")
        if not block:
            return
        enabled = block.get("enabled", False)
        self.doc.mark("torch_autocast", "enabled")
        if enabled is True and "dtype" in block:
            self.doc.mark("torch_autocast", "dtype")
            names = {"torch.bfloat16": "bf16", "bfloat16": "bf16", "bf16": "bf16", "torch.float16": "fp16",
                     "float16": "fp16", "fp16": "fp16", "half": "fp16"}
            act = choice(self.name("torch_autocast.dtype"), block["dtype"], list(names))
            self.b.set("workload", "activation_dtype", names[act], self.name("torch_autocast.dtype"))
            self.b.note("torch_autocast: the model keeps its dtype; activations are taken in the autocast dtype.")

    # --- offload -------------------------------------------------------------------------------------------
    def offload(self, stage, zero):
        for field, key, old in (("offload_optimizer", "offload_optimizer", "cpu_offload"),
                                ("offload_params", "offload_param", "cpu_offload_param")):
            block = zero.get(key)
            path = f"zero_optimization.{key}"
            if block == "auto":
                self.b.auto_key(self.name(path), "none", "dropped by DeepSpeedConfigModel: no offload")
                block = None
            if old in zero and zero[old] == "auto":
                self.b.auto_key(self.name(f"zero_optimization.{old}"), None, "dropped by DeepSpeedConfigModel")
                del zero[old]
            if old in zero:
                device, source = ("cpu" if zero[old] else "none"), self.name(f"zero_optimization.{old}")
            elif isinstance(block, dict):
                values = block                              # checked in zero()
                device = values.get("device", "none")
                if device == "auto":
                    device = "none"
                    self.b.auto_key(self.name(f"{path}.device"), "none",
                                    f"{ACC_SRC}.__post_init__ fills it from its offload device (default none)")
                source = self.name(f"{path}.device") if "device" in values else f"default none ({key})"
            else:
                device, source = "none", f"default: no {key} (DeepSpeedZeroConfig.{key} = None)"
            self.b.set("scenario", field, device, source)
            ignored_below = 3 if key == "offload_param" else 1
            if device != "none" and stage < ignored_below:
                self.b.note(f"{self.name(path)} ({device}) has no effect at stage {stage}: DeepSpeed offloads "
                            f"{'parameters only under ZeRO-3' if ignored_below == 3 else 'only with a ZeRO optimizer'}"
                            "; zerocalc applies it only to the stages where it acts.")
        if zero.get("offload_optimizer") and isinstance(zero["offload_optimizer"], dict):
            ratio = zero["offload_optimizer"].get("ratio")
            if ratio not in (None, "auto", 1.0):
                self.b.ignore(self.name("zero_optimization.offload_optimizer.ratio"),
                              "partial optimizer offload is not modelled: zerocalc offloads the whole partition")

    def _offload_block(self, path, block, fields):
        values = {}
        for name, value in block.items():
            key = f"{path}.{name}"
            self.doc.mark(*path.split("."), name)
            if value == "auto":
                values[name] = "auto"
                continue
            if name not in fields:
                raise FrameworkConfigError(self.name(key), f"an unknown key (= {value!r})", "a key of DeepSpeed "
                                           f"0.19.8's {path.split('.')[-1]} block: " + ", ".join(fields))
            values[name] = S.check_value(self.name(key), value, fields[name])
            if name not in ("device", "ratio"):
                self.b.ignore(self.name(key), "offload tuning: no effect on the bytes zerocalc counts")
        return values

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
            tp = lax_int(self.name("tensor_parallel.autotp_size"), tp, lo=0, hi=10**6)
            if tp > 1:
                self.b.set("layout", "tp", tp, self.name("tensor_parallel.autotp_size"))
                self.b.set("layout", "sequence_parallel", False, "AutoTP splits the linear layers only; "
                                                                 "activations between them stay whole")
        sp = self.doc.get("sequence_parallel_size", default=None)
        if sp is not None:
            sp = lax_int(self.name("sequence_parallel_size"), sp, lo=1, hi=10**6)
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
            self.b.ignore(self.name("optimizer.type"), f"{kind!r} has no zerocalc ledger (adam, adamw, lion); "
                                                       "the view's optimizer is kept")
            return
        self.b.set("scenario", "optimizer", name, self.name("optimizer.type"))

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


