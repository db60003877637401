"""One frozen input object and its validation.

Every check names the field, the value it got and the allowed range; nothing is clamped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional

from .tables import (CONVENTIONS, DEFAULT_CONVENTION, DEFAULT_FACTORED_DIM, DTYPE_BITS, FALLBACK_OPTIMIZERS, MUON_TP,
                     OFFLOAD_TARGETS, OPTIMIZER_IMPLS, OPTIMIZER_NAMES)

# Integer ranges, shared by the validation below, the CLI and the UI's widgets.
INT_LIMITS = {
    "params": (1, 10**18),
    "workers": (1, 10**7),
    "shard_group": (1, 10**7),
    "gpus_per_node": (1, 1024),
    "factored_dim": (1, 10**7),
    "optimizer_rank": (1, 10**6),
}


QUOTE_CHARS = 80          # a refused value is quoted up to this many characters, then its length
NAME_CHARS = 120          # a field name (a key of an uploaded file can be one) likewise
ALLOWED_CHARS = 1_000     # the "allowed" text (some quote a file's own words)


def cut(text: str, limit: int) -> str:
    """Text of at most `limit` characters, and when cut, how long it was: a 990,000-character value in a message
    would freeze the page that shows it."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def quotable(value):
    """A value as a message may quote it: short ones as they are; a long string cut (still a string, so a message
    can say it was text); any other value whose repr is long, as that repr cut."""
    if isinstance(value, str):
        return cut(value, QUOTE_CHARS)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"   # str() of it could raise
    if isinstance(value, (int, float, bool, type(None))):
        return value
    try:
        text = repr(value)
    except ValueError:                           # a container holding an integer too long to print
        return f"a {type(value).__name__} too large to show"
    return value if len(text) <= QUOTE_CHARS else cut(text, QUOTE_CHARS)


class FieldError(ValueError):
    """A bad value for one named input field. The field, value and allowed text are kept short (cut, with the
    length said) however large what was refused: messages quote them."""

    def __init__(self, field: str, value, allowed: str):
        self.field = cut(str(field), NAME_CHARS)
        self.value, self.allowed = quotable(value), cut(str(allowed), ALLOWED_CHARS)
        super().__init__(f"{self.field}: got {self.value!r}; allowed: {self.allowed}")

    def __reduce__(self):
        # Pickled as it is (subclasses' own constructors take other arguments): the app's worker process sends
        # refusals back to the page that asked.
        return _restore, (type(self), self.args, dict(self.__dict__))


def _restore(cls, args, state):
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


def _choices(options) -> str:
    return "one of " + ", ".join(str(o) for o in options)


KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a number with a fraction"), (str, "a string"),
         (type(None), "nothing (None)"))


def kind_of(value) -> str:
    """The type of a value in words, for messages ("a string"): the first matching entry (bool before int)."""
    return next((name for t, name in KINDS if isinstance(value, t)), f"a {type(value).__name__}")


def require_int(field: str, value, lo: int, hi: int, error=FieldError) -> None:
    """An int (not a bool, not a float) within [lo, hi], or `error` naming the field and the range (and the type
    given, when it is not an integer)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(field, value, f"an integer from {lo:,} to {hi:,}, not {kind_of(value)}")
    if not lo <= value <= hi:
        raise error(field, value, f"an integer from {lo:,} to {hi:,}")


def require_choice(field: str, value, options, error=FieldError) -> None:
    if value not in options:
        raise error(field, value, _choices(options))


def require_probability(field: str, value, error=FieldError) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise error(field, value, "a probability from 0 up to (not including) 1")


@dataclass(frozen=True)
class Scenario:
    """What the user is planning: model size, precision ledger, optimizer, parallelism, offload."""

    params: int
    workers: int = 1
    shard_group: Optional[int] = None          # None: all workers (plain ZeRO); smaller for hybrid sharding
    param_dtype: str = "fp16"
    grad_dtype: str = "fp16"
    master_dtype: Optional[str] = "fp32"       # None: no separate master copy
    grad_accum_dtype: Optional[str] = None     # None: no extra gradient accumulation buffer
    optimizer: str = "adam"
    optimizer_dtype: str = "fp32"
    comm_dtype: Optional[str] = None           # None: each tensor travels in its own dtype
    offload_optimizer: str = "none"
    offload_params: str = "none"
    gpus_per_node: int = 8
    factored_dim: int = DEFAULT_FACTORED_DIM   # Adafactor only: side of the assumed square weight matrices
    convention: str = DEFAULT_CONVENTION       # label of the preset these fields started from
    # Shaped optimizers (tables.SHAPED_OPTIMIZERS): Muon's optimizer for the tensors it does not take, the dtype its
    # Newton-Schulz iteration runs in (torch.optim.Muon: bf16), whether it orthogonalises the whole matrix or each
    # tensor-parallel shard; GaLore / APOLLO's projection rank.
    fallback_optimizer: str = "adamw"
    ns_dtype: str = "bf16"
    muon_tp: str = "full"
    optimizer_rank: int = 128
    # Adam / AdamW's step implementation (tables.ADAM_STEP: fused, foreach, for-loop); "auto": by the framework
    # (step/optimizer_step.py resolve_impl).
    optimizer_impl: str = "auto"

    def __post_init__(self):
        validate(self)

    @property
    def group(self) -> int:
        """The divisor of partitioned state: the shard group, or all workers."""
        return self.workers if self.shard_group is None else self.shard_group

    @classmethod
    def from_convention(cls, convention: str = DEFAULT_CONVENTION, **overrides) -> "Scenario":
        """The convention's precision fields, then every override given (None is a value: "no master copy")."""
        if convention not in CONVENTIONS:
            raise FieldError("convention", convention, _choices(CONVENTIONS))
        preset = {k: v for k, v in CONVENTIONS[convention].items() if k != "summary"}
        preset.update(overrides)
        return cls(convention=convention, **preset)

    def with_changes(self, **changes) -> "Scenario":
        return replace(self, **changes)


FIELD_NAMES = tuple(f.name for f in fields(Scenario))
DTYPE_FIELDS = ("param_dtype", "grad_dtype", "master_dtype", "grad_accum_dtype", "optimizer_dtype", "comm_dtype")
OPTIONAL_DTYPE_FIELDS = frozenset({"master_dtype", "grad_accum_dtype", "comm_dtype"})


def _check_int(s: Scenario, field: str) -> None:
    require_int(field, getattr(s, field), *INT_LIMITS[field])


def validate(s: Scenario) -> None:
    """Raise FieldError for the first bad field, in declaration order."""
    for field in ("params", "workers", "gpus_per_node", "factored_dim", "optimizer_rank"):
        _check_int(s, field)
    if s.shard_group is not None:
        _check_int(s, "shard_group")
        if s.workers % s.shard_group:
            raise FieldError("shard_group", s.shard_group,
                             f"a divisor of workers ({s.workers:,}) from 1 to {s.workers:,}")
    for field in DTYPE_FIELDS:
        value = getattr(s, field)
        if value is None and field in OPTIONAL_DTYPE_FIELDS:
            continue
        if value not in DTYPE_BITS:
            extra = ["none"] if field in OPTIONAL_DTYPE_FIELDS else []
            raise FieldError(field, value, _choices(list(DTYPE_BITS) + extra))
    require_choice("optimizer", s.optimizer, OPTIMIZER_NAMES)
    require_choice("fallback_optimizer", s.fallback_optimizer, FALLBACK_OPTIMIZERS)
    require_choice("ns_dtype", s.ns_dtype, DTYPE_BITS)
    require_choice("muon_tp", s.muon_tp, MUON_TP)
    require_choice("optimizer_impl", s.optimizer_impl, OPTIMIZER_IMPLS)
    for field in ("offload_optimizer", "offload_params"):
        require_choice(field, getattr(s, field), OFFLOAD_TARGETS)
    require_choice("convention", s.convention, CONVENTIONS)
