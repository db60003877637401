"""OpenRLHF's train_ppo_ray flags as data: a run script (examples/scripts/train_*_ray_*.sh) or a text list of
flags, never executed. Flag names and defaults from openrlhf 0.11.2 (cli/train_ppo_ray.py: dotted names such as
--vllm.gpu_memory_utilization, default 0.95), with the underscore names of earlier releases (--colocate_all_models,
--vllm_enable_sleep, --deepspeed_enable_sleep, ...) read as the same flags. Which models exist follows
train_ppo_ray.py: a reference when algo.kl.init_coef > 0 (default 0.01); a critic when the advantage estimator is
gae (the default), loaded from the first reward model or else the actor; a reward model unless it is remote.
"""

from __future__ import annotations

from ...frameworks.common import FrameworkConfigError
from .common import GPU_LIMIT, ImportedRL, KeyReader, model_flags, preset_for, scalar, script_tokens

# earlier releases' flag -> the 0.11.2 name (the same setting)
LEGACY = {"colocate_all_models": "train.colocate_all", "vllm_enable_sleep": "vllm.enable_sleep",
          "deepspeed_enable_sleep": "ds.enable_sleep", "vllm_gpu_memory_utilization": "vllm.gpu_memory_utilization",
          "vllm_num_engines": "vllm.num_engines", "vllm_tensor_parallel_size": "vllm.tensor_parallel_size",
          "enforce_eager": "vllm.enforce_eager", "zero_stage": "ds.zero_stage", "adam_offload": "ds.adam_offload",
          "micro_train_batch_size": "train.micro_batch_size", "micro_rollout_batch_size": "rollout.micro_batch_size",
          "rollout_batch_size": "rollout.batch_size", "n_samples_per_prompt": "rollout.n_samples_per_prompt",
          "prompt_max_len": "data.prompt_max_len", "generate_max_len": "rollout.max_new_tokens",
          "pretrain": "actor.model_name_or_path", "reward_pretrain": "reward.model_name_or_path",
          "critic_pretrain": "critic.model_name_or_path", "remote_rm_url": "reward.remote_url",
          "gradient_checkpointing": "actor.gradient_checkpointing_enable", "init_kl_coef": "algo.kl.init_coef",
          "advantage_estimator": "algo.advantage.estimator", "actor_num_nodes": "actor.num_nodes",
          "actor_num_gpus_per_node": "actor.num_gpus_per_node", "ref_reward_offload": "ref.offload",
          "param_dtype": "ds.param_dtype", "use_kl_loss": "algo.kl.use_loss", "packing_samples": "ds.packing_samples",
          "use_dynamic_batch": "train.dynamic_batch_enable", "train_max_tokens_per_gpu": "train.max_tokens_per_gpu",
          "rollout_max_tokens_per_gpu": "rollout.max_tokens_per_gpu", "train_batch_size": "train.batch_size"}
NO_EFFECT = ("save_path", "ckpt_path", "save_hf_ckpt", "max_epochs", "max_samples",
             "actor_learning_rate", "critic_learning_rate", "prompt_data", "input_key", "apply_chat_template",
             "normalize_reward", "vllm_sync_backend", "gamma", "kl_estimator")


def _flags(source, given_as: dict) -> dict:
    """--flag value / --flag (a switch) -> value, in the 0.11.2 names (given_as: the name each was written as);
    the launcher words before the first flag are not read."""
    words = script_tokens(source, "OpenRLHF flag list")
    out, i = {}, 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            i += 1
            continue
        name, _, inline = word[2:].partition("=")
        values = []
        j = i + 1
        while j < len(words) and not words[j].startswith("--"):
            values.append(words[j])
            j += 1
        value = scalar(inline) if inline else (True if not values else scalar(values[0]) if len(values) == 1
                                               else [scalar(v) for v in values])
        out[LEGACY.get(name, name)] = value
        if name in LEGACY:
            given_as[LEGACY[name]] = name
        i = j
    return out


def read_openrlhf(source) -> ImportedRL:
    imp = ImportedRL("openrlhf")
    items = _flags(source, imp.given_as)
    get = KeyReader(items, imp)
    used = get.used

    estimator = get("algo.advantage.estimator", "gae")
    imp.set("algorithm", "ppo" if estimator == "gae" else "grpo")
    imp.set("framework", "openrlhf")
    actor = get("actor.model_name_or_path")
    if actor is not None:
        model_flags(imp, "actor.model_name_or_path", actor)
    gpus = get.count("actor.num_gpus_per_node", 8, hi=GPU_LIMIT) * get.count("actor.num_nodes", 1, hi=GPU_LIMIT)
    if gpus > GPU_LIMIT:
        raise FrameworkConfigError(get.name("actor.num_nodes"), items["actor.num_nodes"], f"at most {GPU_LIMIT:,} "
                                   "GPUs in all (actor.num_gpus_per_node x actor.num_nodes)")
    imp.policy["--gpus"] = str(gpus)
    imp.policy["--convention"] = "deepspeed"
    imp.notes.append("DeepSpeed bf16 (OpenRLHF's engine): bf16 parameters and gradients, fp32 gradient "
                     "accumulation, master copy and Adam moments (the deepspeed convention, 20 bytes per parameter)")
    # argparse type=int: 2.0 and true are refused, as train_ppo_ray.py refuses them
    imp.set("policy_stage", get.one_of("ds.zero_stage", 2, (0, 1, 2, 3), what="0, 1, 2 or 3"))
    if get("ds.adam_offload") is True:
        imp.policy["--offload-optimizer"] = "cpu"
    imp.policy["--micro-batch"] = str(get.count("train.micro_batch_size", 1))
    _batching(imp, get)
    imp.policy["--recompute"] = "full" if get("actor.gradient_checkpointing_enable") is True else "none"
    prompt = get.count("data.prompt_max_len")
    response = get.count("rollout.max_new_tokens")
    total = get.count("data.max_len")
    if prompt is not None:
        imp.set("prompt_length", prompt)
    if response is not None:
        imp.set("response_length", response)
    elif total is not None and prompt is not None:
        if total <= prompt:
            raise FrameworkConfigError(get.name("data.max_len"), total, f"more than {get.name('data.prompt_max_len')}"
                                       f" ({prompt:,}): the response gets what is left")
        imp.set("response_length", total - prompt)
    imp.set("prompts_per_step", get.count("rollout.batch_size", 1024))
    imp.set("group_size", get.count("rollout.n_samples_per_prompt", 1))
    sleep = get("ds.enable_sleep") is True
    imp.set("policy_param_offload", sleep)
    imp.set("policy_optimizer_offload", sleep)
    kl = get.number("algo.kl.init_coef", 0.01, 0.0, 1e6)
    get("algo.kl.use_loss")
    if kl > 0:
        imp.set("reference", "same")
        imp.set("reference_offload", get("ref.offload") is True)
    reward = get("reward.model_name_or_path")
    remote = get("reward.remote_url")
    if reward is not None and remote is None:
        first = str(reward).split(",")[0]
        imp.set("reward", preset_for(first) or "same")
        imp.set("reward_offload", get("ref.offload") is True or get("reward.offload") is True)
    if estimator == "gae":
        critic = get("critic.model_name_or_path") or (str(reward).split(",")[0] if reward and not remote else actor)
        imp.set("critic", preset_for(critic) or "same")
        imp.set("critic_param_offload", sleep)
        imp.set("critic_optimizer_offload", sleep)
    _rollout(imp, get, gpus)
    for key in items:
        if key not in used:
            imp.ignore(key, "paths, data, logging or a loss setting: no memory effect" if key in NO_EFFECT else
                       "not read: no memory rule for it yet")
    return imp


def _batching(imp: ImportedRL, get) -> None:
    """Packing and each pass's micro-batch (rl/batching.py): the updates run train.micro_batch_size, the forward
    passes that make the experience rollout.micro_batch_size (trainer/ppo_utils/experience_maker.py
    split_rollout_samples); dynamic batches cut by token budgets, and they turn packing on (cli/train_ppo_ray.py)."""
    scoring = get.count("rollout.micro_batch_size", 1)
    for key in ("logprob_micro_batch", "reference_micro_batch", "reward_micro_batch", "critic_micro_batch"):
        imp.set(key, scoring)
    # one optimizer step: train.batch_size samples (cli/train_ppo_ray.py "Global training batch size")
    samples = get.count("train.batch_size", 128)
    imp.set("mini_batch", max(1, samples // get.count("rollout.n_samples_per_prompt", 1)))
    dynamic = get("train.dynamic_batch_enable") is True
    imp.set("packing", dynamic or get("ds.packing_samples") is True)
    if dynamic:
        train = get.count("train.max_tokens_per_gpu", 16192)
        rollout = get.count("rollout.max_tokens_per_gpu", train)
        imp.set("max_tokens", train)
        imp.set("critic_update_max_tokens", train)
        for key in ("logprob_max_tokens", "reference_max_tokens", "reward_max_tokens", "critic_max_tokens"):
            imp.set(key, rollout)


def _rollout(imp: ImportedRL, get, gpus: int) -> None:
    engines = get.count("vllm.num_engines", lo=0, hi=GPU_LIMIT)
    tp = get.count("vllm.tensor_parallel_size", 1, hi=GPU_LIMIT)
    imp.set("rollout.tp", tp)
    colocate = get("train.colocate_all") is True
    imp.set("placement", "colocated" if colocate else "split")
    if not colocate and engines:
        imp.set("rollout_gpus", engines * tp)
    elif colocate and engines and engines * tp != gpus:
        raise FrameworkConfigError(get.name("vllm.num_engines"), engines, f"num_engines x tensor_parallel_size = "
                                   f"the actor's GPUs ({gpus}) with colocate_all (train_ppo_ray.py asserts it)")
    imp.set("rollout.gpu_memory_utilization", get.fraction("vllm.gpu_memory_utilization", 0.95))
    imp.set("rollout.sleep_level", 1 if get("vllm.enable_sleep") is True and colocate else 0)
    if get("vllm.enforce_eager") is True:
        imp.set("rollout.cuda_graphs", False)
