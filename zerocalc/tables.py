"""Data, not code: dtypes, optimizers, accounting conventions and ZeRO ownership rules.

One small function in `ledger.py` and `model_states.py` applies these tables, as in the seed's own example
(widths per category, a set of partitioned categories per stage). Every row names its source.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

# --- dtypes: storage width in bits (exact integers; 4-bit types are half a byte per element) ---------------
# tf32 is a compute mode of fp32 tensor cores: its tensors are stored in 32-bit containers (NVIDIA A100 whitepaper).
DTYPE_BITS = MappingProxyType({
    "fp64": 64,
    "fp32": 32,
    "tf32": 32,
    "bf16": 16,
    "fp16": 16,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "int8": 8,
    "uint8": 8,
    "int4": 4,
    "nf4": 4,
    "fp4_e2m1": 4,
})
# Widths the kernels fix whatever the model dtype: statistics (norm rstd, logsumexp, log-softmax) in fp32, token ids
# and indices in int64.
STAT_BITS = DTYPE_BITS["fp32"]
INDEX_BITS = 64


def bytes_of(elements: int, bits: int) -> int:
    """Whole bytes that `elements` values of `bits` bits occupy (rounded up: a partial byte is stored)."""
    return -(-elements * bits // 8)

# --- categories --------------------------------------------------------------------------------------------
# The seeds group the fp32 master copy with the optimizer's moments as "optimizer" (DESIGN.md section 2).
CATEGORIES = ("parameters", "gradients", "optimizer")

# --- ZeRO ownership rules: which categories are split across the shard group at each stage ----------------
# ZeRO paper (Rajbhandari et al., SC20), section 5: P_os (stage 1), P_os+g (stage 2), P_os+g+p (stage 3).
STAGES = (0, 1, 2, 3)
PARTITIONED = MappingProxyType({
    0: frozenset(),
    1: frozenset({"optimizer"}),
    2: frozenset({"optimizer", "gradients"}),
    3: frozenset({"optimizer", "gradients", "parameters"}),
})

# --- offload: what each offload switch moves off the GPU --------------------------------------------------
# Only a worker's own shard moves, never a replicated copy: DeepSpeed offloads the optimizer partition (ZeRO-1/2/3)
# together with the partitioned gradients it consumes (ZeRO-Offload, Ren et al. ATC'21, section 4; DeepSpeed's
# estimate_zero2_model_states_mem_needs keeps only 2 * params on the GPU with offload_optimizer=cpu), and offloads
# parameters only under ZeRO-3 (offload_param). The set actually moved is this set intersected with PARTITIONED.
OFFLOAD_TARGETS = ("none", "cpu", "nvme")
OFFLOADED_CATEGORIES = MappingProxyType({
    "offload_optimizer": frozenset({"optimizer", "gradients"}),
    "offload_params": frozenset({"parameters"}),
})

# --- communication volume per worker per step, in elements of the communicated tensor ---------------------
# ZeRO paper section 7: plain data parallelism all-reduces gradients (reduce-scatter + all-gather = 2 Psi);
# stages 1-2 reduce-scatter gradients (Psi) and all-gather updated parameters (Psi) = 2 Psi; stage 3 all-gathers
# parameters in forward and again in backward (2 Psi) and reduce-scatters gradients (Psi) = 3 Psi.
COMM_TERMS = MappingProxyType({
    0: (("gradients", 2),),
    1: (("gradients", 1), ("parameters", 1)),
    2: (("gradients", 1), ("parameters", 1)),
    3: (("gradients", 1), ("parameters", 2)),
})

# --- optimizers: per-parameter state tensors ---------------------------------------------------------------
# Each state is (name, elements per parameter as (numerator, denominator) or "factored", dtype).
# dtype "state" means the scenario's chosen optimizer-state dtype; any other value is a fixed dtype.
# Sources: PyTorch torch.optim state names (exp_avg, exp_avg_sq, momentum_buffer); Transformer Math 101
# (EleutherAI, 2023) bytes per optimizer; Lion (Chen et al. 2023) keeps one moment; Adafactor (Shazeer & Stern
# 2018) keeps a factored second moment (row + column vectors of each matrix, no first moment by default);
# bitsandbytes Adam8bit keeps two uint8 states plus one fp32 absmax per 256-element block each
# (bitsandbytes/optim/optimizer.py, Optimizer8bit.init_state: blocksize = 256).
OPTIMIZERS = MappingProxyType({
    "adam": (("exp_avg", (1, 1), "state"), ("exp_avg_sq", (1, 1), "state")),
    "adamw": (("exp_avg", (1, 1), "state"), ("exp_avg_sq", (1, 1), "state")),
    "sgd": (),
    "sgd-momentum": (("momentum_buffer", (1, 1), "state"),),
    "lion": (("exp_avg", (1, 1), "state"),),
    "adafactor": (("exp_avg_sq_row+col (factored)", "factored", "state"),),
    "adam-8bit": (
        ("state1 (exp_avg, 8-bit)", (1, 1), "uint8"),
        ("absmax1 (per 256 block)", (1, 256), "fp32"),
        ("state2 (exp_avg_sq, 8-bit)", (1, 1), "uint8"),
        ("absmax2 (per 256 block)", (1, 256), "fp32"),
    ),
})

# --- optimizers whose state follows each tensor's shape (2025-26) -----------------------------------------------
# One row per state tensor: (name in optimizer.state, which tensors keep it, its shape rule, dtype, the rule's
# constant). Holders and shape rules are named in states/optimizers.py (HOLDERS, SHAPES): "muon" is Moonlight's
# rule, "size>=4096" a size threshold, "ao256" torchao's quantizable tensors; "param" the parameter's elements,
# "blocks" one per `arg` elements, "rank-max" rank x the larger dimension... dtype "state" is the scenario's
# optimizer_dtype. Every row was checked against optimizer.state after a step on the CPU (tests/measure/
# optimizer_states.py) unless its source says "code".


class OptState(NamedTuple):
    name: str
    holders: str       # which parameter tensors keep it: atoms joined by "&", "!" negates (optimizers.HOLDERS)
    shape: str         # its elements per tensor (optimizers.SHAPES)
    dtype: str         # "state": the scenario's optimizer_dtype; otherwise fixed
    arg: int = 0       # the shape rule's constant: a block size, a table's length
    place: str = "gpu"  # "unified": CUDA managed memory (bitsandbytes' paged states), on the host until touched


def _s(name, holders, shape, dtype="state", arg=0, place="gpu") -> OptState:
    return OptState(name, holders, shape, dtype, arg, place)


def _bnb8(paged: bool) -> tuple:
    """bitsandbytes Optimizer2State (bitsandbytes/optim/optimizer.py, 0.50.2): tensors under min_8bit_size (4096)
    keep two fp32 states; the others two uint8 states, an fp32 absmax per 256 elements each and the optimizer's two
    shared 256-entry quantization maps. Paged ones allocate a state of 1e5 elements or more in unified memory
    (get_state_buffer: `p.numel() < 1e5` stays on the device)."""
    big = ("size>=100000", "size>=4096&size<100000") if paged else ("size>=4096",)
    rows = []
    for state in ("state1", "state2"):
        rows += [_s(f"{state} (8-bit{', paged' if paged and h == big[0] else ''})", h, "param", "uint8",
                    place="unified" if paged and h == big[0] else "gpu") for h in big]
        rows.append(_s(f"{state} (fp32, under 4096)", "size<4096", "param", "fp32"))
    return tuple(rows) + (
        _s("absmax1", "size>=4096", "blocks", "fp32", 256), _s("absmax2", "size>=4096", "blocks", "fp32", 256),
        _s("qmap1", "size>=4096", "once", "fp32", 256), _s("qmap2", "size>=4096", "once", "fp32", 256))


def _torchao(codes: str, shape: str, block: int, qmap: int) -> tuple:
    """torchao.optim AdamW8bit / AdamW4bit / AdamWFp8 (torchao/optim/adam.py _new_buffer, 0.18.0): a tensor of at
    least 4096 elements that the block size divides keeps each moment as codes + one fp32 scale per block (+ its own
    fp32 qmap for 8- and 4-bit); any other keeps it as zeros_like(p). Its step is torch.tensor(0.0): a host scalar,
    as torch.optim.AdamW's is unless capturable or fused, so not GPU state (the existing rows leave it out too)."""
    quant, rest = f"ao{block}", f"!ao{block}"
    rows = []
    for state in ("exp_avg", "exp_avg_sq"):
        rows += [_s(f"{state}.codes", quant, shape, codes), _s(f"{state}.scale", quant, "blocks", "fp32", block)]
        if qmap:
            rows.append(_s(f"{state}.qmap", quant, "one", "fp32", qmap))
        rows.append(_s(state, rest, "param"))
    return tuple(rows)


def _low_rank(scalar: bool) -> tuple:
    """GaLore (galore_torch/galore_projector.py, GaLoreProjector proj_type "std", galore-torch 1.0) and APOLLO
    (apollo_torch 1.0.3): a projected matrix keeps its projection (rank x the smaller dimension; GaLore's SVD slice
    on an fp32 gradient holds its whole factor, states/optimizers.py _svd_factor) and both moments of the projected
    gradient (rank x the larger); APOLLO also a 0-d scaled_grad norm. Other tensors: plain AdamW."""
    rows = [_s("projector.ortho_matrix", "lowrank", "rank-min" if scalar else "svd-min"),
            _s("exp_avg (projected)", "lowrank", "rank-max"),
            _s("exp_avg_sq (projected)", "lowrank", "rank-max")]
    if scalar:
        rows.append(_s("scaled_grad", "lowrank", "one"))
    return tuple(rows) + (_s("exp_avg", "!lowrank", "param"), _s("exp_avg_sq", "!lowrank", "param"))


SHAPED_OPTIMIZERS = MappingProxyType({
    # torch.optim.Muon (torch 2.13 torch/optim/_muon.py: one momentum_buffer, zeros_like(p)) on the tensors of
    # Moonlight's rule (MoonshotAI/Moonlight examples/toy_train.py @abaa96e, get_optimizer: ndim >= 2 and not
    # embed_tokens / lm_head); every other tensor steps with the fallback optimizer (Scenario.fallback_optimizer).
    "muon": (_s("momentum_buffer", "muon", "param"),),
    "galore-adamw": _low_rank(False),
    "apollo-adamw": _low_rank(True),
    # Distributed Shampoo with its defaults (facebookresearch/optimizers @f6066066 distributed_shampoo.py:
    # max_preconditioner_dim 1024, betas (0.9, 1.0), no grafting, RootInvShampooPreconditionerConfig): each tensor's
    # dims merged up to 1024 (utils/shampoo_utils.py merge_small_dims) and cut into blocks of 1024 per dim
    # (multi_dim_split); per block a filtered gradient in the parameter's dtype and, per block dim d, a factor
    # matrix and its inverse root stored as fp32 triangles of d (d + 1) / 2; the step counter is a host scalar.
    "shampoo": (_s("filtered_grad", "all", "param"),
                _s("factor_matrices (triangles)", "all", "shampoo", "fp32", 1024),
                _s("inv_factor_matrices (triangles)", "all", "shampoo", "fp32", 1024)),
    # SOAP (nikhilvyas/SOAP soap.py @f42d296, defaults max_precond_dim=10000, merge_dims and precondition_1d off):
    # Adam's two moments in the gradient's dtype, and per dimension d <= 10000 of a tensor of 2+ dimensions a
    # preconditioner GG (torch.zeros(d, d): fp32) and its eigenbasis Q (eigh of the fp32 GG: fp32); 1-D: none.
    "soap": (_s("exp_avg", "all", "param"), _s("exp_avg_sq", "all", "param"),
             _s("GG (preconditioners)", "all", "gram", "fp32", 10000),
             _s("Q (eigenbases)", "all", "gram", "fp32", 10000)),
    # Adam-mini (adam_mini/adam_mini.py, adam-mini 1.1.1): m for every tensor; v one per block (states/optimizers.py
    # mini_block): a full v for biases, vmean per head of q/k, per output row of embeddings, output, v, o, MLP and
    # routers, one for the rest (norms).
    "adam-mini": (_s("m", "all", "param"), _s("v (biases)", "mini-bias", "param"),
                  _s("vmean (per head)", "mini-head", "heads"), _s("vmean (per row)", "mini-row", "rows"),
                  _s("vmean (per tensor)", "mini-other", "one")),
    "adamw-8bit-ao": _torchao("uint8", "param", 256, 256),
    "adamw-4bit-ao": _torchao("uint8", "half", 128, 16),
    "adamw-fp8-ao": _torchao("fp8_e4m3", "param", 256, 0),
    "adamw-8bit-bnb": _bnb8(False),
    "paged-adamw-8bit": _bnb8(True),
    # bitsandbytes PagedAdamW (32-bit): two fp32 states, in unified memory from 1e5 elements (get_state_buffer).
    "paged-adamw": (_s("state1 (paged)", "size>=100000", "param", "fp32", place="unified"),
                    _s("state1", "size<100000", "param", "fp32"),
                    _s("state2 (paged)", "size>=100000", "param", "fp32", place="unified"),
                    _s("state2", "size<100000", "param", "fp32")),
})
# --- the optimizer step's temporaries (Adam / AdamW): what each implementation allocates beyond its state ------
# One row per implementation: how many copies of its unit are alive at once, and the unit: "moments", the second
# moments one step call sees (torch steps param group by param group; DeepSpeed hands it one flat partition per
# group), or "tensor", the largest tensor its per-tensor loop sees. The rule is step/optimizer_step.py adam_items.
# Every row was traced op by op on the CPU (tests/measure/optimizer_step.py, torch 2.13.0).


class StepImpl(NamedTuple):
    copies: int        # temporaries of the unit alive at once
    unit: str          # "moments" | "tensor" | "" (none)
    does: str          # what it allocates, in words
    source: str


ADAM_STEP = MappingProxyType({
    # torch fused=True: torch/optim/adam.py _fused_adam calls torch._fused_adamw_ / _fused_adam_, one kernel that
    # updates the parameter and both moments in place (CUDA, and CPU where it is measured: 0 bytes). DeepSpeed's
    # FusedAdam (deepspeed/ops/adam/fused_adam.py step: multi_tensor_applier(self.multi_tensor_adam, ...)) and apex's
    # / Transformer Engine's FusedAdam (Megatron-LM's Adam) are the same multi-tensor kernel in place.
    "fused": StepImpl(0, "", "one kernel, in place", "torch/optim/adam.py _fused_adam (torch._fused_adamw_); "
                      "deepspeed/ops/adam/fused_adam.py; apex / Transformer Engine FusedAdam"),
    # torch foreach (its default on CUDA when neither foreach nor fused is given: torch/optim/optimizer.py
    # _default_to_fused_or_foreach): _multi_tensor_adam's exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs),
    # a copy of every second moment of the group's device/dtype bucket, then divided and offset in place and read
    # by _foreach_addcdiv_. Its local name is rebound bucket by bucket, so two buckets' copies meet: the group's
    # whole second moments with two dtypes, less with three or more (measured).
    "foreach": StepImpl(1, "moments", "a copy of the second moments (torch._foreach_sqrt)",
                        "torch/optim/adam.py _multi_tensor_adam"),
    # torch foreach=False: _single_tensor_adam's denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps):
    # the square root and the quotient of one tensor's second moment alive together, while the previous
    # tensor's denom is still bound (measured). On DeepSpeed's flat partition that tensor is the partition.
    "for-loop": StepImpl(2, "tensor", "denom: the square root and the quotient of one tensor's second moment",
                         "torch/optim/adam.py _single_tensor_adam"),
})
# Scenario.optimizer_impl: one of the rows, or "auto" (step/optimizer_step.py resolve_impl: by the framework).
OPTIMIZER_IMPLS = ("auto",) + tuple(ADAM_STEP)
# DeepSpeed ZeRO-3 steps its fp32 partition in sub-groups of this many elements (zero/config.py sub_group_size,
# default 1e9; stage3.py _optimizer_step hands the optimizer one sub-group's flat tensor at a time).
DEEPSPEED_SUB_GROUP = 1_000_000_000
# What Muon's fallback may be: optimizers whose state is per parameter (OPTIMIZERS above).
FALLBACK_OPTIMIZERS = ("adamw", "adam", "lion", "sgd-momentum", "sgd", "adam-8bit")
# Which tensors Newton-Schulz orthogonalises under tensor parallelism: the whole matrix gathered over TP (Moonlight's
# distributed Muon, Dion) or each rank's shard alone (an implementation that steps DTensor local shards).
MUON_TP = ("full", "local")
OPTIMIZER_NAMES = tuple(OPTIMIZERS) + tuple(SHAPED_OPTIMIZERS)

# --- accounting conventions: named presets of the precision fields of a Scenario ---------------------------
# Keys are Scenario field names. grad_accum_dtype is an extra gradient buffer (None: not kept).
# comm_dtype None: each tensor is communicated in its own dtype.
CONVENTIONS = MappingProxyType({
    # ZeRO paper section 3.1: fp16 params 2 + fp16 grads 2 + K=12 (fp32 master 4, momentum 4, variance 4) = 16.
    "zero-paper": MappingProxyType({
        "param_dtype": "fp16", "grad_dtype": "fp16", "master_dtype": "fp32", "grad_accum_dtype": None,
        "optimizer": "adam", "optimizer_dtype": "fp32", "comm_dtype": None,
        "summary": "ZeRO paper section 3.1: 2 + 2 + 12 = 16 bytes per parameter.",
    }),
    # DeepSpeed stage_1_and_2.py, estimate_zero2_model_states_mem_needs: "2 = params_16bit, 18 = 2_grads_16bit +
    # 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit" = 20 bytes per parameter.
    "deepspeed": MappingProxyType({
        "param_dtype": "fp16", "grad_dtype": "fp16", "master_dtype": "fp32", "grad_accum_dtype": "fp32",
        "optimizer": "adam", "optimizer_dtype": "fp32", "comm_dtype": None,
        "summary": "DeepSpeed ZeRO-1/2 implementation: 2 + 2 + 4 (fp32 grads) + 12 = 20 bytes per parameter.",
    }),
    # Megatron-LM megatron/training/theoretical_memory_usage.py: num_bytes_per_parameter = 18, or
    # 6 + 12 / data_parallel_size with the distributed optimizer (bf16 params 2 + fp32 main grads 4 replicated,
    # fp32 main params + Adam moments 12 sharded) -- ZeRO-1 over this ledger.
    "megatron": MappingProxyType({
        "param_dtype": "bf16", "grad_dtype": "fp32", "master_dtype": "fp32", "grad_accum_dtype": None,
        "optimizer": "adam", "optimizer_dtype": "fp32", "comm_dtype": None,
        "summary": "Megatron-LM: bf16 params 2 + fp32 main grads 4 + 12 = 18 bytes per parameter.",
    }),
    # PyTorch FSDP2 (torch.distributed.fsdp.fully_shard), MixedPrecisionPolicy docstring: "The optimizer step uses
    # the sharded parameter in the original dtype"; param_dtype (bf16) is the dtype of the unsharded parameter and
    # of the all-gather; with reduce_dtype None "the reduction uses the compute dtype". No separate master copy.
    "fsdp2": MappingProxyType({
        "param_dtype": "fp32", "grad_dtype": "fp32", "master_dtype": None, "grad_accum_dtype": None,
        "optimizer": "adamw", "optimizer_dtype": "fp32", "comm_dtype": "bf16",
        "summary": "FSDP2 mixed precision: fp32 sharded params 4 + fp32 grads 4 + Adam 8 = 16 bytes; bf16 only "
                   "while gathered.",
    }),
    # Pure bf16 training (no master copy; e.g. torch.optim.AdamW on a bf16 model): Transformer Math 101 lists
    # optimizer states at the training dtype when no fp32 copy is kept.
    "pure-bf16": MappingProxyType({
        "param_dtype": "bf16", "grad_dtype": "bf16", "master_dtype": None, "grad_accum_dtype": None,
        "optimizer": "adamw", "optimizer_dtype": "bf16", "comm_dtype": None,
        "summary": "Pure bf16, no master copy: 2 + 2 + 4 = 8 bytes per parameter.",
    }),
})
DEFAULT_CONVENTION = "zero-paper"

# Adafactor's factored second moment holds rows + columns of each weight matrix. Without an architecture we assume
# square d x d matrices: (d + d) / d^2 = 2 / d elements per parameter, with d editable.
DEFAULT_FACTORED_DIM = 4096
