"""Every control's label and, for jargon, its help text: data the sidebar and the compare table read."""

from zerocalc.gpus import estimated_names

LABELS = {
    "model": "Model (type to search)", "params": "Parameters (7B, 1.5T, 350M, 1e9 ...)", "layers": "Layers",
    "hidden": "Hidden size", "heads": "Attention heads", "kv_heads": "KV heads (GQA)",
    "head_dim": "Head size (0: hidden / heads)", "ffn": "FFN size", "vocab": "Vocabulary",
    "context": "Context length (learned positions)", "tied_embeddings": "Tied embeddings",
    "gated_mlp": "Gated MLP (SwiGLU)", "norm": "Norm", "bias": "Linear biases", "qkv_bias": "Q/K/V biases",
    "positions": "Positions", "fused_qkv": "Fused QKV module", "fused_gate_up": "Fused gate/up module",
    "activation": "Activation", "softmax_fp32": "Softmax in fp32 (eager)", "attn_dropout": "Attention dropout",
    "resid_dropout": "Residual dropout", "embd_dropout": "Embedding dropout",
    "attn_bias": "Attention biases (q, k, v, o)", "mlp_bias": "MLP biases", "qk_norm": "Q/K norm",
    "sandwich_norm": "Sandwich norms", "attention_sinks": "Attention sinks", "attn_softcap": "Attention soft-cap",
    "final_softcap": "Final logit soft-cap", "sliding_window": "Sliding window (0: none)",
    "sliding_pattern": "Every n-th layer global", "local_rope": "Own rotary tables for local layers",
    "parallel_residual": "Parallel attention + MLP", "shared_norm": "One norm for both branches",
    "rotary_pct": "Rotated share of each head", "head_bias": "LM head bias", "kv_expand": "K/V layout (Falcon)",
    "q_lora_rank": "MLA q_lora_rank", "kv_lora_rank": "MLA kv_lora_rank (0: not MLA)",
    "qk_nope_dim": "MLA qk_nope_head_dim", "qk_rope_dim": "MLA qk_rope_head_dim", "v_head_dim": "MLA v_head_dim",
    "experts": "Routed experts (0: dense)", "experts_per_token": "Experts per token (top-k)",
    "expert_ffn": "Expert FFN size (0: FFN size)", "shared_expert_ffn": "Shared expert FFN size",
    "shared_expert_gate": "Shared expert gate", "router": "Router", "norm_topk": "Renormalise top-k",
    "router_bias": "Router bias", "router_fp32": "Router kept in fp32", "route_weights_fp32": "fp32 routing weights",
    "expert_bias": "Expert biases", "first_dense_layers": "First dense layers", "moe_step": "MoE every n-th layer",
    "convention": "Convention (bytes per parameter)", "param_dtype": "Parameters dtype",
    "grad_dtype": "Gradients dtype", "master_dtype": "Master copy dtype",
    "grad_accum_dtype": "Extra gradient buffer", "optimizer": "Optimizer",
    "optimizer_dtype": "Optimizer state dtype", "comm_dtype": "Communication dtype",
    "fallback_optimizer": "Muon's fallback optimizer", "ns_dtype": "Newton-Schulz dtype",
    "muon_tp": "Muon under tensor parallelism", "optimizer_rank": "Projection rank (GaLore / APOLLO)",
    "optimizer_impl": "Adam step implementation",
    "workers": "Data-parallel workers (dp)", "shard_group": "Shard group (0: all workers)",
    "gpus_per_node": "Workers per node", "offload_optimizer": "Offload optimizer",
    "offload_params": "Offload parameters (ZeRO-3)",
    "micro_batch": "Micro-batch (sequences per GPU)", "seq_len": "Sequence length (± steps by powers of two)",
    "attention": "Attention kernel", "recompute": "Activation recompute", "activation_dtype": "Activation dtype",
    "implementation": "Kernels (what is saved)",
    "reduce_bucket_size": "reduce_bucket_size (elements)", "allgather_bucket_size": "allgather_bucket_size (elements)",
    "prefetch_bucket_size": "stage3_prefetch_bucket_size", "max_live_parameters": "stage3_max_live_parameters",
    "param_persistence_threshold": "stage3_param_persistence_threshold", "overlap_comm": "overlap_comm",
    "cuda_context_bytes": "CUDA context + framework (bytes)", "nccl_buffsize": "NCCL_BUFFSIZE (bytes)",
    "nccl_nvls": "NCCL NVLS buffers (NVSwitch, Hopper on)", "nccl_percent": "NCCL buffers counted (%)", "fragmentation_percent": "Allocator reserve (%; -1: the model)",
    "measured_extra_bytes": "Measured beyond the estimate (bytes)",
    "host_ram_gb": "Host RAM per node (GB; 0: not checked)",
    "model_loading": "Model loading at start-up",
    "transformers_version": "transformers release", "bitsandbytes_version": "bitsandbytes release",
    "workspace_bytes": "Library workspaces (bytes; -1: by GPU)",
    "comm_buffers": "Communication buffers (whose)", "fsdp_wrap": "FSDP wrap units",
    "fsdp_version": "FSDP version", "fsdp_use_orig_params": "FSDP1 use_orig_params",
    "fsdp_backward_prefetch": "FSDP1 backward prefetch",
    "grad_lifetime": "Gradients live",
    "reshard_after_forward": "FSDP reshard after forward", "reduce_dtype": "FSDP reduce dtype",
    "allocator": "Allocator (reserve band)", "allocator_units": "Allocator: ZeRO-3 unit cycles held",
    "loss_fusion": "Megatron --cross-entropy-loss-fusion",
    "loss": "Loss implementation", "loss_chunks": "Loss chunks", "compile": "torch.compile the blocks",
    "repeat_kv": "Attention repeats K and V (torchtune, LitGPT)",
    "activation_offload": "Offload activations to the CPU", "optimizer_in_backward": "Optimizer step in backward",
    "float8": "float8 linears (torchao)", "op_policy": "Op-level policy (what it saves)", "op_saves": "Ops your policy saves", "float8_all_gather": "FSDP float8 all-gather", "async_tp": "Async tensor parallel (torchtitan)",
    "moe_imbalance_percent": "MoE busiest rank's load (% of balanced)",
    "moe_capacity_percent": "MoE capacity factor (%; 0: dropless)",
    "moe_dispatcher": "Token dispatcher (expert parallelism)", "batch_mode": "Batch: fixed, padded or packed", "batch_lengths": "Sample lengths (percentiles)", "router_loss": "MoE load-balancing loss (output_router_logits)",
    "holds_output": "The loop holds the model's output (logits) through backward",
    "holds_graph": "The loop keeps the last step's loss into the next step",
    "gpu": "GPU", "gpu_memory": "Custom capacity", "buffer_factor": "DeepSpeed buffer factor",
    "units": "Units", "breakdown": "Bars by", "stage": "ZeRO stage to check",
    "tp": "Tensor parallel (tp)", "pp": "Pipeline stages (pp)", "schedule": "Pipeline schedule",
    "vpp": "Virtual stages per rank (vpp)", "cp": "Context parallel (cp)", "sequence_parallel": "Sequence parallel",
    "loss_parallel": "Vocab-parallel logits and loss", "vocab_divisor": "Pad vocabulary to a multiple of (x tp; 0: auto)",
    "ep": "Expert parallel (ep)", "etp": "Expert tensor parallel (etp)",
    "stage_split": "Layers per pipeline stage", "stage_layers": "Layers of each stage (schedule order)",
    "first_stage_layers": "Layers on the first pipeline rank", "last_stage_layers": "Layers on the last pipeline rank",
    "embedding_weight": "Embedding counted as layers (-1: the rule's)",
    "head_weight": "Head counted as layers (-1: the rule's)",
    "micro_batches": "Micro-batches per step (gradient accumulation)",
    "recompute_every": "Full recompute of one block in N",
    "mtp_layers": "Multi-token prediction modules trained",
    "recompute_modules": "Megatron's recompute modules", "recompute_method": "Megatron's recompute method",
    "recompute_num_layers": "Megatron's recompute layers (N)",
    "finetune": "What trains", "lora_rank": "Adapter rank (r)", "lora_targets": "Adapted modules",
    "lora_dropout": "Adapter dropout", "adapter_dtype": "Adapter dtype", "modules_to_save": "Also trained in full",
    "train_last_layers": "Train the last k blocks", "train_modules": "Also train", "base_dtype": "Frozen base dtype",
    "quant_type": "Base quantization", "quant_block_size": "4-bit block size",
    "double_quant": "Double quantization (quantize the scales)",
    "kbit_prepare": "prepare_model_for_kbit_training (fp32 non-quantized weights)",
    "quantize_head": "Output head quantized too (Lightning Fabric / LitGPT)",
    "fp32_parts": "Kept in fp32 by the loader",
    # vision-language models (issue 37: ui/state/vision.py)
    "images_per_sample": "Images per sample", "image_width": "Image width (px)", "image_height": "Image height (px)",
    "pixel_budget": "Pixel budget per image (0: the checkpoint's)", "video_frames": "Video frames per sample (Qwen)",
    "pan_and_scan": "Pan and scan (Gemma 3)", "vision_training": "Vision tower", "vision_lora_rank": "Tower LoRA rank",
}
HELP = {
    "model": "Type to search the 52 presets (published parameter counts); custom: edit the architecture or load "
             "a config.json / Hub model; params-only: model states from a parameter count alone.",
    "params": "A count such as 7B or 124439808; the peak needs an architecture, so only model states are shown.",
    "convention": "Which tensors a framework keeps per parameter (zero-paper 16 bytes, deepspeed 20, megatron 18, "
                  "fsdp2 16, pure-bf16 8); each dtype under Precision can then be changed.",
    "units": "GB = 10^9 bytes, GiB = 2^30 bytes (nvidia-smi's MiB is 2^20 bytes).",
    "stage": "The ZeRO stage you plan to run: 0 plain data parallel, 1 shards the optimizer state, 2 also the "
             "gradients, 3 also the parameters (FSDP FULL_SHARD). The verdict, the fixes and the step timeline "
             "check this one.",
    "gpu": ("The verdict uses what PyTorch can use on the card (torch.cuda.get_device_properties' total_memory, the "
            "OOM message's \"total capacity\"), below nvidia-smi's total: an H100 80GB shows 81,559 MiB = 85.52 GB "
            "in nvidia-smi, 79.11 GiB = 84.94 GB in PyTorch. Each card's figure is published (How to read it: the "
            "GPU catalogue). Still estimated, no PyTorch figure published: " + ", ".join(estimated_names())
            + " (nvidia-smi's total less the largest gap published for their memory family)."),
    "gpu_memory": ("What PyTorch can use on your GPU, with its unit: 48 GB, 44.4 GiB, 46068 MiB. The OOM "
                   "message's \"total capacity\" or torch.cuda.get_device_properties(0).total_memory gives it; nvidia-smi's "
                   "total is higher (the driver keeps part of it). A bare number is bytes and must be at least 1 GiB."),
    "workers": "The ZeRO / FSDP group: GPUs that each hold a replica (or a shard) of the model. "
               "World size = dp x tp x pp x cp.",
    "micro_batch": "Sequences each GPU processes per forward/backward (per_device_train_batch_size).",
    "seq_len": "Tokens per sequence. The + and - buttons step through powers of two; any value can be typed.",
    "recompute": "Activation checkpointing: selective recomputes eager attention's scores; op is torchtitan's "
                 "op-level policy (each block keeps its input, every second matmul's output and the attention "
                 "output; the rest runs again in backward); full keeps only each block's input and runs the "
                 "forward again in backward (about a third more compute); one block in N only: Step details.",
    "recompute_every": "With full recompute: checkpoint the N-th, 2N-th... block of each rank and keep every "
                       "activation of the others (torchtitan's selective_ac_option = \"N\"). 1: every block.",
    "recompute_modules": "With selective recompute: Megatron's --recompute-modules. core_attn (its default) is the "
                         "attention-score recompute; layernorm and moe_act free the norms' and the experts' "
                         "activation outputs (rebuilt in backward); mlp, moe, shared_experts and mla_up_proj "
                         "keep only their inputs and re-run their matmuls. Measured on the CPU with Megatron's "
                         "own checkpoint functions.",
    "mtp_layers": "Megatron's --mtp-num-layers: each module (enorm, hnorm, eh_proj, one block of the last block's "
                  "kind, a final norm) sits on the last pipeline stage with a copy of the word embedding there, and "
                  "keeps a loss of its own over the vocabulary. 0: Hugging Face's training forward, which never "
                  "builds them.",
    "recompute_method": "With full recompute: Megatron's --recompute-method. uniform: groups of N blocks per "
                        "checkpoint (one input kept per group, N blocks rebuilt at once); block: the first N blocks "
                        "of each pipeline chunk checkpointed, the others keep everything.",
    "recompute_num_layers": "Megatron's --recompute-num-layers N (1 with uniform: every block, zerocalc's full "
                            "recompute). uniform needs N to divide every chunk's layers.",
    "attention": "flash / SDPA kernels save no s x s score matrix; eager attention does.",
    "activation_dtype": "auto: the compute dtype (communication dtype, else the parameters').",
    "implementation": "What the kernels save for backward: Hugging Face modules (validated within 10%) or "
                      "Megatron's fused kernels (Korthikanti et al. 2022).",
    "micro_batches": "Micro-batches per optimizer step (gradient accumulation); in flight on pipeline stages; "
                     "ZeRO-2/3 reduce gradients after each one.",
    "param_dtype": "dtype of the compute copy of the weights.", "grad_dtype": "dtype gradients are produced in.",
    "master_dtype": "The optimizer's own copy of the weights (fp32 with mixed precision; none for pure bf16).",
    "grad_accum_dtype": "An extra gradient accumulation buffer (DeepSpeed's fp32 gradients); none: no extra.",
    "optimizer": "Adam / AdamW keep two moments per parameter; SGD with momentum one; Lion one; Adafactor "
                 "factored moments; 8-bit Adam quantised moments. Muon, GaLore, APOLLO, Shampoo, SOAP, Adam-mini, "
                 "torchao's and bitsandbytes' low-bit and paged AdamW keep state that follows each tensor's shape (the ledger "
                 "says which tensors keep what).",
    "optimizer_dtype": "dtype of the optimizer's moments (Muon: its momentum).",
    "fallback_optimizer": "Muon steps matrices only: embeddings, the head, norms and biases use this optimizer.",
    "ns_dtype": "dtype Muon's Newton-Schulz iteration runs in (torch.optim.Muon: bf16).",
    "muon_tp": "full: each matrix is gathered whole over tensor parallelism and orthogonalised (Moonlight, "
               "Dion); local: each rank orthogonalises its own shard.",
    "optimizer_rank": "GaLore / APOLLO: the rank of the projected gradient and its moments.",
    "optimizer_impl": "What Adam / AdamW's step allocates beside its state. fused (torch fused=True, DeepSpeed's, "
                      "apex's and Transformer Engine's FusedAdam): nothing; foreach (torch's default on CUDA): a "
                      "copy of the second moments; for-loop (foreach=False): two copies of the largest tensor's, "
                      "which is the whole partition DeepSpeed hands it. auto: fused under Megatron, foreach "
                      "otherwise (Hugging Face's Trainer on torch >= 2.8 and torchtitan run fused).",
    "comm_dtype": "dtype gradients and gathered parameters travel in (FSDP mixed precision); none: their own.",
    "shard_group": "Hybrid sharding (FSDP HYBRID_SHARD, ZeRO++ hpZ, MiCS): state split within groups of this "
                   "size and replicated across groups.",
    "gpus_per_node": "Workers on one machine: for DeepSpeed's estimator and offload per node.",
    "offload_optimizer": "ZeRO-Offload: optimizer state (and its step) on the CPU or NVMe (stages 1-3).",
    "offload_params": "ZeRO-Infinity: parameters on the CPU or NVMe, gathered to the GPU per layer (stage 3).",
    "nccl_buffsize": "Simple protocol's buffer per NCCL connection (NCCL_BUFFSIZE, 4 MiB by default). NCCL's "
                     "buffers per communicator of the plan lie outside PyTorch's allocator, inside nvidia-smi's "
                     "figure (step/nccl.py).",
    "nccl_nvls": "NCCL_NVLS_ENABLE: NVLink SHARP maps 2 x 16 channels x 2 MiB per local rank on an NVSwitch node "
                 "from Hopper on (512 MiB on 8 H100s); on by default where supported.",
    "nccl_percent": "The share of the modelled NCCL buffers counted: 100 at the point; the range shown runs from "
                    "25 (Simple's buffers alone) to 200 (trees beside rings, both sides of each connection).",
    "cuda_context_bytes": "Outside PyTorch's allocator, inside nvidia-smi's figure: the CUDA context and the "
                          "kernel modules it loads. -1 estimates it by card and torch release (the bare context, "
                          "2.04 KiB per thread slot, + 450 MiB of modules: 0.96 GiB on an H100 SXM, 0.82 GiB on an "
                          "RTX 4090; + 1.4 GiB before torch 1.13); a measured figure replaces it.",
    "workspace_bytes": "GEMM scratch that PyTorch's allocator hands out once and max_memory_allocated counts: two "
                       "cuBLAS workspaces (forward and backward threads; 32 MiB each on H100/H200, 8.1 MiB "
                       "elsewhere) plus Transformer Engine's under Megatron (32 MiB from sm90, else 4 MiB). "
                       "-1 takes that table; set CUBLAS_WORKSPACE_CONFIG runs' own figure here.",
    "fragmentation_percent": "Caching-allocator reserve and fragmentation. -1 (the default): the point is the "
                             "caching allocator's model, the step's tensors replayed through PyTorch's allocator "
                             "rules; a percent of the live tensors replaces it. The band shown: 0-35% of the "
                             "tensors plus two ZeRO-3 unit cycles with the default allocator, 0-10% with "
                             "expandable segments, 0-15% flat, reaching the model's point (docs/peak-memory.md 3a).",
    "model_loading": "How a node's processes load the model before it is sharded: the host RAM at start-up. auto: "
                     "zero.Init under DeepSpeed ZeRO-3 (the Hugging Face integration turns it on), meta under "
                     "Megatron, else every process's own fp32 copy (the safe side; transformers 5 loads a bf16 "
                     "checkpoint in 16 bits: every-rank-16bit). rank0: one process per node loads and broadcasts "
                     "(FSDP sync_module_states, accelerate's cpu_ram_efficient_loading).",
    "transformers_version": "The transformers release the run used: before 4.49 the loss copies the shifted fp32 "
                            "logits, before 4.46 the model upcasts them itself (Qwen2.5-VL before 4.52, Gemma 3 "
                            "with images before 5.17), before 5 mixture-of-experts blocks hold one nn.Linear per "
                            "expert (QLoRA quantizes them, all-linear LoRA targets them), before 5.16 the router "
                            "loss builds every layer's one-hot at once. One release stands for each range "
                            "(docs/peak-memory.md).",
    "bitsandbytes_version": "The bitsandbytes release the run used: before 0.43.2 every 4-bit linear kept its input "
                            "for backward (PR #1270), counted as activations.",
    "host_ram_gb": "One node's RAM the offloads may use, in GB of 10^9 bytes (a DGX H100 has 2 TiB, 2,199 GB): the "
                         "offloaded optimizer state and parameters and the offloaded activations of the node's GPUs "
                         "are checked against it.",
    "measured_extra_bytes": "Live tensors a measurement of this plan showed beyond the estimate, held in every "
                            "phase so the verdict follows the run (Calibrate's Set). 0: none.",
    "allocator": "Which allocator the reserve's band models: PyTorch's caching allocator (default), "
                 "expandable_segments:True, or the flat 0-15% band of earlier versions.",
    "allocator_units": "ZeRO-3 / FSDP unit cycles (a gathered unit and its gradient) the reserve holds at the point "
                       "(0; the band's high end holds two: the communication streams' blocks).",
    "comm_buffers": "auto: from the convention (megatron: its grad buffer, nothing more; fsdp2: FSDP one unit at a "
                    "time; otherwise DeepSpeed's buckets), none without data parallelism unless DeepSpeed.",
    "grad_lifetime": "step: a persistent buffer (Megatron's, DeepSpeed's) or accumulation keeps every gradient from "
                     "the step's start; backward: zero_grad(set_to_none=True) frees them after each step, so "
                     "backward starts with none and ends with all; auto: backward for torch's own loops (FSDP2 or "
                     "one GPU, Hugging Face / torchtitan / torchtune) at one micro-batch per step.",
    "fsdp_wrap": "FSDP's units: each decoder block with the ends in the root, or torchtitan's (embedding, blocks, "
                 "[norm, head] kept after forward).",
    "fsdp_version": "2: fully_shard (torchtitan, accelerate fsdp_version 2), per-tensor shards; 1: "
                    "FullyShardedDataParallel (the HF Trainer, accelerate's default, Lightning Fabric), one padded "
                    "flat parameter per unit, the root kept gathered through backward.",
    "fsdp_use_orig_params": "FSDP1's use_orig_params: yes lets a unit mix frozen and trainable weights and allocates "
                            "the gradient of its whole flat parameter (torch warns of it); no wraps each LoRA leaf "
                            "as its own unit (peft's wrap policy).",
    "fsdp_backward_prefetch": "FSDP1's backward_prefetch: pre (torch's BACKWARD_PRE) gathers the next unit at each "
                              "unit's pre-backward, post after its post-backward reshards, none at its own "
                              "pre-backward (accelerate's and the HF Trainer's NO_PREFETCH).",
    "reshard_after_forward": "FSDP2 fully_shard(reshard_after_forward=...): auto as torchtitan, off under pipeline "
                             "parallelism (each rank keeps its stage's unsharded parameters for the step).",
    "reduce_dtype": "FSDP MixedPrecisionPolicy.reduce_dtype: gradients reduced (and, under pipeline parallelism, "
                    "accumulated unsharded) in it; auto: the compute dtype (torchtitan sets fp32).",
    "loss": "What the loss keeps: auto (Hugging Face's upcast, fp32 log-softmax saved), torchtune's chunked "
            "output (the upcast and gradients one chunk at a time), Liger's fused linear cross entropy or "
            "cut-cross-entropy (nothing vocabulary-sized saved), torchtitan's chunked loss (head and loss "
            "backward inside forward), a compiled loss (the bf16 logits saved, no fp32 copy), or one over fp32 "
            "logits (torchtune upcasts in the model); RL log-probs: flash-attn's cross entropy with its in-place "
            "backward (verl: the logits only), over fp32 logits (OpenRLHF), TRL's fused head (tiles, no logits) "
            "or row-by-row fp32 log-softmax (verl without flash-attn).",
    "activation_offload": "torchtune's activation offloading (with every block checkpointed): the blocks' "
                          "inputs go to pinned host memory, two stay on the GPU; the host memory per rank is in "
                          "Peak and step.",
    "optimizer_in_backward": "torchtune's optimizer_in_bwd: each parameter is stepped as soon as its gradient is "
                             "accumulated and the gradient freed, so no gradient set lives (one micro-batch per "
                             "step; under FSDP a unit's unsharded gradient still does).",
    "float8": "torchao Float8Linear recipe: each linear saves its high-precision input as before (measured); its "
              "dynamic casts add a transient (about 9 bytes per cast element eager, the float8 copies compiled).",
    "async_tp": "parallelism.enable_async_tensor_parallel: Inductor fuses the sequence-parallel all-gathers and "
                "reduce-scatters into their matmuls through one symmetric-memory workspace per TP group (2 x tokens / "
                "tp x hidden x the activation width), outside PyTorch's allocator: counted with the CUDA context. "
                "What the fused ops change in the saved activations is not modelled (a measured run read 4.3 GiB "
                "lower): the estimate stays above it.",
    "float8_all_gather": "enable_fsdp_float8_all_gather: the blocks' linear weights gathered at 1 byte per element "
                         "(tensorwise only).",
    "op_policy": "Which ops recompute op saves (torch's create_selective_checkpoint_contexts policy): torchtitan's "
                 "(every second matmul and the attention), every matmul and the attention, the attention only, or "
                 "your own (own: tick the ops it saves).",
    "op_saves": "Your policy returns MUST_SAVE for these and PREFER_RECOMPUTE for the rest: mm every bias-free "
                "matmul, mm/2 every second one (torchtitan's counter), addmm the biased linears, attention the SDPA "
                "kernels, collectives the reduce-scatter / all-to-all outputs and topk.",
    "loss_chunks": "Chunks of torchtune's chunked output (num_output_chunks, default 8) or torchtitan's "
                   "ChunkedLossWrapper (num_chunks, default 8).",
    "repeat_kv": "The attention expands K and V to every query head before SDPA, and the kernel saves those copies "
                 "(torchtune's and LitGPT's attention, eager and compiled; torchtitan before January 2026): 2 x "
                 "(q - kv) features a token per block more than grouped K and V. Hugging Face's SDPA passes them "
                 "grouped only without a mask (from transformers 4.54): a padded batch of two or more repeats them. "
                 "torchtune, LitGPT and Hugging Face launchers' imports set it. No effect with eager attention (it "
                 "repeats them anyway) or without grouped-query heads.",
    "compile": "torch.compile each block (Inductor's default partitioner, measured on torch 2.13): no fp32 norm "
               "copies, silu and gelu fused; with op-level checkpointing the unread down-projection output is "
               "dropped; LoRA blocks keep only what the adapters need. Latent attention, sinks, soft-capping, "
               "sandwich norms, DoRA and quantized bases keep their eager terms; CUDA graphs and max-autotune "
               "workspaces are not counted.",
    "loss_fusion": "Megatron's native fused cross entropy (off by default): its backward holds a second fp32 copy of "
                   "the softmax and a bf16 copy of the gradient.",
    "reduce_bucket_size": "DeepSpeed's gradient reduce bucket, in elements, allocated whole however little trains "
                          "(doubled with overlap_comm at stages 1-2).",
    "allgather_bucket_size": "DeepSpeed's bucket for gathering updated parameters at stages 1-2, in elements.",
    "prefetch_bucket_size": "ZeRO-3 parameters fetched ahead of use, in elements; any value above 0 lets the "
                            "prefetcher run ahead until max_live_parameters are gathered.",
    "max_live_parameters": "ZeRO-3: the gathered parameters DeepSpeed keeps resident beside the running module, in "
                           "elements (1e9 by default: 2 GB in bf16).",
    "param_persistence_threshold": "ZeRO-3 keeps parameters this small (elements) whole on every worker.",
    "overlap_comm": "auto: on for stage 3 only, as DeepSpeed; on doubles the reduce buckets at stages 1-2.",
    "buffer_factor": "The factor DeepSpeed's estimate_zero*_model_states_mem_needs multiplies by.",
    "moe_imbalance_percent": "Under expert parallelism, the routed tokens the busiest rank's experts receive, as "
                             "a share of a balanced load (100: balanced routing).",
    "batch_mode": "fixed: every sample is the sequence length; padded: the micro-batch's samples padded to their "
                  "longest (the sequence length is the longest a sample may be); packed: rows of the sequence "
                  "length filled with samples (flash attention's varlen kernels). The verdict judges the worst step.",
    "moe_dispatcher": "alltoall: NCCL's all-to-all (its send/recv channels per peer are counted with NCCL's "
                      "buffers); deepep: DeepEP's NVLink (and past 8 ranks RDMA) buffers, outside PyTorch's "
                      "allocator, as Megatron's --moe-enable-deepep maps them (zerocalc/step/deepep.py).",
    "batch_lengths": "The samples' lengths as percentile points, p50=512,p90=2048,p99=6000,max=8192 (the last at "
                     "max, the longest sample). A padded micro-batch is as long as its longest sample: the typical "
                     "step is the median longest of micro-batch samples drawn from these; the worst step, the "
                     "sequence length, is what the verdict judges. Empty: no typical step beside the worst.",
    "holds_output": "A hand-written loop that keeps the model's output (output = model(...); loss = output.loss; "
                    "loss.backward()) holds the logits through backward and the optimizer step; the Trainer, "
                    "torchtune and torchtitan drop them first.",
    "holds_graph": "A loop that assigns logits = model(...) and loss = ... each iteration and deletes nothing (LitGPT's "
                   "finetune scripts) keeps the last step's logits and loss, and the autograd graph behind the loss, "
                   "until the next step's replace them: through the optimizer step and into the next forward. The "
                   "graph holds bitsandbytes' 8-bit (and pre-0.43.2 4-bit) base-linear inputs beyond backward.",
    "router_loss": "Hugging Face's load-balancing loss (output_router_logits): every MoE layer's router logits "
                   "kept to the loss and the loss's own tensors; 48 GiB of one-hot before transformers 5.16.",
    "moe_capacity_percent": "A capacity factor drops tokens above it (125: 1.25x a balanced share); 0: dropless "
                            "(Megatron's default).",
    "tp": "Splits heads and the FFN across GPUs of a node (Megatron, torchtitan); must divide heads, KV heads, FFN.",
    "pp": "Splits the layers into stages; the first stage also holds the embedding, the last the head.",
    "schedule": "1F1B holds up to pp micro-batches on the first stage; interleaved adds virtual stages; "
                "GPipe holds all micro-batches.",
    "vpp": "Model chunks per pipeline rank (interleaved schedule); pp x vpp must divide the layers unless the "
           "stages are uneven.",
    "stage_split": "even: as many layers per stage as they go (interleaved: divisible); torchtitan: its default "
                   "split, the embedding and the head each counted as a layer (126 layers on 8 stages: 15, 16 x 6, "
                   "15); megatron: first / last rank's layers, the rest even.",
    "stage_layers": "The decoder layers of each pipeline stage, comma-separated in schedule order (pp x vpp counts "
                    "summing to the layers; a stage may hold 0: the embedding or the head alone), as torchtitan's "
                    "pipeline_parallel_layers_per_stage or a module split gives them. Empty: the even split.",
    "first_stage_layers": "Megatron's --decoder-first-pipeline-num-layers (0: even).",
    "last_stage_layers": "Megatron's --decoder-last-pipeline-num-layers (0: even).",
    "cp": "Splits the sequence across GPUs (ring attention, flash only); ZeRO then shards over dp x cp.",
    "sequence_parallel": "Also splits norms, dropout and the residual stream over tp (Korthikanti et al. 2022).",
    "loss_parallel": "Off: every tensor-parallel rank gathers the full logits (Hugging Face's colwise_rep head).",
    "vocab_divisor": "Megatron's make_vocab_size_divisible_by (128 with megatron kernels; 0 picks it).",
    "ep": "Splits the routed experts over ep ranks; their ZeRO state shards over the expert-data-parallel group "
          "(dp x tp x cp / (ep x etp), Megatron-Core's parallel folding).",
    "etp": "Splits each expert's FFN over etp ranks (Megatron-Core expert tensor parallel).",
    "breakdown": "Stack the bars by category (parameters, gradients, optimizer) or by ledger entry.",
    "kv_heads": "Grouped-query attention: heads that share one key/value head (multi-query = 1).",
    "head_dim": "Per-head width when it is not hidden / heads (Gemma, Qwen3).",
    "ffn": "Intermediate size of the MLP.", "context": "Learned position table size (GPT-2's n_positions).",
    "tied_embeddings": "The output head shares the input embedding's weights.",
    "gated_mlp": "gate, up and down projections (SwiGLU) instead of two.",
    "norm": "LayerNorm, RMSNorm, or Gemma's fp32 RMSNorm.", "positions": "rotary or learned position embeddings.",
    "fused_qkv": "One module for q, k, v (GPT-2 c_attn): ZeRO-3 gathers it at once.",
    "fused_gate_up": "One module for gate and up (Phi-3).", "activation": "The MLP's activation function.",
    "softmax_fp32": "Eager attention's softmax computed and saved in fp32 (Hugging Face's Llama family).",
    "qk_norm": "Norms on queries and keys: per head (Qwen3, Gemma 3) or over all heads (OLMo 2).",
    "sandwich_norm": "Norms before and after the attention and the MLP (Gemma 2/3).",
    "attention_sinks": "One learned sink logit per head (gpt-oss).",
    "parallel_residual": "Attention and MLP both read the block input (GPT-NeoX, phi, Falcon, StableLM's option).",
    "shared_norm": "With parallel blocks: one norm feeds both branches (phi, Falcon-7B, StableLM).",
    "rotary_pct": "Partial rotary: the share of each head's dimensions rotated (Pythia 0.25, phi-2 0.4).",
    "head_bias": "A bias on the LM head (phi).",
    "kv_expand": "Falcon: K and V expanded to every head when split (new architecture) or one head broadcast "
                 "(multi_query, where SDPA falls back to its math kernel).",
    "sliding_window": "Local attention window (tokens); with flash it changes the saved tensors only for long "
                      "sequences.",
    "kv_lora_rank": "Multi-head latent attention (DeepSeek-V2/V3): the compressed KV width.",
    "experts": "Routed experts per mixture-of-experts layer.",
    "experts_per_token": "Experts each token is routed to (top-k): active parameters = dense + top-k / experts.",
    "shared_expert_ffn": "Total FFN width of the shared expert(s) that every token runs (DeepSeek, Qwen2-MoE).",
    "router_fp32": "DeepSeek keeps its router weights in fp32: stored and trained as fp32.",
    "first_dense_layers": "DeepSeek first_k_dense_replace: the first layers keep a dense MLP.",
    "moe_step": "Qwen decoder_sparse_step: layer i is MoE when (i + 1) is a multiple of this.",
    "finetune": "full: every weight trains. freeze: only the last k blocks and / or named modules train. LoRA / "
                "DoRA: low-rank adapters beside a frozen base (peft). QLoRA: adapters on a 4-bit (nf4 / fp4) or "
                "8-bit base (bitsandbytes). Frozen weights keep no gradient, master copy or optimizer state.",
    "lora_rank": "r: lora_A is r x in, lora_B is out x r for every adapted linear.",
    "lora_targets": "peft's target_modules; all-linear adapts every linear of the blocks (not the head: name "
                    "lm_head beside the modules to adapt it). Experts "
                    "and routers are not adapted (they are not nn.Linear modules in transformers 5).",
    "lora_dropout": "Above 0, each adapter saves a 1-byte dropout mask of its input.",
    "adapter_dtype": "auto: peft's default, fp32 adapters on a 16-bit base (autocast_adapter_dtype). DeepSpeed "
                     "casts the whole model to bf16 / fp16: choose that dtype to describe it.",
    "modules_to_save": "peft's modules_to_save: a trained copy beside the frozen original.",
    "base_dtype": "The frozen base weights' dtype; auto: the parameters dtype.",
    "quant_type": "bitsandbytes: nf4 / fp4 pack two weights per byte with an absmax per block; int8 is LLM.int8 "
                  "(a scale per output row). Only the blocks' linears are quantized.",
    "quant_block_size": "Weights per absmax (bnb_4bit_blocksize, 64 by default).",
    "double_quant": "bnb_4bit_use_double_quant: the absmax values stored in 8 bits, with fp32 scales per 256 "
                    "blocks.",
    "kbit_prepare": "peft's prepare_model_for_kbit_training upcasts every non-quantized weight (embedding, head, "
                    "norms) to fp32, so activations are fp32 too.",
    "quantize_head": "Lightning Fabric's BitsandbytesPrecision (LitGPT's --quantize bnb.*) builds every nn.Linear as a "
                     "4-bit one, the output head included: stored in 4 bits, dequantized while it runs. "
                     "transformers' bitsandbytes quantizer leaves the head in 16 bits. An untied head only.",
    "fp32_parts": "Tensors a launcher keeps in fp32 beside a 16-bit model. norms: LLaMA-Factory's "
                  "upcast_layernorm, axolotl's fp32_norms (each linear then casts a norm's fp32 output itself). "
                  "embed-head-norms: axolotl's full fine-tune without flash attention or FSDP (fp32 weights, "
                  "gradients and AdamW states for those tensors, and an fp32 residual stream under autocast).",
    "train_last_layers": "Freeze every block before the last k; they save no activations either.",
    "train_modules": "Modules trained in full beside the last k blocks (the rest stay frozen).",
    "images_per_sample": "Images in each sample, through the family's processor rule; their tokens join the "
                         "language model's sequence (the sequence length above is the text).",
    "pixel_budget": "Qwen: max_pixels per image (smart_resize); InternVL: the pixels of the 448 px tiles allowed.",
    "vision_training": "follow (default: trained under full fine-tuning; tower and projector frozen under freeze, "
                       "LoRA and QLoRA, as LLaMA-Factory, ms-swift and peft do); trained; frozen (its blocks and "
                       "embeddings: the projector still trains); frozen-all; or LoRA on every linear of its blocks.",
}
