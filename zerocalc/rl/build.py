"""An RL plan from the policy's scenario and step (today's inputs) and a flat dict of RL settings: the one path the
CLI, the config importers and the app take, so each default lives here once.

The other models start from the policy's: the same layout, micro-batch, GPU and assumptions, with
- the reference and the reward model frozen (fine-tuning mode "freeze": no gradient or optimizer state), stored in
  `*_dtype` (bf16: verl's ref model_dtype default, fsdp_workers / engine model_dtype None -> bf16 for non-actors),
  run without recompute (no backward);
- the critic trained like the policy (verl's critic defaults to the actor's model and optimizer settings);
- "same" for the policy's architecture, or a preset name for another one.
Every model's sequence is prompt + response (its step scores or trains on whole rollouts).
"""

from __future__ import annotations

from dataclasses import fields, replace
from types import MappingProxyType

from ..model.finetune import FineTune
from ..model.inventory import param_count
from ..model.presets import MODEL_PRESETS
from ..scenario import FieldError
from .plan import ALGORITHMS, FRAMEWORKS, RLModel, RLPlan
from .rollout import Rollout

PLAN_KEYS = ("algorithm", "framework", "placement", "rollout_gpus", "prompt_length", "response_length",
             "typical_response_length", "group_size", "prompts_per_step")
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
    "reference": None, "reference_dtype": "bf16", "reference_stage": None, "reference_offload": False,
    "reference_shares_policy": False, "reward": None, "reward_dtype": "bf16", "reward_stage": None,
    "reward_offload": False, "critic": None, "critic_stage": None, "critic_param_offload": False,
    "critic_optimizer_offload": False,
})
SETTING_KEYS = tuple(DEFAULTS) + ("rollout",)
ROLLOUT_KEYS = tuple(f.name for f in fields(Rollout))


def _arch_for(choice, policy_arch, field: str):
    if choice == "same":
        return policy_arch
    if choice in MODEL_PRESETS:
        return MODEL_PRESETS[choice][0]
    raise FieldError(field, choice, "none, same (the policy's architecture) or a preset: " + ", ".join(MODEL_PRESETS))


def _model(scenario, workload, arch, trains: bool, dtype=None, **flags) -> RLModel:
    changes = {"params": param_count(arch)}
    if not trains:
        changes["param_dtype"] = dtype
    w = replace(workload, arch=arch)
    if not trains:
        w = replace(w, finetune=FineTune(mode="freeze"), recompute="none", recompute_every=1,
                    activation_offload=False, optimizer_in_backward=False, op_policy="torchtitan")
    return RLModel(scenario.with_changes(**changes), w, **flags)


def build_plan(scenario, workload, settings: dict) -> RLPlan:
    """The plan the settings describe (unknown keys refused by name; missing ones take DEFAULTS)."""
    unknown = sorted(set(settings) - set(SETTING_KEYS))
    if unknown:
        raise FieldError(unknown[0], settings[unknown[0]], "an RL setting: " + ", ".join(SETTING_KEYS))
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if k != "rollout"}}
    algo = ALGORITHMS.get(s["algorithm"])
    if algo is None:
        raise FieldError("algorithm", s["algorithm"], "one of " + ", ".join(ALGORITHMS))
    seq = s["prompt_length"] + s["response_length"] if isinstance(s["prompt_length"], int) and \
        isinstance(s["response_length"], int) else workload.seq_len
    workload = replace(workload, seq_len=seq)
    stage = s["policy_stage"] if s["policy_stage"] is not None else 3
    arch = workload.arch
    roles = {}
    trained_role = "reward" if s["algorithm"] == "reward-model" else "policy"
    roles[trained_role] = _model(scenario, workload, arch, True, stage=stage,
                                 param_offload=s["policy_param_offload"],
                                 optimizer_offload=s["policy_optimizer_offload"])
    if s["reference"] is not None and trained_role == "policy":
        roles["reference"] = _model(scenario, workload, _arch_for(s["reference"], arch, "reference"), False,
                                    s["reference_dtype"], stage=_or(s["reference_stage"], stage),
                                    param_offload=s["reference_offload"], shares_policy=s["reference_shares_policy"])
    if s["reward"] is not None and trained_role == "policy":
        roles["reward"] = _model(scenario, workload, _arch_for(s["reward"], arch, "reward"), False, s["reward_dtype"],
                                 stage=_or(s["reward_stage"], stage), param_offload=s["reward_offload"])
    if s["critic"] is not None:
        roles["critic"] = _model(scenario, workload, _arch_for(s["critic"], arch, "critic"), True,
                                 stage=_or(s["critic_stage"], stage), param_offload=s["critic_param_offload"],
                                 optimizer_offload=s["critic_optimizer_offload"])
    rollout = settings.get("rollout") or {}
    if not isinstance(rollout, dict):
        raise FieldError("rollout", rollout, "a mapping of rollout engine settings")
    bad = sorted(set(rollout) - set(ROLLOUT_KEYS))
    if bad:
        raise FieldError(f"rollout.{bad[0]}", rollout[bad[0]], "a rollout setting: " + ", ".join(ROLLOUT_KEYS))
    framework = FRAMEWORKS.get(s["framework"])
    defaults = dict(framework.rollout_defaults) if framework is not None else {}
    return RLPlan(rollout=Rollout(**{**defaults, **rollout}), **{k: s[k] for k in PLAN_KEYS}, **roles)


def _or(value, default):
    return default if value is None else value
