"""What a block saves when only part of the model trains (fine-tuning), from the full-training terms.

Measured with peft 0.21.2 on bf16 Llama models (tests/measure/lora_activations.py, tests/test_finetune_validation.py):
- a frozen weight needs no gradient, so what only its gradient needed is not saved: a frozen linear's input (q/k/v,
  gate/up, down and the head: "attention input", "mlp input", "mlp fc2 input", "output projection input"), a frozen
  norm's normalised copy (Gemma's fp32 output and 1 + w), a frozen embedding's token ids;
- what the input gradient needs stays wherever a gradient flows, but nothing before the first trainable tensor
  needs one: in the first block the input norm saves nothing, and the attention core saves nothing unless q, k or v
  train or carry adapters (Hugging Face's gradient checkpointing turns input gradients on, so every block input
  then needs one);
- each LoRA adapter saves its own fp32 cast of its input (peft LoraLayer casts x to the adapter's dtype: one copy
  per adapter, q, k and v each) unless the activations already have the adapter's dtype, when the adapters share
  the module's input; and the rank-r intermediate (lora_B's input); with lora_dropout > 0 a 1-byte mask where the
  input needs a gradient (and the dropped copy replaces the cast one);
- DoRA adds per adapted module out x (w + 4) bytes per token (the base result and the fp32 LoRA result) and three
  fp32 vectors of out (weight norm, scale - 1, scale); with dropout the base linear runs again in fp32 on the dropped
  input and saves an fp32 copy of the weight (DoraLinearLayer, peft tuners/lora/dora.py);
- an 8-bit base (bitsandbytes Linear8bitLt) keeps each linear's input (ctx.A) although the weight is frozen, where
  that input needs a gradient; a 4-bit one (MatMul4Bit) saves nothing but the packed weight and dequantizes again in
  backward, from bitsandbytes 0.43.2 on: older releases keep the input as 8-bit does (versions.py, measured in
  tests/measure/bnb_versions.py).
Blocks before the first trainable one (freezing all but the last k) save nothing at all.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

from ..model.architecture import ACTIVATION_SAVES
from ..versions import applies

STAT_BITS, MASK_BITS = 32, 8

# Where each module of a block sits in its forward order: a gradient reaches a term only once some module before
# it trains. q, k, v at 1 (the attention core needs them), o at 2, gate and up at 3, down at 4.
MODULE_POSITION = {"q": 1, "k": 1, "v": 1, "o": 2, "gate": 3, "up": 3, "down": 4}
MODULE_ORDER = tuple(MODULE_POSITION)     # the terms' order: q, k, v share a position, a set's order is not fixed
# Terms saved for an input gradient, by position (they need a gradient to reach them).
TERM_POSITION = {
    "input norm": 0,
    "q, k norms": 1, "q, k, v": 1, "attention logsumexp": 1, "attention softmax": 1, "attention dropout": 1,
    "attention soft-cap tanh": 1, "q down-projection norm": 1, "kv down-projection norm": 1,
    "q up-projection input": 1, "kv up-projection input": 1, "q, k (with rotary part)": 1,
    "kv up-projection output (v)": 1, "attention output": 1,
    "attention output dropout mask": 2, "post-attention norm": 2, "pre-MLP norm": 2,
    "mlp activation": 3, "mlp gate product": 3, "mlp fc1 output": 3,
    "mlp output dropout mask": 4, "post-MLP norm": 4,
}
# Terms saved only for a weight's gradient: -> the modules whose base weights need them. A mixture-of-experts
# block's router, experts and shared experts train with the MLP ("down" in a block whose weights train); peft's
# adapters never reach transformers 5's fused 3-D experts. Measured on tiny Mixtral, Qwen-MoE and DeepSeek models
# with LoRA on the attention (tests/test_finetune_validation.py).
WEIGHT_TERMS = {"attention input": ("q", "k", "v"), "mlp input": ("gate", "up"), "mlp fc2 input": ("down",),
                "moe input": ("down",), "router input (fp32 copy)": ("down",),
                "experts: dispatched tokens": ("down",), "shared expert fc2 input": ("down",),
                "kv up-projection input": ("k", "v"), "q up-projection input": ("q",)}
LATENT_NORMS = {"q down-projection norm": "q_lora_rank", "kv down-projection norm": "kv_lora_rank"}
# The experts' activation term ends with the product the down projection reads: saved only for its weight.
PRODUCT_TERMS = ("experts: activation and product",)
NORM_TERMS = ("input norm", "post-attention norm", "pre-MLP norm", "post-MLP norm")


class Training(NamedTuple):
    """What trains in each block (fine-tuning); None stands for full training."""
    trained: frozenset           # modules whose base weights train ("q" ... "down")
    adapted: frozenset           # modules carrying adapters
    norms: bool                  # norm weights train
    embedding: bool
    head: bool
    rank: int = 0
    dropout: bool = False
    dora: bool = False
    adapter_bits: int = 32
    saves_base_inputs: bool = False   # an 8-bit base (a 4-bit one before bitsandbytes 0.43.2) keeps its inputs
    grads_from_start: bool = False    # the first block's input needs a gradient (checkpointing, a trained embedding)
    frozen_blocks: int = 0            # leading blocks no gradient reaches: they save nothing
    # peft's adapters on a MoE block's router ("router") and fused experts ("gate_up", "down"): finetune._moe_adapters
    moe_adapted: frozenset = frozenset()

    final_norm: bool = False          # the final norm's weight trains
    head_adapter: bool = False        # LoRA on the LM head (peft target "lm_head")

    def needs_gradient(self, position: int, first: bool) -> bool:
        """Does a tensor computed after the modules at `position` need a gradient? In the first block only when
        something at or before it trains (or the block's input needs one)."""
        if not first or self.grads_from_start:
            return True
        return any(MODULE_POSITION[m] <= position for m in self.trained | self.adapted)


# Each term a frozen base linear reads as its input -> the modules reading it (WEIGHT_TERMS, and the attention
# core's output that the output projection reads)
BASE_INPUTS = {**WEIGHT_TERMS, "attention output": ("o",)}


def graph_held_bits(terms: Dict[str, int], train: Optional[Training], first: bool = False) -> int:
    """Of one block's adapted terms, the bits bitsandbytes' base linears keep as autograd ctx attributes
    (MatMul8bitLt's ctx.tensors = (CAt, subA, A); MatMul4Bit's ctx.tensors = (A, B) before 0.43.2), not as saved
    tensors: backward does not release them, so they live as long as the graph, as long as the loop keeps the loss
    or the output (measured on the CPU: tests/measure/bnb_versions.py measure_held)."""
    if train is None:
        return 0
    return sum(bits for name, bits in terms.items() if _base_input_kept(name, train, first))


def _base_input_kept(name: str, train: Training, first: bool) -> bool:
    """Does a bitsandbytes base linear keep this term, its input, for backward: the term is the input of frozen
    linears, bitsandbytes keeps inputs (saves_base_inputs) and this one needs a gradient."""
    modules = BASE_INPUTS.get(name)
    return bool(modules) and train.saves_base_inputs and not set(modules) & train.trained \
        and train.needs_gradient(_input_position(modules), first)


def graph_held_bytes(blocks: Dict[str, Dict[str, int]], first, train: Training, counts: Dict[str, int]) -> int:
    """A rank's graph_held_bits in bytes: each block kind's (blocks: kind -> its adapted terms) times the blocks of
    that kind a gradient reaches (counts, layer_counts' dict), the first of them as `first` = (its terms, its kind)
    says."""
    terms, kind = first
    if not any(counts.get(k, 0) for k in blocks):
        return 0
    bits = sum(counts.get(k, 0) * graph_held_bits(v, train) for k, v in blocks.items())
    return -(-(bits + graph_held_bits(terms, train, True) - graph_held_bits(blocks[kind], train)) // 8)


def _input_position(modules) -> int:
    """The position whose output is these modules' input: a bitsandbytes base linear keeps its input only when
    that input needs a gradient (MatMul8bitLt, and MatMul4Bit before 0.43.2: if any(ctx.needs_input_grad[:2]))."""
    return min(MODULE_POSITION.get(m, MODULE_POSITION["down"]) for m in modules) - 1


def norm_weight_bits(a, T: int, w: int, impl: str, width: int) -> int:
    """The part of a norm's saves only its weight's gradient needs (Hugging Face's RMSNorm: the normalised copy;
    Gemma's: its fp32 output and the fp32 1 + w). A fused or LayerNorm kernel saves the same for both."""
    if impl == "megatron" or a.norm == "layernorm":
        return 0
    if a.norm == "rmsnorm-gemma":
        return STAT_BITS * T * width + STAT_BITS * width
    if a.norm == "rmsnorm-fp32":                   # gpt-oss: the fp32 normalised copy
        return STAT_BITS * T * width
    return w * T * width


def _module_dims(a, tp: int) -> Dict[str, tuple]:
    """(in, out) of each adaptable module on one tensor-parallel rank."""
    q, kv, h, f = a.q_size, a.kv_size, a.hidden, a.ffn
    if a.mla:                                  # latent attention: q_proj to every head's q/k width, o_proj from v
        q = a.heads * a.qk_head_dim            # (all-linear only: "k" and "v" stand for kv_a and kv_b)
        return {"q": (h, q // tp), "o": (a.heads * a.v_head_dim // tp, h),
                "k": (h, a.kv_lora_rank + a.qk_rope_dim),
                "v": (a.kv_lora_rank, a.heads * (a.qk_nope_dim + a.v_head_dim) // tp),
                "gate": (h, f // tp), "up": (h, f // tp), "down": (f // tp, h)}
    return {"q": (h, q // tp), "k": (h, kv // tp), "v": (h, kv // tp), "o": (q // tp, h),
            "gate": (h, f // tp), "up": (h, f // tp), "down": (f // tp, h)}


_SHARED_INPUT = {"q": "attention input", "k": "attention input", "v": "attention input", "o": "attention output",
                 "gate": "mlp input", "up": "mlp input", "down": "mlp fc2 input"}


def _moe_kept(train: Training) -> tuple:
    """Terms a MoE block keeps though its base weights are frozen, because an adapter's merged weight needs the
    input's gradient: the router's input, the experts' dispatched tokens, the product the down projection reads."""
    kept = ()
    if "router" in train.moe_adapted:
        kept += ("moe input",)
    if "gate_up" in train.moe_adapted:
        kept += ("experts: dispatched tokens",)
    if "down" in train.moe_adapted:
        kept += PRODUCT_TERMS
    return kept


def _moe_adapter_terms(train: Training, a, w: int, moe) -> Dict[str, int]:
    """What peft's ParamWrapper saves in a MoE block (measured on a tiny Mixtral, tests/test_finetune_validation.py):
    each local expert's merged weight W + BA, which the grouped matmul saves for the input's gradient, and the
    LoRA factors cast to the compute dtype, which the batched product of B and A saves; the router's merged
    weight likewise."""
    ep, etp = (moe.ep, moe.etp) if moe is not None else (1, 1)
    E, h, f, r = a.experts // ep, a.hidden, a.moe_ffn // etp, train.rank
    up = 2 * f if a.gated_mlp else f
    terms = {}
    if "router" in train.moe_adapted:
        terms["lora router: merged weight"] = w * a.experts * h
    if "gate_up" in train.moe_adapted:
        terms["lora experts gate/up: merged weights"] = w * E * up * h
        terms["lora experts gate/up: factors"] = w * E * 2 * r * (h + up)
    if "down" in train.moe_adapted:
        terms["lora experts down: merged weights"] = w * E * h * f
        terms["lora experts down: factors"] = w * E * r * (f + h)
    return terms


def adapt(terms: Dict[str, int], full_terms: Dict[str, int], train: Training, a, t, w: int, impl: str, tp: int,
          first: bool, moe=None) -> Dict[str, int]:
    """One block's terms (bits) when only `train` trains: drop what frozen weights and gradient-free positions
    need, add what the adapters save."""
    out = {}
    keep = _moe_kept(train)
    for name, bits in terms.items():
        if name in keep:                              # the experts' or router's adapters need it
            out[name] = bits
            continue
        if name in TERM_POSITION and not train.needs_gradient(TERM_POSITION[name], first):
            if name in NORM_TERMS and train.norms:       # the weight gradient still needs the normalised copy
                out[name] = norm_weight_bits(a, t.outside, w, impl, a.hidden)
            continue
        if name in WEIGHT_TERMS and not set(WEIGHT_TERMS[name]) & train.trained and \
                not _base_input_kept(name, train, first):
            continue
        if name in NORM_TERMS and not train.norms:
            bits -= norm_weight_bits(a, t.outside, w, impl, a.hidden)
        if name in LATENT_NORMS and not train.norms:      # DeepSeek's q_a / kv_a layernorms, frozen
            bits -= norm_weight_bits(a, t.outside, w, impl, getattr(a, LATENT_NORMS[name]))
        if name == "q, k norms" and not train.norms:      # Qwen3 / Gemma 3 / OLMo q_norm and k_norm, frozen
            bits -= norm_weight_bits(a, t.inside, w, impl, a.q_size) + norm_weight_bits(a, t.inside, w, impl,
                                                                                          a.kv_size)
        if name in PRODUCT_TERMS and "down" not in train.trained:
            saves = ACTIVATION_SAVES[a.activation] + (1 if a.gated_mlp else 0)
            bits -= bits // saves                     # the product [S, f], one of the term's `saves` tensors
        out[name] = bits
    if train.moe_adapted and "experts: dispatched tokens" in terms:
        out.update(_moe_adapter_terms(train, a, w, moe))
    dims = _module_dims(a, tp)
    T = t.inside
    for m in sorted(train.adapted, key=MODULE_ORDER.index):
        inp, outp = dims[m]
        needs = train.needs_gradient(MODULE_POSITION[m] - 1, first)     # does the module's input need one?
        shared = _SHARED_INPUT[m]
        if train.adapter_bits == w and not train.dropout:
            if shared not in out and shared in full_terms:      # the adapters read the module's saved input
                out[shared] = full_terms[shared]
        else:
            out[f"lora {m}: input copy"] = train.adapter_bits * T * inp
        out[f"lora {m}: rank-{train.rank} intermediate"] = train.adapter_bits * T * train.rank
        if train.dropout and needs:
            out[f"lora {m}: dropout mask"] = MASK_BITS * T * inp
        if train.dora:
            out[f"dora {m}: base and LoRA results"] = (w + STAT_BITS) * T * outp
            out[f"dora {m}: norm and scale vectors"] = 3 * STAT_BITS * outp
            if train.dropout:
                out[f"dora {m}: fp32 weight copy"] = STAT_BITS * inp * outp
    return out


def adapt_ends(embed: Dict[str, int], head: Dict[str, int], train: Training, a, t, w: int, impl: str):
    """The embedding end saves token ids only for a trained embedding; the head saves its input only when it
    trains, and its final norm its normalised copy only when the norms train."""
    embed = {k: v for k, v in embed.items() if k != "token ids" or train.embedding}
    head = dict(head)
    shared = head.get("output projection input")
    if not train.head:
        head.pop("output projection input", None)
    if train.head_adapter:
        head.update(_head_adapter_terms(train, a, t, w, shared))
    if train.frozen_blocks >= a.layers and not train.final_norm:
        head.pop("final norm", None)                # no gradient reaches the final norm's input either
    elif not train.final_norm and "final norm" in head:
        head["final norm"] -= norm_weight_bits(a, t.outside, w, impl, a.hidden)
    return embed, head


def _head_adapter_terms(train: Training, a, t, w: int, shared: Optional[int]) -> Dict[str, int]:
    """LoRA on the LM head, as the block adapters save (peft 0.21.2 lora.Linear.forward, measured in
    tests/test_families_lora_head.py): lora_A's input (the head's input itself when the adapter's dtype is the
    activations' and there is no dropout, else its cast copy), a dropout mask, and lora_A's output r x T."""
    T, h = t.inside, a.hidden
    terms = {}
    if train.adapter_bits == w and not train.dropout and shared is not None:
        terms["output projection input"] = shared
    else:
        terms["lora lm_head: input copy"] = train.adapter_bits * T * h
    if train.dropout:
        terms["lora lm_head: dropout mask"] = MASK_BITS * T * h
    terms[f"lora lm_head: rank-{train.rank} intermediate"] = train.adapter_bits * T * train.rank
    return terms


def training_for(ft, arch, recompute: str, param_dtype: str, dtype_bits) -> Optional[Training]:
    """The Training of a fine-tuning mode, or None for full training."""
    if ft.mode == "full":
        return None
    from ..model.finetune import TARGETS
    if ft.mode == "freeze":
        # Hugging Face's gradient checkpointing turns input gradients on (enable_input_require_grads): every
        # checkpointed block then keeps its input, trained or not.
        embedding = "embed_tokens" in ft.train_modules or recompute == "full"
        frozen = 0 if embedding else arch.layers - min(ft.train_last_layers, arch.layers)
        norms = "norms" in ft.train_modules
        if frozen == arch.layers and not norms:
            frozen = arch.layers          # no block trains: none saves anything
        return Training(frozenset(TARGETS) if ft.train_last_layers else frozenset(), frozenset(),
                        bool(ft.train_last_layers) or norms, "embed_tokens" in ft.train_modules,
                        "lm_head" in ft.train_modules, grads_from_start=embedding,
                        frozen_blocks=0 if norms else frozen, final_norm=norms)
    from ..model.finetune import peft_converts_experts
    adapted = frozenset(ft.targets)
    if arch.mla and ft.lora_targets != ("all-linear",):
        # peft matches module names: latent attention has no k_proj / v_proj, and q_proj only without a q LoRA rank
        adapted -= {"k", "v"} | ({"q"} if arch.q_lora_rank else set())
    moe_adapted = frozenset()
    if peft_converts_experts(arch) and ft.mode != "dora":
        # peft re-targets gate / up / down onto the fused experts (and the router under all-linear)
        moe_adapted = frozenset((["router"] if ft.lora_targets == ("all-linear",) else []) +
                                (["gate_up"] if {"gate", "up"} <= adapted else []) +
                                (["down"] if "down" in adapted else []))
        adapted -= {"gate", "up", "down"}
    return Training(frozenset(), adapted, False, "embed_tokens" in ft.modules_to_save,
                    "lm_head" in ft.modules_to_save, ft.lora_rank, ft.lora_dropout > 0, ft.mode == "dora",
                    dtype_bits[ft.adapter_storage(param_dtype)], _keeps_base_inputs(ft),
                    recompute == "full" or "embed_tokens" in ft.modules_to_save, moe_adapted=moe_adapted,
                    head_adapter=ft.head_adapter)


def _keeps_base_inputs(ft) -> bool:
    """bitsandbytes' base linears keep their inputs: 8-bit always, 4-bit before 0.43.2 (versions.py)."""
    four_bit = ft.quantized in ("nf4", "fp4")
    return ft.quantized == "int8" or (four_bit and applies(ft.versions, "4-bit linear input saved"))
