"""An RL post-training plan: the algorithm, its models (each one of today's scenarios with its step), the rollout
engine, the lengths and the placement; and the tables that say which models each algorithm runs and what each
framework keeps where between phases. Validation names the field and its allowed range (FieldError).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple, Optional, Tuple

from ..scenario import FieldError, Scenario, require_choice, require_int
from ..step.workload import Workload
from .batching import Batching
from .logprobs import SCORING_ENDS
from .rollout import Rollout

ROLES = ("policy", "reference", "reward", "critic")
ROLE_NAMES = MappingProxyType({"policy": "policy", "reference": "reference", "reward": "reward model",
                               "critic": "critic"})


class Algorithm(NamedTuple):
    name: str
    trains: Tuple[str, ...]          # roles that train, in the order their updates run
    needs: Tuple[str, ...]           # roles that must be given
    may: Tuple[str, ...]             # roles that may be given (a frozen scorer)
    rollout: bool                    # generates with an engine
    source: str


ALGORITHMS = MappingProxyType({
    "grpo": Algorithm("GRPO", ("policy",), ("policy",), ("reference", "reward"), True,
                      "Shao et al. 2024 (DeepSeekMath) section 4.1: no critic, group-relative advantages; a reference "
                      "only with a KL term (verl use_kl_loss, TRL beta > 0), a reward model only when not rule-based"),
    "ppo": Algorithm("PPO", ("critic", "policy"), ("policy", "critic"), ("reference", "reward"), True,
                     "Ouyang et al. 2022 (InstructGPT) / verl ray_trainer.py fit: critic values, then critic and "
                     "actor updates"),
    "dpo": Algorithm("DPO", ("policy",), ("policy",), ("reference",), False,
                     "Rafailov et al. 2023; TRL DPOTrainer: chosen and rejected in one micro-batch "
                     "(concatenated_forward), the reference's log-probs computed or precomputed"),
    "reward-model": Algorithm("reward-model training", ("reward",), ("reward",), (), False,
                              "TRL RewardTrainer / OpenRLHF train_rm: chosen and rejected through one model with a "
                              "scalar head"),
})
ALGORITHM_CHOICES = tuple(ALGORITHMS)
PLACEMENTS = ("colocated", "split")


class Framework(NamedTuple):
    """What a framework keeps where: which roles share a process (one CUDA context each process), whether the
    engine runs in its own process, the weight-sync path and its buffers, and its default sleep level."""
    name: str
    processes: Tuple[Tuple[str, ...], ...]
    engine_process: bool
    sync: str                        # "bucket": a GPU bucket of sync_bucket_bytes plus the tensor being staged;
                                     # "module": one gathered module at a time; "tensor": one gathered tensor
    sync_bucket_bytes: int
    sync_loads_params: bool          # the sync brings every parameter shard back to the GPU first (else one at a time)
    rollout_defaults: MappingProxyType    # the Rollout fields the framework sets unless told otherwise
    source: str
    packing: bool = False            # remove padding by default (rl/batching.py)
    logprobs: str = "huggingface"    # its log-probability path (rl/logprobs.py LOGPROB_PATHS)
    reference_dtype: str = "bf16"    # the frozen reference's stored dtype
    reference_streams: bool = False  # the reference's shards in host memory, streamed in unit by unit
    batching_source: str = ""
    reduce_dtype: Optional[str] = None   # the trained models' gradient reduction dtype (FSDP MixedPrecision)
    fsdp_version: int = 2            # the FSDP the framework wraps its models in by default (the weight sync's path)


FRAMEWORKS = MappingProxyType({
    "verl": Framework(
        "verl", (("policy", "reference"), ("critic",), ("reward",)), True, "bucket", 2048 << 20, False,
        MappingProxyType({"gpu_memory_utilization": 0.5, "tp": 2, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                          "sleep_level": 2}),
        "verl 0.9.1: workers/engine_workers.py update_weights (resume weights, per-tensor full_tensor() export: "
        "FSDP2 stages one offloaded tensor at a time, engine/fsdp/transformer_impl.py _skip_staging; "
        "offload the actor's parameters when param_offload, then resume the KV cache); workers/rollout/vllm_rollout/"
        "bucketed_weight_transfer.py (a torch.empty(bucket) on the GPU, update_weights_bucket_megabytes=2048); "
        "vllm_async_server.py _resolve_sleep_level (2; 1 with LoRA adapters); trainer/config/rollout/rollout.yaml "
        "(gpu_memory_utilization 0.5, tensor_model_parallel_size 2, max_num_seqs 256, max_num_batched_tokens 8192, "
        "free_cache_engine true)",
        True, "verl", "fp32", True,
        "verl 0.9.1: trainer/config/model/hf_model.yaml use_remove_padding True; engine/fsdp/transformer_impl.py "
        "_build_fsdp_module (a forward-only engine, the reference, gets CPUOffload(offload_params=True) whatever "
        "its param_offload), _build_module (model_dtype fp32, FSDPEngineConfig); engine_workers.py init_model "
        "(ref log_prob_micro_batch_size_per_gpu / log_prob_max_token_len_per_gpu as its micro-batches); "
        "MixedPrecision(param_dtype bf16, reduce_dtype fp32, buffer_dtype fp32); actor strategy fsdp (FSDP1) by "
        "default: get_per_tensor_param loads offloaded shards back (load_fsdp_model_to_gpu) and exports each "
        "parameter's full tensor in its stored dtype (SHARDED_STATE_DICT, DTensor.full_tensor())", "fp32", 1),
    "trl": Framework(
        "TRL", (("policy", "reference", "reward", "critic"),), False, "module", 0, True,
        MappingProxyType({"gpu_memory_utilization": 0.3, "tp": 1, "max_num_batched_tokens": 4096, "sleep_level": 0}),
        "trl 1.16.0: generation/vllm_generation.py (colocate: LLM(distributed_executor_backend='external_launcher') "
        "in the trainer's process, max_num_batched_tokens=4096, sleep(level=2) with vllm_enable_sleep_mode; "
        "sync_weights wakes the weights and loads them module by module, gathered under ZeRO-3); "
        "trainer/grpo_config.py (vllm_gpu_memory_utilization 0.3, vllm_tensor_parallel_size 1, "
        "vllm_enable_sleep_mode false)",
        False, "trl", "bf16", False,
        "trl 1.16.0 trainer/grpo_trainer.py _get_per_token_logps_and_entropies (batches of "
        "per_device_train_batch_size, padded to the longest; the fused head scores the completion tokens)"),
    "openrlhf": Framework(
        "OpenRLHF", (("policy",), ("reference",), ("reward",), ("critic",)), True, "tensor", 0, True,
        MappingProxyType({"gpu_memory_utilization": 0.95, "tp": 1, "sleep_level": 0}),
        "openrlhf 0.11.2: cli/train_ppo_ray.py (each model a Ray actor, vLLM engines apart; --vllm.enable_sleep, "
        "--ds.enable_sleep, --ref.offload / --reward.offload; --vllm.gpu_memory_utilization 0.95); "
        "trainer/ray/vllm_engine.py sleep(level=1) with --vllm.enable_sleep; "
        "weights broadcast parameter by parameter (--vllm.sync_backend nccl)",
        False, "openrlhf", "bf16", False,
        "openrlhf 0.11.2 models/actor.py (--packing_samples: unpad_and_slice_tensor; micro_train_batch_size / "
        "micro_rollout_batch_size)"),
})
FRAMEWORK_CHOICES = tuple(FRAMEWORKS)
ENDS = ("max", "typical")    # the band's ends: every sequence at its longest, or at its typical length
PLAN_LIMITS = {"prompt_length": (1, 10**7), "response_length": (1, 10**7), "typical_response_length": (1, 10**7),
               "typical_prompt_length": (1, 10**7),
               "group_size": (1, 10**5), "prompts_per_step": (1, 10**7), "rollout_gpus": (0, 10**6)}


@dataclass(frozen=True)
class RLModel:
    """One model of the plan: today's scenario and step (its training, or for a frozen scorer its forward), the
    ZeRO / FSDP stage it runs at, and what it keeps off the GPU between its phases."""
    scenario: Scenario
    workload: Workload
    stage: int = 3
    param_offload: bool = False       # verl param_offload, OpenRLHF --ds.enable_sleep / --ref.offload
    optimizer_offload: bool = False   # verl optimizer_offload, OpenRLHF --ds.enable_sleep
    shares_policy: bool = False       # the reference is the policy's LoRA base with its adapters off: no copy
    # How its passes cut the rollouts (rl/batching.py): None keeps the workload's micro-batch and sequence as given;
    # set, the update's workload is derived from the plan's lengths (`workload` holds the "max" end).
    batching: Optional[Batching] = None
    scoring_batching: Optional[Batching] = None    # its forward-only pass (None: as its update)
    scoring_end: Optional[str] = None     # rl/logprobs.py SCORING_ENDS row of that pass (None: its loss's forward)
    # FSDP1 CPUOffload(offload_params=True), which verl forces on a forward-only model (transformer_impl.py
    # _build_fsdp_module): the shards live in host memory, each unit copied in as it is gathered
    streams_params: bool = False

    def __post_init__(self):
        if not isinstance(self.scenario, Scenario):
            raise FieldError("scenario", type(self.scenario).__name__, "a Scenario")
        if not isinstance(self.workload, Workload):
            raise FieldError("workload", type(self.workload).__name__, "a Workload")
        require_int("stage", self.stage, 0, 3)
        for name in ("param_offload", "optimizer_offload", "shares_policy", "streams_params"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, getattr(self, name), "true or false")
        for name in ("batching", "scoring_batching"):
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, Batching):
                    raise FieldError(name, type(value).__name__, "a Batching")
                value.check(name)
        if self.scoring_end is not None:
            require_choice("scoring_end", self.scoring_end, tuple(SCORING_ENDS))
        if (self.batching or self.scoring_batching or Batching(1)).packed and self.workload.attention != "flash":
            raise FieldError("packing", True, "false with eager attention: packed sequences run flash-attn's varlen "
                                              "kernels (remove padding)")

    @property
    def gpus(self) -> int:
        return self.scenario.workers * self.workload.layout.model_parallel


@dataclass(frozen=True)
class RLPlan:
    algorithm: str
    policy: Optional[RLModel] = None
    reference: Optional[RLModel] = None
    reward: Optional[RLModel] = None
    critic: Optional[RLModel] = None
    rollout: Rollout = field(default_factory=Rollout)
    prompt_length: int = 512
    response_length: int = 1024               # the longest response (max_tokens)
    typical_response_length: Optional[int] = None    # what most responses reach (None: the longest)
    typical_prompt_length: Optional[int] = None      # what most prompts hold (None: the longest)
    group_size: int = 8                       # responses per prompt (GRPO n, OpenRLHF n_samples_per_prompt)
    prompts_per_step: int = 64                # prompts generated per step, over every engine
    placement: str = "colocated"
    rollout_gpus: int = 0                     # split: GPUs running the engines (beside the training GPUs)
    framework: str = "verl"
    fsdp_version: int = 2                     # verl actor.strategy fsdp (1) or fsdp2 (2): the weight sync's path

    def __post_init__(self):
        require_choice("algorithm", self.algorithm, ALGORITHM_CHOICES)
        require_choice("placement", self.placement, PLACEMENTS)
        require_choice("framework", self.framework, FRAMEWORK_CHOICES)
        require_choice("fsdp_version", self.fsdp_version, (1, 2))
        for name, (lo, hi) in PLAN_LIMITS.items():
            if getattr(self, name) is not None:
                require_int(name, getattr(self, name), lo, hi)
        if not isinstance(self.rollout, Rollout):
            raise FieldError("rollout", type(self.rollout).__name__, "a Rollout")
        algo = ALGORITHMS[self.algorithm]
        for role in ROLES:
            model = getattr(self, role)
            if model is None and role in algo.needs:
                raise FieldError(role, None, f"a model: {algo.name} needs {', '.join(algo.needs)}")
            if model is not None and role not in algo.needs + algo.may:
                raise FieldError(role, "a model", f"none: {algo.name} runs {', '.join(algo.needs + algo.may)}")
            if model is not None and not isinstance(model, RLModel):
                raise FieldError(role, type(model).__name__, "an RLModel")
        if self.reference is not None and self.reference.shares_policy and (
                self.policy is None or not self.policy.workload.finetune.adapters):
            raise FieldError("reference.shares_policy", True, "false unless the policy trains LoRA adapters (the "
                                                              "reference is then the base with adapters off)")
        if self.typical_response_length is not None and self.typical_response_length > self.response_length:
            raise FieldError("typical_response_length", self.typical_response_length,
                             f"at most the response length ({self.response_length:,})")
        if self.typical_prompt_length is not None and self.typical_prompt_length > self.prompt_length:
            raise FieldError("typical_prompt_length", self.typical_prompt_length,
                             f"at most the prompt length ({self.prompt_length:,})")
        if self.placement == "split" and algo.rollout and self.rollout_gpus < self.rollout.tp:
            raise FieldError("rollout_gpus", self.rollout_gpus, f"at least the engine's tensor-parallel size "
                                                                f"({self.rollout.tp}) when the rollout is split")
        if self.placement == "split" and self.rollout_gpus % self.rollout.tp:
            raise FieldError("rollout_gpus", self.rollout_gpus, f"a multiple of the engine's tp ({self.rollout.tp})")
        if self.placement == "colocated" and algo.rollout and self.trainer.gpus % self.rollout.tp:
            raise FieldError("rollout.tp", self.rollout.tp, f"a divisor of the training GPUs ({self.trainer.gpus})")

    @property
    def algo(self) -> Algorithm:
        return ALGORITHMS[self.algorithm]

    @property
    def rules(self) -> Framework:
        return FRAMEWORKS[self.framework]

    def models(self):
        """(role, model) for every model given, in role order."""
        return [(r, getattr(self, r)) for r in ROLES if getattr(self, r) is not None]

    @property
    def trainer(self) -> RLModel:
        """The model whose GPUs are the training GPUs: the policy, or the reward model being trained."""
        return self.policy if self.policy is not None else getattr(self, self.algo.trains[0])

    @property
    def max_model_len(self) -> int:
        return self.rollout.max_model_len or self.prompt_length + self.response_length

    @property
    def typical_length(self) -> int:
        return (self.typical_prompt_length or self.prompt_length) + (self.typical_response_length or
                                                                      self.response_length)

    @property
    def longest(self) -> int:
        return self.prompt_length + self.response_length

    def length(self, end: str) -> int:
        """Each sequence's length at one end of the band (ENDS)."""
        require_choice("end", end, ENDS)
        return self.longest if end == "max" else self.typical_length

    @property
    def has_band(self) -> bool:
        return self.typical_length != self.longest

    @property
    def engine_replicas(self) -> int:
        """Engines over the rollout GPUs: each spans rollout.tp GPUs."""
        gpus = self.trainer.gpus if self.placement == "colocated" else self.rollout_gpus
        return max(1, gpus // self.rollout.tp)

    def with_changes(self, **changes) -> "RLPlan":
        return replace(self, **changes)
