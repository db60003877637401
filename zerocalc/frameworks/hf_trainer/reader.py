"""Import Hugging Face TrainingArguments, or TRL's SFTConfig / DPOConfig (which extend it), saved as JSON
(TrainingArguments.to_json_string, a run's training_args.json) or YAML (TRL's `trl sft --config FILE.yaml`).
Read at transformers 5.x and TRL's defaults:

- TrainingArguments (hf_trainer/arguments.py): per_device_train_batch_size 8, gradient_accumulation_steps 1,
  activation_checkpointing (gradient_checkpointing, its deprecated alias) False, bf16 / fp16 False, optim
  adamw_torch_fused, deepspeed (a path or inline dict, followed by the caller: follow.py), fsdp / fsdp_config
  (fsdp.py);
- TRL SFTConfig (trl/trainer/sft_config.py): max_length 1024 (max_seq_length, its older name), packing False;
  DPOConfig: max_length 1024, chosen and rejected concatenated (twice the micro-batch);
- model_name_or_path (TRL's ModelConfig, in the same YAML for `trl sft`): the preset; attn_implementation
  (eager -> eager, sdpa / flash_attention_* -> flash, none: transformers' default SDPA); use_peft, lora_r
  (16), lora_target_modules, load_in_4bit / load_in_8bit (QLoRA / int8), bnb_4bit_quant_type (nf4),
  use_bnb_nested_quant (False).
"""

from __future__ import annotations

from ...model.finetune import ALL_LINEAR
from ..accelerate.document import load_mapping
from ..common import (Builder, Doc, FrameworkConfigError, ImportContext, ImportedConfig, boolean, count, number,
                      one_of)
from . import arguments as hf
from .model import read_model

ATTENTION = {"eager": "eager", "sdpa": "flash", "flash_attention_2": "flash", "flash_attention_3": "flash",
             "flex_attention": "flash", "kernels-community/flash-attn": "flash", "kernels-community/vllm-flash-attn3":
             "flash"}
LORA_MODULES = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
                "down_proj": "down"}
TRL_IGNORED = {
    "dataset_name": hf.NO_BYTES, "dataset_text_field": hf.NO_BYTES, "dataset_config": hf.NO_BYTES,
    "completion_only_loss": "which tokens the loss counts: the same tensors", "assistant_only_loss":
    "which tokens the loss counts: the same tensors", "beta": "a loss coefficient: no effect on bytes",
    "lora_alpha": "a scale: no effect on bytes", "lora_dropout": "read only with use_peft",
    "torch_dtype": "the load dtype: bf16 / fp16 decide the ledger", "dtype": "the load dtype: bf16 / fp16 decide "
    "the ledger", "trust_remote_code": "loading policy: no effect on bytes", "model_revision": hf.NO_BYTES,
    "max_prompt_length": "the prompt's share of max_length: the peak is max_length's", "dataset_mixture":
    hf.NO_BYTES, "dataset_num_proc": hf.NO_BYTES, "dataset_train_split": hf.NO_BYTES, "dataset_test_split":
    hf.NO_BYTES, "chat_template": hf.NO_BYTES, "eos_token": hf.NO_BYTES, "pad_token": hf.NO_BYTES,
    "chat_template_path": hf.NO_BYTES,
}


def import_hf_trainer(source, context=None) -> ImportedConfig:
    """TrainingArguments / SFTConfig as JSON or YAML (text or bytes) -> ImportedConfig."""
    data = load_mapping(source, "JSON or YAML", "a mapping of TrainingArguments fields")
    ImportContext.of(context)
    doc, b = Doc(data), Builder("hf_trainer")
    read_model(doc, b, "model_name_or_path") if doc.has("model_name_or_path") else None
    compute = hf.read_precision(doc, b)
    micro, _ = hf.read_batch(doc, b)
    hf.read_optim(doc, b)
    _lengths(doc, b, micro)
    _kernels(doc, b)
    _peft(doc, b, compute)
    hf.read_sharding(doc, b, compute, "the Trainer's AMP: fp32 weights under torch.autocast")
    hf.ignore_rest(doc, b, TRL_IGNORED)
    return b.build()


def _lengths(doc: Doc, b: Builder, micro: int) -> None:
    key = "max_length" if doc.has("max_length") else "max_seq_length" if doc.has("max_seq_length") else None
    if key is not None and doc.get(key) is not None:
        b.set("workload", "seq_len", count(key, doc.get(key), 1, 10**8), key)
    elif key is None:
        b.note("max_length: absent; TRL's SFTConfig truncates at 1024 tokens, a plain Trainer at the data's own "
               "length: the view's seq_len is kept.")
    packing = doc.has("packing") and boolean("packing", doc.get("packing"))
    b.batching(packing, "packing" if doc.has("packing") else "packing (TRL's default False; the Trainer pads)")
    if packing:
        b.note("packing: every sequence is filled to max_length, so seq_len is exact.")
    # DPOConfig: its own keys mark it; chosen and rejected run as one concatenated batch (dpo_trainer.py
    # concatenated_forward)
    if doc.has("beta") and (doc.has("loss_type") or doc.has("max_prompt_length")):
        doc.get("beta")
        b.set("workload", "micro_batch", 2 * micro, "per_device_train_batch_size x 2 (DPO: chosen and rejected "
                                                   "concatenated)")


def _kernels(doc: Doc, b: Builder) -> None:
    key, gc = hf.read_checkpointing(doc)
    b.set("workload", "recompute", "full" if gc else "none", key or "default: TrainingArguments."
                                                                    "activation_checkpointing false")
    if gc:
        hf.read_every(doc, b)
    attn = doc.get("attn_implementation", default=None)
    b.sdpa = attn in (None, "sdpa")            # transformers' default kernel
    if attn is not None:
        name = one_of("attn_implementation", attn, tuple(ATTENTION))
        b.set("workload", "attention", ATTENTION[name], "attn_implementation")


def _peft(doc: Doc, b: Builder, compute) -> None:
    """TRL's ModelConfig (trl/trainer/model_config.py): use_peft False, lora_r 16, lora_target_modules None (the
    model's default targets: q and v for the Llama family in peft's table), load_in_4bit / load_in_8bit."""
    if not boolean("use_peft", doc.get("use_peft", default=False)):
        b.set("finetune", "mode", "full", "default: use_peft false (a full fine-tune)" if not doc.has("use_peft")
              else "use_peft")
        return
    four = boolean("load_in_4bit", doc.get("load_in_4bit", default=False))
    eight = boolean("load_in_8bit", doc.get("load_in_8bit", default=False))
    if four and eight:
        raise FrameworkConfigError("load_in_8bit", True, "false when load_in_4bit is true (TRL ModelConfig: "
                                                         "'You can't use 8 bit and 4 bit precision at the same time')")
    mode = "qlora" if four or eight else "dora" if boolean("use_dora", doc.get("use_dora", default=False)) else "lora"
    b.set("finetune", "mode", mode, "use_peft" + (" / load_in_4bit" if four else " / load_in_8bit" if eight else ""))
    if four or eight:
        b.set("finetune", "kbit_prepare", False, "TRL's SFTTrainer and DPOTrainer no longer call "
              "prepare_model_for_kbit_training (moved to trl.experimental, huggingface/trl PR #4704, v0.26)")
        b.note("TRL before 0.26 called prepare_model_for_kbit_training on a quantized model it did not shard: "
               "fp32 embeddings, head, norms and activations; for such a run set --kbit-prepare yes.")
    if four:
        b.set("finetune", "quant_type", one_of("bnb_4bit_quant_type", doc.get("bnb_4bit_quant_type", default="nf4"),
                                               ("nf4", "fp4")), "bnb_4bit_quant_type")
        b.set("finetune", "double_quant", boolean("use_bnb_nested_quant", doc.get("use_bnb_nested_quant",
                                                                                   default=False)),
              "use_bnb_nested_quant (TRL default false)")
    elif eight:
        b.set("finetune", "quant_type", "int8", "load_in_8bit")
    b.set("finetune", "lora_rank", count("lora_r", doc.get("lora_r", default=16), 1, 1_000_000),
          "lora_r" if doc.has("lora_r") else "default: TRL ModelConfig.lora_r 16")
    b.set("finetune", "lora_dropout", number("lora_dropout", doc.get("lora_dropout", default=0.05), 0.0, 1.0),
          "lora_dropout" if doc.has("lora_dropout") else "default: TRL ModelConfig.lora_dropout 0.05")
    targets = doc.get("lora_target_modules", default=None)
    if targets is not None:
        names = [targets] if isinstance(targets, str) else targets
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise FrameworkConfigError("lora_target_modules", targets, "a module name or a list of them")
        if names in (["all-linear"], ["all"]):
            b.set("finetune", "lora_targets", (ALL_LINEAR,), "lora_target_modules")
        elif all(n in LORA_MODULES for n in names):
            b.set("finetune", "lora_targets", tuple(dict.fromkeys(LORA_MODULES[n] for n in names)),
                  "lora_target_modules")
        else:
            b.note(f"lora_target_modules {names}: not all modules zerocalc counts; the view's targets are kept.")
    if compute:
        b.set("finetune", "base_dtype", compute, "bf16 / fp16: the frozen base in the compute dtype")
