"""python -m zerocalc rl: an RL post-training plan (GRPO, PPO, DPO, reward-model training) as text or JSON.

The policy is today's model: every flag of `python -m zerocalc` (--model, --gpus, --tp, --micro-batch, --recompute,
--convention, ...) describes it and goes to today's parser unchanged. The flags below add the RL plan: the other
models (built from the policy's, rl/build.py), the rollout engine, the lengths and the placement; a framework's
config (--verl-config, --trl-config, --openrlhf-args) sets them as data, and explicit flags win.
Bad arguments exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import json
import sys

from ..rl.build import DEFAULTS, PASS_KEYS, UPDATE_KEYS
from ..rl.logprobs import LOGPROB_CHOICES
from ..rl.engines import ENGINE_CHOICES, KV_DTYPES, SLEEP_LEVELS, WEIGHT_DTYPES
from ..rl.plan import ALGORITHM_CHOICES, FRAMEWORK_CHOICES, PLACEMENTS
from ..scenario import FieldError
from ..units import UNIT_CHOICES
from .rl_text import rl_text
from .types import UsageError, _capacity, _count, _Parser

# flag -> (settings key, where): "plan" keys of rl/build.py, "rollout" keys of rl/rollout.Rollout
PLAN_FLAGS = {"algorithm": "algorithm", "framework": "framework", "placement": "placement",
              "rollout_gpus": "rollout_gpus", "prompt_length": "prompt_length", "response_length": "response_length",
              "typical_response_length": "typical_response_length", "group_size": "group_size",
              "prompts_per_step": "prompts_per_step", "stage": "policy_stage", "param_offload": "policy_param_offload",
              "optimizer_offload": "policy_optimizer_offload", "reference": "reference",
              "reference_dtype": "reference_dtype", "reference_stage": "reference_stage",
              "reference_offload": "reference_offload", "reference_lora": "reference_shares_policy",
              "reward_model": "reward", "reward_dtype": "reward_dtype", "reward_stage": "reward_stage",
              "reward_offload": "reward_offload", "critic": "critic", "critic_stage": "critic_stage",
              "critic_param_offload": "critic_param_offload", "critic_optimizer_offload": "critic_optimizer_offload",
              "typical_prompt_length": "typical_prompt_length", "packing": "packing", "logprobs": "logprobs",
              "max_tokens": "max_tokens", "mini_batch": "mini_batch", "fsdp_version": "fsdp_version", **{key: key for keys in PASS_KEYS.values() for key in keys + UPDATE_KEYS}}
ROLLOUT_FLAGS = {"engine": "engine", "gpu_memory_utilization": "gpu_memory_utilization", "rollout_tp": "tp",
                 "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
                 "max_model_len": "max_model_len", "rollout_dtype": "dtype", "kv_cache_dtype": "kv_cache_dtype",
                 "block_size": "block_size", "cuda_graphs": "cuda_graphs", "sleep_level": "sleep_level",
                 "kv_cache_memory": "kv_cache_memory_bytes", "engine_activation_bytes": "activation_bytes",
                 "engine_non_torch_bytes": "non_torch_bytes", "cudagraph_bytes": "cudagraph_bytes",
                 "engine_context_bytes": "context_bytes"}
BOOLEANS = ("param_offload", "optimizer_offload", "reference_offload", "reference_lora", "reward_offload",
            "critic_param_offload", "critic_optimizer_offload", "cuda_graphs", "packing")


def _fraction(text: str) -> float:
    import argparse
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a fraction above 0 and at most 1")
    return value


def build_parser() -> _Parser:
    p = _Parser(prog="python -m zerocalc rl", description="An RL post-training plan's memory, phase by phase. "
                "Every other flag describes the policy, as `python -m zerocalc` takes it.", add_help=True,
                allow_abbrev=False)      # a policy flag (--gpu) must never read as an abbreviated RL one
    p.add_argument("--algorithm", choices=ALGORITHM_CHOICES, help=f"default {DEFAULTS['algorithm']}")
    p.add_argument("--framework", choices=FRAMEWORK_CHOICES, help="whose residency rules and weight sync "
                   f"(default {DEFAULTS['framework']})")
    p.add_argument("--placement", choices=PLACEMENTS, help="colocated (every model and the engine on every GPU; "
                   "default) or split (the engines on --rollout-gpus of their own)")
    for flag in ("rollout-gpus", "prompt-length", "response-length", "typical-response-length",
                 "typical-prompt-length", "group-size", "prompts-per-step"):
        p.add_argument(f"--{flag}", type=_count)
    b = p.add_argument_group("micro-batches and log-probabilities (default: the framework's)")
    b.add_argument("--packing", nargs="?", const="yes", choices=("yes", "no"), help="pack each micro-batch's real "
                   "tokens into one row (verl use_remove_padding, default yes; OpenRLHF --packing_samples)")
    b.add_argument("--logprobs", choices=LOGPROB_CHOICES, help="the log-probability path: the updates' loss and "
                   "each scoring pass's end (default the framework's; huggingface: transformers' loss)")
    b.add_argument("--max-tokens", type=_count, help="dynamic batch size: the policy update's tokens per "
                   "micro-batch (verl use_dynamic_bsz with ppo_max_token_len_per_gpu); the other passes default to it")
    b.add_argument("--fsdp-version", type=int, choices=(1, 2), help="the FSDP wrapping the models (verl "
                   "actor.strategy fsdp: 1, verl's default; fsdp2: 2): FSDP1's weight sync loads offloaded shards back "
                   "and exports full tensors in their stored dtype")
    b.add_argument("--mini-batch", type=_count, help="prompts per optimizer step (verl ppo_mini_batch_size); more "
                   "than one micro-batch per GPU in it keeps the gradients between micro-batches (default: the whole "
                   "step in one optimizer step)")
    for role, (micro, budget) in list(PASS_KEYS.items()) + [("critic update", UPDATE_KEYS)]:
        who = {"policy": "the policy's own log-probs", "critic": "the critic's values",
               "critic update": "the critic's update"}.get(role, f"the {role}'s pass")
        b.add_argument(f"--{micro.replace('_', '-')}", type=_count, help=f"sequences per micro-batch of {who} "
                       "(default --micro-batch)")
        b.add_argument(f"--{budget.replace('_', '-')}", type=_count, help=f"dynamic batch size: tokens per "
                       f"micro-batch of {who}")
    p.add_argument("--stage", type=int, choices=range(4), metavar="{0,1,2,3}", help="the policy's ZeRO / FSDP "
                   "stage (default 3)")
    for flag, about in (("param-offload", "the policy's parameters in host memory between its phases"),
                        ("optimizer-offload", "the policy's optimizer state in host memory between its phases")):
        p.add_argument(f"--{flag}", nargs="?", const="yes", choices=("yes", "no"), help=about)
    p.add_argument("--reference", metavar="auto|none|same|PRESET",
                   help="a frozen reference model (default auto: DPO's, a frozen copy or under LoRA the base with "
                        "its adapters off, as TRL's DPOTrainer keeps; none for GRPO and PPO; none: precomputed)")
    p.add_argument("--reference-dtype", choices=list(WEIGHT_DTYPES), help="its stored dtype (default bf16)")
    p.add_argument("--reference-stage", type=int, choices=range(4), metavar="{0,1,2,3}")
    p.add_argument("--reference-offload", nargs="?", const="yes", choices=("yes", "no"))
    p.add_argument("--reference-lora", nargs="?", const="yes", choices=("yes", "no"),
                   help="the reference is the policy's LoRA base with the adapters off: no copy")
    p.add_argument("--reward-model", metavar="same|PRESET", help="a frozen reward model (default none: rule-based)")
    p.add_argument("--reward-dtype", choices=list(WEIGHT_DTYPES))
    p.add_argument("--reward-stage", type=int, choices=range(4), metavar="{0,1,2,3}")
    p.add_argument("--reward-offload", nargs="?", const="yes", choices=("yes", "no"))
    p.add_argument("--critic", metavar="same|PRESET", help="PPO's critic (trained like the policy)")
    p.add_argument("--critic-stage", type=int, choices=range(4), metavar="{0,1,2,3}")
    p.add_argument("--critic-param-offload", nargs="?", const="yes", choices=("yes", "no"))
    p.add_argument("--critic-optimizer-offload", nargs="?", const="yes", choices=("yes", "no"))
    e = p.add_argument_group("rollout engine")
    e.add_argument("--engine", choices=ENGINE_CHOICES, help="vllm (default) or sglang")
    e.add_argument("--gpu-memory-utilization", type=_fraction, help="vLLM's share of the card (SGLang: "
                   "mem_fraction_static of the free memory); default 0.5")
    e.add_argument("--rollout-tp", type=_count, help="the engine's tensor-parallel size (default 1)")
    for flag in ("max-num-seqs", "max-num-batched-tokens", "max-model-len", "block-size"):
        e.add_argument(f"--{flag}", type=_count)
    e.add_argument("--rollout-dtype", choices=list(WEIGHT_DTYPES), help="the engine's weights (default bf16)")
    e.add_argument("--kv-cache-dtype", choices=tuple(KV_DTYPES), help="default auto (the weights' dtype)")
    e.add_argument("--cuda-graphs", nargs="?", const="yes", choices=("yes", "no"), help="no: enforce_eager")
    e.add_argument("--sleep-level", type=int, choices=SLEEP_LEVELS, help="between rollouts: 0 awake, 1 weights to "
                   "host, 2 weights discarded (default 1)")
    for flag, about in (("kv-cache-memory", "vLLM kv_cache_memory_bytes: the KV cache's size, fraction unused"),
                        ("engine-activation-bytes", "the engine's activation peak as its log prints it"),
                        ("engine-non-torch-bytes", "its non-torch memory as its log prints it"),
                        ("cudagraph-bytes", "its CUDA-graph memory as its log prints it"),
                        ("engine-context-bytes", "its process's CUDA context (default: the card's bare context, "
                                                 "step/context.py; 0.5 GiB on an AMD or custom card)")):
        e.add_argument(f"--{flag}", type=_capacity if flag == "kv-cache-memory" else _count, help=about)
    c = p.add_argument_group("framework configs (read as data, never executed; explicit flags win)")
    c.add_argument("--verl-config", metavar="PATH", help="verl's Hydra YAML and/or key=value overrides (a run "
                   "script's)")
    c.add_argument("--trl-config", metavar="PATH", help="a TRL GRPOConfig / DPOConfig as YAML or JSON")
    c.add_argument("--openrlhf-args", metavar="PATH", help="OpenRLHF's train_ppo_ray flags as text")
    p.add_argument("--units", choices=UNIT_CHOICES, default="decimal")
    p.add_argument("--json", action="store_true", help="print the plan's report as JSON (integers are bytes)")
    return p


def settings_from_args(args) -> dict:
    settings, rollout = {}, {}
    for flag, key in PLAN_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            settings[key] = value == "yes" if flag in BOOLEANS else value
    for flag, key in ROLLOUT_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            rollout[key] = value == "yes" if flag in BOOLEANS else value
    if rollout:
        settings["rollout"] = rollout
    return settings


def plan_of(argv, policy_inputs):
    """(plan, imported config or None, parsed RL args) from the command line: policy_inputs(rest) -> (scenario,
    arch, workload, imported) parses today's flags with today's CLI. Raises UsageError."""
    from ..rl.build import build_plan
    from .rl_imports import imported_settings
    args, rest = build_parser().parse_known_args(argv)
    settings = settings_from_args(args)
    imported = imported_settings(args, rest)
    if imported is not None:
        settings = imported.merged(settings)
        rest = imported.policy_flags(rest)
    if not any(a.split("=")[0] in ("--model", "--config", "--hub", "--layers") for a in rest):
        raise UsageError("the policy needs a model: give --model, --config or --hub (today's flags)")
    if "--seq-len" in rest or any(a.startswith("--seq-len=") for a in rest):
        raise UsageError("--seq-len: the plan's sequences are --prompt-length + --response-length")
    scenario, arch, workload, _ = policy_inputs(rest)
    if workload is None:
        raise UsageError("the policy needs a model: give --model, --config or --hub (today's flags)")
    try:
        return build_plan(scenario, workload, settings), imported, args
    except FieldError as exc:
        raise UsageError(f"--{exc.field.replace('_', '-')}: got {exc.value!r}; allowed: {exc.allowed}") from None


def run(argv, policy_inputs) -> str:
    from ..rl.report import rl_report
    plan, imported, args = plan_of(argv, policy_inputs)
    try:
        report = rl_report(plan)
    except FieldError as exc:
        raise UsageError(f"--{exc.field.replace('_', '-')}: got {exc.value!r}; allowed: {exc.allowed}") from None
    if imported is not None:
        report["imported"] = imported.to_dict()
    return json.dumps(report, indent=2) if args.json else rl_text(report, args.units)


def main(argv, policy_inputs) -> int:
    try:
        print(run(argv, policy_inputs))
    except UsageError as exc:
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(exc))
        print(f"zerocalc rl: error: {text}", file=sys.stderr)
        return 2
    return 0
