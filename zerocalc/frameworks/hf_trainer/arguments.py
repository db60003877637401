"""The Hugging Face TrainingArguments keys both launchers read (LLaMA-Factory passes them straight through to
Seq2SeqTrainingArguments), at transformers 5.x's defaults (training_args.py TrainingArguments):
per_device_train_batch_size 8, gradient_accumulation_steps 1, gradient_checkpointing False, bf16 / fp16 False,
optim "adamw_torch_fused", deepspeed None, fsdp "".

Precision is the Trainer's AMP: with bf16 or fp16 and no DeepSpeed the model's trainable weights, gradients and
Adam states stay fp32 and the forward runs under torch.autocast (zerocalc's fsdp2 ledger, 16 bytes a parameter,
half-precision activations). With DeepSpeed, the followed ds_config decides the ledger (its "auto" bf16 / fp16 are
these flags: transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process).
"""

from __future__ import annotations

from ..common import Builder, Doc, FrameworkConfigError, boolean, count, text

# TrainingArguments.optim (transformers training_args.py OptimizerNames) -> (zerocalc optimizer, optimizer_impl).
# Trainer.get_optimizer_cls_and_kwargs: adamw_torch builds torch AdamW with its default (foreach on CUDA),
# adamw_torch_fused passes fused=True; the bitsandbytes names build bnb.optim.AdamW with optim_bits 8 / is_paged.
OPTIM = {
    "adamw_torch_fused": ("adamw", "fused"), "adamw_torch": ("adamw", "foreach"),
    "adamw_apex_fused": ("adamw", "fused"),
    "adamw_bnb_8bit": ("adamw-8bit-bnb", None), "adamw_8bit": ("adamw-8bit-bnb", None),
    "paged_adamw_8bit": ("paged-adamw-8bit", None), "paged_adamw": ("paged-adamw", None),
    "paged_adamw_32bit": ("paged-adamw", None), "adamw_torch_4bit": ("adamw-4bit-ao", None),
    "adamw_torch_8bit": ("adamw-8bit-ao", None), "adafactor": ("adafactor", None), "sgd": ("sgd", None),
    "lion_32bit": ("lion", None), "paged_lion_32bit": ("lion", None), "galore_adamw": ("galore-adamw", None),
    "apollo_adamw": ("apollo-adamw", None),
}
OPTIM_DEFAULT = "adamw_torch_fused"

# Keys read nowhere in zerocalc, with why (every other unread key gets the generic reason).
NO_BYTES = "run bookkeeping (data, logging, saving, evaluation, schedule): no effect on the bytes zerocalc counts"
IGNORED = {
    "learning_rate": NO_BYTES, "num_train_epochs": NO_BYTES, "max_steps": NO_BYTES, "lr_scheduler_type": NO_BYTES,
    "warmup_ratio": NO_BYTES, "warmup_steps": NO_BYTES, "weight_decay": NO_BYTES, "max_grad_norm": NO_BYTES,
    "logging_steps": NO_BYTES, "save_steps": NO_BYTES, "save_strategy": NO_BYTES, "save_total_limit": NO_BYTES,
    "output_dir": NO_BYTES, "overwrite_output_dir": NO_BYTES, "report_to": NO_BYTES, "run_name": NO_BYTES,
    "seed": NO_BYTES, "resume_from_checkpoint": NO_BYTES, "save_only_model": NO_BYTES, "eval_strategy": NO_BYTES,
    "eval_steps": NO_BYTES, "per_device_eval_batch_size": "evaluation batches: zerocalc counts the training step",
    "do_train": NO_BYTES, "do_eval": NO_BYTES, "ddp_timeout": NO_BYTES, "logging_strategy": NO_BYTES,
    "dataloader_num_workers": "host-side data loading: no GPU bytes", "push_to_hub": NO_BYTES, "hub_model_id": NO_BYTES,
    "gradient_checkpointing_kwargs": "use_reentrant changes no saved bytes zerocalc counts",
    "activation_checkpointing_kwargs": "use_reentrant changes no saved bytes zerocalc counts",
    "tf32": "a matmul precision mode: no effect on stored bytes", "log_level": NO_BYTES, "hub_strategy": NO_BYTES,
    "save_total_limit": NO_BYTES, "remove_unused_columns": NO_BYTES, "logging_first_step": NO_BYTES,
}


def read_batch(doc: Doc, b: Builder) -> tuple:
    """per_device_train_batch_size -> micro_batch, gradient_accumulation_steps -> layout.micro_batches."""
    micro = count("per_device_train_batch_size", doc.get("per_device_train_batch_size", default=8), 1, 10**6)
    gas = count("gradient_accumulation_steps", doc.get("gradient_accumulation_steps", default=1), 1, 100_000)
    b.set("workload", "micro_batch", micro, "per_device_train_batch_size" if doc.has("per_device_train_batch_size")
          else "default: TrainingArguments.per_device_train_batch_size 8")
    b.set("layout", "micro_batches", gas, "gradient_accumulation_steps" if doc.has("gradient_accumulation_steps")
          else "default: TrainingArguments.gradient_accumulation_steps 1")
    return micro, gas


def read_precision(doc: Doc, b: Builder):
    """bf16 / fp16 (both true is refused, as TrainingArguments.__post_init__ refuses it) -> the compute dtype, or
    None for fp32."""
    bf16 = boolean("bf16", doc.get("bf16", default=False))
    fp16 = boolean("fp16", doc.get("fp16", default=False))
    if bf16 and fp16:
        raise FrameworkConfigError("fp16", True, "false when bf16 is true (TrainingArguments: 'At most one of fp16 "
                                                  "and bf16 can be True')")
    return "bf16" if bf16 else "fp16" if fp16 else None


def amp_ledger(b: Builder, compute, source: str) -> None:
    """The Trainer's AMP without DeepSpeed: fp32 weights, gradients and Adam states, compute-dtype activations."""
    for field, value in (("convention", "fsdp2"), ("param_dtype", "fp32"), ("grad_dtype", "fp32"),
                         ("master_dtype", None), ("grad_accum_dtype", None), ("optimizer_dtype", "fp32"),
                         ("comm_dtype", None), ("offload_params", "none"), ("offload_optimizer", "none")):
        b.set("scenario", field, value, source)
    b.set("workload", "activation_dtype", compute or "fp32", source)


def read_optim(doc: Doc, b: Builder) -> None:
    raw = doc.get("optim", default=OPTIM_DEFAULT)
    name = text("optim", raw)
    if name not in OPTIM:
        b.note(f"optim {name}: not one zerocalc maps (it reads {', '.join(sorted(OPTIM))}); the view's optimizer "
               "is kept.")
        return
    optimizer, impl = OPTIM[name]
    src = "optim" if doc.has("optim") else f"default: TrainingArguments.optim {OPTIM_DEFAULT}"
    b.set("scenario", "optimizer", optimizer, src)
    if impl:
        b.set("scenario", "optimizer_impl", impl, src)


def read_checkpointing(doc: Doc) -> tuple:
    """(the key that decided, on?): activation_checkpointing, else its deprecated alias gradient_checkpointing
    (training_args.py __post_init__: the old name is used only when the new one is unset)."""
    for key in ("activation_checkpointing", "gradient_checkpointing"):
        value = doc.get(key, default=None)
        if value is not None:
            if key == "activation_checkpointing" and doc.has("gradient_checkpointing"):
                doc.get("gradient_checkpointing")      # read, and overridden by the new name
            return key, boolean(key, value)
    return None, False


def read_every(doc: Doc, b: Builder) -> None:
    """activation_checkpointing_kwargs.every_n_layers (or the deprecated gradient_checkpointing_kwargs'):
    checkpoints one block in n (transformers 5.24 activation_checkpointing_enable)."""
    for key in ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"):
        kwargs = doc.data.get(key)
        if isinstance(kwargs, dict) and "every_n_layers" in kwargs:
            n = count(f"{key}.every_n_layers", doc.get(key, "every_n_layers"), 1, 10_000)
            b.set("workload", "recompute_every", n, f"{key}.every_n_layers")
        if isinstance(kwargs, dict) and "offload" in kwargs:
            if boolean(f"{key}.offload", doc.get(key, "offload")):
                b.set("workload", "activation_offload", True, f"{key}.offload: the saved inputs in pinned host "
                                                              "memory")
        if isinstance(kwargs, dict):
            return


def read_sharding(doc: Doc, b: Builder, compute, amp_why: str) -> None:
    """deepspeed (followed by the caller) or fsdp (fsdp.py), or else the Trainer's AMP ledger. Both is refused,
    as accelerate refuses a DeepSpeed plugin beside an FSDP one."""
    from .fsdp import fsdp_items, read_fsdp
    ds = read_path(doc, "deepspeed")
    if ds is not None:
        if fsdp_items(doc) is not None:
            raise FrameworkConfigError("fsdp", doc.get("fsdp"), "absent with deepspeed (one sharding engine)")
        b.follows.append(("deepspeed", ds, compute))
        if compute:
            b.set("workload", "activation_dtype", compute, "bf16" if compute == "bf16" else "fp16")
    elif not read_fsdp(doc, b, compute):
        amp_ledger(b, compute, f"bf16 / fp16 ({amp_why})")


def read_path(doc: Doc, key: str):
    """A config path the file points to (a string), or None. A dict (the Trainer also takes the config inline) is
    returned as is."""
    value = doc.get(key, default=None)
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        return value
    return text(key, value, what="a path to a config file")


def ignore_rest(doc: Doc, b: Builder, extra: dict) -> None:
    for key in doc.leftovers():
        top = key.split(".", 1)[0]
        b.ignore(key, extra.get(top) or IGNORED.get(top) or "no effect on the bytes zerocalc counts")
