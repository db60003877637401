"""Activation bytes saved for backward, per layer and for the embedding and output ends.

Start: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.1:
per layer sbh(34 + 5as/h) bytes with 16-bit activations and 1-byte dropout masks (Megatron's fused kernels):
attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh. We keep their terms and generalise each one:
any activation width w, grouped-query K/V, any FFN width, gated MLPs, dropout on or off, flash attention, and a
second implementation, "huggingface", whose modules save more (derived below and checked against real
transformers models in tests/test_activation_validation.py):
- RMSNorm (LlamaRMSNorm) upcasts its input to fp32, saves it, the fp32 rsqrt, and the normalised copy cast back;
- rotary embeddings produce new q and k tensors; the cos/sin tables (batch 1) are saved once per model;
- eager Llama attention runs softmax in fp32 and saves that and the copy cast back; GPT-2 keeps softmax in w;
- eager attention with fewer KV heads saves K and V repeated to every query head (repeat_kv copies);
- MLP activations save what their autograd formulas need (gelu_new: 4 tensors of the FFN width; see
  architecture.ACTIVATION_SAVES);
- the loss upcasts logits to fp32 and log_softmax saves its fp32 output.
Flash / memory-efficient attention (CUDA) saves q, k, v as passed, the output and an fp32 logsumexp (b x a x s)
(PyTorch derivatives.yaml, _scaled_dot_product_flash_attention): no s^2 term.
Dropout masks are 1 byte per element, as CUDA's fused dropout saves them.
Later families (measured the same way, tests/measure/moe_activations.py): q/k norms are RMSNorms over each head
(Qwen3, Gemma 3) or all heads (OLMo 2); Gemma's RMSNorm computes in fp32 and saves its fp32 output and (1 + w);
sandwich norms (Gemma 2/3) add two per block; soft-capping saves its tanh output (Gemma 2); latent attention
(DeepSeek-V2/V3) saves its down-projected KV (and Q) through their norms, and SDPA's value is a view of the
up-projection's output, which stays alive whole. Mixture-of-experts blocks: zerocalc/step/moe.py.

All sizes are in bits until the end, so fp8 or 4-bit widths stay exact.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict, NamedTuple, Optional

from ..model.architecture import ACTIVATION_SAVES, Architecture, layer_counts
from ..scenario import FieldError
from ..tables import INDEX_BITS, STAT_BITS
from . import fp32_stream
from .compiled import compiled_adapter_terms, compiled_op_terms, compiled_terms, covered_adapters
from .compiled import covered as compiled_covered
from .block_backward import backward_bits
from .block_checkpoint import megatron_full_blocks, split_checkpointed  # noqa: F401 (shape.py's names)
from .megatron_recompute import DEFAULT_MODULES, module_terms, parse_modules
from .moe import Routing, moe_terms, routed_pairs
from .norms import norm_bits
from .mtp import mtp_module_terms, mtp_terms
from .op_checkpoint import op_saved_terms
from .parallel_blocks import kv_index, math_fallback, mlp_norm, sdpa_math_fallback
from .repeated_kv import every_block, joined, sliding_layers
from .trainable import adapt, adapt_ends, graph_held_bytes

ATTENTION = ("eager", "flash")
# op: torchtitan's op-level selective checkpointing (step/op_checkpoint.py); selective: Korthikanti et al.'s
# attention-core recompute (saves nothing under flash attention); full: every block (or one in N) checkpointed.
RECOMPUTE = ("none", "selective", "op", "full")
CHECKPOINTED = ("op", "full")
RECOMPUTE_NAMES = {"none": "no recompute", "selective": "selective recompute (attention scores)",
                   "op": "op-level selective checkpointing", "full": "full recompute"}


def recompute_name(recompute: str) -> str:
    return RECOMPUTE_NAMES[recompute]     # blocks that keep their input and re-run their forward in backward
IMPLEMENTATIONS = ("huggingface", "megatron")
MASK_BITS = 8          # CUDA dropout masks are bool


class ActivationReport(NamedTuple):
    per_layer: Dict[str, int]     # term -> bytes for one dense (or every) transformer block
    embed: Dict[str, int]         # before the first block
    head: Dict[str, int]          # final norm, output projection, loss
    layers: int                   # blocks of per_layer's kind
    recompute_working: int        # one block's full activations, rebuilt during backward under full recompute
    stage: Dict[str, int] = {}    # what every pipeline stage (model chunk) saves once: its rotary tables
    per_moe_layer: Dict[str, int] = {}   # term -> bytes for one mixture-of-experts block
    moe_layers: int = 0
    per_sliding_layer: Dict[str, int] = {}   # term -> bytes a local-attention block saves beyond the others
    sliding_layers: int = 0
    first_block_delta: int = 0    # fine-tuning: the first block a gradient reaches saves this much less (<= 0)
    frozen_blocks: int = 0        # fine-tuning: leading blocks no gradient reaches save nothing
    # Full recompute of one block in every N (torchtitan's layer SAC): a checkpointed block saves `checkpointed`,
    # the others save per_layer / per_moe_layer as without recompute; checkpointed_layers of them in the model.
    checkpointed: Dict[str, int] = {}
    checkpointed_layers: int = 0
    full_blocks: Dict[str, int] = {}     # under full recompute: one block's whole activations, by kind (dense, moe)
    mtp_rebuilt: int = 0                 # what backward rebuilds of one checkpointed MTP module (the last stage's)
    recompute_backward: Optional[int] = None   # its backward beyond its saves (block_backward.py; None: not walked)
    rebuilt_terms: Dict[str, int] = {}   # under full recompute: the largest block's terms, as backward rebuilds them
    graph_held: int = 0       # bitsandbytes' inputs on the autograd graph past backward (trainable.graph_held_bytes)

    @property
    def per_layer_total(self) -> int:
        return sum(self.per_layer.values())

    @property
    def per_moe_layer_total(self) -> int:
        return sum(self.per_moe_layer.values())

    def blocks(self, dense: int, moe: int, sliding: int = 0, checkpointed: int = 0) -> int:
        """Bytes of `dense` dense blocks and `moe` MoE blocks, `sliding` of them with local attention, and
        `checkpointed` blocks that keep only their checkpoint input."""
        return dense * self.per_layer_total + moe * self.per_moe_layer_total + \
            sliding * sum(self.per_sliding_layer.values()) + checkpointed * sum(self.checkpointed.values())

    @property
    def total(self) -> int:
        """A whole model's worth (the frozen leading blocks and the first block's saving included)."""
        return (self.blocks(self.layers, self.moe_layers, self.sliding_layers, self.checkpointed_layers)
                + sum(self.embed.values()) + sum(self.stage.values()) + sum(self.head.values())
                + self.first_block_delta)


class Tokens(NamedTuple):
    """One rank's share of a micro-batch, in tokens, for each kind of term (Korthikanti et al. section 4.2):
    inside the tensor-parallel region (heads and FFN split over tp), outside it (the full hidden size: norms,
    residual dropout, the block input; split over tp only with sequence parallel), and the saved input of a
    column-parallel linear (q/k/v, gate/up, head): Megatron's sequence-parallel linear saves its local shard and
    all-gathers again in backward (LinearWithGradAccumulationAndAsyncCommunication), while a DTensor plan saves
    the all-gathered input its matmul ran on (torch.distributed.tensor.parallel: the redistribute to Replicate is
    its own autograd op). Context parallelism gives each rank s / cp of the sequence."""
    b: int
    s: int              # this rank's sequence length (s / cp)
    inside: int
    outside: int
    linear_in: int


def tokens(micro_batch: int, seq_len: int, tp: int = 1, cp: int = 1, sequence_parallel: bool = False,
           implementation: str = "huggingface") -> Tokens:
    s = seq_len // cp
    inside = micro_batch * s
    outside = inside // tp if sequence_parallel and tp > 1 else inside
    linear_in = outside if implementation == "megatron" else inside
    return Tokens(micro_batch, s, inside, outside, linear_in)


def mlp_terms(a: Architecture, t: Tokens, w: int, impl: str, f: int = None, prefix: str = "mlp",
              with_input: bool = True) -> Dict[str, int]:
    """A (gated) MLP of FFN width f (default the block's): its input, activation, gate product and fc2 input."""
    f, T = a.ffn if f is None else f, t.inside
    terms = {f"{prefix} input": w * t.linear_in * a.hidden} if with_input else {}
    if impl == "megatron":
        terms[f"{prefix} fc1 output"] = w * T * f * (2 if a.gated_mlp else 1)   # GeLU / SwiGLU input (Korthikanti)
    else:
        terms[f"{prefix} activation"] = ACTIVATION_SAVES[a.activation] * w * T * f
        if a.gated_mlp:
            terms[f"{prefix} gate product"] = 2 * w * T * f                 # act(gate) and up, saved by the product
    terms[f"{prefix} fc2 input"] = w * T * f                                # Korthikanti: 8sbh
    return terms


def _qkv(a: Architecture, T: int, w: int, attention: str, hf: bool) -> int:
    """Bits of Q, K and V saved by the attention (views of one storage count once)."""
    q, kv = a.q_size, a.kv_size
    if not hf:
        return w * T * (q + 2 * kv)
    repeated = attention == "eager" and a.n_kv_heads < a.heads     # repeat_kv copies to every query head
    fused = q + 2 * kv
    if a.kv_expand == "split":                 # Falcon's new architecture: K and V expanded when split (copies)
        return 3 * w * T * q
    if a.positions == "rotary":                                    # new q and k tensors after the rotation
        # v stays a view of the projection output; eager's matmul copies a strided view of a fused one
        v = q if repeated or (attention == "eager" and a.fused_qkv) else (fused if a.fused_qkv else kv)
        return w * T * (q + (q if repeated else kv) + v)
    if a.fused_qkv:
        return w * T * (fused + (2 * q if repeated else 0))
    return w * T * (q + (2 * q if repeated else 2 * kv))


def _scores(a: Architecture, t: Tokens, w: int, hf: bool) -> Dict[str, int]:
    """Eager attention's s x s terms: softmax (fp32 and its copy in Hugging Face's Llama family), dropout,
    soft-capping's tanh output (Gemma 2)."""
    scores = a.heads * t.s * t.s * t.b
    dropout = a.attn_dropout > 0
    terms = {}
    if hf and a.attention_sinks:
        # gpt-oss eager_attention_forward: the sink logit joins each row (s + 1 columns), the row max is taken
        # off (its int64 indices saved), softmax in the logits' dtype; the probabilities without the sink are a
        # view of its output, which attn @ V saves again (one storage).
        terms["attention softmax (with sinks)"] = w * a.heads * t.s * (t.s + 1) * t.b
        terms["attention row max indices"] = INDEX_BITS * a.heads * t.s * t.b
    elif hf and a.softmax_fp32:
        # fp32 output saved by softmax; its copy cast back to w is saved by attn @ V only without dropout
        # (with dropout, attn @ V saves the dropped probabilities instead).
        terms["attention softmax"] = STAT_BITS * scores + (w * scores if w != STAT_BITS and not dropout else 0)
    else:
        terms["attention softmax"] = w * scores
    if dropout:
        terms["attention dropout"] = (MASK_BITS + w) * scores      # mask + dropped probabilities
    if a.attn_softcap:
        terms["attention soft-cap tanh"] = w * scores
    return terms


def _latent_qkv(a: Architecture, t: Tokens, w: int, impl: str) -> Dict[str, int]:
    """Multi-head latent attention (HF DeepseekV2Attention): the down-projected Q (with q_lora_rank) and KV
    through their norms, the up-projections' inputs, Q and K with their rotary part, and the KV up-projection's
    whole output (SDPA's value is a view of it)."""
    T, heads = t.inside, a.heads
    terms = {}
    if a.q_lora_rank:
        terms["q down-projection norm"] = norm_bits(a, t.outside, w, impl, a.q_lora_rank)
        terms["q up-projection input"] = w * t.linear_in * a.q_lora_rank
    terms["kv down-projection norm"] = norm_bits(a, t.outside, w, impl, a.kv_lora_rank)
    terms["kv up-projection input"] = w * t.linear_in * a.kv_lora_rank
    terms["q, k (with rotary part)"] = 2 * w * T * heads * a.qk_head_dim
    terms["kv up-projection output (v)"] = w * T * heads * (a.qk_nope_dim + a.v_head_dim)
    return terms


def _qk_norms(a: Architecture, T: int, w: int, impl: str) -> int:
    if a.qk_norm == "head":                    # over each head's d features
        return norm_bits(a, T, w, impl, a.q_size, T * a.heads) + norm_bits(a, T, w, impl, a.kv_size,
                                                                             T * a.n_kv_heads)
    return norm_bits(a, T, w, impl, a.q_size) + norm_bits(a, T, w, impl, a.kv_size)


def _attention(a: Architecture, t: Tokens, w: int, attention: str, impl: str, recompute: str) -> Dict[str, int]:
    hf = impl == "huggingface"
    terms = {"attention input": w * t.linear_in * a.hidden}
    if a.mla:
        terms.update(_latent_qkv(a, t, w, impl))
    else:
        if a.qk_norm != "none":
            terms["q, k norms"] = _qk_norms(a, t.inside, w, impl)
        if not sdpa_math_fallback(a, hf, attention):
            terms["q, k, v"] = _qkv(a, t.inside, w, attention, hf) + kv_index(a, hf)
    if sdpa_math_fallback(a, hf, attention):                        # Falcon's multi_query (parallel_blocks.py)
        terms.update(math_fallback(a, t, recompute))
    elif attention == "flash":
        terms["attention logsumexp"] = STAT_BITS * t.b * a.heads * t.s
    elif recompute != "selective":                                 # selective recompute drops the s^2 terms
        terms.update(_scores(a, t, w, hf))
    v_width = a.heads * a.v_head_dim if a.mla else a.q_size
    terms["attention output"] = w * t.inside * v_width             # out-projection input (= flash output)
    if a.resid_dropout > 0:
        terms["attention output dropout mask"] = MASK_BITS * t.outside * a.hidden
    return terms


def _layer(a, t: Tokens, w, attention, impl, recompute, kind="dense", moe=None, train=None, tp=1,
           first=False) -> Dict[str, int]:
    full = _full_layer(a, t, w, attention, impl, recompute, kind, moe)
    if train is None:
        return full
    whole = _full_layer(a, t, w, attention, impl, "none", kind, moe)
    return adapt(full, whole, train, a, t, w, impl, tp, first, moe)


def _full_layer(a, t: Tokens, w, attention, impl, recompute, kind="dense", moe=None) -> Dict[str, int]:
    terms = {"input norm": norm_bits(a, t.outside, w, impl)}
    terms.update(_attention(a, t, w, attention, impl, recompute))
    if a.parallel_residual:                    # the MLP reads the block input too (parallel_blocks.py)
        terms.update(mlp_norm(a, norm_bits(a, t.outside, w, impl), w, t.outside))
    else:
        terms["post-attention norm"] = norm_bits(a, t.outside, w, impl)
    if a.sandwich_norm:
        terms["pre-MLP norm"] = norm_bits(a, t.outside, w, impl)
        terms["post-MLP norm"] = norm_bits(a, t.outside, w, impl)
    terms.update(mlp_terms(a, t, w, impl, with_input=not a.shared_norm) if kind == "dense"
                 else moe_terms(a, t, w, impl, moe, mlp_terms))
    if a.resid_dropout > 0:
        terms["mlp output dropout mask"] = MASK_BITS * t.outside * a.hidden
    return terms


def _bytes(terms: Dict[str, int]) -> Dict[str, int]:
    return {k: -(-v // 8) for k, v in terms.items() if v}


def tp_local(a: Architecture, tp: int) -> Architecture:
    """The block one tensor-parallel rank runs: heads, KV heads and the FFN split over tp, hidden size whole."""
    if tp == 1:
        return a
    split = getattr(a, "tp_split", None)       # activation_formulas' symbolic stand-in splits itself, uncached
    return split(tp) if split is not None else _tp_local(a, tp)


@lru_cache(maxsize=256)
def _tp_local(a: Architecture, tp: int) -> Architecture:
    return replace(a, heads=a.heads // tp, kv_heads=None if a.mla else a.n_kv_heads // tp, head_dim=a.d_head,
                   ffn=a.ffn // tp, shared_expert_ffn=a.shared_expert_ffn // tp)


@lru_cache(maxsize=1024)     # a layout search asks again for each offload setting; callers never mutate the dicts
def activations(a: Architecture, micro_batch: int, seq_len: int, bits: int, attention: str = "flash",
                recompute: str = "none", implementation: str = "huggingface", tp: int = 1, cp: int = 1,
                sequence_parallel: bool = False, loss_vocab: int = None, moe=None,
                training=None, recompute_every: int = 1,
                loss_saved: tuple = (STAT_BITS, "loss log-softmax (fp32)"),
                compiled: bool = False, op_policy: str = "torchtitan", recompute_modules: str = DEFAULT_MODULES,
                recompute_method: str = "uniform", recompute_num_layers: int = 1,
                stream_bits: int = 0, fp32_norms: bool = False, repeat_kv: bool = False) -> ActivationReport:
    """Bytes saved for backward by one rank for one micro-batch: its tensor-parallel split of the heads and FFN,
    its share of the tokens (tokens()), and `loss_vocab` vocabulary columns of the fp32 loss (default: all of
    them; vocab-parallel cross entropy keeps the padded vocabulary / tp). `moe`: the routing assumptions
    (moe_activations.Routing), for mixture-of-experts blocks; `training`: what trains when fine-tuning
    (training_activations.Training; None: everything). `recompute_every` N > 1 with full recompute checkpoints
    one block in N (the N-th, 2N-th... a gradient reaches, as torchtitan's layer SAC counts them,
    activation_checkpoint.py _apply_layer_sac); the others save everything. `loss_saved`: (bits per token and
    vocabulary column, name) of what the loss keeps for backward (step/losses.py; 0 bits: nothing T x V).
    `compiled`: the blocks run under torch.compile (step/compiled.py), for the block kinds measured; `op_policy`:
    which ops recompute "op" saves (op_checkpoint.OP_POLICIES); `recompute_modules`: Megatron's selective modules
    (megatron_recompute.py; "core_attn" alone is the selective recompute above); `recompute_method` /
    `recompute_num_layers`: Megatron's full recompute of the first N blocks ("block") or of groups of N ("uniform"),
    counted here over the model as one chunk (step/shape.py counts each chunk). `stream_bits` 32: an fp32
    residual stream (fp32 embeddings, head and norms) beside 16-bit linears under autocast (step/fp32_stream.py;
    with `bits` 32 too, as QLoRA's k-bit preparation counts, only the head's 16-bit weight copy is added), 0: none;
    `fp32_norms`: the norms alone in fp32, the stream `bits` wide (each linear casts a norm's output itself);
    `repeat_kv`: the attention saves K and V repeated to every query head (step/repeated_kv.py)."""
    t = tokens(micro_batch, seq_len, tp, cp, sequence_parallel, implementation)
    local = tp_local(a, tp)
    w = bits
    hf = implementation == "huggingface"
    kinds = ("dense", "moe") if a.experts else ("dense",)
    tr = training
    first_delta, held = 0, None
    every = recompute_every if recompute == "full" else 1
    mods = parse_modules(recompute_modules) if recompute == "selective" else ()
    if a.parallel_residual and mods and mods != ("core_attn",):
        raise FieldError("recompute_modules", recompute_modules, "core_attn only for parallel attention + MLP blocks "
                         "(Megatron's layernorm / mlp modules assume a sequential block)")
    megatron_full = recompute == "full" and (recompute_method == "block" or recompute_num_layers > 1)
    stream = max(w, stream_bits)
    checkpoint = {"block input (checkpoint)": stream * t.outside * a.hidden} if recompute == "full" else {}
    pairs = routed_pairs(t.outside, a.experts_per_token, moe or Routing()) if a.experts else 0
    compile_blocks = compiled and hf and tr is None and compiled_covered(local)     # measured kinds (compiled.py)
    compile_adapters = compiled and hf and covered_adapters(local, tr) and recompute != "op"
    if compile_adapters:                      # compiled LoRA blocks (compiled.py): no op policy under fine-tuning
        full = {"dense": compiled_adapter_terms(local, t, w, attention, tr, _scores(local, t, w, hf))}
    elif compile_blocks:
        full = {k: compiled_terms(local, t, w, attention, k, pairs, _scores(local, t, w, hf)) for k in kinds}
    else:
        full = {k: _layer(local, t, w, attention, implementation, "none", k, moe, tr, tp) for k in kinds}
    repeat = every_block(local, t, w, attention, repeat_kv)       # the attention's K, V copies (repeated_kv.py)
    full, first = {k: joined(v, repeat) for k, v in full.items()}, None
    if compile_adapters and recompute == "full" and every == 1:
        blocks = {"dense": checkpoint}
    elif compile_adapters:
        blocks = full if recompute != "selective" else {"dense": compiled_adapter_terms(local, t, w, attention, tr)}
        first, kind = compiled_adapter_terms(local, t, w, attention, tr, {} if recompute == "selective" else
                                             _scores(local, t, w, hf), first=True), "dense"
    elif recompute == "op":
        blocks = {k: op_saved_terms(local, t, w, attention, k, pairs, tp, sequence_parallel,
                                    moe.ep if moe is not None else 1, op_policy) for k in kinds}
        if compile_blocks:
            blocks = {k: compiled_op_terms(v) for k, v in blocks.items()}
    elif recompute == "full" and every == 1 and not megatron_full:
        blocks = {k: checkpoint for k in kinds}
    elif recompute == "full" and megatron_full:                          # the chunk's groups: step/shape.py
        blocks = full
    elif compile_blocks and recompute == "selective":                     # the s^2 terms recomputed
        blocks = {k: compiled_terms(local, t, w, attention, k, pairs, {}) for k in kinds}
    elif compile_blocks:
        blocks = full
    else:
        mode = "selective" if recompute == "selective" and "core_attn" in (mods or ("core_attn",)) else "none"
        blocks = {k: _layer(local, t, w, attention, implementation, mode, k, moe, tr, tp) for k in kinds}
        if mods and mods != ("core_attn",):                               # Megatron's other modules
            blocks = {k: module_terms(v, local, t, w, implementation, k, mods, tp, sequence_parallel)
                      for k, v in blocks.items()}
        if tr is not None:
            kind = "moe" if a.is_moe_layer(tr.frozen_blocks) else "dense"
            first = _layer(local, t, w, attention, implementation, mode, kind, moe, tr, tp, first=True)
    if recompute != "op":      # op-level checkpointing rebuilds the copies with the ops it does not save
        blocks = {k: joined(v, repeat) for k, v in blocks.items()}
    if first is not None:      # the first trained block (fine-tuning, of `kind`) against the others
        first = joined(first, repeat)
        first_delta = sum(_bytes(first).values()) - sum(_bytes(blocks[kind]).values())
        held = None if compile_adapters else (first, kind)
    if stream > w or fp32_norms:    # fp32_stream.py: each block's norms and autocast's copies, wherever it saves
        extra = fp32_stream.block_terms(local, t, tr, norms_only=stream == w)
        full = {k: {**v, **extra} for k, v in full.items()}
        blocks = {k: v if v is checkpoint else {**v, **extra} for k, v in blocks.items()}

    embed = {"token ids": INDEX_BITS * t.inside}
    stage = {}
    if a.positions == "learned":
        embed["position ids"] = INDEX_BITS * t.s
    elif hf:
        # Batch-1 tables shared by a module's layers; each pipeline stage runs the rotary embedding itself.
        tables = 2 if a.local_rope and a.sliding_window and a.sliding_pattern > 1 else 1   # local + global
        # partial rotary (GPT-NeoX rotary_pct, phi / StableLM partial_rotary_factor): tables of the rotated dims
        rotated = a.qk_rope_dim if a.mla else int(a.d_head * a.rotary_pct)
        stage["rotary cos/sin"] = tables * 2 * w * t.s * rotated
        if recompute in CHECKPOINTED:
            stage["position ids (checkpoint input)"] = INDEX_BITS * t.s   # each checkpointed block's input
    if recompute in CHECKPOINTED and hf and attention == "eager":
        embed["causal mask (checkpoint input)"] = w * t.b * t.s * t.s  # HF's 4-D additive mask, kept for recompute
    if a.embd_dropout > 0:
        embed["embedding dropout mask"] = MASK_BITS * t.outside * a.hidden
    vocab = a.vocab if loss_vocab is None else loss_vocab
    head = {
        "final norm": norm_bits(a, t.outside, w, implementation),
        "output projection input": w * t.linear_in * a.hidden,
        "labels": INDEX_BITS * t.inside,
    }
    if loss_saved[0]:
        head[loss_saved[1]] = loss_saved[0] * t.inside * vocab
    if a.final_softcap:
        head["logit soft-cap tanh"] = w * t.inside * vocab
    mtp_rebuilt = 0
    if a.mtp_layers:                       # multi-token prediction on the output end (step/mtp.py)
        kind = a.mtp_kind
        ckpt = recompute == "full" and every == 1 and recompute_method == "uniform"
        norm = lambda rows: norm_bits(a, rows, w, implementation)          # noqa: E731
        head.update(mtp_terms(a, t, w, implementation, full[kind] if recompute == "full" else blocks[kind], vocab,
                              loss_saved, norm, ckpt))
        if ckpt:
            mtp_rebuilt = sum(_bytes(mtp_module_terms(a, t, w, implementation, full[kind], norm)).values())
    if tr is not None:
        embed, head = adapt_ends(embed, head, tr, a, t, w, implementation)
        if tr.frozen_blocks >= a.layers:
            stage = {}                              # no block runs backward: nothing needs its rotary tables
    if stream_bits and (tr is None or tr.frozen_blocks < a.layers):   # a gradient goes back through the head
        head.update(fp32_stream.head_terms(a, t, tr, vocab, wide_stream=stream > w))
    working = max(sum(_bytes(full[k]).values()) for k in kinds) if recompute == "full" else 0
    walked = [backward_bits(local, t, w, attention, implementation, k, full[k], tr) for k in kinds] \
        if recompute == "full" and not megatron_full and not compile_adapters and not compile_blocks \
        and stream == w else [None]        # the walk's gradients are w wide: an fp32 stream keeps the summed moment
    if recompute == "op" or mods and mods != ("core_attn",):   # the re-run forwards rebuild what was not saved
        working = max(sum(_bytes(full[k]).values()) - sum(_bytes(blocks[k]).values()) for k in kinds)
        working = max(working, 0)
    sliding = sliding_layers(local, t, w, attention, hf, seq_len) if not repeat and (
        recompute not in CHECKPOINTED or every > 1 or megatron_full) else {}
    frozen = 0 if tr is None else tr.frozen_blocks
    live = layer_counts(a, min(frozen, a.layers), a.layers)      # blocks a gradient reaches
    if live["all"] == 0:
        first_delta = 0
    kept, checkpointed = live, 0
    if every > 1:
        kept, checkpointed = split_checkpointed(a, range(min(frozen, a.layers), a.layers), every)
        kept = kept._asdict()
    full_sizes = {k: sum(_bytes(full[k]).values()) for k in kinds} if recompute == "full" else {}
    if megatron_full:                              # the model as one chunk (step/shape.py: chunk by chunk)
        kept, checkpointed, working = megatron_full_blocks(a, range(a.layers), recompute_method,
                                                           recompute_num_layers, full_sizes)
        kept = kept._asdict()
    graph_held = graph_held_bytes(blocks, held, tr, kept) if held else 0
    return ActivationReport(_bytes(blocks["dense"]), _bytes(embed), _bytes(head), kept["dense"], working,
                            _bytes(stage), _bytes(blocks["moe"]) if a.experts else {}, kept["moe"],
                            _bytes(sliding), kept["sliding"], first_delta, frozen,
                            _bytes(checkpoint) if every > 1 or megatron_full else {}, checkpointed,
                            full_sizes, mtp_rebuilt, None if None in walked else -(-max(walked) // 8),
                            _bytes(full[max(kinds, key=full_sizes.get)]) if full_sizes else {}, graph_held)
