"""Megatron's activation recompute as data: --recompute-granularity selective --recompute-modules M1,M2... and
--recompute-granularity full --recompute-method uniform|block --recompute-num-layers N.

From megatron-core 0.16.1 (NVIDIA/Megatron-LM megatron/core; the venv's copy is that release):
- transformer_config.py: recompute_modules defaults to ["core_attn"]; the allowed names are RECOMPUTE_MODULES;
  mla_up_proj without multi-latent attention is refused; "selective always uses all layers".
- Two kinds of checkpoint (tensor_parallel/random.py): `checkpoint` (CheckpointFunction) saves the function's
  inputs and keeps its output; `CheckpointWithoutOutput` also frees its output's storage (resize_(0)) once the
  consumer ran, and rebuilds it from a gradient hook in backward. Inside either, nothing else is saved.
- Megatron's default GPT layer spec (gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec) fuses the
  pre-attention norm into linear_qkv and a dense block's pre-MLP norm into linear_fc1 (TE's LayerNormLinear), so
  "layernorm" finds a norm of its own only before latent attention and before an MoE layer
  (transformer_layer.py skips IdentityOp norms), and "mlp" checkpoints the fused norm with the MLP; latent
  attention's q/kv norms are fused into the up-projections. zerocalc's "megatron" implementation follows that
  spec; "huggingface" has every norm as a module of its own (Megatron's local spec has the same boundaries).
- full (transformer_block.py _checkpointed_forward, per TransformerBlock = one model chunk, a virtual stage under
  vpp): "uniform" runs the chunk's layers in consecutive groups of N, each one checkpoint (the group's input is
  kept; backward rebuilds the N layers at once); N must divide every chunk's layer count, since the last group
  indexes past the chunk otherwise (self.layers[index]); "block" checkpoints the chunk's first N layers one by
  one and keeps every activation of the others. uniform with N = 1 is zerocalc's full recompute.

Measured: the RECOMPUTE_MODULES rows on Hugging Face Llama, Qwen3-MoE and DeepSeek-V2-style blocks with
Megatron's own checkpoint functions at Megatron's module boundaries (tests/measure/megatron_recompute.py,
tests/test_megatron_recompute.py); the "megatron" implementation's fused-norm rules are from the spec's code.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

DEFAULT_MODULES = "core_attn"
FULL_METHODS = ("uniform", "block")


class RecomputeModule(NamedTuple):
    blocks: str          # where it applies: every block, dense (non-MoE) blocks, moe blocks, latent attention
    without_output: bool  # CheckpointWithoutOutput (output freed) rather than checkpoint (output kept)
    code: str            # where Megatron checkpoints it (megatron-core 0.16.1, megatron/core/transformer/)
    about: str


# In Megatron's own order (transformer_config.py recompute_modules docstring)
RECOMPUTE_MODULES = {
    "core_attn": RecomputeModule("every", False, "attention.py _checkpointed_attention_forward",
                                 "core attention (eager attention's s x s scores; zerocalc's selective)"),
    "moe_act": RecomputeModule("moe", True, "moe/experts.py TEGroupedMLP.forward (activation_checkpoint)",
                               "the routed experts' activation and its product"),
    "layernorm": RecomputeModule("every", True, "transformer_layer.py (input_layernorm / pre_mlp_layernorm)",
                                 "the norms before attention and before the MLP, where they are modules of their "
                                 "own"),
    "mla_up_proj": RecomputeModule("mla", True, "multi_latent_attention.py qkv_up_proj_and_rope_apply",
                                   "latent attention's q/kv up-projections and RoPE"),
    "mlp": RecomputeModule("dense", False, "transformer_layer.py _forward_mlp (recompute_mlp)",
                           "a dense block's MLP"),
    "moe": RecomputeModule("moe", False, "moe/moe_layer.py MoELayer.forward (moe_layer_recompute)",
                           "the whole MoE layer: router, dispatch, experts, shared experts"),
    "shared_experts": RecomputeModule("moe", False, "moe/moe_layer.py shared_experts_compute",
                                      "the shared experts"),
}
MODULES_HINT = ("a comma list of " + ", ".join(RECOMPUTE_MODULES)
                + " (Megatron's --recompute-modules; core_attn is zerocalc's selective)")
# The MoE part of a block's terms (step/moe.py names): what the "moe" checkpoint keeps none of but its input.
MOE_PREFIXES = ("moe input", "router ", "experts: ", "shared expert")


def parse_modules(text) -> Tuple[str, ...]:
    """The modules a --recompute-modules text names, in Megatron's order; ValueError naming what is wrong."""
    if not isinstance(text, str) or len(text) > 200:
        raise ValueError(MODULES_HINT)
    names = [m.strip() for m in text.replace(" ", ",").split(",") if m.strip()]
    unknown = [m for m in names if m not in RECOMPUTE_MODULES]
    if unknown or not names or len(set(names)) < len(names):
        raise ValueError(f"{', '.join(unknown) or 'an empty or repeated list'} in {text!r}: " + MODULES_HINT)
    return tuple(m for m in RECOMPUTE_MODULES if m in names)


def modules_text(text: str) -> str:
    """The canonical spelling (Megatron's order, commas): what the Workload stores."""
    return ",".join(parse_modules(text))


def check_modules(text: str, arch) -> str:
    """'' when Megatron accepts these modules for the architecture, else what it refuses."""
    mods = parse_modules(text)
    if "mla_up_proj" in mods and not arch.mla:
        return "mla_up_proj only with latent attention (Megatron refuses it otherwise)"
    if "layernorm" in mods and arch.sandwich_norm:
        return "layernorm not with sandwich norms (Megatron's layer has one norm before attention and the MLP)"
    return ""


def module_terms(terms: Dict[str, int], a, t, w: int, impl: str, kind: str, mods: Tuple[str, ...],
                 tp: int = 1, sequence_parallel: bool = False) -> Dict[str, int]:
    """One block's saved terms (activations._layer, core_attn already applied or not) under the other modules:
    each module drops what its checkpoint rebuilds and keeps the checkpoint's inputs. `a`: the rank's split."""
    out = dict(terms)
    megatron = impl == "megatron"
    ckpt = w * t.outside * a.hidden                # a block-width checkpoint input on this rank
    no_gather = t.linear_in == t.outside           # the linears save the norm's own output (no all-gather copy)
    norm_input = "layernorm" in mods and (not megatron or a.mla)
    norm_pre_mlp = "layernorm" in mods and (not megatron or kind == "moe")
    if norm_input:
        out.pop("input norm")
        out["input norm input (checkpoint)"] = ckpt
        if no_gather:
            out.pop("attention input", None)       # the discarded norm output the q/k/v (down) projections saved
    if norm_pre_mlp:
        out.pop("post-attention norm")
        out["pre-MLP norm input (checkpoint)"] = ckpt
        if no_gather:
            out.pop("mlp input" if kind == "dense" else "moe input", None)
    if "mla_up_proj" in mods and a.mla:
        _mla_up_proj(out, a, t, w, megatron, tp, sequence_parallel)
    if kind == "dense" and "mlp" in mods:
        for name in ("mlp activation", "mlp gate product", "mlp fc1 output", "mlp fc2 input"):
            out.pop(name, None)
        if megatron:                               # linear_fc1 is a LayerNormLinear: the norm is checkpointed too
            out.pop("post-attention norm", None)
            out.pop("mlp input", None)
            out["pre-MLP norm input (checkpoint)"] = ckpt
    if kind == "moe":
        if "moe" in mods:
            for name in [k for k in out if k.startswith(MOE_PREFIXES)]:
                out.pop(name)
            if not (norm_pre_mlp and no_gather):  # its input, unless that is the norm output layernorm discards
                out["moe input (checkpoint)"] = ckpt
        if "moe_act" in mods:
            out.pop("experts: activation and product", None)
        if "shared_experts" in mods:
            gate = () if megatron else ("shared expert gate",)     # HF's gate sits outside the shared expert
            for name in [k for k in out if k.startswith("shared expert") and k not in gate]:
                out.pop(name)
    return out


def _mla_up_proj(out: Dict[str, int], a, t, w: int, megatron: bool, tp: int, sequence_parallel: bool) -> None:
    """Queries, keys and values discarded; the checkpoint keeps q_compressed, the normed KV latent and k_pos_emb,
    a view of the KV down-projection's output, which so stays alive whole."""
    out.pop("q, k (with rotary part)")
    out.pop("kv up-projection output (v)")
    kv_combined = a.kv_lora_rank + a.qk_rope_dim
    if not megatron:
        out["kv down-projection output (k_pos_emb view)"] = w * t.linear_in * kv_combined
        return
    # TE spec: the q / kv norms are fused into the up-projections, so the checkpoint's inputs are the
    # down-projections' outputs themselves (kv_compressed and k_pos_emb both views of kv_combined).
    if a.q_lora_rank:
        out.pop("q down-projection norm")
        out.pop("q up-projection input")
        out["q down-projection output (checkpoint)"] = w * t.outside * a.q_lora_rank
    out.pop("kv down-projection norm")
    out.pop("kv up-projection input")
    out["kv down-projection output (checkpoint)"] = w * t.outside * kv_combined
    if tp > 1 and sequence_parallel:               # k_pos_emb all-gathered over the sequence: a copy of its own
        out["k_pos_emb (gathered, checkpoint)"] = w * t.inside * a.qk_rope_dim


def megatron_recompute_words(workload) -> str:
    """Megatron's modules or full-recompute method in words, when not its defaults (the recipe line)."""
    if workload.recompute_modules != DEFAULT_MODULES:
        return f" of Megatron's modules {workload.recompute_modules.replace(',', ', ')}"
    n = workload.recompute_num_layers
    if workload.recompute_method == "block":
        return f", Megatron's block method: the first {n} block{'s' if n > 1 else ''} of each chunk"
    return f", Megatron's uniform method: {n} blocks per checkpoint" if n > 1 else ""


def recomputed_elements(a, kind: str, text: str) -> int:
    """Weight elements per token (on the rank's split `a`) of the matmuls the modules re-run in backward: 2 FLOPs
    each. Norms, activations and RoPE are elementwise (left out); core attention is priced apart."""
    mods = parse_modules(text)
    h = a.hidden
    up = 3 if a.gated_mlp else 2
    n = 0
    if "mla_up_proj" in mods and a.mla:
        n += (a.q_lora_rank or h) * a.heads * a.qk_head_dim + a.kv_lora_rank * a.heads * (a.qk_nope_dim
                                                                                         + a.v_head_dim)
    if kind == "dense" and "mlp" in mods:
        n += up * h * a.ffn
    if kind == "moe" and "moe" in mods:
        n += h * a.experts + a.experts_per_token * up * h * a.moe_ffn
    if kind == "moe" and ("moe" in mods or "shared_experts" in mods):
        n += up * h * a.shared_expert_ffn
    return n


def full_groups(layers: int, method: str, num_layers: int) -> Tuple[int, int, int]:
    """One model chunk of `layers` blocks under full recompute: (checkpoints, blocks kept whole, blocks per
    checkpoint). uniform: layers / N checkpoints of N blocks each; block: the first N checkpointed one by one."""
    if method == "uniform":
        return layers // num_layers, 0, num_layers
    n = min(num_layers, layers)
    return n, layers - n, 1


def uniform_misfit(chunk_sizes, num_layers: int) -> str:
    """'' when N divides every chunk's layer count (as uniform needs), else the counts it does not divide."""
    bad = sorted({c for c in chunk_sizes if c % num_layers})
    return ", ".join(f"{c:,}" for c in bad)
