"""The command line's flags, grouped as the page's sidebar sections are (issue 35: a newcomer reads --help in the
order the page asks): the job first, then a config to load, the architecture, precision, sharding, parallelism,
the recipe, step details, fine-tuning, the working-set assumptions and the output. Groups only order the help:
every flag parses the same wherever it is listed.
"""

from __future__ import annotations

import argparse

from .. import __version__
from ..answers.sweep import AXES
from ..gpus import GPU_CATALOG
from ..layout import SCHEDULES, STAGE_SPLITS
from ..model.finetune import FP32_PARTS, MODES, QUANT_TYPES, SAVEABLE, TRAINABLE_MODULES
from ..model.presets import MODEL_PRESETS
from ..step.activations import ATTENTION, IMPLEMENTATIONS
from ..step.allocator import ALLOCATORS
from ..step.buffers import COMM_BUFFERS, FSDP_WRAPS
from ..step.deepep import DISPATCHERS
from ..step.fsdp1 import FSDP_VERSIONS, ORIG_PARAMS, PREFETCH
from ..step.grad_lifetime import GRAD_LIFETIMES
from ..step.host import LOADING_CHOICES
from ..step.workload import OVERLAP_CHOICES, RESHARD_CHOICES
from ..tables import CONVENTIONS, DEFAULT_CONVENTION, DTYPE_BITS, OFFLOAD_TARGETS
from ..units import UNIT_CHOICES
from ..versions import DEFAULTS as VERSION_DEFAULTS
from .batch_flags import add_batch_flags
from .frameworks import add_framework_flags
from .optimizer import add_optimizer_flags
from .recipe_flags import add_recipe_flags
from .vision import add_vision_flags
from .types import (_capacity, _count, _dtype_or_none, _factor, _names, _Parser, _probability, _stage_layers,
                    _targets, _versions)


def _percent_or_model(text: str):
    """A percent, or "model" (the Workload's None: the allocator's model replays the step)."""
    return "model" if text.strip().lower() == "model" else _count(text)


def build_parser(description: str) -> argparse.ArgumentParser:
    p = _Parser(prog="python -m zerocalc", usage="python -m zerocalc [rl | mcp] [FLAGS ...]",
                formatter_class=argparse.RawDescriptionHelpFormatter, description=description)
    p.add_argument("--version", action="version", version=f"zerocalc {__version__}")
    for title, add in SECTIONS:
        if add in OWN_GROUP:
            add(p)                           # a module that makes its own group (the imports: mutually exclusive)
        else:
            add(p.add_argument_group(title))
    return p


def _job(g) -> None:
    g.add_argument("--model", choices=list(MODEL_PRESETS), help="a preset (see --list-models)")
    g.add_argument("--params", type=_count, help="parameter count: 1e9, 7B, 1.5T, 350M, 124439808 "
                                                 "(or give a model below)")
    g.add_argument("--gpu", choices=list(GPU_CATALOG), help="default H100-SXM-80GB (see --list-gpus)")
    g.add_argument("--gpu-memory", type=_capacity, metavar="CAPACITY",
                   help="a custom capacity PyTorch can use, with its unit: 48GB, 44.4GiB, 46068MiB (overrides --gpu)")
    g.add_argument("--workers", type=_count, help="data-parallel workers: the ZeRO / FSDP group, dp (default 1)")
    g.add_argument("--gpus", type=_count, help="total GPUs, instead of --workers: dp = gpus / (tp x pp x cp)")
    g.add_argument("--micro-batch", type=_count)
    g.add_argument("--seq-len", type=_count, help="sequence length (default 2048)")
    g.add_argument("--check-stage", type=int, choices=range(4), metavar="{0,1,2,3}",
                   help="the ZeRO stage the plan runs at, for what would make it fit (default: 3 across "
                        "workers, 0 on one GPU)")
    g.add_argument("--measured", metavar="FILE", help="what a run of this plan printed at --check-stage (an out-of-"
                   "memory message, max_memory_allocated / reserved lines, memory_stats JSON, nvidia-smi CSV, the "
                   "probe's line: the page's Calibrate formats): measured beats estimated for that stage's verdict")
    g.add_argument("--list-models", action="store_true", help="list the model presets and exit")
    g.add_argument("--list-gpus", action="store_true", help="list the GPU catalog and exit")


def _arch(g) -> None:
    g.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (read locally, never executed)")
    g.add_argument("--hub", metavar="ORG/NAME", help="fetch a model's config.json from the Hugging Face Hub (no "
                                                     "weights; HF_TOKEN from the environment; HF_HUB_OFFLINE honoured)")
    g.add_argument("--revision", help="with --hub: a branch, tag or commit (default main)")
    for flag in ("--layers", "--hidden", "--heads", "--kv-heads", "--ffn", "--vocab"):
        g.add_argument(flag, type=_count, help="architecture field (overrides the preset's)")
    g.add_argument("--tied-embeddings", nargs="?", const="yes", choices=("yes", "no"))
    g.add_argument("--score-head", type=int, metavar="N", help="a score head of N outputs in place of the LM head "
                   "(1: a PPO critic's value head or a reward model's; default 0: the LM head)")
    g.add_argument("--dropout", type=_probability, help="every dropout probability (default: the model's)")


def _precision(g) -> None:
    dtypes = list(DTYPE_BITS)
    g.add_argument("--convention", choices=list(CONVENTIONS),
                   help=f"preset ledger (default {DEFAULT_CONVENTION}); the dtype flags below override it")
    g.add_argument("--param-dtype", choices=dtypes)
    g.add_argument("--grad-dtype", choices=dtypes)
    g.add_argument("--master-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}")
    g.add_argument("--grad-accum-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}",
                   help="an extra gradient accumulation buffer (DeepSpeed keeps an fp32 one)")
    add_optimizer_flags(g, _count)
    g.add_argument("--comm-dtype", type=_dtype_or_none, metavar="{none," + ",".join(dtypes) + "}",
                   help="dtype tensors are communicated in (none: their own)")


def _sharding(g) -> None:
    g.add_argument("--shard-group", type=_count, help="workers one sharded copy is split across (default: all)")
    g.add_argument("--gpus-per-node", type=_count, help="default 8")
    g.add_argument("--offload-optimizer", choices=OFFLOAD_TARGETS, help="default none")
    g.add_argument("--offload-params", choices=OFFLOAD_TARGETS, help="default none")
    g.add_argument("--host-ram", dest="host_memory_bytes", type=_capacity, metavar="CAPACITY",
                   help="one node's host RAM, with its unit: 512GB, 2TiB (default: not checked; the report still "
                        "says what a node needs at start-up and in the step)")
    g.add_argument("--model-loading", choices=LOADING_CHOICES,
                   help="how a node's processes load the model at start-up (default auto: zero.Init under "
                        "DeepSpeed ZeRO-3, meta under Megatron, else every process's own fp32 copy)")


def _parallel(g) -> None:
    g.add_argument("--tp", type=_count, help="tensor-parallel degree (default 1)")
    g.add_argument("--pp", type=_count, help="pipeline-parallel stages (default 1)")
    g.add_argument("--vpp", type=_count, help="virtual stages per pipeline rank (interleaved schedule)")
    g.add_argument("--cp", type=_count, help="context-parallel degree (default 1)")
    g.add_argument("--sequence-parallel", nargs="?", const="yes", choices=("yes", "no"),
                   help="split norms, dropout and the residual stream over tp too")
    g.add_argument("--micro-batches", type=_count, help="micro-batches per optimizer step (gradient "
                                                        "accumulation; in flight under pipeline parallel)")
    g.add_argument("--schedule", choices=SCHEDULES, help="pipeline schedule (default 1f1b)")
    g.add_argument("--stage-layers", type=_stage_layers, metavar="N,N,...",
                   help="decoder layers of each of the pp x vpp stages in schedule order (stage c on rank c mod pp)")
    g.add_argument("--stage-split", choices=STAGE_SPLITS, help="the stages' layers when --stage-layers is not "
                   "given: even (default), torchtitan (its default split), megatron")
    g.add_argument("--first-stage-layers", type=_count, help="with --stage-split megatron: "
                   "--decoder-first-pipeline-num-layers")
    g.add_argument("--last-stage-layers", type=_count, help="with --stage-split megatron: "
                   "--decoder-last-pipeline-num-layers")
    g.add_argument("--embedding-weight", type=_count, help="the embedding counted as layers in the split: "
                   "torchtitan's pipeline_parallel_first_stage_less_layers (default 1), Megatron's "
                   "--account-for-embedding-in-pipeline-split (1; default 0)")
    g.add_argument("--head-weight", type=_count, help="the head and loss counted as layers: torchtitan's "
                   "pipeline_parallel_last_stage_less_layers (default 1), Megatron's "
                   "--account-for-loss-in-pipeline-split (1; default 0)")
    g.add_argument("--loss-parallel", choices=("yes", "no"),
                   help="vocab-parallel logits and loss under tp (default yes; no: gathered logits)")
    g.add_argument("--vocab-divisor", type=_count, help="pad the vocabulary to a multiple of this x tp "
                                                       "(default: 128 for megatron kernels, 1 otherwise)")
    g.add_argument("--ep", type=_count, help="expert parallel: routed experts split over ep ranks (default 1)")
    g.add_argument("--moe-dispatcher", choices=DISPATCHERS, help="expert parallelism's token dispatcher: alltoall "
                   "(NCCL's, default) or deepep (DeepEP's NVLink / RDMA buffers too, outside the allocator: "
                   "Megatron's --moe-enable-deepep)")
    g.add_argument("--etp", type=_count, help="expert tensor parallel: each expert's FFN over etp ranks "
                                              "(default 1; Megatron's default is tp)")


def _recipe(g) -> None:
    add_recipe_flags(g)
    g.add_argument("--cross-entropy-loss-fusion", dest="loss_fusion", action="store_const", const=True,
                   help="with --implementation megatron: Megatron's fused (native) cross entropy, whose backward "
                        "holds an fp32 copy of the softmax and a bf16 gradient (default: unfused, as Megatron)")


def _step(g) -> None:
    add_batch_flags(g, _count)                # padded / packed batches, the lengths, the router loss
    g.add_argument("--attention", choices=ATTENTION, help="eager keeps the s^2 scores (default flash)")
    g.add_argument("--activation-dtype", choices=list(DTYPE_BITS), help="default: the compute dtype")
    g.add_argument("--implementation", choices=IMPLEMENTATIONS, help="which kernels save activations "
                                                                      "(default huggingface)")
    g.add_argument("--comm-buffers", choices=COMM_BUFFERS,
                   help="whose gradient buckets and gathered parameters the step holds: deepspeed (fixed-size "
                        "buckets), megatron (none beyond its grad buffer), fsdp (one unit at a time), none; "
                        "auto (default): from the convention (megatron, fsdp2 -> fsdp, else deepspeed), none "
                        "without data parallelism unless DeepSpeed")
    g.add_argument("--grad-lifetime", choices=GRAD_LIFETIMES, help="gradients live the whole step (a persistent "
                   "buffer) or from backward on (set_to_none); auto: backward for torch loops at one micro-batch")
    g.add_argument("--fsdp-wrap", choices=FSDP_WRAPS,
                   help="FSDP units: blocks (default: each decoder block, the ends in the root) or torchtitan "
                        "(the embedding, each block, [norm, head] kept gathered after forward)")
    g.add_argument("--fsdp-version", type=int, choices=FSDP_VERSIONS, help="which FSDP the fsdp buffers model: 2 "
                   "(default: fully_shard, per-tensor shards) or 1 (FullyShardedDataParallel: a flat parameter per "
                   "unit)")
    g.add_argument("--fsdp-use-orig-params", choices=ORIG_PARAMS, help="FSDP1's use_orig_params (default no): yes "
                   "lets a unit mix frozen and trainable weights and allocates its whole flat gradient")
    g.add_argument("--fsdp-backward-prefetch", choices=PREFETCH, help="FSDP1's backward_prefetch: pre (default, "
                   "torch's BACKWARD_PRE), post, none (accelerate's and the HF Trainer's NO_PREFETCH)")
    g.add_argument("--reshard-after-forward", choices=RESHARD_CHOICES,
                   help="FSDP2 at stage 3: yes frees each unit's gathered parameters after forward, no keeps them "
                        "(under pp: the stage unsharded for the step); auto (default): torchtitan's, no under pp")
    g.add_argument("--reduce-dtype", choices=list(DTYPE_BITS),
                   help="FSDP's reduce_dtype (default: the compute dtype; torchtitan: fp32)")
    for flag in ("--reduce-bucket-size", "--allgather-bucket-size", "--prefetch-bucket-size",
                 "--max-live-parameters", "--param-persistence-threshold"):
        g.add_argument(flag, type=_count, help="DeepSpeed ZeRO knob, in elements")
    g.add_argument("--overlap-comm", choices=OVERLAP_CHOICES, help="auto: on for stage 3 only (DeepSpeed)")


def _finetune(g) -> None:
    g.add_argument("--finetune", choices=MODES, help="what trains (default full)")
    g.add_argument("--lora-rank", type=_count, help="LoRA / DoRA / QLoRA rank (default 8)")
    g.add_argument("--lora-targets", type=_targets, help="q,k,v,o,gate,up,down (any of them) or all-linear "
                                                         "(default q,v)")
    g.add_argument("--lora-dropout", type=_probability, help="adapter dropout (default 0)")
    g.add_argument("--adapter-dtype", choices=list(DTYPE_BITS), help="default: peft's (fp32 on a 16-bit base)")
    g.add_argument("--modules-to-save", type=_names(SAVEABLE), help="trained in full beside the adapters: "
                                                                    "lm_head,embed_tokens")
    g.add_argument("--train-last-layers", type=_count, help="freeze: the last k blocks train")
    g.add_argument("--train-modules", type=_names(TRAINABLE_MODULES), help="freeze: embed_tokens,lm_head,norms")
    g.add_argument("--base-dtype", choices=list(DTYPE_BITS), help="frozen base weights (default: --param-dtype)")
    g.add_argument("--quant-type", choices=QUANT_TYPES, help="qlora base: nf4, fp4 or int8 (default nf4)")
    g.add_argument("--quant-block-size", type=_count, help="4-bit block size (default 64)")
    g.add_argument("--double-quant", choices=("yes", "no"), help="quantize the 4-bit scales too (default yes)")
    g.add_argument("--kbit-prepare", choices=("yes", "no"), help="qlora: peft's prepare_model_for_kbit_training "
                                                                 "(fp32 non-quantized weights; default yes)")
    g.add_argument("--quantize-head", choices=("yes", "no"),
                   help="qlora: the output head quantized too (an untied one), as Lightning Fabric's "
                        "BitsandbytesPrecision does under LitGPT; transformers' quantizer leaves it out (default no)")
    g.add_argument("--fp32-parts", choices=tuple(FP32_PARTS),
                   help="tensors a loader keeps in fp32 beside a 16-bit model: norms (LLaMA-Factory's "
                        "upcast_layernorm, axolotl's fp32_norms), embed-head-norms (axolotl's full fine-tune "
                        "without flash attention or FSDP: an fp32 residual stream under autocast); default none")
    g.add_argument("--versions", type=_versions, metavar="LIB=VERSION,...",
                   help="the library releases the run used, e.g. transformers=4.45,bitsandbytes=0.43.1 (default: "
                        + ", ".join(f"{k} {v}" for k, v in VERSION_DEFAULTS.items())
                        + "); older releases keep other bytes (docs/peak-memory.md)")


def _assumptions(g) -> None:
    g.add_argument("--cuda-context-bytes", type=_count, help="CUDA context and its kernel modules (default: by card "
                   "and torch release, step/context.py; a measured figure replaces it)")
    g.add_argument("--nccl-buffsize", type=_count, help="NCCL_BUFFSIZE: Simple's buffer per connection, bytes "
                   "(default 4 MiB); NCCL's buffers per communicator lie outside the allocator (step/nccl.py)")
    g.add_argument("--nccl-nvls", choices=("yes", "no"), help="NCCL_NVLS_ENABLE: NVLink SHARP's buffers on an "
                   "NVSwitch node from Hopper on (default yes, NCCL's auto)")
    g.add_argument("--nccl-percent", type=_count, help="percent of the modelled NCCL buffers counted (100; the "
                   "band moves it 25-200)")
    g.add_argument("--workspace-bytes", type=_count,
                   help="GEMM workspaces held in PyTorch's allocator (default: by GPU and implementation: 2 cuBLAS workspaces, 32 MiB each on sm90, + Transformer Engine's under megatron)")
    g.add_argument("--fragmentation-percent", type=_percent_or_model, help="allocator reserve: model (the default: the "
                   "step replayed through the caching allocator's model, step/timeline.py), or a percent of the "
                   "tensors (5 was the default before issue 32)")
    g.add_argument("--allocator", choices=tuple(ALLOCATORS),
                   help="which allocator the reserve's band models: caching (PyTorch's default), expandable "
                        "(expandable_segments:True), flat (0-15%%, the band before issue 20)")
    g.add_argument("--allocator-units", type=_count,
                   help="ZeRO-3 unit cycles the reserve holds beyond the percent (0; the band's high end: 2)")
    g.add_argument("--moe-imbalance-percent", type=_count, help="pairs the busiest expert-parallel rank "
                                                                "receives, %% of a balanced share (100)")
    g.add_argument("--moe-capacity-percent", type=_count, help="capacity factor x 100: drops pairs beyond it "
                                                               "(0: dropless)")


def _output(g) -> None:
    g.add_argument("--units", choices=UNIT_CHOICES, default="decimal",
                   help="GB, GiB, TB, ... or decimal / binary: an automatic unit of that system (default decimal)")
    g.add_argument("--json", action="store_true", help="print the report as JSON (integers are bytes)")
    g.add_argument("--sweep", choices=tuple(AXES), help="every stage's peak along this input, the others held, "
                   "and where the --check-stage stage stops fitting")
    g.add_argument("--deepspeed-estimate", action="store_true",
                   help="add what DeepSpeed's estimate_zero{2,3}_model_states_mem_needs return")
    g.add_argument("--largest-layer-params", type=_count, help="for the DeepSpeed ZeRO-3 rows")
    g.add_argument("--nodes", type=_count, help="for the DeepSpeed view (default: workers / gpus-per-node)")
    g.add_argument("--buffer-factor", type=_factor, default=1.5, help="DeepSpeed additional_buffer_factor (1.5)")

SECTIONS = (
    ("the job: model, GPU, workers, batch (a model adds the peak working set, the verdict and the solvers)", _job),
    ("load a config", add_framework_flags),
    ("architecture (the page's Architecture: overrides the preset's)", _arch),
    ("precision and optimizer (the page's Precision)", _precision),
    ("sharding, nodes and offload (the page's Sharding)", _sharding),
    ("parallel layout, world = dp x tp x pp x cp (the page's Parallelism; needs a model)", _parallel),
    ("recipe: recompute, compile, float8, offload, loss (the page's Recipe; needs a model)", _recipe),
    ("step details: batches, kernels, dtypes, the framework's buffers (the page's Step details)", _step),
    ("fine-tuning (the page's Fine-tuning; needs a model)", _finetune),
    ("vision-language models (the page's Vision)", add_vision_flags),
    ("working-set assumptions, beyond the tensors (the page's Assumptions)", _assumptions),
    ("output and extra views (the page's Display)", _output),
)
OWN_GROUP = (add_framework_flags, add_vision_flags)     # each titles its own group
