"""What one training step runs on each worker, beyond the model-state ledger: the architecture, the batch, the
attention and recompute choices, and every working-set assumption, each a visible, editable input.

ZeRO knobs keep DeepSpeed's names and defaults and count elements, not bytes (deepspeed/runtime/zero/config.py
and the stage-3 optimizer's signature in stage3.py: reduce_bucket_size=5e8, allgather_bucket_size=5e8,
stage3_prefetch_bucket_size=5e7, stage3_max_live_parameters=1e9, stage3_param_persistence_threshold=1e5;
overlap_comm defaults to True only for stage 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Tuple

from ..gpus import DEFAULT_GPU, GPU_CATALOG
from ..layout import Layout, check_against, chunk_layers, padded_vocab, stage_sizes
from ..model.architecture import Architecture
from ..model.finetune import FULL, FineTune
from ..model.vision import TOWERS
from ..model.vision_tokens import ImageInputs, VisionTokens, vision_tokens
from ..scenario import FieldError, require_choice, require_int
from ..tables import DTYPE_BITS
from .activations import ATTENTION, IMPLEMENTATIONS, RECOMPUTE
from .allocator import ALLOCATORS, DEFAULT_ALLOCATOR
from .buffers import COMM_BUFFERS, FSDP_WRAPS
from .host import LOADING_CHOICES
from .fsdp1 import FSDP_VERSIONS, ORIG_PARAMS, PREFETCH
from .async_tp import refusal as async_tp_refusal
from .float8 import FLOAT8_RECIPES
from .grad_lifetime import GRAD_LIFETIMES
from .megatron_recompute import DEFAULT_MODULES, FULL_METHODS, check_modules, modules_text, uniform_misfit
from .op_checkpoint import op_rule
from .losses import LOSS_CHOICES
from .batches import check_batch
from .deepep import DISPATCHERS
from .moe import Routing

WORKLOAD_LIMITS = {
    "micro_batch": (1, 10**6),
    "seq_len": (1, 10**8),
    "reduce_bucket_size": (1, 10**13),
    "allgather_bucket_size": (1, 10**13),
    "prefetch_bucket_size": (0, 10**13),
    "max_live_parameters": (1, 10**15),
    "param_persistence_threshold": (0, 10**13),
    "cuda_context_bytes": (0, 2**40),
    "workspace_bytes": (0, 2**40),
    "gpu_memory": (2**30, 2**50),      # below 1 GiB is a unit mistake ("48" meant 48 GB), not a GPU
    "fragmentation_percent": (0, 100),
    "allocator_units": (0, 64),
    "moe_imbalance_percent": (100, 10_000),
    "moe_capacity_percent": (0, 10_000),
    "recompute_every": (1, 10_000),
    "recompute_num_layers": (1, 10_000),
    "loss_chunks": (1, 4096),
    "measured_extra_bytes": (0, 2**50),
    "host_memory_bytes": (0, 2**50),
    "nccl_percent": (0, 1000),
    "nccl_buffsize": (64 * 1024, 2**30),
}
OVERLAP_CHOICES = ("auto", "on", "off")
RESHARD_CHOICES = ("auto", "yes", "no")      # FSDP2 fully_shard(reshard_after_forward=...); auto: torchtitan
CAPACITY_HINT = "bytes from 1 GiB (1,073,741,824) to 1 PiB; a number below 1 GiB is a missing unit: 48 GB, 44.4 GiB"


@dataclass(frozen=True)
class Workload:
    arch: Architecture
    micro_batch: int = 1
    seq_len: int = 2048
    activation_dtype: Optional[str] = None    # None: the compute dtype (comm_dtype or param_dtype)
    attention: str = "flash"
    recompute: str = "none"
    # With recompute op: which ops the policy saves (step/op_checkpoint.py OP_POLICIES; torchtitan's by default)
    op_policy: str = "torchtitan"
    # With full recompute, checkpoint one block in N (torchtitan's selective_ac_option = "N"); 1: every block.
    recompute_every: int = 1
    # With recompute selective: Megatron's --recompute-modules, a comma list (step/megatron_recompute.py); its
    # default core_attn alone is the attention-score recompute. With full: Megatron's --recompute-method (uniform:
    # groups of N blocks per checkpoint; block: the first N blocks of each chunk) and --recompute-num-layers N.
    recompute_modules: str = "core_attn"
    recompute_method: str = "uniform"
    recompute_num_layers: int = 1
    implementation: str = "huggingface"
    # Megatron's --cross-entropy-loss-fusion (its "native" impl; off by default, as Megatron): step/peak.py _logits.
    loss_fusion: bool = False
    # The loss implementation (step/losses.py LOSSES): auto (the implementation's own: Hugging Face's upcast, or
    # Megatron's), torchtune's chunked output, Liger's fused linear cross entropy, cut-cross-entropy,
    # torchtitan's ChunkedLossWrapper, or a compiled loss; loss_chunks: the chunk count of the chunked ones.
    loss: str = "auto"
    loss_chunks: int = 8
    # torch.compile of each block (Inductor's default partitioner saves fewer tensors: step/compiled.py)
    compile: bool = False
    # The attention repeats K and V to every query head before its kernel, which saves the copies (torchtune's
    # MultiHeadAttention, LitGPT's: step/repeated_kv.py); Hugging Face's SDPA passes them grouped.
    repeat_kv: bool = False
    # Activation offloading to the CPU (torchtune enable_activation_offloading): with full recompute the blocks'
    # checkpoint inputs go to pinned host memory, a few stay on the GPU (step/offload.py)
    activation_offload: bool = False
    # The optimizer step fused into backward, one parameter at a time (torchtune optimizer_in_bwd:
    # step/optimizer_in_backward.py); refused with gradient accumulation, as torchtune refuses it.
    optimizer_in_backward: bool = False
    # torchao float8 linears (step/float8.py): none | tensorwise | rowwise | rowwise_with_gw_hp; and FSDP2's float8
    # all-gather of the linear weights (enable_fsdp_float8_all_gather, tensorwise only)
    float8: str = "none"
    float8_all_gather: bool = False
    # torchtitan's async tensor parallelism (step/async_tp.py): its symmetric-memory workspace, outside the allocator
    async_tp: bool = False
    # When the gradient set lives (step/grad_lifetime.py): step (a persistent buffer, or accumulation) | backward
    # (zero_grad(set_to_none=True): none at backward's start) | auto (backward for torch's own loops at one
    # micro-batch per step)
    grad_lifetime: str = "auto"
    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    prefetch_bucket_size: int = 50_000_000
    max_live_parameters: int = 1_000_000_000
    param_persistence_threshold: int = 100_000
    overlap_comm: str = "auto"                # auto: on for stage 3 only, as DeepSpeed
    # CUDA context and the kernel modules it loads: outside PyTorch's allocator, inside nvidia-smi's figure
    # (torch.cuda.memory_allocated docs). None (the default): estimated by card and torch release (step/context.py);
    # a figure replaces it (a measurement).
    cuda_context_bytes: Optional[int] = None
    # NCCL's buffers per communicator of the plan (step/nccl.py), outside the allocator: NCCL_BUFFSIZE (Simple's
    # buffer per connection), NCCL_NVLS_ENABLE (NVLink SHARP on an NVSwitch node), and the percent of the modelled
    # bytes counted (the assumption's band in answers/ranges.py moves it; 100 at the point).
    nccl_buffsize: int = 4 * 2**20
    nccl_nvls: bool = True
    nccl_percent: int = 100
    # Expert parallelism's token dispatcher: alltoall (NCCL's, counted in nccl.py) or deepep (DeepEP's own buffers
    # beside it, deepep.py: Megatron's flex dispatcher with --moe-enable-deepep).
    moe_dispatcher: str = "alltoall"
    # The GEMM workspaces libraries take from PyTorch's allocator and keep (step/workspaces.py: PyTorch's cuBLAS
    # per thread, Transformer Engine's under Megatron); None: that table's, by the card's compute capability.
    workspace_bytes: Optional[int] = None
    # Caching-allocator reserve and fragmentation: None (the default, issue 32) replays the step through the
    # caching allocator's model (step/allocator.py simulated_reserve); a percent of what tensors need replaces it.
    fragmentation_percent: Optional[int] = None
    # Which allocator the reserve's band models (step/allocator.py): "caching" (PyTorch's default), "expandable"
    # (expandable_segments:True) or "flat" (0-15 % of the tensors, the band before issue 20); and how many unit
    # cycles of ZeRO-3's communication streams the reserve holds (0 at the point; the band's high end holds two).
    allocator: str = DEFAULT_ALLOCATOR
    allocator_units: int = 0
    # Live tensors a measurement of this plan showed beyond the estimate (Calibrate's Set: the allocated peak, with
    # an out-of-memory's failed request, less the estimated tensors), held in every phase as "measured beyond the
    # estimate", so the verdict follows the run. 0: none.
    measured_extra_bytes: int = 0
    # One node's host RAM the offloads may use (ZeRO-Offload's states, activation offloading's pinned blocks), in
    # bytes; 0: not checked (the report still says what the node needs).
    host_memory_bytes: int = 0
    # How the node's processes load the model at start-up (step/host.py LOADING; auto: the framework's way).
    model_loading: str = "auto"
    gpu: str = DEFAULT_GPU
    gpu_memory: Optional[int] = None          # a custom capacity PyTorch can use, in bytes; overrides the catalog
    layout: Layout = Layout()                 # tensor, pipeline and context parallelism; dp is Scenario.workers
    # Expert parallelism: the pairs the busiest rank's experts receive, % of a balanced share (100: balanced
    # routing), capped by a capacity factor when one drops tokens (0: dropless, as Megatron's default).
    moe_imbalance_percent: int = 100
    moe_capacity_percent: int = 0
    # Hugging Face's load-balancing loss (the model's output_router_logits, False in every family's config): every
    # MoE layer's router logits kept to the loss, and the loss's own tensors (step/router_loss.py).
    router_loss: bool = False
    # A hand-written loop that keeps the model's output (`output = model(...); loss = output.loss;
    # loss.backward(); optimizer.step()`, as Answer.AI's fsdp_qlora train.py does until `output = None` after the
    # step) holds the returned logits through backward and the step; the HF Trainer, torchtune and torchtitan drop
    # them first (step/losses.py held_output_bytes).
    holds_output: bool = False
    # A loop that keeps the last step's logits and loss until the next step's replace them (LitGPT's fit loops:
    # `logits = model(...)` and `loss = ...` at the top of each iteration, nothing deleted): through backward and
    # the optimizer step, and into the next step's forward, the logits and what the autograd graph behind the loss
    # holds beyond backward (bitsandbytes' base-linear inputs: step/activations.py graph_held).
    holds_graph: bool = False
    # The batch as it really is (step/batches.py): fixed (every sample seq_len long), padded (micro_batch samples
    # padded to their longest; seq_len the longest a sample may be) or packed (micro_batch rows of seq_len tokens,
    # flash-attention varlen); batch_lengths: the samples' lengths as (percentile, tokens) points, the last at 100.
    # micro_batch x seq_len stays the worst step; the lengths give the typical one.
    batch_mode: str = "fixed"
    batch_lengths: Tuple[Tuple[int, int], ...] = ()
    finetune: FineTune = FULL                 # what trains: full, frozen blocks, LoRA / DoRA, QLoRA
    # FSDP2 (the fsdp buffers, ZeRO-3): whether each unit frees its gathered parameters after forward. auto: as
    # torchtitan's fsdp_reshard_after_forward "default" (parallelize.py apply_fsdp: not pp_enabled), so under
    # pipeline parallelism a rank keeps its stage's unsharded parameters for the step (step/fsdp_pipeline.py).
    reshard_after_forward: str = "auto"
    # FSDP's MixedPrecisionPolicy.reduce_dtype: the dtype gradients are reduced (and, without gradient sync,
    # accumulated unsharded) in. None: the compute dtype (the policy's default; torchtitan sets float32).
    reduce_dtype: Optional[str] = None
    # Whose communication buffers the step holds (step/buffers.py): deepspeed | megatron | fsdp | none; auto: from
    # the convention (megatron, fsdp2 -> fsdp, else deepspeed), none without data parallelism unless DeepSpeed.
    comm_buffers: str = "auto"
    # FSDP's wrap units: blocks (each decoder block, the ends in the root) or torchtitan's (embedding, blocks,
    # [norm, head] kept after forward).
    fsdp_wrap: str = "blocks"
    # Which FSDP the fsdp buffers model (step/fsdp1.py): 2, fully_shard's per-tensor shards (torchtitan, accelerate
    # fsdp_version 2), or 1, FullyShardedDataParallel's flat parameter per unit (the HF Trainer's and accelerate's
    # fsdp_version 1, accelerate's default; Lightning Fabric's FSDPStrategy). fsdp_use_orig_params: FSDP1's
    # use_orig_params (torch's and accelerate's default no; the HF Trainer's FSDP1 default yes): yes lets a unit mix
    # frozen and trainable tensors and allocates the whole flat gradient; no wraps trainable leaves alone.
    fsdp_version: int = 2
    fsdp_use_orig_params: str = "no"
    # FSDP1's backward_prefetch (step/fsdp1.py PREFETCH): pre (torch's default), post, none (accelerate's and the HF
    # Trainer's NO_PREFETCH). FSDP2 prefetches the next unit at each pre-backward: pre.
    fsdp_backward_prefetch: str = "pre"
    # Vision-language models (issue 37; the tower and its training mode are arch.vision): what one sample carries,
    # images of one resolution or a pixel budget, or a video's frames (model/vision_tokens.py). seq_len is the
    # language model's whole sequence, the images' tokens included (step/vision_activations.py lm_seq_len).
    images: ImageInputs = ImageInputs()

    def __post_init__(self):
        if not isinstance(self.arch, Architecture):
            raise FieldError("arch", type(self.arch).__name__, "an Architecture")
        if isinstance(self.gpu_memory, int) and not isinstance(self.gpu_memory, bool) and self.gpu_memory < 2**30:
            raise FieldError("gpu_memory", self.gpu_memory, CAPACITY_HINT)
        for field, (lo, hi) in WORKLOAD_LIMITS.items():
            if getattr(self, field) is not None or field not in ("gpu_memory", "workspace_bytes",
                                                                   "fragmentation_percent", "cuda_context_bytes"):
                require_int(field, getattr(self, field), lo, hi)
        for field in ("activation_dtype", "reduce_dtype"):
            if getattr(self, field) is not None:
                require_choice(field, getattr(self, field), DTYPE_BITS)
        for field, options in (("attention", ATTENTION), ("recompute", RECOMPUTE),
                               ("implementation", IMPLEMENTATIONS), ("overlap_comm", OVERLAP_CHOICES),
                               ("reshard_after_forward", RESHARD_CHOICES), ("comm_buffers", COMM_BUFFERS),
                               ("fsdp_wrap", FSDP_WRAPS), ("allocator", ALLOCATORS), ("loss", LOSS_CHOICES),
                               ("grad_lifetime", GRAD_LIFETIMES), ("model_loading", LOADING_CHOICES),
                               ("moe_dispatcher", DISPATCHERS)):
            require_choice(field, getattr(self, field), options)
        if self.recompute_every > 1 and self.recompute != "full":
            raise FieldError("recompute_every", self.recompute_every, "1 unless recompute is full")
        if self.recompute == "op" and isinstance(self.finetune, FineTune) and self.finetune.mode != "full":
            # adapters add matmuls to the policy's every-other count and frozen blocks save differently
            raise FieldError("recompute", self.recompute, "none, selective or full when fine-tuning "
                             f"({self.finetune.mode}); op-level checkpointing is modelled for full training")
        if self.loss != "auto" and self.implementation != "huggingface":
            raise FieldError("loss", self.loss, "auto with implementation megatron (its loss: loss_fusion)")
        require_choice("float8", self.float8, FLOAT8_RECIPES)
        self._check_fsdp1()
        try:
            op_rule(self.op_policy)
        except ValueError as exc:
            raise FieldError("op_policy", self.op_policy, str(exc)) from None
        if self.op_policy != "torchtitan" and self.recompute != "op":
            raise FieldError("op_policy", self.op_policy, "torchtitan unless recompute is op")
        if self.float8_all_gather is True and self.float8 != "tensorwise":
            # torchao config.py Float8LinearConfig.__post_init__: the float8 all-gather needs tensorwise scaling
            raise FieldError("float8_all_gather", True, "false unless float8 is tensorwise (torchao refuses it)")
        for field in ("compile", "repeat_kv", "activation_offload", "optimizer_in_backward", "float8_all_gather",
                      "async_tp", "nccl_nvls", "router_loss", "holds_output", "holds_graph"):
            if not isinstance(getattr(self, field), bool):
                raise FieldError(field, getattr(self, field), "true or false")
        if self.async_tp and isinstance(self.layout, Layout) and async_tp_refusal(self):
            raise FieldError("async_tp", True, async_tp_refusal(self))
        if self.optimizer_in_backward and isinstance(self.layout, Layout) and self.layout.micro_batches > 1:
            raise FieldError("optimizer_in_backward", True, "false with more than one micro-batch per step "
                             "(torchtune: 'Gradient accumulation is not supported with optimizer in bwd.')")
        if self.activation_offload and (self.recompute != "full" or self.recompute_every > 1
                                        or self.recompute_method != "uniform" or self.recompute_num_layers > 1):
            # torchtune's recipes refuse it without activation checkpointing of every layer
            raise FieldError("activation_offload", True, "false unless recompute is full on every block "
                             "(torchtune: enable_activation_offloading needs enable_activation_checkpointing)")
        if not isinstance(self.loss_fusion, bool) or self.loss_fusion and self.implementation != "megatron":
            raise FieldError("loss_fusion", self.loss_fusion, "true or false; true only with implementation megatron")
        if self.gpu_memory is None and self.gpu not in GPU_CATALOG:
            raise FieldError("gpu", self.gpu, "one of " + ", ".join(GPU_CATALOG) + ", or a custom gpu_memory")
        if not isinstance(self.layout, Layout):
            raise FieldError("layout", type(self.layout).__name__, "a Layout")
        if not isinstance(self.finetune, FineTune):
            raise FieldError("finetune", type(self.finetune).__name__, "a FineTune")
        check_against(self.layout, self.arch, self.seq_len, self.attention)
        check_batch(self)
        if self.holds_output and (self.implementation != "huggingface" or self.loss != "auto"):
            raise FieldError("holds_output", True, "false unless implementation is huggingface with its own loss "
                             "(loss auto): the other losses return no logits to hold")
        if self.router_loss and (not self.arch.moe_layers or self.implementation != "huggingface"):
            # Megatron's aux losses run inside each layer's router: nothing outside the layers (router_loss.py)
            raise FieldError("router_loss", True, "false unless the model has MoE layers and implementation is "
                                                  "huggingface (output_router_logits)")
        self._check_vision()
        self._check_megatron_recompute()
        self._check_mtp()

    def _check_fsdp1(self):
        """FSDP1's flags as torch accepts them: torchtitan's wrap, reshard_after_forward and the float8 all-gather
        are fully_shard's (FSDP1 at stage 3 is FULL_SHARD, which reshards every unit but the root)."""
        if isinstance(self.fsdp_version, bool):
            raise FieldError("fsdp_version", self.fsdp_version, "1 or 2")
        require_choice("fsdp_version", self.fsdp_version, FSDP_VERSIONS)
        require_choice("fsdp_use_orig_params", self.fsdp_use_orig_params, ORIG_PARAMS)
        require_choice("fsdp_backward_prefetch", self.fsdp_backward_prefetch, PREFETCH)
        if self.fsdp_version == 2:
            if self.fsdp_backward_prefetch != "pre":
                raise FieldError("fsdp_backward_prefetch", self.fsdp_backward_prefetch,
                                 "pre with fsdp_version 2 (fully_shard prefetches at each pre-backward)")
            return
        for field, value, allowed in (("fsdp_wrap", "torchtitan", "blocks"), ("reshard_after_forward", "no",
                                      "auto or yes (FSDP1's SHARD_GRAD_OP is ZeRO stage 2)"),
                                      ("float8_all_gather", True, "false (torchao's float8 all-gather is FSDP2's)")):
            if getattr(self, field) == value and type(getattr(self, field)) is type(value):
                raise FieldError(field, value, f"{allowed} with fsdp_version 1")

    def _check_vision(self):
        if not isinstance(self.images, ImageInputs):
            raise FieldError("images", type(self.images).__name__, "an ImageInputs")
        if self.arch.vision is None:
            if self.images.images or self.images.video_frames:
                raise FieldError("images_per_sample", self.images.images or self.images.video_frames,
                                 "0 unless the model has a vision tower (" + ", ".join(TOWERS) + ")")
            return
        tokens = self.vision_tokens.text_tokens
        if self.seq_len <= tokens:
            raise FieldError("seq_len", self.seq_len, f"more than the images' {tokens:,} tokens (the language "
                             "model's sequence holds them and the text)")

    @cached_property
    def vision_tokens(self) -> VisionTokens:
        """One sample's images through the tower's token rule (no tower: none)."""
        if self.arch.vision is None:
            return VisionTokens(0, 0, 0, 0, 0)
        return vision_tokens(self.arch.vision, self.images)

    def _check_mtp(self):
        """Multi-token prediction (step/mtp.py) as modelled: Megatron's, for full training with the implementation's
        own loss; Megatron asserts one layer per checkpoint for it under uniform full recompute."""
        if not self.arch.mtp_layers:
            return
        refused = [words for words, bad in (
            ("fine-tuning", self.finetune.mode != "full"), ("compile", self.compile),
            ("activation offload", self.activation_offload), (f"the loss {self.loss}", self.loss != "auto"),
            ("uniform recompute of more than 1 layer (Megatron asserts recompute_num_layers == 1 for MTP)",
             self.recompute == "full" and self.recompute_method == "uniform" and self.recompute_num_layers > 1))
            if bad]
        if refused:
            raise FieldError("mtp_layers", self.arch.mtp_layers, "0 with " + ", ".join(refused) + " (multi-token "
                             "prediction is modelled for full training with the implementation's own loss)")

    def _check_megatron_recompute(self):
        """Megatron's recompute modules and full-recompute method (step/megatron_recompute.py), as it accepts them;
        the modules are stored in its canonical order."""
        try:
            object.__setattr__(self, "recompute_modules", modules_text(self.recompute_modules))
        except ValueError as exc:
            raise FieldError("recompute_modules", self.recompute_modules, str(exc)) from None
        require_choice("recompute_method", self.recompute_method, FULL_METHODS)
        full_training = not isinstance(self.finetune, FineTune) or self.finetune.mode == "full"
        if self.recompute_modules != DEFAULT_MODULES:
            refused = check_modules(self.recompute_modules, self.arch)
            if self.recompute != "selective" or refused or self.compile or not full_training:
                raise FieldError("recompute_modules", self.recompute_modules, refused or "core_attn unless recompute "
                                 "is selective, for full training, without compile (Megatron's modules)")
        if self.recompute_method == "uniform" and self.recompute_num_layers == 1:
            return
        if self.recompute != "full" or self.recompute_every > 1 or not full_training:
            raise FieldError("recompute_method" if self.recompute_method != "uniform" else "recompute_num_layers",
                             self.recompute_method if self.recompute_method != "uniform" else
                             self.recompute_num_layers, "uniform with 1 layer unless recompute is full on every "
                             "block (recompute_every 1), for full training (Megatron's --recompute-method)")
        if self.recompute_method == "uniform" and isinstance(self.layout, Layout):
            layout = self.layout
            sizes = stage_sizes(layout, self.arch.layers) if layout.stage_layers is not None or \
                layout.stage_split != "even" else [c for r in chunk_layers(self.arch.layers, layout.pp, layout.vpp)
                                                   for c in r]
            misfit = uniform_misfit(sizes, self.recompute_num_layers)
            if misfit:
                raise FieldError("recompute_num_layers", self.recompute_num_layers, "a divisor of every model chunk's "
                                 f"layers (not of {misfit}): Megatron's uniform method runs groups of N layers and "
                                 "indexes past a chunk otherwise")

    @cached_property      # read by every rank's step and cost: worked out once per workload
    def routing(self) -> Routing:
        """Routed pairs per rank: balanced within a rank's own tokens; under expert parallelism the busiest
        rank receives moe_imbalance_percent of a balanced share, at most moe_capacity_percent."""
        load = 100 if self.layout.ep == 1 else self.moe_imbalance_percent
        if self.moe_capacity_percent:
            load = min(load, self.moe_capacity_percent)
        return Routing(self.layout.ep, self.layout.etp, load)

    @property
    def capacity_bytes(self) -> int:
        """What the verdict compares the peak with: the memory PyTorch can use (zerocalc.gpus), or the custom one."""
        return self.gpu_memory if self.gpu_memory is not None else GPU_CATALOG[self.gpu].usable_bytes

    @property
    def nvidia_smi_bytes(self) -> Optional[int]:
        """nvidia-smi's total of a catalogued card (shown beside the capacity; a custom capacity has none)."""
        return None if self.gpu_memory is not None else GPU_CATALOG[self.gpu].smi_bytes

    @property
    def gpu_label(self) -> str:
        return f"custom {self.gpu_memory:,} bytes" if self.gpu_memory is not None else GPU_CATALOG[self.gpu].name

    @cached_property      # read by every rank's step and cost: worked out once per workload
    def vocab_rows(self) -> int:
        """The vocabulary as the embedding and head store it (padded as the kernels pad it)."""
        return padded_vocab(self.arch.vocab, self.layout.vocab_multiple(self.implementation))

    @cached_property      # read by every rank's step and cost: worked out once per workload
    def vocab_columns(self) -> int:
        """Vocabulary columns of the logits one rank computes: its vocab-parallel split, or all of them when the
        logits are gathered (Hugging Face's own "colwise_rep" head plan); a score head's outputs (model/architecture.py
        score_head: a critic's values, a reward model's scores)."""
        if self.arch.score_head:
            return self.arch.score_head
        rows = self.vocab_rows
        return -(-rows // self.layout.tp) if self.layout.loss_parallel else rows

    def overlap(self, stage: int) -> bool:
        return stage == 3 if self.overlap_comm == "auto" else self.overlap_comm == "on"


def recompute_resets(workload, recompute: str) -> dict:
    """The Workload fields that belong to a recompute level other than `recompute`, reset to their defaults: one
    block in N, activation offload and Megatron's method belong to full recompute, an own policy to op, Megatron's
    modules to selective (a fix or a searched layout that recomputes otherwise drops them)."""
    out = {}
    if recompute != "full":
        if workload.recompute_every > 1:
            out["recompute_every"] = 1
        if workload.activation_offload:
            out["activation_offload"] = False
        if workload.recompute_method != "uniform" or workload.recompute_num_layers > 1:
            out.update(recompute_method="uniform", recompute_num_layers=1)
    if recompute != "op" and workload.op_policy != "torchtitan":
        out["op_policy"] = "torchtitan"
    if recompute != "selective" and workload.recompute_modules != DEFAULT_MODULES:
        out["recompute_modules"] = DEFAULT_MODULES
    return out
