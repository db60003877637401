"""torchtitan's config schema at the commit zerocalc reads it at (data): the sections, the fields of the dataclasses
zerocalc reads (torchtitan/config/job_config.py), the dtypes and pipeline schedules by name.
"""

COMMIT = "238fa9953e4aec2a62582121564273d7cbb1e9f1"
SRC = f"torchtitan job_config.py default ({COMMIT[:7]})"
SECTIONS = ("job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training", "parallelism",
            "checkpoint", "activation_checkpoint", "compile", "quantize", "comm", "memory_estimation",
            "fault_tolerance", "experimental", "validation", "debug")
FIELDS = {   # the dataclasses zerocalc reads, every field (job_config.py)
    "training": ("dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "enable_cpu_offload", "dtype", "mixed_precision_param", "mixed_precision_reduce", "gc_freq",
                 "gc_debug", "dataloader"),
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
                    "pipeline_parallel_degree", "module_fqns_per_model_part",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_expert_parallel_overlap", "context_parallel_degree",
                    "context_parallel_load_balancer", "context_parallel_rotate_method", "expert_parallel_degree",
                    "expert_tensor_parallel_degree", "expert_parallel_comm_backend"),
    "activation_checkpoint": ("mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns",
                              "early_stop", "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
                              "determinism_check", "debug"),
    "compile": ("enable", "components", "backend"),
    "optimizer": ("name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation", "early_step_in_backward"),
}
DTYPES = {"bfloat16": "bf16", "float32": "fp32"}      # training.dtype / mixed_precision_param Literals
# torch.distributed.pipelining.schedules.get_schedule_class names (case-insensitive) -> zerocalc schedule.
SCHEDULES = {"1f1b": "1f1b", "interleaved1f1b": "interleaved", "gpipe": "gpipe", "loopedbfs": "gpipe",
             "interleavedzerobubble": "interleaved", "zbvzerobubble": "interleaved", "dualpipev": "interleaved",
             "pipelineschedulesingle": None, "pipelineschedulemulti": None}
SINGLE_STAGE = ("1f1b", "gpipe", "pipelineschedulesingle")
LIMIT = 10**6

# optimizer.name = "Muon": torchtitan at the pinned commit builds Adam and AdamW only (components/optimizer.py
# optimizer_classes); a build that adds Muon is read as torch.optim.Muon with an AdamW fallback.
MUON_NOTE = ("optimizer.name = 'Muon': torchtitan at this commit builds Adam and AdamW only (optimizer_classes); a "
             "build that adds Muon is read as torch.optim.Muon on Moonlight's set (2-D and up, not embeddings or "
             "head) with AdamW on the rest, each matrix orthogonalised whole (gathered from its FSDP and TP shards).")
# (model.name, model.flavor) -> the zerocalc preset with the same shapes (torchtitan's models/*/__init__.py flavor
# tables: llama3 8B / 70B / 405B are Llama 3.1's; qwen3's flavors are the Qwen3 releases; deepseek_v3 671B is V3's)
FLAVORS = {("llama3", "8B"): "llama-3.1-8b", ("llama3", "70B"): "llama-3.1-70b", ("llama3", "405B"): "llama-3.1-405b",
           ("qwen3", "0.6B"): "qwen3-0.6b", ("qwen3", "4B"): "qwen3-4b", ("qwen3", "8B"): "qwen3-8b",
           ("qwen3", "14B"): "qwen3-14b", ("qwen3", "32B"): "qwen3-32b", ("qwen3", "30B-A3B"): "qwen3-30b-a3b",
           ("qwen3", "235B-A22B"): "qwen3-235b-a22b", ("deepseek_v3", "671B"): "deepseek-v3"}
