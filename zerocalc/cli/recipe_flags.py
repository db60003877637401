"""The CLI's recipe flags: how the step recomputes, compiles, offloads and computes its loss, each a Workload field
(zerocalc/cli/workload.py WORKLOAD_FLAGS)."""

from __future__ import annotations

from ..step.activations import RECOMPUTE
from ..step.float8 import FLOAT8_RECIPES
from ..step.losses import LOSS_CHOICES
from ..step.megatron_recompute import FULL_METHODS, RECOMPUTE_MODULES
from ..step.op_checkpoint import USER_POLICY_OPS


def add_recipe_flags(m) -> None:
    """The recipe flags, on the model / peak-memory argument group."""
    m.add_argument("--recompute", choices=RECOMPUTE, help="activation recomputation (default none): selective "
                   "(eager attention scores), op (torchtitan's op-level policy), full")
    m.add_argument("--op-policy", metavar="POLICY", help="with --recompute op: which ops the policy saves: "
                   "torchtitan (every second matmul and the attention; default), matmuls (every matmul and the "
                   "attention), attention (the attention only), or your own: save: and a comma list of "
                   + ", ".join(USER_POLICY_OPS) + " (save:mm,attention)")
    m.add_argument("--recompute-every", type=int, metavar="N",
                   help="with --recompute full: checkpoint one block in N, the others keep every activation "
                        "(torchtitan's selective_ac_option = \"N\"; default 1: every block)")
    m.add_argument("--recompute-modules", metavar="M,M", help="with --recompute selective: Megatron's "
                   "--recompute-modules, a comma list of " + ", ".join(RECOMPUTE_MODULES) + " (default core_attn, "
                   "the attention scores)")
    m.add_argument("--recompute-method", choices=FULL_METHODS, help="with --recompute full: Megatron's "
                   "--recompute-method: uniform (groups of N blocks per checkpoint; default) or block (the first N "
                   "blocks of each pipeline chunk, the others keep everything)")
    m.add_argument("--recompute-num-layers", type=int, metavar="N", help="with --recompute full: Megatron's "
                   "--recompute-num-layers (default 1)")
    m.add_argument("--loss", choices=LOSS_CHOICES, help="the loss implementation: auto (the implementation's "
                   "own), chunked (torchtune), liger (fused linear cross entropy), cut (cut-cross-entropy), "
                   "torchtitan-chunked (ChunkedLossWrapper), compiled (torch.compile'd loss), compiled-fp32 (over "
                   "torchtune's fp32 logits)")
    m.add_argument("--loss-chunks", type=int, metavar="N", help="chunks of the chunked losses (default 8)")
    m.add_argument("--compile", nargs="?", const="yes", choices=("yes", "no"),
                   help="torch.compile each block: Inductor's partitioner saves fewer tensors (default no)")
    m.add_argument("--repeat-kv", nargs="?", const="yes", choices=("yes", "no"),
                   help="the attention repeats K and V to every query head before its kernel, which saves the "
                        "copies (torchtune's and LitGPT's attention, Hugging Face's SDPA under a padding mask; "
                        "default no: SDPA without a mask passes them grouped)")
    m.add_argument("--activation-offload", nargs="?", const="yes", choices=("yes", "no"),
                   help="with --recompute full: each block's checkpoint input in pinned host memory, two on the "
                        "GPU (torchtune enable_activation_offloading; default no)")
    m.add_argument("--optimizer-in-backward", nargs="?", const="yes", choices=("yes", "no"),
                   help="the optimizer steps each parameter in backward, so no gradient set lives (torchtune "
                        "optimizer_in_bwd; one micro-batch per step; default no)")
    m.add_argument("--float8", choices=FLOAT8_RECIPES, help="torchao float8 linears (default none): their casts' "
                   "transients; the saved activations do not change")
    m.add_argument("--float8-all-gather", nargs="?", const="yes", choices=("yes", "no"),
                   help="with --float8 tensorwise under FSDP: the blocks' linear weights gathered in float8")
    m.add_argument("--async-tp", nargs="?", const="yes", choices=("yes", "no"),
                   help="torchtitan's async tensor parallelism (with --tp, --sequence-parallel and --compile): its "
                        "symmetric-memory workspace, outside the allocator, with the CUDA context (default no)")
    m.add_argument("--mtp-layers", metavar="N|config", help="multi-token prediction modules trained (Megatron's "
                   "--mtp-num-layers; default 0, as Hugging Face's training forward and Megatron by default): N, or "
                   "config for the count the config declares (DeepSeek-V3's num_nextn_predict_layers: 1)")
