"""An RL plan from the policy's scenario and step (today's inputs) and a flat dict of RL settings: the one path the
CLI, the config importers and the app take, so each default lives here once.

The other models start from the policy's: the same layout, micro-batch, GPU and assumptions, with
- the reference and the reward model frozen (fine-tuning mode "freeze": no gradient or optimizer state), stored in
  `*_dtype` (bf16: verl's ref model_dtype default, fsdp_workers / engine model_dtype None -> bf16 for non-actors),
  run without recompute (no backward);
- the critic trained like the policy (verl's critic defaults to the actor's model and optimizer settings);
- "same" for the policy's architecture, or a preset name for another one.
Every model's sequence is prompt + response (its step scores or trains on whole rollouts).

The framework's own rules come in here too, each overridable by a setting: its log-probability path (rl/logprobs.py:
the updates' loss row unless the policy's --loss says otherwise, each scoring pass's row), whether its micro-batches
pack the real tokens (rl/batching.py), each pass's micro-batch and token budget (verl log_prob_micro_batch_size_per_gpu,
ppo_max_token_len_per_gpu, ...), the reference's stored dtype and whether its shards stream from host memory. With an
RL algorithm that generates, each model's workload is its pass's at the "max" end of the band (every sequence at
prompt + response max length); the "typical" end is derived from the same rule (RLModel.batching).
"""

from __future__ import annotations

from dataclasses import fields, replace
from types import MappingProxyType

from ..model.finetune import FineTune
from ..model.inventory import param_count
from ..model.presets import MODEL_PRESETS
from ..scenario import FieldError, require_choice, require_int
from ..step.allocator import DEFAULT_PERCENT
from .batching import Batching, micro_batch_shape
from .logprobs import LOGPROB_CHOICES, LOGPROB_PATHS
from .plan import ALGORITHMS, FRAMEWORKS, RLModel, RLPlan
from .rollout import Rollout

PLAN_KEYS = ("algorithm", "framework", "placement", "rollout_gpus", "prompt_length", "response_length",
             "typical_response_length", "typical_prompt_length", "group_size", "prompts_per_step")
# each scoring pass's micro-batch (sequences) and dynamic token budget: role -> (micro-batch key, budget key); the
# policy's update takes today's --micro-batch and max_tokens, the critic's update the critic_update ones (verl
# critic.ppo_micro_batch_size_per_gpu; its values pass: critic.forward_micro_batch_size_per_gpu)
PASS_KEYS = MappingProxyType({"policy": ("logprob_micro_batch", "logprob_max_tokens"),
                              "reference": ("reference_micro_batch", "reference_max_tokens"),
                              "reward": ("reward_micro_batch", "reward_max_tokens"),
                              "critic": ("critic_micro_batch", "critic_max_tokens")})
UPDATE_KEYS = ("critic_update_micro_batch", "critic_update_max_tokens")
MODEL_KEYS = MappingProxyType({
    "policy": ("policy_stage", "policy_param_offload", "policy_optimizer_offload"),
    "reference": ("reference", "reference_dtype", "reference_stage", "reference_offload", "reference_shares_policy"),
    "reward": ("reward", "reward_dtype", "reward_stage", "reward_offload"),
    "critic": ("critic", "critic_stage", "critic_param_offload", "critic_optimizer_offload"),
})
DEFAULTS = MappingProxyType({
    "algorithm": "grpo", "framework": "verl", "placement": "colocated", "rollout_gpus": 0, "prompt_length": 512,
    "response_length": 1024, "typical_response_length": None, "group_size": 8, "prompts_per_step": 64,
    "policy_stage": None, "policy_param_offload": False, "policy_optimizer_offload": False,
    "reference": "auto", "reference_dtype": None, "reference_stage": None, "reference_offload": False,
    "reference_shares_policy": False, "reward": None, "reward_dtype": "bf16", "reward_stage": None,
    "reward_offload": False, "critic": None, "critic_stage": None, "critic_param_offload": False,
    "critic_optimizer_offload": False, "typical_prompt_length": None, "packing": None, "logprobs": None,
    "max_tokens": None, "mini_batch": None, "fsdp_version": None, **{key: None for keys in PASS_KEYS.values() for key in keys + UPDATE_KEYS},
})
SETTING_KEYS = tuple(DEFAULTS) + ("rollout",)
ROLLOUT_KEYS = tuple(f.name for f in fields(Rollout))


def _arch_for(choice, policy_arch, field: str):
    if choice == "same":
        return policy_arch
    if choice in MODEL_PRESETS:
        return MODEL_PRESETS[choice][0]
    raise FieldError(field, choice, "none, same (the policy's architecture) or a preset: " + ", ".join(MODEL_PRESETS))


def _scored(arch):
    """A critic's or reward model's architecture: the blocks with a one-output score head in place of the LM head
    (verl 0.9.1 transformer_impl.py _build_module: a value model loads AutoModelForTokenClassification with
    num_labels=1; openrlhf 0.11.2 models/model.py get_llm_for_sequence_regression: value_head Linear(h, 1); TRL's
    reward models: AutoModelForSequenceClassification, num_labels=1). No vocabulary logits."""
    return replace(arch, score_head=1, tied_embeddings=False)


def _model(scenario, workload, arch, trains: bool, dtype=None, **flags) -> RLModel:
    changes = {"params": param_count(arch)}
    if not trains:
        # stored in `dtype`, computed in the policy's compute dtype (verl: model_dtype fp32 under MixedPrecision
        # param_dtype bf16): a wider storage is cast when gathered
        compute = scenario.comm_dtype or scenario.param_dtype
        changes["param_dtype"] = dtype
        if dtype != compute:
            changes["comm_dtype"] = compute
    w = replace(workload, arch=arch)
    if not trains:
        w = replace(w, finetune=FineTune(mode="freeze"), recompute="none", recompute_every=1,
                    activation_offload=False, optimizer_in_backward=False, op_policy="torchtitan")
    return RLModel(scenario.with_changes(**changes), w, **flags)


class _Passes:
    """Each model's passes: their batching (rl/batching.py), the log-probability path's rows (rl/logprobs.py), and
    the workload at the band's max end."""

    def __init__(self, s: dict, workload, framework):
        algo = ALGORITHMS[s["algorithm"]]
        self.s, self.rollout = s, algo.rollout
        packing = framework.packing if s["packing"] is None else s["packing"]
        if not isinstance(packing, bool):
            raise FieldError("packing", packing, "true or false (remove padding: pack each micro-batch's real tokens)")
        self.packing = packing
        path = s["logprobs"] if s["logprobs"] is not None else framework.logprobs
        require_choice("logprobs", path, LOGPROB_CHOICES)
        self.path = LOGPROB_PATHS[path]
        for key in ("max_tokens", "typical_prompt_length", "mini_batch") + UPDATE_KEYS + \
                tuple(k for keys in PASS_KEYS.values() for k in keys):
            if s[key] is not None:
                require_int(key, s[key], 1, 10**9)
        self.sequences = s["group_size"] * s["prompts_per_step"] if isinstance(s["group_size"], int) and \
            isinstance(s["prompts_per_step"], int) else 1
        self.longest = workload.seq_len
        self.micro_batch = workload.micro_batch
        self.reduce_dtype = framework.reduce_dtype
        # rollouts per optimizer step (verl ppo_mini_batch_size x n; default: the whole step in one update)
        self.mini = s["group_size"] * s["mini_batch"] if s["mini_batch"] is not None and \
            isinstance(s["group_size"], int) else self.sequences

    def batching(self, micro_batch, max_tokens) -> Batching:
        return Batching(micro_batch or self.micro_batch, self.packing, max_tokens)

    def shaped(self, model: RLModel, batching: Batching) -> RLModel:
        """The model with its batching and its workload at the max end (every sequence at its longest)."""
        per_gpu = -(-self.sequences // model.scenario.workers)
        micro_batch, seq_len = micro_batch_shape(batching, self.longest, self.longest, per_gpu)
        return replace(model, workload=replace(model.workload, micro_batch=micro_batch, seq_len=seq_len),
                       batching=batching)

    def accumulates(self, model: RLModel, batching: Batching) -> bool:
        """More than one micro-batch per optimizer step on a GPU: the gradients live from step to step."""
        per_gpu = -(-self.mini // model.scenario.workers)
        if batching.max_tokens is not None:
            return per_gpu * self.longest > batching.max_tokens
        return per_gpu > batching.sequences

    def trained(self, model: RLModel) -> RLModel:
        """The framework's training rules on a trained model's update (the workload's own settings win)."""
        w, changes = model.workload, {}
        if self.path.update_loss != "auto" and w.loss == "auto" and w.implementation == "huggingface" and \
                not w.arch.score_head:
            changes["loss"] = self.path.update_loss
        if self.reduce_dtype and w.reduce_dtype is None:
            changes["reduce_dtype"] = self.reduce_dtype
        if self.rollout and w.grad_lifetime == "auto" and model.batching is not None and \
                self.accumulates(model, model.batching):
            changes["grad_lifetime"] = "step"
        return replace(model, workload=replace(w, **changes)) if changes else model

    def apply(self, role: str, model: RLModel, trains: bool) -> RLModel:
        s, path = self.s, self.path
        if not self.rollout and trains:
            model = self.trained(model)
        scoring = path.policy_scoring if role == "policy" else path.other_scoring
        model = replace(model, scoring_end=scoring)
        if not self.rollout:                   # DPO, reward-model training: the micro-batch as given
            return model
        micro_key, budget_key = PASS_KEYS[role]
        update_micro, update_budget = (s[UPDATE_KEYS[0]], _or(s[UPDATE_KEYS[1]], s["max_tokens"])) \
            if role == "critic" else (None, s["max_tokens"])
        # a pass's budget defaults to its update's (verl: log_prob_max_token_len_per_gpu is
        # ${oc.select:actor_rollout_ref.actor.ppo_max_token_len_per_gpu,16384}), the critic's values pass's
        # micro-batch to its update's (forward_micro_batch_size_per_gpu: ${.ppo_micro_batch_size_per_gpu})
        own = self.batching(_or(s[micro_key], update_micro), _or(s[budget_key], update_budget))
        if not trains:                         # a frozen model has only its scoring pass
            return self.shaped(model, own)
        model = self.trained(self.shaped(model, self.batching(update_micro, update_budget)))
        return replace(model, scoring_batching=own)


def build_plan(scenario, workload, settings: dict) -> RLPlan:
    """The plan the settings describe (unknown keys refused by name; missing ones take DEFAULTS)."""
    unknown = sorted(set(settings) - set(SETTING_KEYS))
    if unknown:
        raise FieldError(unknown[0], settings[unknown[0]], "an RL setting: " + ", ".join(SETTING_KEYS))
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if k != "rollout"}}
    for role in ("reference", "reward", "critic"):       # "none", as the page and the refusal spell it: no model
        if s.get(role) == "none":
            s[role] = None
    algo = ALGORITHMS.get(s["algorithm"])
    if algo is None:
        raise FieldError("algorithm", s["algorithm"], "one of " + ", ".join(ALGORITHMS))
    if s["reference"] == "auto":
        s.update(_auto_reference(s["algorithm"], s["framework"], workload.finetune.mode))
    framework = FRAMEWORKS.get(s["framework"])
    if framework is None:
        raise FieldError("framework", s["framework"], "one of " + ", ".join(FRAMEWORKS))
    seq = s["prompt_length"] + s["response_length"] if isinstance(s["prompt_length"], int) and \
        isinstance(s["response_length"], int) else workload.seq_len
    workload = replace(workload, seq_len=seq)
    if workload.fragmentation_percent is None:
        # An RL plan's models keep the reserve at DEFAULT_PERCENT of their tensors, as its engines do: the view's
        # placements and solvers build whole plans of up to four models each, and replaying every model's step
        # through the allocator's model (step/timeline.py) took 3-6 s of CPU on the largest a link can hold.
        workload = replace(workload, fragmentation_percent=DEFAULT_PERCENT)
    passes = _Passes(s, workload, framework)
    stage = s["policy_stage"] if s["policy_stage"] is not None else 3
    arch = workload.arch
    roles = {}
    trained_role = "reward" if s["algorithm"] == "reward-model" else "policy"
    roles[trained_role] = _model(scenario, workload, arch if trained_role == "policy" else _scored(arch), True,
                                 stage=stage,
                                 param_offload=s["policy_param_offload"],
                                 optimizer_offload=s["policy_optimizer_offload"])
    if s["reference"] is not None and trained_role == "policy":
        dtype = s["reference_dtype"] or framework.reference_dtype
        roles["reference"] = _model(scenario, workload, _arch_for(s["reference"], arch, "reference"), False,
                                    dtype, stage=_or(s["reference_stage"], stage),
                                    param_offload=s["reference_offload"], shares_policy=s["reference_shares_policy"],
                                    streams_params=framework.reference_streams and not s["reference_shares_policy"])
    if s["reward"] is not None and trained_role == "policy":
        roles["reward"] = _model(scenario, workload, _scored(_arch_for(s["reward"], arch, "reward")), False,
                                 s["reward_dtype"],
                                 stage=_or(s["reward_stage"], stage), param_offload=s["reward_offload"])
    if s["critic"] is not None:
        roles["critic"] = _model(scenario, workload, _scored(_arch_for(s["critic"], arch, "critic")), True,
                                 stage=_or(s["critic_stage"], stage), param_offload=s["critic_param_offload"],
                                 optimizer_offload=s["critic_optimizer_offload"])
    roles = {role: passes.apply(role, m, role in algo.trains) for role, m in roles.items()}
    rollout = settings.get("rollout") or {}
    if not isinstance(rollout, dict):
        raise FieldError("rollout", rollout, "a mapping of rollout engine settings")
    bad = sorted(set(rollout) - set(ROLLOUT_KEYS))
    if bad:
        raise FieldError(f"rollout.{bad[0]}", rollout[bad[0]], "a rollout setting: " + ", ".join(ROLLOUT_KEYS))
    defaults = dict(framework.rollout_defaults)
    return RLPlan(rollout=Rollout(**{**defaults, **rollout}), **{k: s[k] for k in PLAN_KEYS}, **roles,
                  fsdp_version=_or(s["fsdp_version"], framework.fsdp_version))


def _auto_reference(algorithm: str, framework: str, mode: str) -> dict:
    """The reference an algorithm keeps unless told otherwise ("auto"). DPO's loss needs the reference's
    log-probabilities every step: TRL's DPOTrainer builds a frozen copy of the policy when no ref_model is given,
    unless the policy is a PEFT model (the base with its adapters off, no copy) or precompute_ref_log_probs is set
    (trl/trainer/dpo_trainer.py, "Reference model", trl f2cd577 2026-07-24); OpenRLHF's train_dpo always loads its
    own reference (a copy under LoRA too). Precomputed log-probabilities are `reference none`. GRPO and PPO keep one
    only with a KL term, which the framework's config says (rl/configs): none."""
    if algorithm != "dpo":
        return {"reference": None}
    shares = mode in ("lora", "qlora") and framework != "openrlhf"
    return {"reference": "same", **({"reference_shares_policy": True} if shares else {})}


def _or(value, default):
    return default if value is None else value
