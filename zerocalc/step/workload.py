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
from typing import Optional

from ..gpus import DEFAULT_GPU, GPU_CATALOG
from ..layout import Layout, check_against, padded_vocab
from ..model.architecture import Architecture
from ..model.finetune import FULL, FineTune
from ..scenario import FieldError, require_choice, require_int
from ..tables import DTYPE_BITS
from .activations import ATTENTION, IMPLEMENTATIONS, RECOMPUTE
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
    "gpu_memory": (1, 2**50),
    "fragmentation_percent": (0, 100),
    "moe_imbalance_percent": (100, 10_000),
    "moe_capacity_percent": (0, 10_000),
    "recompute_every": (1, 10_000),
}
OVERLAP_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class Workload:
    arch: Architecture
    micro_batch: int = 1
    seq_len: int = 2048
    activation_dtype: Optional[str] = None    # None: the compute dtype (comm_dtype or param_dtype)
    attention: str = "flash"
    recompute: str = "none"
    # With full recompute, checkpoint one block in N (torchtitan's selective_ac_option = "N"); 1: every block.
    recompute_every: int = 1
    implementation: str = "huggingface"
    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    prefetch_bucket_size: int = 50_000_000
    max_live_parameters: int = 1_000_000_000
    param_persistence_threshold: int = 100_000
    overlap_comm: str = "auto"                # auto: on for stage 3 only, as DeepSpeed
    # CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers: outside PyTorch's allocator, inside nvidia-smi's
    # figure (torch.cuda.memory_allocated docs). Commonly 0.5-1.5 GiB; 1 GiB assumed.
    cuda_context_bytes: int = 2**30
    # Caching-allocator reserve and fragmentation, as a percentage of what tensors need (assumed 5%).
    fragmentation_percent: int = 5
    gpu: str = DEFAULT_GPU
    gpu_memory: Optional[int] = None          # a custom capacity in bytes; overrides the catalog
    layout: Layout = Layout()                 # tensor, pipeline and context parallelism; dp is Scenario.workers
    # Expert parallelism: the pairs the busiest rank's experts receive, % of a balanced share (100: balanced
    # routing), capped by a capacity factor when one drops tokens (0: dropless, as Megatron's default).
    moe_imbalance_percent: int = 100
    moe_capacity_percent: int = 0
    finetune: FineTune = FULL                 # what trains: full, frozen blocks, LoRA / DoRA, QLoRA

    def __post_init__(self):
        if not isinstance(self.arch, Architecture):
            raise FieldError("arch", type(self.arch).__name__, "an Architecture")
        for field, (lo, hi) in WORKLOAD_LIMITS.items():
            if getattr(self, field) is not None or field != "gpu_memory":
                require_int(field, getattr(self, field), lo, hi)
        if self.activation_dtype is not None:
            require_choice("activation_dtype", self.activation_dtype, DTYPE_BITS)
        for field, options in (("attention", ATTENTION), ("recompute", RECOMPUTE),
                               ("implementation", IMPLEMENTATIONS), ("overlap_comm", OVERLAP_CHOICES)):
            require_choice(field, getattr(self, field), options)
        if self.recompute_every > 1 and self.recompute != "full":
            raise FieldError("recompute_every", self.recompute_every, "1 unless recompute is full")
        if self.gpu_memory is None and self.gpu not in GPU_CATALOG:
            raise FieldError("gpu", self.gpu, "one of " + ", ".join(GPU_CATALOG) + ", or a custom gpu_memory")
        if not isinstance(self.layout, Layout):
            raise FieldError("layout", type(self.layout).__name__, "a Layout")
        if not isinstance(self.finetune, FineTune):
            raise FieldError("finetune", type(self.finetune).__name__, "a FineTune")
        check_against(self.layout, self.arch, self.seq_len, self.attention)

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
        return self.gpu_memory if self.gpu_memory is not None else GPU_CATALOG[self.gpu][1]

    @property
    def gpu_label(self) -> str:
        return f"custom {self.gpu_memory:,} bytes" if self.gpu_memory is not None else GPU_CATALOG[self.gpu][0]

    @cached_property      # read by every rank's step and cost: worked out once per workload
    def vocab_rows(self) -> int:
        """The vocabulary as the embedding and head store it (padded as the kernels pad it)."""
        return padded_vocab(self.arch.vocab, self.layout.vocab_multiple(self.implementation))

    @cached_property      # read by every rank's step and cost: worked out once per workload
    def vocab_columns(self) -> int:
        """Vocabulary columns of the logits one rank computes: its vocab-parallel split, or all of them when the
        logits are gathered (Hugging Face's own "colwise_rep" head plan)."""
        rows = self.vocab_rows
        return -(-rows // self.layout.tp) if self.layout.loss_parallel else rows

    def overlap(self, stage: int) -> bool:
        return stage == 3 if self.overlap_comm == "auto" else self.overlap_comm == "on"
