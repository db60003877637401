"""Import an accelerate config (the YAML `accelerate config` writes): process counts, mixed precision, and the FSDP
or DeepSpeed section. Read as accelerate 1.15.0 reads it:

- commands/config/config_args.py (ClusterConfig / SageMakerConfig, process_config): unknown top-level keys are
  refused, distributed_type is required, num_processes defaults to -1 (given at launch; 1 for NO);
- commands/launch.py: fsdp_config keys without the "fsdp_" prefix get it; --fsdp_version defaults to "1" and
  --fsdp_sharding_strategy to "FULL_SHARD"; parallelism_config needs FSDP version 2; with deepspeed_config_file
  the plugin fields below are refused (utils/dataclasses.py DeepSpeedPlugin._deepspeed_config_checks);
- utils/dataclasses.py FullyShardedDataParallelPlugin: a sharding strategy by name (any case) or number 1-5
  (FSDP_SHARDING_STRATEGY order), preferred over reshard_after_forward under FSDP1 (accelerator.py:
  "sharding_strategy or reshard_after_forward"); FSDP2 reads only reshard_after_forward (a bool, default true);
- DeepSpeedPlugin.__post_init__: zero_stage 2 and offload devices "none" by default; gradient_accumulation_steps
  absent is ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else "auto", which accelerator.py _prepare_deepspeed fills
  from Accelerator(gradient_accumulation_steps=...) (default 1): the training script's value, taken from the view
  here. All of it is written into a DeepSpeed config that deepspeed.py then reads.

FSDP with mixed precision keeps fp32 sharded parameters and computes in the mixed dtype (MixedPrecision /
MixedPrecisionPolicy param_dtype = reduce_dtype = that dtype: set_mixed_precision), zerocalc's fsdp2 convention.
DDP (MULTI_GPU) with mixed precision is torch.autocast over fp32 parameters and gradients.
"""

from __future__ import annotations

from ...scenario import INT_LIMITS
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, count, one_of)
from ..deepspeed import reader as deepspeed
from .document import load_mapping
from .fsdp import FsdpReader

CLUSTER_KEYS = ("compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug", "num_processes",
                "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend",
                "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config", "deepspeed_config",
                "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config", "downcast_bf16",
                "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm",
                "tpu_env", "dynamo_config")
SAGEMAKER_KEYS = ("compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug",
                  "ec2_instance_type", "iam_role_name", "image_uri", "profile", "region", "num_machines", "gpu_ids",
                  "base_job_name", "pytorch_version", "transformers_version", "py_version", "sagemaker_inputs_file",
                  "sagemaker_metrics_file", "additional_args", "dynamo_config", "enable_cpu_affinity")
LEGACY_KEYS = ("fp16", "dynamo_backend")          # converted by BaseConfig.process_config
DDP_TYPES = ("MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "MULTI_HPU",
             "MULTI_NEURON")
DISTRIBUTED_TYPES = ("NO", "MULTI_CPU") + DDP_TYPES + ("DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM")
SAGEMAKER_TYPES = ("NO", "DATA_PARALLEL", "MODEL_PARALLEL")
PRECISIONS = ("no", "fp16", "bf16", "fp8")
PLUGIN_FIELDS = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
                 "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
                 "zero3_save_16bit_model")
PARALLELISM_PREFIX = "parallelism_config_"


def import_accelerate(source, context=None) -> ImportedConfig:
    """An accelerate config (YAML text or bytes; JSON text also works) -> ImportedConfig."""
    data = load_mapping(source, "YAML", "a YAML mapping of accelerate settings")
    return _Reader(Doc(data), ImportContext.of(context)).run()


class _Reader(FsdpReader):
    def __init__(self, doc: Doc, ctx: ImportContext):
        self.doc, self.ctx, self.b = doc, ctx, Builder("accelerate")

    def run(self) -> ImportedConfig:
        env = self.doc.get("compute_environment", default="LOCAL_MACHINE")
        env = one_of("compute_environment", env, ("LOCAL_MACHINE", "AMAZON_SAGEMAKER"))
        allowed = CLUSTER_KEYS if env == "LOCAL_MACHINE" else SAGEMAKER_KEYS
        for key in self.doc.data:
            if key not in allowed and key not in LEGACY_KEYS:
                raise FrameworkConfigError(key, self.doc.data[key], "a key of accelerate 1.15's "
                                           f"{'ClusterConfig' if env == 'LOCAL_MACHINE' else 'SageMakerConfig'} "
                                           "(accelerate refuses unknown keys)")
        if not self.doc.has("distributed_type"):
            raise FrameworkConfigError("distributed_type", None, "one of " + ", ".join(DISTRIBUTED_TYPES) +
                                       " (accelerate: 'A `distributed_type` must be specified')")
        if env == "AMAZON_SAGEMAKER":       # SageMakerDistributedType: NO, DATA_PARALLEL, MODEL_PARALLEL
            kind = one_of("distributed_type", self.doc.get("distributed_type"), SAGEMAKER_TYPES)
            self.b.note(f"SageMaker ({kind}) runs are not modelled: zerocalc reads local-machine configs.")
            for key in self.doc.leftovers():
                self.b.ignore(key, "a SageMaker setting")
            return self.b.build()
        kind = one_of("distributed_type", self.doc.get("distributed_type"), DISTRIBUTED_TYPES)
        self.kind = kind
        precision = self.precision()
        world = self.processes(kind)
        if kind == "FSDP":
            self.fsdp(world, precision)
        elif kind == "DEEPSPEED":
            self.deepspeed(world, precision)
        elif kind == "NO" or kind in DDP_TYPES:
            self.ddp(world if kind != "NO" else 1, precision, kind)
        else:
            self.b.note(f"distributed_type {kind} is not modelled (zerocalc counts GPU data parallelism, FSDP "
                        "and DeepSpeed); only the process counts were read.")
        self.dynamo()
        # doc.data, not doc.get: reading the whole section here would hide its unread keys from the leftovers
        if self.doc.data.get("parallelism_config") and not self.parallel_ok:
            # parallelism_config.py ParallelismConfig._validate_accelerator: "only compatible DistributedType.FSDP
            # (version 2) or DistributedType.Multi{Device} or DistributedType.DEEPSPEED"
            raise FrameworkConfigError("parallelism_config", self.doc.data["parallelism_config"],
                                       "absent or empty unless distributed_type is FSDP with fsdp_version 2, "
                                       "DEEPSPEED or a MULTI_* type (accelerate ParallelismConfig."
                                       "_validate_accelerator refuses it otherwise)")
        for key in self.doc.leftovers():
            self.b.ignore(key, "no effect on the bytes zerocalc counts")
        return self.b.build()

    fsdp2 = False
    parallel_ok = False         # parallelism_config is read: FSDP2, DDP types (MULTI_*) and DEEPSPEED

    # --- common ----------------------------------------------------------------------------------------------
    def dynamo(self) -> None:
        """dynamo_config.dynamo_backend (utils/dataclasses.py DynamoBackend; the legacy top-level dynamo_backend):
        accelerator.prepare compiles the whole model with torch.compile, the loss inside its forward too.
        Inductor's partitioner is what zerocalc measured (step/compiled.py)."""
        key = "dynamo_config.dynamo_backend"
        backend = self.doc.get("dynamo_config", "dynamo_backend", default=None)
        if backend is None and self.doc.has("dynamo_backend"):
            backend, key = self.doc.get("dynamo_backend"), "dynamo_backend"
        if backend is None or backend is False or str(backend).upper() == "NO":
            return                               # an unquoted NO reads as false in YAML: NO, as accelerate means
        if not isinstance(backend, str):
            raise FrameworkConfigError(key, backend, "a DynamoBackend name such as INDUCTOR or NO")
        if backend.upper() != "INDUCTOR":
            self.b.note(f"{key} {backend}: only Inductor's partitioner is modelled; the eager terms are kept.")
            return
        self.b.set("workload", "compile", True, f"{key} INDUCTOR: accelerate compiles the model")
        self.b.set("workload", "loss", "compiled", f"{key} INDUCTOR: the loss runs inside the compiled forward")

    def precision(self) -> str:
        value = self.doc.get("mixed_precision", default=None)
        if value is None and self.doc.has("fp16"):        # process_config: the legacy fp16 flag
            value = "fp16" if self.doc.get("fp16") else None
        if value is None or value is False:               # YAML reads an unquoted no as false
            if value is False:
                self.b.note("mixed_precision: no (unquoted YAML reads it as false) means no mixed precision.")
            return "no"
        return one_of("mixed_precision", value, PRECISIONS)

    def processes(self, kind: str):
        default = 1 if kind == "NO" else -1               # ClusterConfig.num_processes = -1; process_config: 1 for NO
        n = self.doc.get("num_processes", default=default)
        n = count("num_processes", n, -1, INT_LIMITS["workers"][1]) if n != -1 else -1
        if n == 0:
            raise FrameworkConfigError("num_processes", 0, "a positive process count, or -1 (given at launch)")
        machines = count("num_machines", self.doc.get("num_machines", default=1), 1, 10**6)
        self.machines = machines
        if kind == "NO" and n != 1:
            # commands/launch.py launch_command: NO runs simple_launcher, a single process, whatever num_processes
            # says (only without a config file does launch turn num_processes > 1 into multi-GPU)
            self.b.note(f"distributed_type NO runs one process (accelerate launch's simple_launcher): num_processes "
                        f"{n} is not used. Set distributed_type MULTI_GPU to run {n} processes.")
            n = 1
        if n == -1:
            if self.ctx.gpus is None:
                self.b.auto_key("num_processes", None, "-1: given at launch (accelerate launch --num_processes); "
                                                       "the view's workers are kept")
                return None
            n = self.ctx.gpus
            self.b.auto_key("num_processes", n, "-1: given at launch; the view's GPU count is used")
        if n % machines == 0 and n // machines <= INT_LIMITS["gpus_per_node"][1]:
            self.b.set("scenario", "gpus_per_node", n // machines, "num_processes / num_machines")
        else:
            self.b.note(f"num_processes {n} does not split evenly over num_machines {machines}.")
        self.b.set("layout", "gpus", n, "num_processes")
        return n

    def fp32_ledger(self, source: str, comm):
        """fp32 parameters, gradients and Adam states, no master copy (FSDP mixed precision, DDP + autocast)."""
        for field, value in (("convention", "fsdp2"), ("param_dtype", "fp32"), ("grad_dtype", "fp32"),
                             ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", "fp32"),
                             ("comm_dtype", comm)):
            self.b.set("scenario", field, value, source)

    # --- DDP -------------------------------------------------------------------------------------------------
    def ddp(self, world, precision, kind):
        self.b.stage = 0
        if world is not None:
            self.b.set("scenario", "workers", world, "num_processes" if kind != "NO" else "distributed_type NO")
        self.fp32_ledger(f"distributed_type {kind}: fp32 weights under torch.autocast", None)
        for field in ("offload_params", "offload_optimizer"):
            self.b.set("scenario", field, "none", f"distributed_type {kind}: DDP keeps everything on the GPU")
        if kind != "NO":
            self._ddp_parallelism(world)
        if precision != "no":
            act = "bf16" if precision == "fp8" else precision
            self.b.set("workload", "activation_dtype", act, "mixed_precision (torch.autocast compute dtype)")
            self.b.note(f"mixed_precision {precision} with DDP is autocast: fp32 parameters, gradients and "
                        f"optimizer state (the fsdp2 ledger, 16 bytes), {act} activations.")

    def _ddp_parallelism(self, world):
        """parallelism_config under DDP (ParallelismConfig._validate_accelerator accepts multi-device types): the
        data-parallel ranks are dp_replicate x dp_shard (DDP shards nothing), beside tp and cp."""
        sizes = self._parallel_sizes()
        if sizes is None:
            return
        rep, shard, tp, cp, sp = (sizes[n] for n in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size",
                                                     "sp_size"))
        total = rep * shard * tp * cp * sp
        if total == 1:
            return
        if world is not None and total != world:
            raise FrameworkConfigError("parallelism_config", f"total size {total}",
                                       f"dp_replicate x dp_shard x tp x cp x sp = num_processes ({world})")
        src = "parallelism_config.parallelism_config_"
        self.b.set("scenario", "workers", rep * shard, f"{src}dp_replicate_size x dp_shard_size (DDP replicas)")
        for name, value in (("tp", tp), ("cp", cp * sp)):
            if value > 1:
                self.b.set("layout", name, value, f"{src}{name}_size" if name == "tp" else f"{src}cp_size/sp_size")
        self.b.set("layout", "gpus", total, "parallelism_config total size")

    def _parallel_sizes(self):
        """parallelism_config's five sizes (ParallelismConfig.__post_init__ checks), or None when absent/empty."""
        cfg = self.doc.section("parallelism_config")
        if not cfg:
            return None
        self.parallel_ok = self.parallel_ok or self.kind in DDP_TYPES + ("DEEPSPEED",)
        sizes = {}
        for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size"):
            key = PARALLELISM_PREFIX + name
            raw = self.doc.get("parallelism_config", key, default=1)
            sizes[name] = count(f"parallelism_config.{key}", raw, 1, 10**6)
        rep, shard, tp, cp, sp = (sizes[n] for n in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size",
                                                     "sp_size"))
        if cp > 1 and sp > 1:
            raise FrameworkConfigError("parallelism_config.parallelism_config_sp_size", sp,
                                       "1 when cp_size > 1 (context and sequence parallelism are exclusive)")
        if (tp > 1 or cp > 1) and rep > 1 and shard == 1:
            raise FrameworkConfigError("parallelism_config.parallelism_config_dp_shard_size", shard,
                                       "above 1 with tp/cp and dp_replicate_size > 1 (accelerate ParallelismConfig)")
        return sizes

    def _parallelism(self, world):
        sizes = self._parallel_sizes()
        if sizes is None:
            return None
        rep, shard, tp, cp, sp = (sizes[n] for n in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size",
                                                     "sp_size"))
        total = rep * shard * tp * cp * sp
        if total == 1:
            return None
        if world is not None and total != world:
            raise FrameworkConfigError("parallelism_config", f"total size {total}",
                                       f"dp_replicate x dp_shard x tp x cp x sp = num_processes ({world})")
        src = "parallelism_config.parallelism_config_"
        self.b.set("scenario", "workers", rep * shard, f"{src}dp_replicate_size x dp_shard_size")
        if rep > 1 and shard > 1:
            self.b.set("scenario", "shard_group", shard, f"{src}dp_shard_size (HSDP)")
        for name, value in (("tp", tp), ("cp", cp * sp)):
            if value > 1:
                self.b.set("layout", name, value, f"{src}{name}_size" if name == "tp" else f"{src}cp_size/sp_size")
        if cp > 1 or sp > 1:
            self.b.note("FSDP shards over dp_shard x cp ranks (accelerate's dp_shard_cp mesh), so each rank holds "
                        "1 / (dp_shard x cp) of the sharded state.")
        self.b.set("layout", "gpus", total, "parallelism_config total size")
        return sizes

    # --- DeepSpeed -------------------------------------------------------------------------------------------
    def _deepspeed_sp(self, world) -> int:
        """parallelism_config under DEEPSPEED: accelerator.py _prepare_deepspeed runs DeepSpeed-Ulysses over sp_size
        ranks (UlyssesSPAttentionHF, sequence_parallel_size=sp_size) and sets train_batch_size from the data-parallel
        size; ParallelismConfig._validate_accelerator skips the total-size check then. tp and cp sizes are not
        applied on this path (only the DeepSpeed config's tensor_parallel.autotp_size is)."""
        sizes = self._parallel_sizes()
        if sizes is None:
            return 1
        src = "parallelism_config.parallelism_config_"
        for name in ("tp_size", "cp_size"):
            if sizes[name] > 1:
                self.b.ignore(f"{src}{name}", "accelerate's DeepSpeed path applies only sp_size (Ulysses) and the "
                                              "DeepSpeed config's tensor_parallel.autotp_size (_prepare_deepspeed)")
        sp = sizes["sp_size"]
        total = sizes["dp_replicate_size"] * sizes["dp_shard_size"] * sizes["tp_size"] * sizes["cp_size"] * sp
        if sp == 1 and world is not None and total not in (1, world):
            raise FrameworkConfigError("parallelism_config", f"total size {total}",
                                       f"dp_replicate x dp_shard x tp x cp x sp = num_processes ({world})")
        if world is not None and world % sp:
            raise FrameworkConfigError(f"{src}sp_size", sp, f"a divisor of num_processes ({world})")
        return sp

    def deepspeed(self, world, precision):
        cfg = self.doc.section("deepspeed_config")
        sp = self._deepspeed_sp(world)
        dp = None if world is None else world // sp
        if "deepspeed_config_file" in cfg:
            self.doc.get("deepspeed_config", "deepspeed_config_file")
            for key in PLUGIN_FIELDS:
                if key in cfg:
                    raise FrameworkConfigError(f"deepspeed_config.{key}", cfg[key],
                                               "absent when deepspeed_config_file is given: accelerate refuses it "
                                               "(DeepSpeedPlugin._deepspeed_config_checks); set it in that file")
            if self.doc.has("mixed_precision"):
                raise FrameworkConfigError("mixed_precision", self.doc.data["mixed_precision"],
                                           "absent when deepspeed_config_file is given (set fp16/bf16 in that file)")
            self.b.ignore("deepspeed_config.deepspeed_config_file",
                          "not read: import that JSON file itself (--ds-config) for the stage, precision and buckets")
            self.b.note("The DeepSpeed settings live in deepspeed_config_file, which was not read; only the process "
                        "counts come from this file.")
            if world is not None:
                self.b.set("scenario", "workers", dp, "num_processes" if sp == 1 else "num_processes / sp_size")
            self._ulysses_layout(sp, world)
            return
        names = {"zero_optimization.stage": "deepspeed_config.zero_stage",
                 "zero_optimization.offload_optimizer.device": "deepspeed_config.offload_optimizer_device",
                 "zero_optimization.offload_param.device": "deepspeed_config.offload_param_device",
                 "gradient_accumulation_steps": "deepspeed_config.gradient_accumulation_steps",
                 "fp16.enabled": "mixed_precision", "bf16.enabled": "mixed_precision",
                 "train_batch_size": "train_batch_size (auto in accelerate's generated DeepSpeed config)",
                 "train_micro_batch_size_per_gpu": "train_micro_batch_size_per_gpu (auto in accelerate's "
                                                   "generated DeepSpeed config)"}
        get = lambda key, default: self.doc.get("deepspeed_config", key, default=default)  # noqa: E731
        # absent: "auto" (DeepSpeedPlugin.__post_init__), filled by Accelerator._prepare_deepspeed from
        # Accelerator(gradient_accumulation_steps), i.e. the script's value: the view's micro-batches
        gas = get("gradient_accumulation_steps", "auto")
        if gas == "auto":
            given = self.doc.has("deepspeed_config", "gradient_accumulation_steps")
            names["gradient_accumulation_steps"] = ("deepspeed_config.gradient_accumulation_steps" if given else
                                                    "deepspeed_config.gradient_accumulation_steps (absent: auto)")
            auto_how = {"gradient_accumulation_steps": (
                "DeepSpeedPlugin.__post_init__ leaves it \"auto\" (ACCELERATE_GRADIENT_ACCUMULATION_STEPS unset); "
                "Accelerator._prepare_deepspeed fills it from Accelerator(gradient_accumulation_steps=...), "
                "default 1: ")}
        else:
            auto_how = {}
        ds = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": gas,
              "zero_optimization": {"stage": get("zero_stage", 2),
                                    "offload_optimizer": {"device": get("offload_optimizer_device", "none")},
                                    "offload_param": {"device": get("offload_param_device", "none")}}}
        # DeepSpeedPlugin.set_mixed_precision: fp16 -> fp16 on; bf16 and fp8 -> bf16 on; the other one off.
        ds["fp16"] = {"enabled": precision == "fp16"}
        ds["bf16"] = {"enabled": precision in ("bf16", "fp8")}
        deepspeed.from_dict(ds, self.ctx, self.b, names, auto_how)
        self.b.fmt = "accelerate"
        if world is not None:
            self.b.set("scenario", "workers", dp, "num_processes" if sp == 1 else "num_processes / sp_size")
            self.b.set("layout", "gpus", world, "num_processes")
        self._ulysses_layout(sp, world)
        if precision == "fp8":
            self.b.note("mixed_precision fp8 with DeepSpeed runs bf16 (set_mixed_precision); fp8 is not modelled.")

    def _ulysses_layout(self, sp, world):
        if sp == 1:
            return
        self.b.set("layout", "cp", sp, "parallelism_config.parallelism_config_sp_size")
        if world is not None:
            self.b.set("layout", "gpus", world, "num_processes")
        self.b.note(f"parallelism_config sp_size {sp} with DeepSpeed is DeepSpeed-Ulysses (accelerator.py "
                    "_prepare_deepspeed), modelled as context parallelism: the sequence is split over those ranks "
                    f"and ZeRO shards over all num_processes ranks (data x sequence).")
