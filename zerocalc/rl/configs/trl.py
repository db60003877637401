"""TRL's GRPOConfig as data: the YAML or JSON mapping `TrlParser` (trl scripts, open-r1 recipes) turns into a
GRPOConfig and its model arguments, never executed. Field names and defaults from trl 1.16.0
(trainer/grpo_config.py: num_generations 8, max_completion_length 512, use_vllm false, vllm_mode colocate,
vllm_gpu_memory_utilization 0.3, vllm_tensor_parallel_size 1, vllm_enable_sleep_mode false, beta 0.0, and its
overrides of TrainingArguments: gradient_checkpointing true, bf16 true); the engine's max_num_seqs as GRPOTrainer
sets it (per_device_train_batch_size x vllm_tensor_parallel_size x steps_per_generation) and generation_batch_size
as GRPOConfig.__post_init__ works it out (per_device_train_batch_size x processes x steps_per_generation, where
steps_per_generation defaults to gradient_accumulation_steps). A reference exists only with beta > 0; with PEFT it
is the base with the adapters off.
"""

from __future__ import annotations

from ...frameworks.accelerate.document import load_yaml
from ...frameworks.common import FrameworkConfigError, parse_json
from .common import ImportedRL, KeyReader, model_flags

PER_DEVICE_DEFAULT = 8           # transformers TrainingArguments.per_device_train_batch_size
PROMPT_DEFAULT = 512             # a prompt length to plan with when the config names none (GRPOConfig has none now)


def _mapping(source) -> dict:
    text = source.decode("utf-8", "replace") if isinstance(source, (bytes, bytearray)) else source
    if isinstance(text, str) and text.lstrip().startswith("{"):
        return parse_json(source)
    data = load_yaml(source)
    if not isinstance(data, dict):
        raise FrameworkConfigError("config", type(data).__name__, "a GRPOConfig as a YAML or JSON mapping")
    return data


def read_trl(source, processes: int = 1) -> ImportedRL:
    """`processes`: the training processes (GPUs) GRPOConfig divides the generation batch over."""
    items = _mapping(source)
    imp = ImportedRL("trl")
    get = KeyReader(items, imp)
    used = get.used

    imp.set("algorithm", "grpo")
    imp.set("framework", "trl")
    path = get("model_name_or_path")
    if path is not None:
        model_flags(imp, "model_name_or_path", path)
    generations = get.count("num_generations", 8)
    imp.set("group_size", generations)
    imp.set("response_length", get.count("max_completion_length", 512))
    prompt = get.count("max_prompt_length")
    imp.set("prompt_length", PROMPT_DEFAULT if prompt is None else prompt)
    if prompt is None:
        imp.notes.append(f"no max_prompt_length: prompts of {PROMPT_DEFAULT} tokens planned (--prompt-length)")
    per_device = get.count("per_device_train_batch_size", PER_DEVICE_DEFAULT)
    imp.policy["--micro-batch"] = str(per_device)
    accumulation = get.count("gradient_accumulation_steps", 1)
    steps = get.count("steps_per_generation")
    batch = get.count("generation_batch_size")
    if batch is not None:
        steps = batch // (per_device * processes) or 1
    steps = accumulation if steps is None else steps
    batch = per_device * processes * steps if batch is None else batch
    imp.set("prompts_per_step", max(1, batch // generations))
    imp.policy["--micro-batches"] = str(accumulation)
    # one optimizer step: per_device_train_batch_size x processes x gradient_accumulation_steps completions
    imp.set("mini_batch", max(1, per_device * processes * accumulation // generations))
    imp.policy["--recompute"] = "full" if get.flag("gradient_checkpointing", True) else "none"
    kwargs = get("model_init_kwargs") or {}
    dtype = get("torch_dtype") or (kwargs.get("torch_dtype") if isinstance(kwargs, dict) else None)
    imp.policy["--convention"] = "pure-bf16" if dtype in ("bfloat16", "bf16") else "fsdp2"
    imp.notes.append("weights loaded in bfloat16 (torch_dtype): pure bf16 training, Adam's moments in bf16"
                     if dtype in ("bfloat16", "bf16") else "fp32 weights under bf16 autocast (Trainer): fp32 "
                     "parameters, gradients and Adam moments, 16 bytes per parameter")
    if get("use_vllm", False) is not True:
        imp.notes.append("use_vllm is false: TRL generates with transformers in the training process; planned "
                         "with a colocated vLLM engine instead (set use_vllm: true, or read the engine rows as "
                         "approximate)")
    mode = get.one_of("vllm_mode", "colocate", ("colocate", "server"), what="colocate or server")
    imp.set("placement", "colocated" if mode == "colocate" else "split")
    if mode == "server":
        imp.notes.append("vllm_mode server: the engine runs on GPUs of its own; give them with --rollout-gpus")
    if get("vllm_device") is not None and "vllm_mode" not in items:
        # TRL 0.14-0.15 (GRPOConfig.vllm_device, "auto": the next GPU after the training processes)
        imp.set("placement", "split")
        imp.set("rollout_gpus", 1)
        imp.notes.append(f"vllm_device {items['vllm_device']} (TRL 0.14-0.15): vLLM on one GPU of its own beside the "
                         "training processes; --gpus counts the training GPUs")
    imp.notes.append("the ZeRO / FSDP stage comes from accelerate's config, not this file: give --stage (default 3)")
    tp = get.count("vllm_tensor_parallel_size", 1)
    imp.set("rollout.tp", tp)
    imp.set("rollout.gpu_memory_utilization", get.fraction("vllm_gpu_memory_utilization", 0.3))
    imp.set("rollout.sleep_level", 2 if get.flag("vllm_enable_sleep_mode", False) else 0)
    imp.set("rollout.max_num_seqs", per_device * tp * steps)
    for key in ("vllm_max_model_length", "vllm_max_model_len"):
        if (value := get.count(key)) is not None:
            imp.set("rollout.max_model_len", value)
    beta = get.number("beta", 0.0, 0.0, 1e6)             # the KL coefficient: a reference exists when above 0
    peft = get("use_peft", False) is True
    if peft:
        imp.policy["--finetune"] = "lora"
        imp.policy["--lora-rank"] = str(get.count("lora_r", 16))
        targets = get("lora_target_modules")
        if targets == "all-linear" or targets == ["all-linear"]:
            imp.policy["--lora-targets"] = "all-linear"
    if beta > 0:
        imp.set("reference", "same")
        imp.set("reference_shares_policy", peft)
    for key in items:
        if key not in used:
            imp.ignore(key, "not read: no memory effect modelled (data, logging, schedule or a generation "
                            "setting)" if key not in ("vllm_device", "vllm_dtype") else
                       "a TRL field of older releases (trl 1.16.0 has none)")
    if "vllm_device" in used:
        imp.ignored = [i for i in imp.ignored if i["key"] != "vllm_device"]
    return imp
