"""The RL plan's settings on the page: named fields with a kind and an allowed range (data), their link form
(`rl.` parameters: ?view=rl&rl.algorithm=ppo&rl.critic=same), and the settings dict the core's plan builder takes
(zerocalc/rl/build.py). The policy is the page's own plan (model, GPUs, stage, micro-batch, recompute...).

Nothing from a link is trusted: each value is parsed by its kind and range; a bad or unknown one falls back to its
default with a warning naming it. Zero (or "default") means the framework's or the engine's own default.
"""

from __future__ import annotations

from typing import NamedTuple

from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.rl.engines import ENGINE_CHOICES, KV_DTYPES
from zerocalc.rl.logprobs import LOGPROB_CHOICES
from zerocalc.rl.plan import ALGORITHM_CHOICES, FRAMEWORK_CHOICES, PLACEMENTS
from zerocalc.scenario import FieldError

RL_PREFIX = "rl."
RL_VALUES = "_rl_values"           # session key: the RL fields' values
MODEL_CHOICES = ("none", "same") + tuple(MODEL_PRESETS)
MAX_TEXT = 64


class RLField(NamedTuple):
    name: str
    kind: str                      # "choice" | "int" | "fraction" | "bool"
    default: object
    choices: tuple = ()
    lo: float = 0
    hi: float = 0
    label: str = ""
    help: str = ""


def _i(name, default, lo, hi, label, help_text=""):
    return RLField(name, "int", default, (), lo, hi, label, help_text)


RL_FIELDS = (
    RLField("algorithm", "choice", "grpo", ALGORITHM_CHOICES, label="Algorithm",
            help="GRPO (no critic), PPO (a critic), DPO or reward-model training (no rollout)"),
    RLField("framework", "choice", "verl", FRAMEWORK_CHOICES, label="Framework",
            help="Whose rules: which models share a process, the weight-sync buffers, the engine's defaults"),
    RLField("placement", "choice", "colocated", PLACEMENTS, label="Placement",
            help="colocated: the engine and every model on every GPU, the engine asleep between rollouts; split: "
                 "the engines on rollout GPUs of their own"),
    _i("rollout_gpus", 0, 0, 10**6, "Rollout GPUs (split)", "GPUs for the engines beside the page's training GPUs"),
    _i("prompt_length", 512, 1, 10**7, "Prompt tokens"),
    _i("response_length", 1024, 1, 10**7, "Response tokens (max)"),
    _i("typical_response_length", 0, 0, 10**7, "Typical response tokens", "0: as the longest"),
    _i("typical_prompt_length", 0, 0, 10**7, "Typical prompt tokens", "0: as the longest"),
    RLField("packing", "choice", "default", ("default", "yes", "no"), label="Pack micro-batches (remove padding)",
            help="yes: each micro-batch is its sequences' real tokens in one row (verl use_remove_padding, OpenRLHF "
                 "--packing_samples); no: padded to the longest; default: the framework's"),
    RLField("logprobs", "choice", "default", ("default",) + LOGPROB_CHOICES, label="Log-probability path",
            help="What the updates' loss and the scoring passes hold at the logits; default: the framework's"),
    _i("logprob_micro_batch", 0, 0, 10**6, "Policy log-prob micro-batch", "Sequences per micro-batch of the policy's "
       "own log-probs (verl rollout.log_prob_micro_batch_size_per_gpu); 0: the page's micro-batch"),
    _i("reference_micro_batch", 0, 0, 10**6, "Reference micro-batch", "0: the page's micro-batch"),
    _i("max_tokens", 0, 0, 10**9, "Dynamic batch: tokens per micro-batch", "verl use_dynamic_bsz with "
       "ppo_max_token_len_per_gpu (every pass); 0: off"),
    _i("mini_batch", 0, 0, 10**7, "Prompts per optimizer step", "verl ppo_mini_batch_size: more than one "
       "micro-batch per GPU keeps the gradients between micro-batches; 0: the whole step"),
    RLField("fsdp_version", "choice", "default", ("default", "1", "2"), label="FSDP version (weight sync)",
            help="verl actor.strategy fsdp (1, verl's default) or fsdp2 (2); default: the framework's"),
    _i("group_size", 8, 1, 10**5, "Responses per prompt (group size)"),
    _i("prompts_per_step", 64, 1, 10**7, "Prompts per step"),
    RLField("reference", "choice", "auto", ("auto",) + MODEL_CHOICES, label="Reference model",
            help="auto: DPO's (a frozen copy, or the LoRA base with its adapters off), none for GRPO and PPO; "
                 "same or another preset for a KL term; none with precomputed log-probabilities"),
    RLField("reference_offload", "bool", False, label="Reference offloaded between its passes"),
    RLField("reference_lora", "bool", False, label="Reference is the policy's LoRA base (no copy)"),
    RLField("reward", "choice", "none", MODEL_CHOICES, label="Reward model", help="none: a rule-based reward"),
    RLField("critic", "choice", "none", MODEL_CHOICES, label="Critic (PPO)"),
    RLField("param_offload", "bool", False, label="Policy parameters offloaded between phases"),
    RLField("optimizer_offload", "bool", False, label="Policy optimizer state offloaded between phases"),
    RLField("engine", "choice", "vllm", ENGINE_CHOICES, label="Rollout engine"),
    RLField("gpu_memory_utilization", "fraction", 0.0, (), 0, 1, "gpu_memory_utilization",
            "vLLM's share of the card (SGLang: mem_fraction_static of the free memory); 0: the framework's"),
    _i("rollout_tp", 0, 0, 1024, "Engine tensor-parallel size", "0: the framework's"),
    _i("max_num_seqs", 0, 0, 10**6, "max_num_seqs", "0: the engine's default for the card"),
    RLField("kv_cache_dtype", "choice", "auto", tuple(KV_DTYPES), label="KV-cache dtype"),
    RLField("sleep_level", "choice", "default", ("default", "0", "1", "2"), label="Sleep level",
            help="Between rollouts: 0 awake, 1 weights to host memory, 2 weights discarded; default: the framework's"),
    RLField("cuda_graphs", "bool", True, label="CUDA graphs", help="off: enforce_eager"),
)
RL_FIELD = {f.name: f for f in RL_FIELDS}


def defaults() -> dict:
    return {f.name: f.default for f in RL_FIELDS}


def parse(field: RLField, text: str):
    """One value from its link text, or ValueError saying what is allowed."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"at most {MAX_TEXT} characters")
    if field.kind == "choice":
        if text not in field.choices:
            raise ValueError("one of " + ", ".join(field.choices[:12]) + (" ..." if len(field.choices) > 12 else ""))
        return text
    if field.kind == "bool":
        if text not in ("true", "false"):
            raise ValueError("true or false")
        return text == "true"
    if field.kind == "fraction":
        value = float(text)
        if not (value == value and field.lo <= value <= field.hi):     # NaN fails the first test
            raise ValueError(f"a fraction from {field.lo:g} to {field.hi:g}")
        return value
    if not text.isdigit() or not field.lo <= int(text) <= field.hi:
        raise ValueError(f"an integer from {field.lo:,} to {field.hi:,}")
    return int(text)


def from_query(params: dict):
    """(values, warnings) from the link's `rl.` parameters (without their prefix): each parsed by its field."""
    values, warnings = defaults(), []
    for name, texts in params.items():
        text = texts[-1] if isinstance(texts, list) else texts
        field = RL_FIELD.get(name)
        if field is None:
            warnings.append(f"Link parameter {RL_PREFIX}{str(name)[:40]} is not an RL setting; ignored.")
            continue
        try:
            values[name] = parse(field, str(text))
        except ValueError as exc:
            warnings.append(f"Link parameter {RL_PREFIX}{name}={str(text)[:40]!r}: allowed {exc}. Using the "
                            f"default, {field.default}.")
    return values, warnings


def to_query(values: dict) -> dict:
    """The `rl.` parameters of the values that differ from their defaults."""
    out = {}
    for f in RL_FIELDS:
        value = values.get(f.name, f.default)
        if value != f.default:
            out[RL_PREFIX + f.name] = ("true" if value else "false") if f.kind == "bool" else str(value)
    return out


def settings_of(values: dict, stage: int) -> dict:
    """The core's plan settings (zerocalc/rl/build.py) from the page's RL values; the policy's stage is the page's."""
    v = {**defaults(), **values}
    settings = {k: v[k] for k in ("algorithm", "framework", "placement", "rollout_gpus", "prompt_length",
                                  "response_length", "group_size", "prompts_per_step")}
    settings["typical_response_length"] = v["typical_response_length"] or None
    settings["typical_prompt_length"] = v["typical_prompt_length"] or None
    if v["packing"] != "default":
        settings["packing"] = v["packing"] == "yes"
    if v["logprobs"] != "default":
        settings["logprobs"] = v["logprobs"]
    for key in ("logprob_micro_batch", "reference_micro_batch", "max_tokens", "mini_batch"):
        if v[key]:
            settings[key] = v[key]
    if v["fsdp_version"] != "default":
        settings["fsdp_version"] = int(v["fsdp_version"])
    settings["policy_stage"] = stage
    settings["policy_param_offload"], settings["policy_optimizer_offload"] = v["param_offload"], v["optimizer_offload"]
    for role in ("reference", "reward", "critic"):
        settings[role] = None if v[role] == "none" else v[role]
    settings["reference_offload"], settings["reference_shares_policy"] = v["reference_offload"], v["reference_lora"]
    rollout = {"engine": v["engine"], "kv_cache_dtype": v["kv_cache_dtype"], "cuda_graphs": v["cuda_graphs"]}
    if v["gpu_memory_utilization"]:
        rollout["gpu_memory_utilization"] = v["gpu_memory_utilization"]
    if v["rollout_tp"]:
        rollout["tp"] = v["rollout_tp"]
    if v["max_num_seqs"]:
        rollout["max_num_seqs"] = v["max_num_seqs"]
    if v["sleep_level"] != "default":
        rollout["sleep_level"] = int(v["sleep_level"])
    settings["rollout"] = rollout
    return settings


# The core's plan settings that have a field on the page, by setting (settings_of's inverse): setting -> field.
_SETTING_FIELD = {"policy_param_offload": "param_offload", "policy_optimizer_offload": "optimizer_offload",
                  "reference_shares_policy": "reference_lora"}
_ROLLOUT_FIELD = {"engine": "engine", "kv_cache_dtype": "kv_cache_dtype", "cuda_graphs": "cuda_graphs",
                  "gpu_memory_utilization": "gpu_memory_utilization", "tp": "rollout_tp",
                  "max_num_seqs": "max_num_seqs", "sleep_level": "sleep_level"}


def _text(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def values_from_settings(settings: dict) -> tuple:
    """(the RL fields' values, the settings the page has no field for) from an imported config's plan settings
    (settings_of's inverse; policy_stage is the page's own stage). Each value is checked as a link's would be: a
    FieldError names the field and what it allows."""
    pairs, unused = [], []
    for key, value in settings.items():
        if key == "rollout":
            pairs += [(_ROLLOUT_FIELD[name], v) for name, v in value.items() if name in _ROLLOUT_FIELD]
            unused += [f"rollout.{name}" for name in value if name not in _ROLLOUT_FIELD]
        elif key == "packing":
            pairs.append((key, "yes" if value else "no"))
        elif key in ("reference", "reward", "critic"):
            pairs.append((key, "none" if value is None else value))
        elif key in ("typical_response_length", "typical_prompt_length"):
            pairs.append((key, value or 0))
        elif key in _SETTING_FIELD or key in RL_FIELD:
            pairs.append((_SETTING_FIELD.get(key, key), value))
        elif key != "policy_stage":
            unused.append(key)
    values = {}
    for name, value in pairs:
        try:
            values[name] = parse(RL_FIELD[name], _text(value))
        except ValueError as exc:
            raise FieldError(name, value, str(exc)) from None
    return values, unused
