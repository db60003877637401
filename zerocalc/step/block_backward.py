"""One block's backward under full recompute: what its gradients add to its rebuilt saves (issue 31 item 4).

torch.utils.checkpoint (non-reentrant, as transformers wires it) re-runs the block's forward, keeping what its ops
save, then runs the block's backward: each op's backward makes its inputs' gradients while its output's gradient
and its saves are still held, and frees them once it is done (the recomputed saves are released as they are
unpacked). So the block's moment is its rebuilt saves plus the gradients alive at its worst op, less the saves
already released. We walk the ops in reverse order (MLP, then attention), per family as activations.py sees
them, and take the max:
- the residual stream's gradient (the block output's, then the attention output's) lives throughout;
- a linear makes its input's gradient (and, when its weight trains, the weight's, added into .grad at once);
  a LoRA adapter (peft LoraLayer) casts the output's gradient to the adapter's dtype, scales it, runs lora_B and
  lora_A's backward (and lora_dropout's: one more input-wide tensor, from the op, not traced), casts back and adds
  into the base path's input gradient;
- gated MLP: the product's backward makes both factors' gradients beside its own input's (Korthikanti's
  fc2 input), the activation's backward one FFN-wide gradient;
- Hugging Face's RMSNorm backward works in fp32: the upcast gradient and two fp32 products of it alive at once;
- flash / SDPA attention: the heads' gradient made contiguous, then grad q, k, v; rotary backward makes a copy
  and rotate_half's two halves per q and k;
- eager attention: attn @ V's backward makes the probabilities' gradient (s x s), softmax's backward in fp32
  (the upcast gradient and its result), the scaled scores' gradient, and q @ k^T's backward grad q, k.
Traced on the CPU against transformers' Llama with peft (tests/measure/recompute_backward.py,
tests/test_block_backward.py). Families the walk does not cover (MoE, latent attention, parallel blocks,
Megatron's fused ops) return None: step/peak.py then keeps the loss moment and the rebuilt block summed.
"""

from __future__ import annotations

from typing import Dict, Iterable, NamedTuple, Optional, Tuple

STAT_BITS = 32


class Step(NamedTuple):
    """One op's backward: gradients it makes (name, bits), the gradients and saved terms released after it."""
    new: Tuple[Tuple[str, int], ...]
    drop: Tuple[str, ...] = ()
    saves: tuple = ()       # activations.py term names released (a name ending in ":": every term it starts;
                            # (name, bits): that much of the term, the rest later under its name)


def _linear(m: str, g_in: str, inp: int, out: int, T: int, w: int, train, saves=()) -> Iterable[Step]:
    """A linear's backward (its output's gradient held by the caller) and, with an adapter, peft's LoRA path."""
    trains = train is None or m in train.trained
    if train is not None and m in train.adapted:
        a, r = train.adapter_bits, train.rank
        cast = () if a == w else ((f"{m} lora grad", a * T * out),)
        yield Step(cast + ((f"{m} lora scaled", a * T * out),))
        yield Step(((f"{m} lora B in", a * T * r), (f"{m} lora B weight", a * r * out)),
                   (f"{m} lora grad", f"{m} lora scaled", f"{m} lora B weight"), (f"lora {m}:",))
        yield Step(((f"{m} lora x", a * T * inp), (f"{m} lora A weight", a * r * inp)),
                   (f"{m} lora B in", f"{m} lora A weight"))
        if train.dropout:                 # lora_dropout's backward: the gradient times its mask, a new tensor
            yield Step(((f"{m} lora dropped", a * T * inp),), (f"{m} lora x",))
        if a != w:                        # cast back to the module's dtype
            yield Step(((f"{m} lora x cast", w * T * inp),), (f"{m} lora x", f"{m} lora dropped"))
        base = ((g_in, w * T * inp),) + (((f"{m} weight", w * inp * out),) if trains else ())
        yield Step(base, (f"{m} weight",), saves)
        yield Step(((f"{m} sum", w * T * inp),),                                    # added into g_in
                   (f"{m} sum", f"{m} lora x", f"{m} lora dropped", f"{m} lora x cast"))
        return
    yield Step(((g_in, w * T * inp),) + (((f"{m} weight", w * inp * out),) if trains else ()), (f"{m} weight",),
               saves)


def _mlp(a, T: int, w: int, train) -> Iterable[Step]:
    h, f = a.hidden, a.ffn
    yield from _linear("down", "grad fc2 input", f, h, T, w, train, ("mlp fc2 input",))
    if a.gated_mlp:
        yield Step((("grad act", w * T * f), ("grad up", w * T * f)), ("grad fc2 input",), ("mlp gate product",))
        yield from _linear("up", "grad mlp input", h, f, T, w, train)
        yield Step((("grad gate", w * T * f),), ("grad act", "grad up"), ("mlp activation",))
        yield from _linear("gate", "grad mlp input 2", h, f, T, w, train, ("mlp input",))
        yield Step((("grad mlp input sum", w * T * h),), ("grad gate", "grad mlp input", "grad mlp input 2"))
    else:
        yield Step((("grad fc1 output", w * T * f),), ("grad fc2 input",), ("mlp activation",))
        yield from _linear("up", "grad mlp input sum", h, f, T, w, train, ("mlp input",))
        yield Step((), ("grad fc1 output",))


def _norm(name: str, grad: str, T: int, h: int, w: int) -> Iterable[Step]:
    """Hugging Face's RMSNorm backward (weight * x.to(w)): the weight product's gradient, its fp32 upcast and
    two fp32 products (by the rsqrt, and by x for the rsqrt's gradient); then the input's gradient cast back and
    added into the residual stream's."""
    yield Step(((f"{name} grad", w * T * h),), (grad,))
    yield Step(((f"{name} fp32", STAT_BITS * T * h), (f"{name} fp32 a", STAT_BITS * T * h),
                (f"{name} fp32 b", STAT_BITS * T * h)), (f"{name} grad", f"{name} fp32 b"))
    yield Step(((f"{name} fp32 c", STAT_BITS * T * h),), (f"{name} fp32", f"{name} fp32 a", f"{name} fp32 c"),
               (name,))
    yield Step(((f"{name} input grad", w * T * h), ("residual sum", w * T * h)),
               (f"{name} input grad", "residual"))
    yield Step((("residual", w * T * h),), ("residual sum",))


def _attention(a, t, w: int, attention: str, train) -> Iterable[Step]:
    T, q, kv, h = t.inside, a.q_size, a.kv_size, a.hidden
    yield from _linear("o", "grad attention output", q, h, T, w, train)
    repeated = a.n_kv_heads < a.heads
    if attention == "flash":      # SDPA's backward wants the heads' gradient contiguous: transpose's is a copy
        yield Step((("grad heads", w * T * q),), ("grad attention output",))
        yield Step((("grad q", w * T * q), ("grad k", w * T * kv), ("grad v", w * T * kv)), ("grad heads",),
                   ("q, k, v", "attention logsumexp", "attention output"))
    else:
        s2 = a.heads * t.s * t.s * t.b
        kvr = q if repeated else kv
        copy = ("attention softmax", w * s2) if a.softmax_fp32 and w != STAT_BITS else ()
        # attn @ V's backward releases what it saved: V (repeated to every query head) and the probabilities'
        # copy (the fp32 softmax cast back)
        yield Step((("grad probs", w * s2), ("grad v", w * T * kvr)), ("grad attention output",),
                   ("attention output", ("q, k, v", w * T * kvr)) + ((copy,) if copy else ()))
        if copy:
            yield Step((("grad probs fp32", STAT_BITS * s2),), ("grad probs",))
            yield Step((("grad scores fp32", STAT_BITS * s2),), ("grad probs fp32",), ("attention softmax",))
            yield Step((("grad scores", w * s2),), ("grad scores fp32",))
        else:
            yield Step((("grad scores", w * s2),), ("grad probs",), ("attention softmax",))
        yield Step((("grad scaled", w * s2),), ("grad scores",))
        yield Step((("grad q", w * T * q), ("grad k", w * T * kvr)), ("grad scaled",), ("q, k, v",))
        if repeated:                                      # repeat_kv's backward sums the copies per KV head
            yield Step((("grad k sum", w * T * kv), ("grad v sum", w * T * kv)), ("grad k", "grad v"))
    for name, width in (("q", q), ("k", kv)):             # rotary: x * cos + rotate_half(x) * sin
        yield Step(((f"{name} rot", w * T * width), (f"{name} halves", w * T * width),
                     (f"{name} pre", w * T * width)), (f"grad {name}", f"{name} rot", f"{name} halves"))
    yield from _linear("v", "grad x v", h, kv, T, w, train)
    yield Step((), ("grad v", "grad v sum"))
    yield from _linear("k", "grad x k", h, kv, T, w, train)
    yield Step((("grad x sum", w * T * h),), ("k pre", "grad x v", "grad x k"))
    yield from _linear("q", "grad x q", h, q, T, w, train, ("attention input", "q, k norms"))
    yield Step((("grad x sum 2", w * T * h),), ("q pre", "grad x sum", "grad x q"))


def covered(a, implementation: str, kind: str) -> bool:
    """Blocks the walk knows: Hugging Face's sequential dense blocks with a plain RMSNorm."""
    return (implementation == "huggingface" and kind == "dense" and not a.mla and not a.parallel_residual
            and not a.sandwich_norm and a.norm == "rmsnorm" and a.qk_norm == "none" and a.positions == "rotary"
            and not a.attention_sinks and not a.attn_softcap and a.attn_dropout == 0 and a.resid_dropout == 0)


def steps(a, t, w: int, attention: str, train) -> Tuple[Step, ...]:
    T, h = t.inside, a.hidden
    return (*_mlp(a, T, w, train), *_norm("post-attention norm", "grad mlp input sum", T, h, w),
            *_attention(a, t, w, attention, train), *_norm("input norm", "grad x sum 2", T, h, w))


def forward_moments(a, T: int, w: int, train, saved: Dict[str, int]) -> Iterable[int]:
    """The re-run forward's own moments, in bits beyond the whole rebuilt block (its saves not yet made count
    against it): at a gated MLP's adapted gate or up projection, peft adds the adapter's result (in its dtype) to
    the base output, so the base output, the scaled LoRA result and their sum are alive beside the residual
    stream's gradient (the block output's), the attention half's output (the residual the MLP adds to) and the
    MLP's input (the norm's output). Traced: with LoRA on every linear it is the block's peak."""
    if train is None or not a.gated_mlp:
        return
    f, h, ad = a.ffn, a.hidden, train.adapter_bits
    later = {"gate": ("mlp activation", "mlp gate product", "lora up:"), "up": ()}
    for m in ("gate", "up"):
        if m not in train.adapted:
            continue
        pending = sum(v for n, v in saved.items() if n in ("mlp fc2 input",) + later[m] or n.startswith("lora down:")
                      or any(p.endswith(":") and n.startswith(p) for p in later[m]))
        pending += w * T * f if m == "up" else 0          # the product's up half (its act half is made)
        yield 3 * w * T * h + (w + 2 * ad) * T * f - pending


def walk(saved: Dict[str, int], block: Iterable[Step], residual: int) -> int:
    """The most the block's gradients hold beyond its saves already released, in bits: the peak of the live
    gradients (the residual stream's `residual` among them) less the saved terms released before that op."""
    live, released, peak = {"residual": residual}, 0, 0
    left = dict(saved)
    for step in block:
        live.update(step.new)
        peak = max(peak, sum(live.values()) - released)
        for g in step.drop:
            live.pop(g, None)
        for s in step.saves:
            if isinstance(s, tuple):
                part = min(s[1], left.get(s[0], 0))
                released += part
                left[s[0]] = left.get(s[0], 0) - part
                continue
            for n in [n for n in left if n == s or s.endswith(":") and n.startswith(s)]:
                released += left.pop(n)
    return peak


def backward_bits(a, t, w: int, attention: str, implementation: str, kind: str, saved: Dict[str, int],
                  train) -> Optional[int]:
    """Bits one rebuilt block's backward holds beyond its rebuilt saves at its worst op, or None (not covered)."""
    if not covered(a, implementation, kind):
        return None
    return max([walk(saved, steps(a, t, w, attention, train), w * t.inside * a.hidden),
                *forward_moments(a, t.inside, w, train, saved)])
