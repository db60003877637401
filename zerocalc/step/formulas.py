"""Each saved-activation term as a formula, with the values plugged in, taken from the very code that computes it.

activations.activations() runs once more on symbolic stand-ins: every dimension (hidden h, heads a, KV heads kv,
FFN f, vocabulary V, micro-batch b, sequence s, bits per element w, tp, cp, ep...) is a `Sym` that computes its
exact integer and records how: `w·b·s·h` and `16·1·2048·4096`. So the formula a user reads cannot drift from the
byte the report counts (tests/test_activation_formulas.py checks both against the report for every preset). The
rounding to whole bytes (ceil(bits / 8)) is shown apart."""

from __future__ import annotations

from dataclasses import fields
from fractions import Fraction

from ..model.architecture import Architecture
from .activations import activations, tp_local

LEGEND = ("b micro-batch, s sequence, h hidden, a heads, kv key-value heads, d head width, f FFN width, f_e an "
          "expert's FFN width, f_s the shared experts' width, E experts, k experts per token, r_q / r_kv latent "
          "ranks, V vocabulary, w activation bits, w_stream the fp32 residual stream's bits, load% the routed "
          "share of the balanced load; x/tp, s/cp, E/ep: one rank's share; ⌈x/n⌉ rounds up")

# What each term is, in words (the formula says how big): shown beside it.
NOTES = {
    "input norm": "the norm's saved input copies and statistics", "post-attention norm": "as the input norm",
    "final norm": "as the input norm", "attention input": "the q/k/v projections' input",
    "q, k, v": "rotated q and k, v (views of one storage count once)",
    "attention logsumexp": "flash: fp32 log-sum-exp per head and token",
    "attention softmax": "eager: the s x s probabilities (fp32 and its copy in Hugging Face's Llama family)",
    "attention dropout": "1-byte mask + dropped probabilities",
    "attention softmax (with sinks)": "gpt-oss eager: s + 1 columns (the sink), in the logits' dtype",
    "attention row max indices": "int64: the row max taken off before the softmax", "attention output": "the out-projection's input",
    "mlp input": "gate/up projections' input", "mlp activation": "the activation function's input",
    "mlp gate product": "act(gate) and up, saved by their product", "mlp fc2 input": "the down projection's input",
    "mlp fc1 output": "Megatron: the GeLU / SwiGLU input", "token ids": "int64", "labels": "int64",
    "position ids": "int64", "loss log-softmax (fp32)": "the fp32 log-probabilities over the vocabulary (Megatron: "
    "the softmax, computed in place in the logits' one fp32 upcast)",
    "block input (checkpoint)": "full recompute keeps each block's input only",
    "input norm input (checkpoint)": "Megatron's layernorm recompute: the norm's input only, its output discarded",
    "pre-MLP norm input (checkpoint)": "Megatron's layernorm (or fused-norm mlp) recompute: the norm's input only",
    "moe input (checkpoint)": "Megatron's moe recompute: the MoE layer's input only",
    "kv down-projection output (k_pos_emb view)": "Megatron's mla_up_proj recompute keeps k_pos_emb, a view of it",
    "kv down-projection output (checkpoint)": "Megatron's mla_up_proj: the fused-norm up-projection's input",
    "q down-projection output (checkpoint)": "Megatron's mla_up_proj: the fused-norm up-projection's input",
    "k_pos_emb (gathered, checkpoint)": "Megatron's mla_up_proj under sequence parallelism: the gathered rotary key",
    "rotary cos/sin": "cos and sin tables, batch 1", "output projection input": "the head's input",
    "fp32 stream: the norms' fp32 outputs, autocast's copy per linear": "fp32 embeddings and norms: each linear's "
    "16-bit copy of a norm's fp32 output, a trained RMSNorm's fp32 normalised input (step/fp32_stream.py)",
    "output projection weight (autocast's 16-bit copy)": "the fp32 head weight cast once per forward, kept for "
    "backward",
    "final norm fp32 output (fp32 stream)": "the trained final norm's fp32 normalised input",
    "repeated k, v (the attention's own copies)": "K and V repeated to every query head before the kernel, which "
    "saves the copies (torchtune, LitGPT, SDPA under a mask), beyond the grouped pair (step/repeated_kv.py)",
    "repeated k, v (local attention mask)": "Hugging Face's local layers past their window: repeat_kv before SDPA, "
    "beyond the grouped pair",
}

ATOM, PRODUCT, SUM = 3, 2, 1           # precedences: a product wraps a sum in parentheses, a quotient a product

# The symbol of each architecture dimension that enters an activation term (its name in docs/peak-memory.md).
SYMBOLS = {"hidden": "h", "heads": "a", "kv_heads": "kv", "head_dim": "d", "ffn": "f", "vocab": "V",
           "q_lora_rank": "r_q", "kv_lora_rank": "r_kv", "qk_nope_dim": "d_nope", "qk_rope_dim": "d_rope",
           "v_head_dim": "d_v", "experts": "E", "experts_per_token": "k", "expert_ffn": "f_e",
           "shared_expert_ffn": "f_s", "sliding_window": "window"}


def _text(x, numbers: bool, prec: int, after_product: bool = False) -> str:
    """x's formula (or its numbers) as an operand at precedence `prec`. A floor quotient right of a product keeps
    its parentheses: a·(b/c) is not a·b/c in integers."""
    if isinstance(x, Sym):
        body = x.nums if numbers else x.text
        return f"({body})" if x.prec < prec or (after_product and x.quot) else body
    if isinstance(x, Fraction) and x.denominator != 1:
        return f"({x})" if prec > SUM else str(x)
    return str(x)


class Sym:
    """An exact integer that remembers its formula. Arithmetic with plain numbers and other Syms gives a Sym;
    comparisons, truth and indexing use the value, so the accounting code runs unchanged on it. A negation floats
    out of products, so the code's ceiling idiom -(-x // n) reads ⌈x/n⌉."""

    __slots__ = ("value", "text", "nums", "prec", "neg_of", "ceil_of", "quot")

    def __init__(self, value, text: str, nums: str = None, prec: int = ATOM, neg_of=None, ceil_of=None,
                 quot: bool = False):
        self.value, self.text, self.prec = value, text, prec
        self.nums = f"{value:,}" if nums is None else nums
        self.neg_of = neg_of                 # -x: the x it negates
        self.ceil_of = ceil_of               # ⌈x/n⌉: (x, n)
        self.quot = quot                     # a floor quotient: parenthesised right of a product

    @staticmethod
    def _value(x):
        return x.value if isinstance(x, Sym) else x

    @classmethod
    def _binary(cls, x, y, op: str, value, prec: int, right_prec: int = None) -> "Sym":
        right = prec if right_prec is None else right_prec
        product = op == "·"
        return cls(value, f"{_text(x, False, prec)}{op}{_text(y, False, right, product)}",
                   f"{_text(x, True, prec)}{op}{_text(y, True, right, product)}", prec, quot=op == "/")

    def __mul__(self, other):
        if self.neg_of is not None:
            return -(self.neg_of * other)
        if isinstance(other, Sym) and other.neg_of is not None:
            return -(self * other.neg_of)
        if not isinstance(other, Sym) and other == 1:
            return self
        if not isinstance(other, Sym) and other == 0:
            return 0
        return Sym._binary(self, other, "·", self.value * Sym._value(other), PRODUCT)

    def __rmul__(self, other):
        if self.neg_of is not None:
            return -(other * self.neg_of)
        if other == 1:
            return self
        if other == 0:
            return 0
        return Sym._binary(other, self, "·", other * self.value, PRODUCT)

    def __add__(self, other):
        if not isinstance(other, Sym) and other == 0:
            return self
        return Sym._binary(self, other, " + ", self.value + Sym._value(other), SUM)

    def __radd__(self, other):
        if other == 0:
            return self
        return Sym._binary(other, self, " + ", other + self.value, SUM)

    def __sub__(self, other):
        if not isinstance(other, Sym) and other == 0:
            return self
        return Sym._binary(self, other, " − ", self.value - Sym._value(other), SUM, PRODUCT)

    def __rsub__(self, other):
        return Sym._binary(other, self, " − ", other - self.value, SUM, PRODUCT)

    def __floordiv__(self, other):
        if not isinstance(other, Sym) and other == 1:
            return self
        if self.neg_of is not None:          # (-x) // n = -⌈x/n⌉
            x, n = self.neg_of, other
            ceil = Sym(-(-Sym._value(x) // Sym._value(n)), f"⌈{_text(x, False, PRODUCT)}/{_text(n, False, ATOM)}⌉",
                       f"⌈{_text(x, True, PRODUCT)}/{_text(n, True, ATOM)}⌉", ATOM, ceil_of=(x, n))
            return -ceil
        return Sym._binary(self, other, "/", self.value // Sym._value(other), PRODUCT, ATOM)

    def __rfloordiv__(self, other):
        return Sym._binary(other, self, "/", other // self.value, PRODUCT, ATOM)

    def __neg__(self):
        if self.neg_of is not None:
            return self.neg_of
        return Sym(-self.value, f"−{_text(self, False, ATOM)}", f"−{_text(self, True, ATOM)}", SUM, neg_of=self)

    def _cmp(self, other):
        return self.value, Sym._value(other)

    def __eq__(self, other):
        a, b = self._cmp(other)
        return a == b

    def __lt__(self, other):
        a, b = self._cmp(other)
        return a < b

    def __le__(self, other):
        a, b = self._cmp(other)
        return a <= b

    def __gt__(self, other):
        a, b = self._cmp(other)
        return a > b

    def __ge__(self, other):
        a, b = self._cmp(other)
        return a >= b

    __hash__ = object.__hash__               # never equal-hashed to a plain int: no cache mistakes one for it

    def __bool__(self):
        return bool(self.value)

    def __index__(self):
        return int(self.value)

    __int__ = __index__

    def __repr__(self):
        return f"Sym({self.text} = {self.value})"


def sym(name: str, value) -> object:
    """A named dimension; 0 and None stay themselves (a feature that is off has no formula)."""
    if value is None or isinstance(value, bool) or value == 0:
        return value
    return Sym(value, name)


class SymbolicArchitecture:
    """An Architecture whose dimensions are Syms. Its properties (q_size, kv_size, d_head...) and methods run the
    Architecture's own code with this object as `self`, so q_size reads a·d, not a number."""

    def __init__(self, arch: Architecture, names: dict = None):
        self._arch = arch
        names = SYMBOLS if names is None else names
        for f in fields(arch):
            value = getattr(arch, f.name)
            object.__setattr__(self, f.name, sym(names[f.name], value) if f.name in names else value)
        if arch.head_dim is None:                # h / a: named d, as the formulas in the docs write it
            object.__setattr__(self, "head_dim", sym(names.get("head_dim", "d"), arch.d_head))

    def __getattr__(self, name):
        attr = getattr(type(self._arch), name)
        if isinstance(attr, property):
            return attr.fget(self)
        return attr.__get__(self)             # a method, bound to the symbolic stand-in

    def tp_split(self, tp) -> "SymbolicArchitecture":
        """What one tensor-parallel rank runs, as activations.tp_local splits it: each dimension it changes
        becomes "symbol/tp" (a head dimension it fixes keeps its symbol d)."""
        local = tp_local(self._arch, int(tp))
        names = {}
        for f in fields(local):
            base = SYMBOLS.get(f.name)
            if base is None:
                continue
            before, after = getattr(self._arch, f.name), getattr(local, f.name)
            names[f.name] = base if before == after or before is None else f"{base}/tp"
        return SymbolicArchitecture(local, names)


def activation_formulas(a: Architecture, micro_batch: int, seq_len: int, bits: int, attention: str = "flash",
                        recompute: str = "none", implementation: str = "huggingface", tp: int = 1, cp: int = 1,
                        sequence_parallel: bool = False, loss_vocab: int = None, moe=None,
                        training=None, recompute_every: int = 1, loss_saved: tuple = (32, "loss log-softmax (fp32)"),
                        compiled: bool = False, op_policy: str = "torchtitan", recompute_modules: str = "core_attn",
                        recompute_method: str = "uniform", recompute_num_layers: int = 1, stream_bits: int = 0,
                        fp32_norms: bool = False, repeat_kv: bool = False) -> dict:
    """The arguments of activations.activations(); returns {group: {term: row}}, the groups of the report's
    `activation_terms`, each row {"formula", "values", "bits", "bytes", "note"}: the formula in symbols, the same
    with the numbers, its bits, the bytes the report counts (bits / 8 rounded up), and what the term is."""
    from .moe import Routing

    routing = None if moe is None else Routing(sym("ep", moe.ep) if moe.ep > 1 else 1,
                                               sym("etp", moe.etp) if moe.etp > 1 else 1,
                                               sym("load%", moe.load_percent) if moe.load_percent != 100 else 100)
    vocab = None if loss_vocab is None else sym(_vocab_symbol(a.vocab, loss_vocab, tp), loss_vocab)
    report = activations.__wrapped__(                       # never the cache: Syms are not the report's keys
        SymbolicArchitecture(a), sym("b", micro_batch), sym("s", seq_len), sym("w", bits), attention, recompute,
        implementation, sym("tp", tp) if tp > 1 else 1, sym("cp", cp) if cp > 1 else 1, sequence_parallel,
        vocab, routing, training, recompute_every,
        (sym("w", bits) if loss_saved[0] == bits and bits != 32 else loss_saved[0], loss_saved[1]), compiled,
        op_policy, recompute_modules, recompute_method, recompute_num_layers, sym("w_stream", stream_bits),
        fp32_norms, repeat_kv)
    groups = {"per_layer": report.per_layer, "per_moe_layer": report.per_moe_layer,
              "per_sliding_layer": report.per_sliding_layer, "checkpointed_block": report.checkpointed,
              "embedding_end": report.embed, "every_stage": report.stage, "output_end": report.head}
    return {g: {k: {**row(v), "note": NOTES.get(k, "")} for k, v in terms.items()} for g, terms in groups.items()}


def formulas_for(scenario, workload) -> dict:
    """activation_formulas() for the report's scenario and workload: the terms of report["activation_terms"]."""
    from .shape import activation_args

    return activation_formulas(*activation_args(scenario, workload))


def _vocab_symbol(vocab: int, columns: int, tp: int) -> str:
    """The loss's vocabulary columns: V, V_pad (padded to Megatron's multiple), or V/tp (one rank's share of the
    padded vocabulary under vocab-parallel cross entropy)."""
    if columns == vocab:
        return "V"
    return "V/tp" if tp > 1 and columns < vocab else "V_pad"


def row(nbytes) -> dict:
    """One term: the bits' formula (the byte rounding apart), its values, its bits and its bytes."""
    if not isinstance(nbytes, Sym):                  # a constant term (no dimension in it)
        return {"formula": f"{nbytes:,} bytes", "values": f"{nbytes:,}", "bits": 8 * int(nbytes),
                "bytes": int(nbytes)}
    inner = nbytes.ceil_of[0] if nbytes.ceil_of else nbytes
    bits = inner.value if isinstance(inner, Sym) else inner
    return {"formula": _text(inner, False, SUM), "values": _text(inner, True, SUM), "bits": int(bits),
            "bytes": int(nbytes.value)}
