"""Import a torchtitan training TOML: parallelism degrees, batch, mixed precision, activation checkpointing.

Read as torchtitan reads it at commit 238fa9953e4aec2a62582121564273d7cbb1e9f1, the last with TOML configs
(#2386 then replaced them by a Python registry): torchtitan/config/job_config.py gives every default,
config/manager.py _dict_to_dataclass refuses unknown fields (unless job.custom_config_module extends the config),
distributed/parallel_dims.py resolves data_parallel_shard_degree = -1 to the ranks left over, train.py derives
gradient accumulation from global_batch_size, distributed/pipeline_parallel.py splits local_batch_size into
pipeline micro-batches, models/llama3/infra/parallelize.py applies FSDP2 (fully_shard with MixedPrecisionPolicy
param_dtype / reduce_dtype, reshard_after_forward from fsdp_reshard_after_forward) when dp_shard > 1 or cp > 1,
and apply_tp(loss_parallel=not disable_loss_parallel); distributed/utils.py maybe_enable_amp turns mixed precision
off without FSDP under tp or pp (autocast only for DDP or one device); distributed/activation_checkpoint.py reads
selective_ac_option ("op", or a layer frequency N: every block k with `not N or k % N == 0` fully checkpointed).
"""

from __future__ import annotations

import re
import tomllib

from ...layout import MAX_STAGES, STAGE_LAYER_LIMITS
from ...step.workload import WORKLOAD_LIMITS
from ...values import Given
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, count, decode_text, line_col,
                      long_integer_refusal, one_of)
from .recipe import read_compile, read_float8, read_optimizer_impl
from .fields import DTYPES, FIELDS, FLAVORS, LIMIT, MUON_NOTE, SCHEDULES, SECTIONS, SINGLE_STAGE, SRC
from .legacy import LegacyReader


MAX_TOML_CHARS = 262_144      # torchtitan's own configs are a few KB; tomllib is pure Python (about 1 s a MB here)


def parse_toml(source) -> dict:
    text = decode_text(source, "TOML")
    if len(text) > MAX_TOML_CHARS:
        raise FrameworkConfigError("config", f"{len(text):,} characters", f"a torchtitan TOML of at most "
                                   f"{MAX_TOML_CHARS:,} characters (its own configs are a few thousand)")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, col = _toml_position(str(exc), text)
        raise FrameworkConfigError("config", Given(str(exc)[:200]), "valid TOML", line, col) from None
    except RecursionError:
        raise FrameworkConfigError("config", "nesting too deep", "valid TOML") from None
    except ValueError:                      # tomllib's int() of a number over Python's digit limit
        raise (long_integer_refusal(text, "TOML") or
               FrameworkConfigError("config", "TOML that cannot be read", "valid TOML")) from None


def _toml_position(message: str, text: str):
    # tomllib's messages end with "(at line L, column C)" or "(at end of document)".
    found = re.search(r"at line (\d+), column (\d+)", message)
    if found:
        return int(found.group(1)), int(found.group(2))
    return line_col(text, len(text))


def import_torchtitan(source, context=None) -> ImportedConfig:
    """A torchtitan train_configs/*.toml (text or bytes) -> ImportedConfig."""
    return _Reader(Doc(parse_toml(source)), ImportContext.of(context)).run()


class _Reader(LegacyReader):
    def __init__(self, doc: Doc, ctx: ImportContext):
        self.doc, self.ctx, self.b = doc, ctx, Builder("torchtitan")

    def run(self) -> ImportedConfig:
        self.legacy()
        self.check_fields()
        t = self.section_values("training")
        p = self.section_values("parallelism")
        dims = self.degrees(p)
        self.ledger(t, dims)
        self.batch(t, p, dims)
        self.checkpointing()
        read_compile(self)
        self.optimizer()
        self.model_notes()
        for key in self.doc.leftovers():
            self.b.ignore(key, "no effect on the bytes zerocalc counts")
        return self.b.build()

    def check_fields(self):
        custom = self.doc.get("job", "custom_config_module", default="")
        experimental = self.doc.get("experimental", "custom_args_module", default="")
        self.extended = bool(custom or experimental)
        for section, value in self.doc.data.items():
            if section not in SECTIONS:
                self._unknown(section, value)
            elif section in FIELDS and isinstance(value, dict):
                for key in value:
                    if key not in FIELDS[section]:
                        self._unknown(f"{section}.{key}", value[key])
            elif section in FIELDS and not isinstance(value, dict):
                raise FrameworkConfigError(section, value, "a [table]")

    def _unknown(self, key, value):
        if not self.extended:
            raise FrameworkConfigError(key, value, "a torchtitan JobConfig field (config/manager.py refuses "
                                                   "others unless job.custom_config_module adds them)")
        self.b.ignore(key, "a field of the custom config module (job.custom_config_module), not modelled")

    def section_values(self, section):
        return self.doc.section(section)

    def get(self, section, key, default):
        return self.doc.get(section, key, default=default)

    def int_field(self, section, key, default, lo=1):
        return count(f"{section}.{key}", self.get(section, key, default), lo, LIMIT)

    # --- degrees ---------------------------------------------------------------------------------------------
    def degrees(self, p):
        dims = {name: self.int_field("parallelism", key, 1) for name, key in (
            ("dp_replicate", "data_parallel_replicate_degree"), ("tp", "tensor_parallel_degree"),
            ("pp", "pipeline_parallel_degree"), ("cp", "context_parallel_degree"),
            ("ep", "expert_parallel_degree"), ("etp", "expert_tensor_parallel_degree"))}
        shard_key = "parallelism.data_parallel_shard_degree"
        shard = self.get("parallelism", "data_parallel_shard_degree", -1)
        shard = count(shard_key, shard, -1, LIMIT)
        if shard == 0:
            raise FrameworkConfigError(shard_key, 0, "-1 (the ranks left over) or a degree >= 1")
        if dims["ep"] > 1 and dims["etp"] not in (1, dims["tp"]):
            raise FrameworkConfigError("parallelism.expert_tensor_parallel_degree", dims["etp"],
                                       f"1 or tensor_parallel_degree ({dims['tp']}) when expert parallelism is on")
        others = dims["dp_replicate"] * dims["cp"] * dims["tp"] * dims["pp"]
        if shard == -1:
            shard = self._leftover(shard_key, others)
        dims["dp_shard"] = shard
        for name in ("tp", "pp", "cp", "ep"):
            if dims[name] > 1:
                self.b.set("layout", name, dims[name], f"parallelism.{self._key(name)}")
        if dims["tp"] > 1:      # parallelize.py apply_tp: SequenceParallel() on the norms (Megatron-style SP)
            self.b.set("layout", "sequence_parallel", True, "torchtitan tensor parallelism shards the norms' "
                                                            "activations over the sequence (apply_tp)")
        self.loss_parallel(dims)
        if shard is not None:
            dp = dims["dp_replicate"] * shard
            self.b.set("scenario", "workers", dp, "data_parallel_replicate_degree x data_parallel_shard_degree")
            self.b.set("layout", "gpus", dp * others // dims["dp_replicate"],
                       "dp_replicate x dp_shard x cp x tp x pp (parallel_dims.py)")
            if dims["dp_replicate"] > 1 and shard > 1:
                self.b.set("scenario", "shard_group", shard, "parallelism.data_parallel_shard_degree (HSDP)")
        if dims["cp"] > 1:
            self.b.note("torchtitan's FSDP mesh is dp_shard x cp (parallel_dims.py: fsdp includes cp), so each rank "
                        "holds 1 / (dp_shard x cp) of the sharded state.")
        if dims["ep"] > 1:
            self.b.note("Expert parallelism: routed experts are split over ep ranks and sharded over the rest of "
                        "dp_shard x cp (the efsdp mesh); zerocalc's layout gets ep, the model decides the rest.")
        return dims

    def loss_parallel(self, dims):
        # models/llama3/infra/parallelize.py apply_tp(loss_parallel=not disable_loss_parallel): the output projection
        # keeps its vocab shard (Shard(-1)) or gathers the logits (Replicate()); train.py enables the loss_parallel()
        # context only when tp_enabled and not disable_loss_parallel.
        key = "parallelism.disable_loss_parallel"
        disable = self.get("parallelism", "disable_loss_parallel", False)
        if not isinstance(disable, bool):
            raise FrameworkConfigError(key, disable, "true or false")
        if dims["tp"] > 1:
            self.b.set("layout", "loss_parallel", not disable,
                       key if self.doc.has("parallelism", "disable_loss_parallel") else f"{key} = false ({SRC}): "
                       "vocab-parallel logits and loss (parallelize.py apply_tp loss_parallel)")
        elif self.doc.has("parallelism", "disable_loss_parallel"):
            self.b.ignore(key, "loss parallelism exists only under tensor parallelism (train.py: tp_enabled and not "
                               "disable_loss_parallel); tensor_parallel_degree is 1")

    @staticmethod
    def _key(name):
        return {"tp": "tensor_parallel_degree", "pp": "pipeline_parallel_degree", "cp": "context_parallel_degree",
                "ep": "expert_parallel_degree"}[name]

    def _leftover(self, key, others):
        world = self.ctx.gpus
        if world is None and self.ctx.workers is not None:
            self.b.auto_key(key, None, "-1: the ranks left after dp_replicate, cp, tp and pp (parallel_dims.py); "
                                       "the world size is set at launch (NGPU); the view's workers are kept")
            return None
        if world is None:
            self.b.auto_key(key, None, "-1: the ranks left after dp_replicate, cp, tp and pp (parallel_dims.py); "
                                       "unresolved without a world size")
            return None
        if world % others:
            self.b.auto_key(key, None, f"-1: the view's {world} GPUs do not divide by dp_replicate x cp x tp x pp "
                                       f"= {others}; unresolved")
            return None
        self.b.auto_key(key, world // others, f"-1: the view's {world} GPUs / (dp_replicate x cp x tp x pp = "
                                              f"{others}) (parallel_dims.py)")
        return world // others

    # --- ledger and stage ------------------------------------------------------------------------------------
    def ledger(self, t, dims):
        dtype = DTYPES[one_of("training.dtype", self.get("training", "dtype", "float32"), tuple(DTYPES))]
        param = DTYPES[one_of("training.mixed_precision_param",
                              self.get("training", "mixed_precision_param", "bfloat16"), tuple(DTYPES))]
        one_of("training.mixed_precision_reduce", self.get("training", "mixed_precision_reduce", "float32"),
               ("float32",))
        fsdp = dims["dp_shard"] is None or dims["dp_shard"] > 1 or dims["cp"] > 1
        if dims["dp_shard"] is None:
            self.b.note("data_parallel_shard_degree -1 is assumed to leave more than one rank, so FSDP is on.")
        stage = self.stage(fsdp, dims)
        self.b.stage = stage
        if fsdp:      # distributed/fsdp.py apply_fsdp_to_decoder: embedding, each block, [norm, lm_head] as units
            self.b.set("workload", "comm_buffers", "fsdp", "FSDP2 fully_shard: one unit at a time")
            self.b.set("workload", "fsdp_wrap", "torchtitan", "apply_fsdp_to_decoder's units")
        s = "scenario"
        if dtype == "bf16":
            for field, value in (("convention", "pure-bf16"), ("param_dtype", "bf16"), ("grad_dtype", "bf16"),
                                 ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", "bf16"),
                                 ("comm_dtype", None)):
                self.b.set(s, field, value, "training.dtype = bfloat16: parameters, gradients and optimizer "
                                            "states in bf16, no fp32 copy")
        else:
            comm = param if fsdp else None
            for field, value in (("convention", "fsdp2"), ("param_dtype", "fp32"), ("grad_dtype", "fp32"),
                                 ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", "fp32"),
                                 ("comm_dtype", comm if comm != "fp32" else None)):
                self.b.set(s, field, value, f"training.dtype float32 ({SRC}); FSDP2 MixedPrecisionPolicy "
                                            "param_dtype = training.mixed_precision_param")
            if fsdp and param == "bf16":
                self.b.note("Gradients are reduce-scattered in float32 (mixed_precision_reduce), twice the bytes "
                            "zerocalc's single bf16 comm dtype counts for them.")
            if not fsdp:
                self.no_fsdp_precision(dims, param)
        offload = self.get("training", "enable_cpu_offload", False)
        if not isinstance(offload, bool):
            raise FrameworkConfigError("training.enable_cpu_offload", offload, "true or false")
        for field in ("offload_params", "offload_optimizer"):
            self.b.set(s, field, "cpu" if offload and fsdp else "none", "training.enable_cpu_offload (FSDP2 "
                                                                       "CPUOffloadPolicy: parameters, gradients, "
                                                                       "optimizer states)")
        if offload and not fsdp:
            self.b.note("enable_cpu_offload has no effect without FSDP (it is an FSDP2 CPUOffloadPolicy).")

    def no_fsdp_precision(self, dims, param):
        # distributed/utils.py maybe_enable_amp: FSDP handles mixed precision itself; without FSDP, tp or pp turn it
        # off ("Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled"), and only
        # DDP or a single device runs under torch.autocast(mixed_precision_param).
        if dims["tp"] > 1 or dims["pp"] > 1:
            self.b.set("workload", "activation_dtype", "fp32", "no FSDP with tp or pp: mixed precision is disabled "
                                                               "(distributed/utils.py maybe_enable_amp)")
            if param == "bf16":
                self.b.note("Without FSDP (data_parallel_shard_degree 1, cp 1) torchtitan disables mixed precision "
                            "under tensor or pipeline parallelism (distributed/utils.py maybe_enable_amp), so "
                            "training.mixed_precision_param bfloat16 has no effect: fp32 weights and fp32 "
                            "activations.")
        elif param == "bf16":
            self.b.set("workload", "activation_dtype", "bf16", "training.mixed_precision_param via torch.autocast "
                                                               "(no FSDP: DDP or one device, maybe_enable_amp)")

    def stage(self, fsdp, dims):
        policy = one_of("parallelism.fsdp_reshard_after_forward",
                        self.get("parallelism", "fsdp_reshard_after_forward", "default"),
                        ("default", "always", "never"))
        if not fsdp:
            if dims["dp_replicate"] > 1 and dims["tp"] * dims["pp"] * dims["cp"] > 1:
                self.b.note("torchtitan's DDP does not combine with other parallelism (parallelize.py: 'DDP has "
                            "not supported > 1D parallelism').")
            self.b.sources["selected_stage"] = "no FSDP (dp_shard 1 and cp 1): DDP or one replica"
            return 0
        # parallelize.py apply_fsdp: always -> True, never -> False, default -> not pp_enabled. The parameters stay
        # sharded (ZeRO-3) either way; a unit that does not reshard keeps its gathered bf16 copy beside the shard
        # (zerocalc.step.fsdp_pipeline), and under pipelining the gradients accumulate unsharded in float32.
        self.b.set("workload", "reshard_after_forward", {"always": "yes", "never": "no", "default": "auto"}[policy],
                   "parallelism.fsdp_reshard_after_forward (parallelize.py apply_fsdp; default: not pp_enabled)")
        self.b.set("workload", "reduce_dtype", "fp32", "training.mixed_precision_reduce (MixedPrecisionPolicy "
                                                       "reduce_dtype)")
        self.b.sources["selected_stage"] = f"parallelism.fsdp_reshard_after_forward = {policy}"
        if policy == "default" and dims["pp"] > 1:
            self.b.note("With pipeline parallelism torchtitan's default keeps parameters gathered after forward "
                        "(reshard_after_forward = not pp_enabled): each rank holds its stage's bf16 parameters "
                        "unsharded and, until the last micro-batch, their float32 gradients.")
        return 3

    # --- batch, pipeline -------------------------------------------------------------------------------------
    def batch(self, t, p, dims):
        local = self.int_field("training", "local_batch_size", 8)
        lo, hi = WORKLOAD_LIMITS["seq_len"]
        seq = count("training.seq_len", self.get("training", "seq_len", 2048), lo, hi)
        self.b.set("workload", "seq_len", seq, "training.seq_len" if "seq_len" in t else SRC)
        pp_micro = self.int_field("parallelism", "pipeline_parallel_microbatch_size", 1)
        micro, per_local = local, 1
        if dims["pp"] > 1 and self._legacy_era():
            pp_micro = self._legacy_microbatch(local, dims)
        if dims["pp"] > 1:
            if local % pp_micro:
                raise FrameworkConfigError("parallelism.pipeline_parallel_microbatch_size", pp_micro,
                                           f"a divisor of training.local_batch_size ({local})")
            micro, per_local = pp_micro, local // pp_micro
            self.pipeline(dims)
        self.b.set("workload", "micro_batch", micro, "training.local_batch_size" if dims["pp"] == 1 else
                   "parallelism.pipeline_parallel_microbatch_size (pipeline_parallel.py)")
        if dims["pp"] == 1:
            for key, _ in self.legacy_pipeline.values():
                self.b.ignore(key, "an older torchtitan pipeline setting; pipeline parallelism is off (degree 1)")
        global_batch = self.get("training", "global_batch_size", -1)
        if isinstance(global_batch, int) and not isinstance(global_batch, bool) and global_batch < 0:
            global_batch = -1                     # train.py: any negative value means local x dp
        global_batch = count("training.global_batch_size", global_batch, -1, 10**9)
        if global_batch == 0:
            raise FrameworkConfigError("training.global_batch_size", 0, "-1 (local x dp) or a positive batch "
                                                                       "(train.py asserts > 0)")
        dp = dims["dp_shard"] and dims["dp_replicate"] * dims["dp_shard"]
        if global_batch == -1:
            self.b.set("layout", "micro_batches", per_local, "global_batch_size -1: local_batch_size x dp, no "
                                                             "gradient accumulation (train.py)")
            return
        if not dp:
            self.b.auto_key("training.global_batch_size", None, "gradient accumulation = global / (local x dp) "
                                                                "(train.py); dp unresolved")
            return
        if global_batch % (local * dp):
            raise FrameworkConfigError("training.global_batch_size", global_batch,
                                       f"a multiple of local_batch_size x data-parallel degree ({local} x {dp}; "
                                       "train.py asserts it)")
        gas = global_batch // (local * dp)
        self.b.set("layout", "micro_batches", gas * per_local, "global_batch_size / (local_batch_size x dp)"
                   + (" x pipeline micro-batches per local batch" if per_local > 1 else ""))

    def pipeline(self, dims):
        name = self.get("parallelism", "pipeline_parallel_schedule", "1F1B")
        if not isinstance(name, str) or name.lower() not in SCHEDULES:
            raise FrameworkConfigError("parallelism.pipeline_parallel_schedule", name,
                                       "a torch.distributed.pipelining schedule: 1F1B, Interleaved1F1B, GPipe, "
                                       "LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV, "
                                       "PipelineScheduleSingle, PipelineScheduleMulti")
        schedule = SCHEDULES[name.lower()]
        if schedule is None:
            self.b.ignore("parallelism.pipeline_parallel_schedule",
                          f"{name} runs a schedule from pipeline_parallel_schedule_csv: not modelled")
            return
        self.b.set("layout", "schedule", schedule, "parallelism.pipeline_parallel_schedule")
        if name.lower() not in ("1f1b", "interleaved1f1b", "gpipe"):
            self.b.note(f"Pipeline schedule {name} is approximated as {schedule}.")
        if name.lower() not in SINGLE_STAGE:
            per_rank = self.get("parallelism", "module_fqns_per_model_part", None)
            layers = self.get("parallelism", "pipeline_parallel_layers_per_stage", None)
            if "pipeline_parallel_split_points" in self.legacy_pipeline:
                key = self.legacy_pipeline["pipeline_parallel_split_points"][0]
                self.b.set("layout", "vpp", self._legacy_stages_per_rank(dims), f"{key}: (points + 1) / pp")
            elif per_rank is None and layers is None:
                self.b.set("layout", "vpp", 2, "multi-stage schedules default to 2 stages per rank "
                                               "(pipeline_parallel.py)")
            elif isinstance(per_rank, list) and per_rank and len(per_rank) % dims["pp"] == 0:
                self.b.set("layout", "vpp", len(per_rank) // dims["pp"], "module_fqns_per_model_part / pp")
            else:
                self.b.note("Stages per rank depend on the model's layer count "
                            "(pipeline_parallel_layers_per_stage); the view's vpp is kept.")
        self.stages()

    def stages(self):
        """pipeline_parallel.py pipeline_llm: module_fqns_per_model_part names each stage's modules (its layers.N
        entries are the stage's layers); else generate_llm_fqn_per_model_part splits the layers with the embedding
        and the head weighed as pipeline_parallel_first / last_stage_less_layers layers (default 1 each; both 0 is
        zerocalc's even split)."""
        key = "parallelism.module_fqns_per_model_part"
        parts = self.get("parallelism", "module_fqns_per_model_part", None)
        if parts is not None:
            if not isinstance(parts, list) or not parts or len(parts) > MAX_STAGES or not all(
                    isinstance(p, list) and all(isinstance(n, str) for n in p) for p in parts):
                raise FrameworkConfigError(key, parts, f"a list of lists of module names, one per stage (at most "
                                                       f"{MAX_STAGES:,})")
            counts = tuple(sum(1 for n in p if n.startswith("layers.")) for p in parts)
            self.b.set("layout", "stage_layers", counts, f"{key}: the layers.N names of each stage")
            return
        weights = {}
        for field, name in (("embedding_weight", "pipeline_parallel_first_stage_less_layers"),
                            ("head_weight", "pipeline_parallel_last_stage_less_layers")):
            weights[field] = (f"parallelism.{name}", count(f"parallelism.{name}",
                                                                self.get("parallelism", name, 1), 0,
                                                                STAGE_LAYER_LIMITS[1]))
        if not any(value for _, value in weights.values()):
            return
        self.b.set("layout", "stage_split", "torchtitan", "generate_llm_fqn_per_model_part (pipeline_parallel.py)")
        for field, (source, value) in weights.items():
            if value != 1:
                self.b.set("layout", field, value, source)

    # --- recompute, optimizer, model -------------------------------------------------------------------------
    def checkpointing(self):
        mode = one_of("activation_checkpoint.mode", self.get("activation_checkpoint", "mode", "selective"),
                      ("selective", "full", "memory_budget", "none"))
        src = "activation_checkpoint.mode" if self.doc.has("activation_checkpoint", "mode") else SRC
        if mode == "memory_budget":
            self.b.note("activation_checkpoint.mode memory_budget lets the compiler choose what to save: not "
                        "modelled, the view's recompute is kept.")
            return
        if mode != "selective":
            self.b.set("workload", "recompute", mode, src)
            if self.doc.has("activation_checkpoint", "selective_ac_option"):
                self.doc.get("activation_checkpoint", "selective_ac_option")
                self.b.ignore("activation_checkpoint.selective_ac_option",
                              f"read only with mode = selective (activation_checkpoint.py); mode is {mode}")
            return
        self.selective(src)

    def selective(self, mode_src):
        """distributed/activation_checkpoint.py _apply_ac_to_transformer_block: "op" is op-level selective AC;
        a digit string N is _apply_layer_sac, which wraps transformer block k (counted from 1) in a full
        checkpoint_wrapper when `not N or k % N == 0`; anything else raises ValueError."""
        key = "activation_checkpoint.selective_ac_option"
        given = self.doc.has("activation_checkpoint", "selective_ac_option")
        option = self.get("activation_checkpoint", "selective_ac_option", "2")
        src = key if given else f"{key} = \"2\" ({SRC})"
        allowed = ("'op' or a layer frequency as a string of digits, like '2' (activation_checkpoint.py raises "
                   "'Invalid selective AC option' otherwise)")
        if not isinstance(option, str):
            raise FrameworkConfigError(key, option, allowed)
        if option == "op":
            # SelectiveAC._wrap_block: matmul (every second one recomputed) and attention outputs saved
            self.b.set("workload", "recompute", "op", f"{mode_src} with {key} = op")
            return
        try:
            every = int(option) if option.isdigit() else None
        except ValueError:               # "²" passes isdigit() but int() refuses it, as in _apply_layer_sac
            every = None
        if every is None:
            raise FrameworkConfigError(key, option, allowed)
        if every <= 1:
            self.b.set("workload", "recompute", "full", f"{src}: every transformer block checkpointed")
            self.b.note(f"selective_ac_option = '{option}' checkpoints every transformer block (_apply_layer_sac: "
                        "'not ac_freq or count % ac_freq == 0'): zerocalc's full recompute, exactly.")
            return
        self.b.set("workload", "recompute", "full", f"{src}: one transformer block in {every} checkpointed")
        self.b.set("workload", "recompute_every", every, src)
        self.b.note(f"selective_ac_option = '{option}' fully checkpoints one transformer block in {every} "
                    f"(blocks {every}, {2 * every}, ... of each rank: _apply_layer_sac), the others keep all their "
                    f"activations: zerocalc's full recompute with recompute_every = {every}.")

    def optimizer(self):
        name = self.get("optimizer", "name", "AdamW")
        options = {"Adam": "adam", "AdamW": "adamw", "Muon": "muon"}   # components/optimizer.py optimizer_classes
        value = options[one_of("optimizer.name", name, tuple(options))]
        self.b.set("scenario", "optimizer", value, "optimizer.name" if self.doc.has("optimizer", "name") else SRC)
        self.b.note(MUON_NOTE) if value == "muon" else read_optimizer_impl(self)     # recipe.py

    def model_notes(self):
        name = self.get("model", "name", "llama3")
        flavor = self.get("model", "flavor", "debugmodel")
        preset = FLAVORS.get((str(name), str(flavor)), "")
        self.b.model = preset
        self.b.note(f"The model is torchtitan's {name} {flavor}: " + (f"zerocalc's {preset} preset (the same shapes)."
                    if preset else "no zerocalc preset has its shapes: choose or describe the model."))
        converters = self.get("model", "converters", [])
        rest = read_float8(self, converters) if isinstance(converters, list) else converters
        if rest:
            self.b.note(f"model.converters {rest}: these low-precision matmuls are not modelled.")
