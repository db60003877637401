"""Who holds which part of each parameter tensor: the inventory (architecture.tensors) placed on a layout.

A pipeline rank holds its chunks' layers (layout.stage_sizes: the even split, a named uneven one or the counts
given), the embedding end on the first stage and the output end on the last; a tied output head is kept as a copy
on the last stage when that stage does not also hold the embedding (Megatron-LM keeps the word embeddings on both
and all-reduces their gradients over the embedding group). Within a stage every tensor-parallel rank holds its
split of each tensor (architecture.ParamTensor.tp), rounded up to whole rows when a dimension does not divide
(DTensor's torch.chunk order: the first ranks take the larger shards).

Ranks that hold the same bytes form a **rank class** (DESIGN.md section 7): pipeline stages with the same chunks
and ends. Every tensor- and context-parallel rank and every data-parallel replica of a stage is in its class.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict, NamedTuple, Tuple

from ..layout import Layout, padded_vocab, stage_sizes
from .architecture import Architecture, layer_counts
from .finetune import FULL, FineTune, expert_rule, finetuned
from .inventory import ParamTensor, tensors
from .vision import resolved


class Blocks(NamedTuple):
    """The blocks of one model chunk: dense-MLP ones, mixture-of-experts ones, and how many use local attention."""
    dense: int
    moe: int
    sliding: int = 0


def group_of(t: ParamTensor) -> str:
    """The parameter group: tensors sharded over the same data-parallel group, stored in the same dtype and trained
    alike ("" for the dense trainable parameters in the ledger's dtypes; "experts", "fp32", "nf4, frozen", ...)."""
    parts = (["experts"] if t.expert else []) + ([t.storage] if t.storage else []) + \
        ([] if t.trainable else ["frozen"])
    return ", ".join(parts)


def block_counts(arch: Architecture, indices: Tuple[int, ...], t: ParamTensor) -> int:
    """How many of these blocks hold tensor t: its kind (every block, dense or MoE ones) and its layer span."""
    if t.kind == "all" and t.first_layer == 0 and t.stop_layer >= arch.layers:
        return len(indices)
    return sum(1 for i in indices if t.first_layer <= i < t.stop_layer
               and (t.kind == "all" or (t.kind == "moe") == arch.is_moe_layer(i)))


class Holding(NamedTuple):
    tensor: ParamTensor
    local_elements: int      # this rank's split of one instance
    instances: int           # how many of it the rank holds (its blocks of the tensor's kind, for block tensors)
    group: str = ""          # group_of(tensor)
    rows: int = 1            # its first dimension on this rank (FSDP2 shards tensor by tensor along it)
    shape: Tuple[int, ...] = ()   # its shape on this rank (shape-rule optimizer state reads it)

    def fsdp_shard(self, ranks: int) -> int:
        """Elements of one rank's FSDP2 shard of every instance: dim 0 split in torch.chunk order and padded
        to ceil(dim 0 / ranks) rows on every rank (torch.distributed.fsdp _fsdp_param.py)."""
        per_row = self.local_elements // self.rows if self.rows else 0
        return -(-self.rows // ranks) * per_row * self.instances

    @property
    def elements(self) -> int:
        return self.local_elements * self.instances


class RankClass(NamedTuple):
    name: str
    pp_ranks: Tuple[int, ...]
    chunks: Tuple[Blocks, ...]       # the blocks of each model chunk this rank holds
    first: bool                      # holds the embedding end
    last: bool                       # holds the output end
    count: int                       # ranks in the class: pipeline ranks x dp x tp x cp
    holdings: Tuple[Holding, ...]
    spans: Tuple[range, ...] = ()    # the layer indices of each of its chunks

    @property
    def layers(self) -> int:
        return sum(c.dense + c.moe for c in self.chunks)

    @property
    def moe_layers(self) -> int:
        return sum(c.moe for c in self.chunks)

    @property
    def sliding_layers(self) -> int:
        return sum(c.sliding for c in self.chunks)

    @property
    def params(self) -> int:
        """Parameter elements one rank holds (its TP/PP/EP shard, before ZeRO)."""
        return sum(_group_params(self.holdings).values())

    def group_params(self) -> Dict[str, int]:
        return _group_params(self.holdings)

    def group_holdings(self) -> Dict[str, Tuple[Holding, ...]]:
        return _group_holdings(self.holdings)

    def largest_module(self) -> Tuple[str, int]:
        """The largest single module's local parameters: what ZeRO-3 gathers at once on this rank."""
        return _largest_module(self.holdings)

    def persistent_params(self, threshold: int) -> int:
        """Elements of tensors at most `threshold` elements large (per rank): kept whole by ZeRO-3."""
        return _persistent_params(self.holdings, threshold)


# What a rank's holdings sum to, cached on the holdings alone: the layout search meets the same ones again in every
# report of a layout and in every layout sharing its tp, pp and ep.

@lru_cache(maxsize=4096)
def _group_params(holdings: Tuple[Holding, ...]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for h in holdings:
        out[h.group] = out.get(h.group, 0) + h.elements
    return out


@lru_cache(maxsize=4096)
def _group_holdings(holdings: Tuple[Holding, ...]) -> Dict[str, Tuple[Holding, ...]]:
    out: Dict[str, list] = {}
    for h in holdings:
        out.setdefault(h.group, []).append(h)
    return {group: tuple(members) for group, members in out.items()}


@lru_cache(maxsize=4096)
def _largest_module(holdings: Tuple[Holding, ...]) -> Tuple[str, int]:
    modules = {}
    for h in holdings:
        modules[h.tensor.module] = modules.get(h.tensor.module, 0) + h.local_elements
    name = max(modules, key=modules.get)
    return name, modules[name]


@lru_cache(maxsize=4096)
def _persistent_params(holdings: Tuple[Holding, ...], threshold: int) -> int:
    return sum(h.elements for h in holdings if h.local_elements <= threshold)


def local_elements(t: ParamTensor, tp: int, vocab_rows: int, ep: int = 1, etp: int = 1) -> int:
    n = 1
    for d in local_shape(t, tp, vocab_rows, ep, etp):
        n *= d
    return n


def local_shape(t: ParamTensor, tp: int, vocab_rows: int, ep: int = 1, etp: int = 1) -> Tuple[int, ...]:
    shape = list(t.shape)
    if t.tp == "vocab":
        shape[0] = vocab_rows
    if t.tp in ("column", "vocab"):
        shape[0] = -(-shape[0] // tp)
    elif t.tp == "row":
        shape[-1] = -(-shape[-1] // tp)
    elif t.expert:
        shape[0] = -(-shape[0] // ep)                 # whole experts over ep
        if t.tp == "expert-column":
            shape[1] = -(-shape[1] // etp)
        elif t.tp == "expert-row" and len(shape) > 2:
            shape[2] = -(-shape[2] // etp)
    return tuple(shape)


def _stage_name(ranks: Tuple[int, ...], pp: int) -> str:
    if pp == 1:
        return "every rank"
    span = f"stage {ranks[0]}" if len(ranks) == 1 else f"stages {ranks[0]}-{ranks[-1]}"
    ends = [label for label, r in (("first", 0), ("last", pp - 1)) if r in ranks]
    return f"pipeline {span}" + (f" ({', '.join(ends)})" if ends else "")


def chunk_ranges(layers: int, pp: int, vpp: int, sizes=None) -> Tuple[Tuple[range, ...], ...]:
    """The layer indices of each model chunk on each pipeline rank: result[r][v] for chunk v of rank r. sizes: the
    stages' layer counts in schedule order (layout.stage_sizes); None: the even split (array_split order)."""
    n = pp * vpp
    if sizes is None:
        base, extra = divmod(layers, n)
        sizes = tuple(base + (1 if c < extra else 0) for c in range(n))
    spans, start = [], 0
    for size in sizes:
        spans.append(range(start, start + size))
        start += size
    return tuple(tuple(spans[v * pp + r] for v in range(vpp)) for r in range(pp))


def chunk_blocks(arch: Architecture, pp: int, vpp: int, sizes=None) -> Tuple[Tuple[Blocks, ...], ...]:
    """The blocks of each model chunk on each pipeline rank: result[r][v] for chunk v of rank r. Layers
    are cut into pp x vpp chunks in order (sizes, or the even split: the first ones a layer longer when they do
    not divide); chunk v x pp + r lives on rank r (Megatron's virtual pipeline layout)."""
    def blocks(span):
        kinds = layer_counts(arch, span.start, span.stop)
        return Blocks(kinds["dense"], kinds["moe"], kinds["sliding"])
    return tuple(tuple(blocks(span) for span in rank) for rank in chunk_ranges(arch.layers, pp, vpp, sizes))


def inventory(arch: Architecture, finetune: FineTune = FULL, param_dtype: str = "bf16") -> Tuple[ParamTensor, ...]:
    """The parameter tensors, with the fine-tuning mode applied (frozen flags, adapters, quantized storage; a vision
    tower's mode resolved under it: model/vision.py tower_mode)."""
    if arch.vision is not None:
        arch = replace(arch, vision=resolved(arch.vision, finetune))
    return finetuned(tensors(arch), finetune, arch.layers, param_dtype, expert_rule(arch, finetune))


@lru_cache(maxsize=1024)
def rank_classes(arch: Architecture, layout: Layout, dp: int, implementation: str, finetune: FineTune = FULL,
                 param_dtype: str = "bf16") -> Tuple[RankClass, ...]:
    """The distinct ranks of a layout, in pipeline order."""
    per_stage = dp * layout.tp * layout.cp
    vocab_rows = padded_vocab(arch.vocab, layout.vocab_multiple(implementation))
    return tuple(c._replace(count=c.count * per_stage)
                 for c in _pipeline_classes(arch, layout.tp, layout.pp, layout.vpp, layout.ep, layout.etp,
                                            vocab_rows, finetune, param_dtype, stage_sizes(layout, arch.layers)))


# Keyed by what a rank holds, without dp and cp (they only multiply the class's count): a new worker count, and
# every layout of a search that differs only in cp or micro-batches, reuses the same classes and holdings.
@lru_cache(maxsize=1024)
def _pipeline_classes(arch: Architecture, tp: int, pp: int, vpp: int, ep: int, etp: int, vocab_rows: int,
                      finetune: FineTune, param_dtype: str, sizes=None) -> Tuple[RankClass, ...]:
    """rank_classes with each class's count in pipeline ranks alone (sizes: the stages' layers, stage_sizes)."""
    table = inventory(arch, finetune, param_dtype)
    ranges = chunk_ranges(arch.layers, pp, vpp, sizes)
    split = {t: local_shape(t, tp, vocab_rows, ep, etp) for t in table}
    chunks = chunk_blocks(arch, pp, vpp, sizes)

    def signature(r):
        return chunks[r], r == 0, r == pp - 1

    groups = []
    for r in range(pp):
        if groups and signature(groups[-1][-1]) == signature(r):
            groups[-1].append(r)
        else:
            groups.append([r])
    classes = []
    for ranks in groups:
        r = ranks[0]
        first, last = r == 0, r == pp - 1
        indices = tuple(i for span in ranges[r] for i in span)
        held = []
        for t in table:
            if t.place == "layer":
                instances = block_counts(arch, indices, t)
            elif t.place == "first":
                instances = 1 if first else 0
            elif t.place == "mtp":                      # multi-token prediction: the last stage (inventory._mtp)
                instances = arch.mtp_layers if last else 0
            elif t.tied:
                instances = 1 if last and not first else 0
            else:
                instances = 1 if last else 0
            if instances:
                shape = split[t]
                n = 1
                for d in shape:
                    n *= d
                held.append(Holding(t, n, instances, group_of(t), shape[0], shape))
        classes.append(RankClass(_stage_name(tuple(ranks), pp), tuple(ranks), chunks[r], first, last,
                                 len(ranks), tuple(held), ranges[r]))
    return tuple(classes)


def stored_holdings(arch: Architecture, layout: Layout, implementation: str, finetune: FineTune = FULL,
                    param_dtype: str = "bf16") -> Tuple[Holding, ...]:
    """One copy of every parameter as stored (vocabulary padded as the kernels pad it; tied weights once)."""
    return _stored_holdings(arch, padded_vocab(arch.vocab, layout.vocab_multiple(implementation)), finetune,
                            param_dtype)


@lru_cache(maxsize=1024)     # keyed by the padded vocabulary, the only part of the layout one copy depends on
def _stored_holdings(arch: Architecture, vocab_rows: int, finetune: FineTune, param_dtype: str) -> Tuple[Holding, ...]:
    every = tuple(range(arch.layers))
    out = []
    for t in inventory(arch, finetune, param_dtype):
        if not t.tied:
            shape = local_shape(t, 1, vocab_rows)
            count = block_counts(arch, every, t) if t.place == "layer" else arch.mtp_layers if t.place == "mtp" else 1
            out.append(Holding(t, local_elements(t, 1, vocab_rows), count, group_of(t), shape[0], shape))
    return tuple(out)


def stored_groups(arch: Architecture, layout: Layout, implementation: str, finetune: FineTune = FULL,
                  param_dtype: str = "bf16") -> Dict[str, int]:
    return _group_params(stored_holdings(arch, layout, implementation, finetune, param_dtype))


def stored_params(arch: Architecture, layout: Layout, implementation: str, finetune: FineTune = FULL,
                  param_dtype: str = "bf16") -> int:
    return sum(stored_groups(arch, layout, implementation, finetune, param_dtype).values())
