"""What a torchtune recipe YAML's names mean to zerocalc, at pytorch/torchtune commit
bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1 (torchtune/models/*/_model_builders.py, recipes/*.py)."""

from __future__ import annotations

# model._component_'s builder (its lora_ / qlora_ prefix removed) -> zerocalc preset. qlora_X is
# partial(lora_X, quantize_base=True) in every _model_builders.py.
PRESETS = {
    "llama2_7b": "llama-2-7b", "llama2_13b": "llama-2-13b", "llama2_70b": "llama-2-70b",
    "llama3_8b": "llama-3-8b", "llama3_70b": "llama-3-70b", "llama3_1_8b": "llama-3.1-8b",
    "llama3_1_70b": "llama-3.1-70b", "llama3_1_405b": "llama-3.1-405b", "llama3_2_1b": "llama-3.2-1b",
    # llama3_3/_model_builders.py builds llama3_3_70b with llama3_1's 70B component: the same shapes
    "llama3_3_70b": "llama-3.1-70b",
    "mistral_7b": "mistral-7b", "gemma_2b": "gemma-2b", "gemma_7b": "gemma-7b", "gemma2_2b": "gemma-2-2b",
    "gemma2_9b": "gemma-2-9b", "gemma2_27b": "gemma-2-27b", "phi3_mini": "phi-3-mini", "phi4_14b": "phi-4",
    "qwen2_7b": "qwen2.5-7b", "qwen2_5_0_5b": "qwen2.5-0.5b", "qwen2_5_7b_base": "qwen2.5-7b",
    "qwen2_5_7b_instruct": "qwen2.5-7b", "qwen3_0_6b_base": "qwen3-0.6b", "qwen3_0_6b_instruct": "qwen3-0.6b",
    "qwen3_4b_base": "qwen3-4b", "qwen3_4b_instruct": "qwen3-4b", "qwen3_8b_base": "qwen3-8b",
    "qwen3_8b_instruct": "qwen3-8b", "qwen3_14b_base": "qwen3-14b", "qwen3_14b_instruct": "qwen3-14b",
    "qwen3_32b": "qwen3-32b",
}

# lora_attn_modules / apply_lora_to_mlp / apply_lora_to_output -> zerocalc's LoRA targets (w1 gate, w3 up, w2 down)
ATTN_TARGETS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "output_proj": "o"}
MLP_TARGETS = ("gate", "up", "down")

# optimizer._component_ -> zerocalc optimizer (torch.optim.AdamW / Adam / SGD read their fused / foreach / momentum)
OPTIMIZERS = {
    "torch.optim.AdamW": "adamw", "torch.optim.Adam": "adam", "torch.optim.SGD": "sgd",
    "bitsandbytes.optim.PagedAdamW8bit": "paged-adamw-8bit", "bitsandbytes.optim.PagedAdamW": "paged-adamw",
    "bitsandbytes.optim.PagedAdamW32bit": "paged-adamw", "bitsandbytes.optim.AdamW8bit": "adamw-8bit-bnb",
    "torchao.optim.AdamW8bit": "adamw-8bit-ao", "torchao.optim.AdamW4bit": "adamw-4bit-ao",
    "torchao.optim.AdamWFp8": "adamw-fp8-ao", "torchao.prototype.low_bit_optim.AdamW8bit": "adamw-8bit-ao",
    "torchao.prototype.low_bit_optim.AdamW4bit": "adamw-4bit-ao",
}

# loss._component_ -> zerocalc's loss (step/losses.py). LinearCrossEntropyLoss projects and upcasts one chunk of
# tokens at a time inside the loss (modules/loss/cross_entropy_loss.py); zerocalc's nearest row is the chunked
# output's (CEWithChunkedOutputLoss), which also keeps the bf16 chunks until the loss ends: measured on the CPU
# (tests/measure/linear_ce.py), the same saved bytes and backward peak, a forward peak 1.77 bytes per T x V lower.
LOSSES = {
    "torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked",
    "torchtune.modules.loss.LinearCrossEntropyLoss": "chunked",
    "torch.nn.CrossEntropyLoss": "auto",
}

# Recipes (recipes/*.py), named in each config's header comment ("# Config for ... in lora_finetune_single_device.py"
# and "tune run RECIPE --config ..."): whether they shard over FSDP2, and what their step adds.
RECIPES = {
    "full_finetune_single_device": (False, ""), "lora_finetune_single_device": (False, ""),
    "full_finetune_distributed": (True, ""), "lora_finetune_distributed": (True, ""),
    "lora_dpo_single_device": (False, "dpo"), "lora_dpo_distributed": (True, "dpo"),
    "full_dpo_distributed": (True, "dpo-reference"),
    "knowledge_distillation_single_device": (False, "teacher"), "knowledge_distillation_distributed": (True, "teacher"),
    "qat_single_device": (False, "qat"), "qat_distributed": (True, "qat"),
    "qat_lora_finetune_distributed": (True, "qat"),
    "ppo_full_finetune_single_device": (False, "ppo"),
}
EXTRAS = {
    "dpo-reference": "full_dpo_distributed keeps a frozen reference model beside the policy; zerocalc counts the "
                     "policy alone.",
    "teacher": "knowledge distillation runs a frozen teacher model beside the student; zerocalc counts the student "
               "alone.",
    "qat": "quantization-aware training's fake-quantized linears (torchao) are not modelled; the plain step is "
           "counted.",
    "ppo": "PPO's reference, reward and value models and its generations are not counted; the policy's step is.",
}
# Keys only the distributed recipes read: a file without a recipe name that holds one is taken as distributed
DISTRIBUTED_KEYS = ("fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers", "tensor_parallel_dim",
                    "context_parallel_dim", "data_parallel_shard_dim", "data_parallel_replicate_dim")

LOG = "run bookkeeping (checkpoints, logging, validation, schedule): no effect on the bytes zerocalc counts"
DATA = "dataset selection and preprocessing: no effect on the bytes of a step"
IGNORED = {
    "output_dir": LOG, "checkpointer": LOG, "resume_from_checkpoint": LOG, "save_adapter_weights_only": LOG,
    "seed": LOG, "shuffle": DATA, "epochs": LOG, "max_steps_per_epoch": LOG, "clip_grad_norm": "clipping reads the "
    "gradients in place: no bytes zerocalc counts", "lr_scheduler": LOG, "metric_logger": LOG,
    "log_every_n_steps": LOG, "log_peak_memory_stats": LOG, "log_level": LOG, "profiler": LOG,
    "device": "the device type: zerocalc counts a GPU", "dataset_val": LOG, "run_val_every_n_steps": LOG,
    "batch_size_val": "validation batches: zerocalc counts the training step", "tokenizer": DATA, "dataset": DATA,
    "collate_fn": DATA, "enable_async_checkpointing": LOG, "cudnn_deterministic_mode": "a kernel choice: no bytes",
    "low_cpu_ram": "host memory while loading: no effect on the GPU's step",
    "custom_sharded_layers": "the embedding and output as their own FSDP units: zerocalc's unit is one layer",
    "tensor_parallel_plan": "the plan's module names: tensor_parallel_dim sets the degree",
    "resize_token_embeddings": DATA, "model.lora_alpha": "a scale: no effect on bytes",
    "optimizer": "a hyperparameter: no effect on bytes", "loss": "a loss option: the same tensors",
}
