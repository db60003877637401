"""The optimizer's flags: which optimizer, its state dtype, and the options of the shaped ones (tables.
SHAPED_OPTIMIZERS): Muon's fallback, Newton-Schulz dtype and tensor-parallel scope, GaLore / APOLLO's rank; Adam /
AdamW's step implementation (tables.ADAM_STEP: its temporaries)."""

from __future__ import annotations

from ..tables import DTYPE_BITS, FALLBACK_OPTIMIZERS, MUON_TP, OPTIMIZER_IMPLS, OPTIMIZER_NAMES

# Scenario fields these flags set (None when not given: the convention's value or the Scenario default).
OPTIMIZER_FIELDS = ("optimizer", "optimizer_dtype", "factored_dim", "fallback_optimizer", "ns_dtype", "muon_tp",
                    "optimizer_rank", "optimizer_impl")


def add_optimizer_flags(p, count) -> None:
    """The flags on parser p (count: the CLI's integer parser, which reads 1e3 / 4K)."""
    dtypes = list(DTYPE_BITS)
    p.add_argument("--optimizer", choices=list(OPTIMIZER_NAMES),
                   help="muon, galore-adamw, apollo-adamw, shampoo, soap, adam-mini, adamw-8bit-ao / -4bit-ao / -fp8-ao (torchao), "
                        "adamw-8bit-bnb, paged-adamw(-8bit) (bitsandbytes): state follows each tensor's shape")
    p.add_argument("--optimizer-dtype", choices=dtypes, help="dtype of the optimizer's state (Muon: its momentum)")
    p.add_argument("--factored-dim", type=count, help="Adafactor, and shaped optimizers without an architecture: "
                                                      "side of the assumed square matrices (4096)")
    p.add_argument("--fallback-optimizer", choices=FALLBACK_OPTIMIZERS,
                   help="Muon: the optimizer of embeddings, head, norms and biases (default adamw)")
    p.add_argument("--ns-dtype", choices=dtypes, help="Muon: dtype of its Newton-Schulz iteration (default bf16)")
    p.add_argument("--muon-tp", choices=MUON_TP, help="Muon under tensor parallelism: orthogonalise the whole "
                                                      "matrix, gathered (full, default) or each shard (local)")
    p.add_argument("--optimizer-rank", type=count, help="GaLore / APOLLO: projection rank (default 128)")
    p.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS,
                   help="Adam / AdamW's step: fused (nothing beside its state), foreach (a copy of the second "
                        "moments), for-loop (two copies of the largest tensor's; DeepSpeed's whole partition); "
                        "auto (default): fused under Megatron, foreach otherwise")
