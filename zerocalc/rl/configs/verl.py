"""verl's config as data: its Hydra YAML (a mapping with verl's keys: a saved or printed config) or a run script's
key=value overrides (examples/*/run_*.sh), never executed. Keys and defaults from verl 0.9.1
(trainer/config/_generated_ppo_trainer.yaml, rollout/rollout.yaml, workers/engine_workers.py); which models exist
follows verl's trainer (ray_trainer.py: a reference when use_kl_loss or use_kl_in_reward, a critic when the
advantage estimator is gae; a LoRA actor carries its reference, ref_in_actor).

Interpolations are resolved by our small rule only for ${key} and ${oc.select:key,default}; others are listed as
unread. Every key not read is listed with its reason.
"""

from __future__ import annotations

import re

from ...frameworks.accelerate.document import load_yaml
from ...frameworks.common import FrameworkConfigError, text
from .common import GPU_LIMIT, ImportedRL, KeyReader, flatten, is_key, model_flags, preset_for, scalar, script_tokens

ACTOR, ROLLOUT, REF = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout.", "actor_rollout_ref.ref."
CRITIC_FREE = ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "grpo_passk",
               "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline", "tir_optimal_token_baseline")
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "float32": "fp32", "fp32": "fp32"}
INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?([A-Za-z0-9_.]+)(?:,(.*))?\}$")
# keys read, each with what it sets (the rest of the rules below say how)
ROLLOUT_KEYS = {"gpu_memory_utilization": "gpu_memory_utilization", "tensor_model_parallel_size": "tp",
                "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
                "max_model_len": "max_model_len"}


def _items(source) -> dict:
    """Dotted key -> value, from a YAML mapping or from a script's overrides (the last given wins, as Hydra)."""
    tokens = script_tokens(source, "verl run script or YAML")
    overrides = [t for t in tokens if "=" in t and is_key(t.split("=", 1)[0].lstrip("+~"))]
    if overrides:
        return {t.split("=", 1)[0].lstrip("+~"): scalar(t.split("=", 1)[1]) for t in overrides}
    data = load_yaml(source)
    if not isinstance(data, dict):
        raise FrameworkConfigError("config", type(data).__name__, "verl's config: a YAML mapping, or key=value "
                                   "overrides as a run script passes them")
    return flatten(data)


def _resolve(items: dict, imported: ImportedRL) -> dict:
    out = {}
    for key, value in items.items():
        if isinstance(value, str) and value.startswith("${"):
            m = INTERPOLATION.match(value)
            if m and (m.group(1) in items or m.group(2) is not None):
                target = items.get(m.group(1))
                value = scalar(m.group(2)) if target is None or str(target).startswith("${") else target
            else:
                imported.ignore(key, f"an interpolation we do not resolve ({value[:60]})")
                continue
        out[key] = value
    return out


def read_verl(source) -> ImportedRL:
    imp = ImportedRL("verl")
    items = _resolve(_items(source), imp)
    get = KeyReader(items, imp)
    used = get.used

    estimator = get.one_of("algorithm.adv_estimator", "gae", ("gae",) + CRITIC_FREE,
                           what="an estimator of verl 0.9.1: gae, " + ", ".join(CRITIC_FREE))
    algorithm = "ppo" if estimator == "gae" else "grpo"
    if estimator not in ("gae", "grpo"):
        imp.notes.append(f"adv_estimator {estimator}: critic-free like GRPO, planned as GRPO (same models)")
    imp.set("algorithm", algorithm)
    imp.set("framework", "verl")
    for key, setting in (("data.max_prompt_length", "prompt_length"), ("data.max_response_length", "response_length"),
                         ("data.train_batch_size", "prompts_per_step"), (ROLLOUT + "n", "group_size")):
        value = get.count(key)
        if value is not None:
            imp.set(setting, value)
    path = get("actor_rollout_ref.model.path")
    if path is not None:
        model_flags(imp, "actor_rollout_ref.model.path", path)
    # each checked before the product: text times a count is a string repeated (issue 38: 2 GB from 214 bytes)
    gpus = get.count("trainer.n_gpus_per_node", 8, hi=GPU_LIMIT) * get.count("trainer.nnodes", 1, hi=GPU_LIMIT)
    if gpus > GPU_LIMIT:
        raise FrameworkConfigError("trainer.nnodes", items["trainer.nnodes"], f"at most {GPU_LIMIT:,} GPUs in all "
                                   "(trainer.n_gpus_per_node x trainer.nnodes)")
    imp.policy["--gpus"] = str(gpus)
    strategy = text(ACTOR + "strategy", get(ACTOR + "strategy", "fsdp"))
    imp.policy["--convention"] = "megatron" if strategy == "megatron" else "fsdp2"
    if strategy in ("fsdp", "fsdp2"):
        imp.set("fsdp_version", 1 if strategy == "fsdp" else 2)
    if strategy == "megatron":
        imp.notes.append("actor strategy megatron: give its tp / pp with --tp / --pp (verl's megatron keys are not "
                         "read)")
    micro = get.count(ACTOR + "ppo_micro_batch_size_per_gpu")
    if micro is not None:
        imp.policy["--micro-batch"] = str(micro)
    _batching(imp, get)
    checkpointing = get.flag("actor_rollout_ref.model.enable_gradient_checkpointing")
    if checkpointing is not None:
        imp.policy["--recompute"] = "full" if checkpointing else "none"
    for key, setting in ((ACTOR + "fsdp_config.param_offload", "policy_param_offload"),
                         (ACTOR + "fsdp_config.optimizer_offload", "policy_optimizer_offload")):
        if (value := get.flag(key)) is not None:
            imp.set(setting, value)
    lora = get.count("actor_rollout_ref.model.lora_rank", 0, lo=0)      # verl: 0 is no LoRA
    if lora:
        imp.policy["--finetune"], imp.policy["--lora-rank"] = "lora", str(lora)
        if get("actor_rollout_ref.model.target_modules") == "all-linear":
            imp.policy["--lora-targets"] = "all-linear"
    if get(ACTOR + "use_kl_loss") is True or get("algorithm.use_kl_in_reward") is True:
        imp.set("reference", "same")
        imp.set("reference_shares_policy", bool(lora))
        offload = get.flag(REF + "fsdp_config.param_offload")
        if offload is not None:
            imp.set("reference_offload", offload)
        if not lora:
            imp.notes.append("the reference's shards live in host memory whatever ref.fsdp_config.param_offload says: "
                             "verl 0.9.1 gives a forward-only engine CPUOffload(offload_params=True) "
                             "(engine/fsdp/transformer_impl.py _build_fsdp_module), each unit copied in as gathered")
    _rollout(imp, get)
    if algorithm == "ppo":
        critic_path = get("critic.model.path", path)
        imp.set("critic", "same" if critic_path in (None, path) else (preset_for(critic_path) or "same"))
        for key, setting in (("critic.model.fsdp_config.param_offload", "critic_param_offload"),
                             ("critic.model.fsdp_config.optimizer_offload", "critic_optimizer_offload")):
            if (value := get.flag(key)) is not None:
                imp.set(setting, value)
    if get("reward_model.enable") is True:
        rm = get("reward_model.model.path")
        imp.set("reward", preset_for(rm) or "same")
        imp.notes.append(f"reward_model.model.path {rm}: planned as {preset_for(rm) or 'the policy architecture'}")
    for key in items:
        if key not in used:
            imp.ignore(key, _reason(key))
    return imp


def _batching(imp: ImportedRL, get) -> None:
    """Each pass's micro-batch and token budget, remove padding and the log-probability path (rl/batching.py,
    rl/logprobs.py), with verl 0.9.1's defaults (trainer/config/_generated_ppo_trainer.yaml)."""
    imp.set("mini_batch", get.count(ACTOR + "ppo_mini_batch_size", 256))
    padding = get.flag("actor_rollout_ref.model.use_remove_padding")
    if padding is not None:
        imp.set("packing", padding)
    dynamic = get(ACTOR + "use_dynamic_bsz", False) is True
    budget = get.count(ACTOR + "ppo_max_token_len_per_gpu", 16384)
    if dynamic:
        imp.set("max_tokens", budget)
    for prefix, micro_key, budget_key in ((ROLLOUT, "logprob_micro_batch", "logprob_max_tokens"),
                                          (REF, "reference_micro_batch", "reference_max_tokens")):
        micro = get.count(prefix + "log_prob_micro_batch_size_per_gpu")
        if micro is not None:
            imp.set(micro_key, micro)
        if get(prefix + "log_prob_use_dynamic_bsz", dynamic) is True:
            imp.set(budget_key, get.count(prefix + "log_prob_max_token_len_per_gpu", budget))
    for key, setting in (("critic.ppo_micro_batch_size_per_gpu", "critic_update_micro_batch"),
                         ("critic.forward_micro_batch_size_per_gpu", "critic_micro_batch")):
        if (value := get.count(key)) is not None:
            imp.set(setting, value)
    if get("critic.use_dynamic_bsz", dynamic) is True:
        critic = get.count("critic.ppo_max_token_len_per_gpu", 32768)
        imp.set("critic_update_max_tokens", critic)
        imp.set("critic_max_tokens", get.count("critic.forward_max_token_len_per_gpu", critic))
    path = "verl"
    if get(ACTOR + "entropy_from_logits_with_chunking") is True:
        path = "verl-chunked-entropy"
    elif get(ACTOR + "fsdp_config.use_torch_compile") is False:
        path = "verl-eager-entropy"
    if path != "verl":
        imp.set("logprobs", path)
    coeff = get.number(ACTOR + "entropy_coeff", None, -1e6, 1e6)
    if coeff:
        imp.notes.append(f"entropy_coeff {coeff}: the update computes the entropy with gradients too (flash-attn's "
                         "cross entropy without its in-place backward): not modelled, the update is counted without it")
    if get("actor_rollout_ref.model.use_fused_kernels") is True:
        imp.notes.append("use_fused_kernels: verl's fused linear + log-prob kernel keeps no logits; planned with its "
                         "default path (the logits counted), so the passes read high")


def _rollout(imp: ImportedRL, get) -> None:
    name = get.one_of(ROLLOUT + "name", None, ("vllm", "sglang"),
                      what="vllm or sglang (the engines zerocalc accounts for)")
    if name is not None:
        imp.set("rollout.engine", name)
    for key, field in ROLLOUT_KEYS.items():
        value = get.fraction(ROLLOUT + key) if field == "gpu_memory_utilization" else get.count(ROLLOUT + key)
        if value is not None:
            imp.set("rollout." + field, value)
    eager = get.flag(ROLLOUT + "enforce_eager")
    if eager is not None:
        imp.set("rollout.cuda_graphs", not eager)
    if get(ROLLOUT + "free_cache_engine") is False:
        imp.set("rollout.sleep_level", 0)
    dtype = get.one_of(ROLLOUT + "dtype", None, tuple(DTYPES), what=", ".join(DTYPES))
    if dtype is not None:
        imp.set("rollout.dtype", DTYPES[dtype])


def _reason(key: str) -> str:
    if key.startswith(("data.train_files", "data.val_files", "trainer.", "custom_reward_function")):
        return "paths, logging and schedule: no memory effect"
    if key.endswith(("lr", "optim.lr", "coef", "coeff", "kl_loss_type", "entropy_coeff")):
        return "a loss or optimizer coefficient: no memory effect"
    if key.startswith("critic."):
        return "the critic runs the policy's optimizer and recompute settings here"
    if "quantization" in key:
        return "a quantized rollout is not modelled: the engine's weights are counted in its dtype"
    if key.endswith("entropy_checkpointing"):
        return "checkpointing the entropy saves nothing in a no-grad pass, and the update computes none here"
    if key.endswith(("log_prob_micro_batch_size", "ppo_micro_batch_size")):
        return "a global micro-batch (deprecated): give the *_per_gpu key"
    return "not read: no memory rule for it yet"
