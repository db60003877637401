"""The DeepSpeed config's precision ledger and offload: which dtypes the parameters, gradients, master copy,
accumulation buffer and optimizer state have under fp16 / bf16 / autocast at each ZeRO stage, and where the
optimizer state and parameters live (zero_optimization.offload_optimizer / offload_param). A part of the reader
(reader._Reader), kept apart because it is the one part that follows DeepSpeed's optimizer code rather than its
config models.
"""

from __future__ import annotations

from ..common import FrameworkConfigError, one_of
from . import schema as S

ACC_SRC = "accelerate DeepSpeedPlugin"


class PrecisionReader:
    """The ledger and offload half of reader._Reader (which supplies doc, ctx, b and name())."""

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
            comm = one_of(self.name("communication_data_type"), comm.lower() if isinstance(comm, str) else comm,
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
            act = one_of(self.name("torch_autocast.dtype"), block["dtype"], list(names))
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
