"""Optimizer state that follows each tensor's shape (tables.SHAPED_OPTIMIZERS): which tensors keep each state
(HOLDERS), how many elements it has for one tensor (SHAPES), and the sum over a parameter group's holdings.

A state row applies to a tensor when every atom of its holders holds ("muon&!size<4096"). Shapes are the tensor's
shape on its rank (placement.Holding.shape: its tensor- and expert-parallel split, before ZeRO). Without an
architecture there are no shapes: the rows are read on an assumed square d x d hidden matrix, d the scenario's
factored_dim (the Adafactor precedent), and say so.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Dict, Tuple

from ..scenario import FieldError
from ..tables import FALLBACK_OPTIMIZERS, OPTIMIZERS, SHAPED_OPTIMIZERS, OptState


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _muon(t, shape) -> bool:
    """Moonlight's rule (examples/toy_train.py @abaa96e): every tensor of two or more dimensions except the token
    embedding and the output head; learned positions are an embedding too (Keller Jordan's Muon README: embeddings,
    head and scalars go to AdamW)."""
    return len(shape) >= 2 and t.role not in ("embedding", "head", "position")


def _lowrank(t, shape) -> bool:
    """GaLore / APOLLO's usual target set (galore-torch README, torchrun_main.py: modules named attn or mlp): the
    blocks' 2-D linear weights, the router too where Hugging Face names it mlp.gate (Qwen-MoE, DeepSeek) and LoRA
    adapters inside them (measured). 3-D fused experts are not nn.Linear weights: they step as plain AdamW."""
    return len(shape) == 2 and t.role in ("attention", "mlp", "shared expert", "router", "adapter")


def _atom(word: str) -> Callable:
    if word.startswith("size>="):
        n = int(word[6:])
        return lambda t, shape: _numel(shape) >= n
    if word.startswith("size<"):
        n = int(word[5:])
        return lambda t, shape: _numel(shape) < n
    if word.startswith("ao"):              # torchao adam.py _new_buffer: numel >= 4096 and numel % block == 0
        block = int(word[2:])
        return lambda t, shape: _numel(shape) >= 4096 and _numel(shape) % block == 0
    return HOLDERS[word]


# Adam-mini 1.1.1 (adam_mini/adam_mini.py step) classes a tensor by substrings of its Hugging Face name, in order:
# "bias" keeps a full v; q/k projections one v per head; embeddings, output, v, o and MLP weights one per output
# row; everything else (norms) one. Our names, prefixed as Hugging Face's modules name them, go through the same.
_MINI = (("bias", ("bias",)), ("head", ("k_proj", "q_proj", "wq", "wk", "query", "key")),
         ("row", ("embed", "embd", "wte", "lm_head", "output", "final_layer", "v_proj", "wv", "value", "o_proj", "wo",
                  "attn.proj", "feed_forward", "linear", "mlp")))
_HF_PREFIX = {"attention": "self_attn.", "mlp": "mlp.", "shared expert": "mlp.", "expert": "mlp.", "router": "mlp.gate."}


def mini_block(t) -> str:
    name = _HF_PREFIX.get(t.role, "") + t.name
    return next((kind for kind, words in _MINI if any(w in name for w in words)), "other")


HOLDERS: Dict[str, Callable] = {"all": lambda t, shape: True, "muon": _muon, "lowrank": _lowrank,
                                **{f"mini-{kind}": (lambda kind: lambda t, shape: mini_block(t) == kind)(kind)
                                   for kind in ("bias", "head", "row", "other")}}


_WORDS = {"all": "every tensor", "muon": "Muon's matrices (2-D and up, not embeddings or head)",
          "!muon": "the fallback's tensors (embeddings, head, norms, biases)",
          "lowrank": "projected matrices (attention, MLP, router, adapters)", "!lowrank": "every other tensor",
          "mini-bias": "biases", "mini-head": "q and k weights (per head)",
          "mini-row": "embeddings, head, v, o, MLP and router weights (per row)", "mini-other": "norms and the rest"}


def describe(holders: str) -> str:
    """Which tensors keep a state, in words (the ledger view)."""
    words = []
    for word in holders.split("&"):
        if word in _WORDS:
            words.append(_WORDS[word])
        elif word.lstrip("!").startswith("ao"):
            words.append(("not " if word.startswith("!") else "") + f"quantizable (>= 4096 elements, "
                         f"a multiple of {word.lstrip('!')[2:]})")
        else:
            words.append(word.replace("size", "elements ").replace(">=", ">= ").replace("<", "< "))
    return ", ".join(words)


def holds(holders: str, t, shape) -> bool:
    for word in holders.split("&"):
        negate = word.startswith("!")
        if _atom(word.lstrip("!"))(t, shape) == negate:
            return False
    return True


def _rank(shape, rank: int) -> int:
    return min(rank, min(shape))          # an SVD keeps at most min(m, n) directions


def _shampoo(shape, block: int) -> int:
    """Elements of Distributed Shampoo's factor triangles for one tensor: its dims merged (size-1 dims dropped,
    from the last dim backwards, while the product stays <= block: merge_small_dims), each cut into pieces of
    block (multi_dim_split); every block keeps d (d + 1) / 2 per dim d. Summed dim by dim: a dim's pieces times
    the number of blocks along the other dims."""
    merged = []
    for d in reversed([d for d in shape if d != 1] or [1]):
        if merged and merged[-1] * d <= block:
            merged[-1] *= d
        else:
            merged.append(d)
    pieces = [[block] * (d // block) + ([d % block] if d % block else []) for d in reversed(merged)]
    total = 0
    for i, sizes in enumerate(pieces):
        others = 1
        for j, other in enumerate(pieces):
            if j != i:
                others *= len(other)
        total += sum(c * (c + 1) // 2 for c in sizes) * others
    return total


def _mini_refused(t, why: str):
    return FieldError("optimizer", "adam-mini", f"an optimizer that steps {t.name} {tuple(t.shape)}: adam-mini "
                      f"1.1.1 raises on it ({why}; measured)")


def _mini_heads(t, shape) -> int:
    """Adam-mini's m.view(-1, dim * dim // n_heads) of a q/k weight: one v per head."""
    head = t.shape[-1] ** 2 // t.heads if t.heads else 0
    if not head or _numel(shape) % head:
        raise _mini_refused(t, "its elements are not whole blocks of hidden^2 / heads")
    return _numel(shape) // head


def _mini_rows(t, shape) -> int:
    """Adam-mini's vmean = m[0:rows, 0:1]: one v per output row of a 2-D weight."""
    if len(shape) != 2:
        raise _mini_refused(t, "its per-row step views a 3-D tensor as rows x 1")
    return shape[0]


def _svd_factor(shape, rank: int, dtype: str) -> int:
    """GaLore's projection (galore_projector.py get_orthogonal_matrix): rank rows or columns of an SVD factor. On an
    fp32 gradient it keeps the slice, a view that holds the whole min(m, n)^2 factor alive (measured); on any other
    dtype the slice is copied back to that dtype (.type(original_type)), rank x min(m, n)."""
    return min(shape) ** 2 if dtype == "fp32" else _rank(shape, rank) * min(shape)


# Elements of one state for one tensor of `shape` (arg: the row's constant; rank: the scenario's optimizer_rank;
# dtype: the state's).
SHAPES: Dict[str, Callable] = {
    "param": lambda t, shape, arg, rank, dtype: _numel(shape),
    "half": lambda t, shape, arg, rank, dtype: -(-_numel(shape) // 2),            # two 4-bit codes per byte
    "blocks": lambda t, shape, arg, rank, dtype: -(-_numel(shape) // arg),         # one scale per block of arg
    "one": lambda t, shape, arg, rank, dtype: arg or 1,                            # a scalar, or a table, per tensor
    "rank-min": lambda t, shape, arg, rank, dtype: _rank(shape, rank) * min(shape),    # a random projection
    "svd-min": lambda t, shape, arg, rank, dtype: _svd_factor(shape, rank, dtype),     # an SVD projection
    "rank-max": lambda t, shape, arg, rank, dtype: _rank(shape, rank) * max(shape),    # a projected moment
    # one d x d matrix per dimension d <= arg of a tensor of two or more dimensions (SOAP's GG and Q)
    "gram": lambda t, shape, arg, rank, dtype: sum(d * d for d in shape if d <= arg) if len(shape) >= 2 else 0,
    # Adam-mini's blocks: one per hidden^2 / heads elements (a head of a q/k weight [.., hidden]), one per output
    # row (m[0:rows, 0:1]: every element but the second dimension's)
    "shampoo": lambda t, shape, arg, rank, dtype: _shampoo(shape, arg),
    "heads": lambda t, shape, arg, rank, dtype: _mini_heads(t, shape),
    "rows": lambda t, shape, arg, rank, dtype: _mini_rows(t, shape),
}
# What each shape rule scales with, for the ledger view.
SCALES = {"param": "parameter count", "half": "parameter count", "blocks": "parameter count",
          "one": "tensor count", "once": "one per optimizer", "rank-min": "rank x matrix dimension",
          "svd-min": "rank x matrix dimension (fp32: the whole SVD factor)", "rank-max": "rank x matrix dimension",
          "gram": "each matrix dimension squared", "shampoo": "each block dimension squared (triangles)", "heads": "attention heads", "rows": "output rows"}


def optimizer_states(optimizer: str, fallback: str = "adamw") -> Tuple[OptState, ...]:
    """The state rows of an optimizer: a shaped one's own, Muon's fallback's on every tensor Muon does not take,
    and a per-parameter one's as rows that every tensor keeps."""
    if optimizer == "muon":
        return SHAPED_OPTIMIZERS["muon"] + tuple(s._replace(holders="!muon") for s in _per_param(fallback))
    if optimizer in SHAPED_OPTIMIZERS:
        return SHAPED_OPTIMIZERS[optimizer]
    return _per_param(optimizer)


def _per_param(optimizer: str) -> Tuple[OptState, ...]:
    if optimizer not in FALLBACK_OPTIMIZERS:
        raise ValueError(optimizer)
    return tuple(OptState(name, "all", ("fraction", per), dtype) for name, per, dtype in OPTIMIZERS[optimizer])


def state_elements(state: OptState, holdings, rank: int, dtype: str) -> int:
    """Elements of one state row over a group's holdings (each tensor's on its rank, times its instances)."""
    if isinstance(state.shape, tuple):                    # a per-parameter fraction over the group, rounded up once
        num, den = state.shape[1]
        n = sum(h.elements for h in holdings if holds(state.holders, h.tensor, h.shape))
        return -(-n * num // den)
    if state.shape == "once":
        return state.arg if any(holds(state.holders, h.tensor, h.shape) for h in holdings) else 0
    rule = SHAPES[state.shape]
    return sum(rule(h.tensor, h.shape, state.arg, rank, dtype) * h.instances for h in holdings
               if holds(state.holders, h.tensor, h.shape))


class _Square:
    """An assumed hidden d x d matrix: what a params-only scenario's shaped rows are read on."""
    role, name, heads = "mlp", "up_proj.weight", 0


def assumed_per_param(state: OptState, d: int, rank: int, dtype: str) -> Fraction:
    """Elements per parameter of a state row on assumed square d x d hidden matrices (no architecture)."""
    shape = (d, d)
    if isinstance(state.shape, tuple):
        return Fraction(*state.shape[1]) if holds(state.holders, _Square, shape) else Fraction(0)
    if not holds(state.holders, _Square, shape) or state.shape == "once":
        return Fraction(0)
    return Fraction(SHAPES[state.shape](_Square, shape, state.arg, rank, dtype), d * d)


def check_optimizer(optimizer: str, tensors: Callable) -> None:
    """FieldError naming the first trainable tensor the optimizer's own code cannot step (adam-mini's blocks), so
    that a plan is refused before any number is given. tensors(): the inventory, asked only when needed."""
    for st in SHAPED_OPTIMIZERS.get(optimizer, ()):
        if st.shape in ("heads", "rows"):
            for t in tensors():
                if t.trainable and holds(st.holders, t, t.shape):
                    SHAPES[st.shape](t, t.shape, st.arg, 0, st.dtype)
