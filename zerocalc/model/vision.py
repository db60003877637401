"""Vision towers as data (issue 37): a vision-language model is its language model (an Architecture preset) plus a
tower of ViT / SigLIP-style blocks with their own width, depth, heads and patch size, and a projector or merger
that hands the image's tokens to the language model, into its text sequence or (Llama 3.2 Vision) through
cross-attention layers.

Each family is one VisionTower row; tower_tensors() lists its parameter tensors as the inventory's rows
(model/inventory.py ParamTensor, place "first": the tower runs before the first block, on the first pipeline
stage), so the tower's count, its largest module and its trainable part read one table. The tensor shapes follow
transformers 5.24 (models/qwen2_5_vl, qwen3_vl, siglip + gemma3, internvl, mllama modeling files) and are checked
against those classes built on the meta device (tests/test_vision_towers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Tuple

from ..scenario import FieldError, require_choice, require_int
from .tensor import ParamTensor

TOWER_LIMITS = {"lora_rank": (1, 4096), "depth": (1, 1_000), "width": (1, 10**5), "heads": (1, 10**4),
                "mlp": (1, 10**6),
                "patch": (1, 1_024), "temporal_patch": (1, 64), "channels": (1, 64), "positions": (0, 10**7),
                "merge": (1, 64), "out": (1, 10**6), "global_depth": (0, 1_000), "deepstack": (0, 1_000),
                "tiles": (0, 64), "aspect_ratios": (0, 1_000), "feature_layers": (0, 1_000),
                "cross_layers": (0, 1_000), "cross_head_dim": (0, 10**5), "extra_vocab": (0, 10**6)}
PROJECTORS = ("qwen2.5-vl", "qwen3-vl", "gemma3", "internvl", "mllama")
TOWER_NORMS = ("layernorm", "rmsnorm")
# The tower's training mode (the language model's is FineTune's): follow (the default: what the launchers do, resolved
# by tower_mode from the fine-tuning), trained, frozen (its blocks and embeddings; the projector trains),
# frozen-all (the tower and the projector), or LoRA on every linear of its blocks (peft LoraConfig's default rank 8;
# the projector trains).
TRAINING = ("follow", "trained", "frozen", "frozen-all", "lora")
# What the launchers do by default, read at pinned commits (docs/vision.md, "The tower follows the fine-tuning"):
# - LLaMA-Factory ff6d4d12 (hparams/finetuning_args.py): freeze_vision_tower True and freeze_multi_modal_projector
#   True for every finetuning_type; under LoRA, lora_target "all" leaves both out (model_utils/misc.py
#   find_all_linear_modules) and peft freezes the rest;
# - ms-swift 3602360a (swift/arguments/tuner_args.py): freeze_vit True, freeze_aligner True, in full training and
#   for all-linear LoRA targets;
# - peft 0.21.2 get_peft_model: everything but the adapters (and modules_to_save) is frozen, so under LoRA the
#   projector is frozen too; its "all-linear" does reach the tower's and the merger's linears (measured,
#   tests/test_vision_follow.py): that is an explicit choice here ("lora"), not the default;
# - a plain full fine-tune (the Trainer, TRL, axolotl without a freeze key) trains every parameter.
# So "follow" is: trained under full fine-tuning, frozen-all under freeze / LoRA / DoRA / QLoRA; a launcher's own
# keys (FineTune.vision_training, set by its importer) and an explicit tower mode win over it.
FOLLOW = {"full": "trained", "freeze": "frozen-all", "lora": "frozen-all", "dora": "frozen-all",
          "qlora": "frozen-all"}
# (tower frozen, projector frozen) as a launcher's keys say -> the tower's mode, for a full / freeze fine-tune and
# for LoRA (whose all-linear targets then reach the tower: LLaMA-Factory's lora_target all, ms-swift's all-linear)
LAUNCHER_MODES = {(True, True): ("frozen-all", "frozen-all"), (True, False): ("frozen", "frozen"),
                  (False, False): ("trained", "lora"), (False, True): ("trained", "lora")}


@dataclass(frozen=True)
class VisionTower:
    """One family's tower, merger / projector and where the image's tokens enter the language model."""

    projector: str            # PROJECTORS: the family, which fixes the merger's shape and the token rule
    depth: int                # tower blocks (Llama 3.2 Vision: its local encoder; global_depth more after it)
    width: int
    heads: int
    mlp: int                  # the block's MLP width
    patch: int                # px per patch side
    out: int                  # the language model's width (the projector's output)
    temporal_patch: int = 1   # frames per patch (Qwen: 2; an image is repeated to fill them)
    channels: int = 3
    norm: str = "layernorm"   # the blocks' norm (Qwen2.5-VL: RMSNorm without bias)
    gated_mlp: bool = False   # gate, up and down projections (Qwen2.5-VL)
    fused_qkv: bool = False   # one qkv Linear (Qwen)
    attn_bias: bool = True    # biases on q, k, v and the output projection
    patch_bias: bool = True   # a bias on the patch embedding's convolution
    positions: int = 0        # learned position rows (0: rotary only, Qwen2.5-VL)
    cls_token: bool = False   # a class embedding before the patches (InternVL, Llama 3.2 Vision)
    layer_scale: bool = False  # per-channel scales on both residual branches (InternVL lambda_1 / lambda_2)
    post_norm: bool = False   # a norm after the last block (SigLIP post_layernorm)
    merge: int = 1            # patches merged per side into one token (Qwen 2, InternVL pixel shuffle 2,
                              # Gemma 3's 4 x 4 average pool)
    deepstack: int = 0        # Qwen3-VL: mergers for intermediate blocks' features (deepstack_visual_indexes)
    # Llama 3.2 Vision (mllama): gated global blocks, tile and aspect-ratio embeddings, the features of
    # intermediate_layers_indices concatenated, and the text model's cross-attention layers
    global_depth: int = 0
    tiles: int = 0            # max_num_tiles
    aspect_ratios: int = 0    # len(supported_aspect_ratios): the aspect-ratio embeddings have one more row
    feature_layers: int = 0   # len(intermediate_layers_indices)
    cross_layers: int = 0     # the text model's cross-attention layers (each adds q/k norms and two gates)
    cross_head_dim: int = 0
    extra_vocab: int = 0      # embedding rows beyond the vocabulary (mllama: 8, its image and special tokens)
    training: str = "follow"  # TRAINING
    lora_rank: int = 8

    def __post_init__(self):
        require_choice("vision_training", self.training, TRAINING)
        require_choice("projector", self.projector, PROJECTORS)
        require_choice("norm", self.norm, TOWER_NORMS)
        for f, (lo, hi) in TOWER_LIMITS.items():
            require_int(f, getattr(self, f), lo, hi)
        if self.width % self.heads:
            raise FieldError("heads", self.heads, f"a divisor of the tower's width ({self.width:,})")


def _linear(module, out, inp, role, bias=True) -> list:
    rows = [ParamTensor(f"{module}.weight", module, (out, inp), role, "replicated", "first")]
    return rows + ([ParamTensor(f"{module}.bias", module, (out,), role, "replicated", "first")] if bias else [])


def _norm(module, width, t: VisionTower, role="vision", kind=None) -> list:
    names = ("weight", "bias") if (kind or t.norm) == "layernorm" else ("weight",)
    return [ParamTensor(f"{module}.{n}", module, (width,), role, "replicated", "first") for n in names]


def _param(name, module, shape, role="vision") -> ParamTensor:
    return ParamTensor(name, module, shape, role, "replicated", "first")


def _block(prefix: str, t: VisionTower) -> list:
    """One tower block: two norms, attention (fused or separate q/k/v, then the output projection), the MLP."""
    w, b = t.width, t.attn_bias
    rows = _norm(f"{prefix}norm1", w, t) + _norm(f"{prefix}norm2", w, t)
    if t.fused_qkv:
        rows += _linear(f"{prefix}attn.qkv", 3 * w, w, "vision", b)
    else:
        for name in ("q_proj", "k_proj", "v_proj"):
            rows += _linear(f"{prefix}attn.{name}", w, w, "vision", b)
    rows += _linear(f"{prefix}attn.proj", w, w, "vision", b)
    ups = ("gate_proj", "up_proj") if t.gated_mlp else ("fc1",)
    for name in ups:
        rows += _linear(f"{prefix}mlp.{name}", t.mlp, w, "vision")
    rows += _linear(f"{prefix}mlp.fc2", w, t.mlp, "vision")
    if t.layer_scale:
        rows += [_param(f"{prefix}lambda_{i}", f"{prefix}layer", (w,)) for i in (1, 2)]
    return rows


def _projector(t: VisionTower) -> list:
    """The merger / projector as each family builds it (role "projector")."""
    w, m2 = t.width, t.width * t.merge ** 2
    if t.projector == "qwen2.5-vl":           # Qwen2_5_VLPatchMerger: RMSNorm(w), Linear(4w, 4w), GELU, Linear(4w, out)
        return _norm("merger.ln_q", w, t, "projector") + _linear("merger.fc1", m2, m2, "projector") + \
            _linear("merger.fc2", t.out, m2, "projector")
    if t.projector == "qwen3-vl":             # Qwen3VLVisionPatchMerger; deepstack mergers norm the merged width
        rows = _norm("merger.norm", w, t, "projector") + _linear("merger.linear_fc1", m2, m2, "projector") + \
            _linear("merger.linear_fc2", t.out, m2, "projector")
        for i in range(t.deepstack):
            p = f"deepstack_merger_list.{i}"
            rows += _norm(f"{p}.norm", m2, t, "projector") + _linear(f"{p}.linear_fc1", m2, m2, "projector") + \
                _linear(f"{p}.linear_fc2", t.out, m2, "projector")
        return rows
    if t.projector == "gemma3":               # Gemma3MultiModalProjector: Gemma RMSNorm(w), a [w, out] weight
        return _norm("mm_soft_emb_norm", w, t, "projector", "rmsnorm") + \
            [_param("mm_input_projection_weight", "multi_modal_projector", (w, t.out), "projector")]
    if t.projector == "internvl":             # InternVLMultiModalProjector: LayerNorm(4w), Linear, GELU, Linear
        return _norm("multi_modal_projector.layer_norm", m2, t, "projector") + \
            _linear("multi_modal_projector.linear_1", t.out, m2, "projector") + \
            _linear("multi_modal_projector.linear_2", t.out, t.out, "projector")
    # mllama: Linear over the last hidden state and the intermediate layers' features, concatenated
    return _linear("multi_modal_projector", t.out, w * (1 + t.feature_layers), "projector")


def _ends(t: VisionTower) -> list:
    """Patch embedding, position tables, class token and the tower's own outer norms."""
    conv = (t.width, t.channels) + ((t.temporal_patch,) if t.temporal_patch > 1 else ()) + (t.patch, t.patch)
    rows = [_param("patch_embed.weight", "patch_embed", conv)]
    if t.patch_bias:
        rows.append(_param("patch_embed.bias", "patch_embed", (t.width,)))
    if t.cls_token:
        rows.append(_param("class_embedding", "embeddings", (t.width,)))
    if t.positions:
        rows.append(_param("position_embedding.weight", "position_embedding", (t.positions, t.width)))
    if t.post_norm:
        rows += _norm("post_layernorm", t.width, t)
    if t.tiles:                               # mllama: gated position, tile and pre/post tile embeddings, two norms
        ratios = t.aspect_ratios + 1
        rows += [_param("gated_positional_embedding.gate", "gated_positional_embedding", (1,)),
                 _param("tile_embedding.weight", "tile_embedding", (ratios, t.tiles * t.positions * t.width))]
        for name in ("pre_tile_positional_embedding", "post_tile_positional_embedding"):
            rows += [_param(f"{name}.gate", name, (1,)), _param(f"{name}.weight", name, (ratios, t.tiles * t.width))]
        rows += _norm("layernorm_pre", t.width, t) + _norm("layernorm_post", t.width, t)
    return rows


def _cross_attention(t: VisionTower) -> list:
    """What mllama's text model holds beyond a Llama decoder of the same depth (role "cross-attention"): each
    cross-attention layer's q/k norms and its two tanh gates (same q/k/v/o/MLP shapes as a self-attention layer,
    counted in the Architecture), and the embedding's extra rows. They are language-model tensors (trained as the
    fine-tuning says), placed with the embedding: 2,064 parameters, whatever pipeline stage holds their layers."""
    rows = []
    for i in range(t.cross_layers):
        p = f"cross_layers.{i}"
        rows += [ParamTensor(f"{p}.{n}", f"{p}.cross_attn", shape, "cross-attention", "replicated", "first")
                 for n, shape in (("q_norm.weight", (t.cross_head_dim,)), ("k_norm.weight", (t.cross_head_dim,)),
                                  ("cross_attn_attn_gate", (1,)), ("cross_attn_mlp_gate", (1,)))]
    if t.extra_vocab:
        rows.append(ParamTensor("embed_tokens.extra_rows", "embed_tokens", (t.extra_vocab, t.out), "embedding",
                                "vocab", "first"))
    return rows


def _adapters(rows: list, r: int) -> list:
    """LoRA on the tower: lora_A [r, in] and lora_B [out, r] beside every linear weight of its blocks."""
    out = []
    for t in rows:
        if t.name.endswith(".weight") and len(t.shape) == 2 and (".attn." in t.name or ".mlp." in t.name):
            o, i = t.shape
            out += [_param(f"{t.module}.lora_A.weight", f"{t.module}.lora_A", (r, i), "vision adapter"),
                    _param(f"{t.module}.lora_B.weight", f"{t.module}.lora_B", (o, r), "vision adapter")]
    return out


@lru_cache(maxsize=64)
def tower_tensors(t: VisionTower) -> Tuple[ParamTensor, ...]:
    """Every parameter tensor of the tower, its projector and the cross-attention extras, one row per tensor
    (block rows named "blocks.i." for every block: a tower is small enough to list whole); a frozen or LoRA tower's
    own rows are frozen (the projector still trains), a LoRA tower adds its adapters, frozen-all freezes the
    projector too. An unresolved "follow" lists the tower as trained (only counts read it: tower_mode resolves it
    wherever training matters)."""
    rows = _ends(t)
    for i in range(t.depth):
        rows += _block(f"blocks.{i}.", t)
    for i in range(t.global_depth):           # mllama's global blocks: tanh gates on attention and MLP
        p = f"global_blocks.{i}."
        rows += _block(p, t) + [_param(f"{p}gate_attn", f"{p}layer", (1,)), _param(f"{p}gate_ffn", f"{p}layer", (1,))]
    projector = _projector(t)
    if t.training not in ("trained", "follow"):
        adapters = _adapters(rows, t.lora_rank) if t.training == "lora" else []
        rows = [p._replace(trainable=False) for p in rows] + adapters
    if t.training == "frozen-all":
        projector = [p._replace(trainable=False) for p in projector]
    return tuple(rows + projector + _cross_attention(t))


def tower_mode(t: VisionTower, ft) -> str:
    """The tower's mode under the fine-tuning `ft` (a FineTune): its own when set, else the launcher's
    (ft.vision_training, from an importer), else what the launchers do by default (FOLLOW)."""
    if t.training != "follow":
        return t.training
    return ft.vision_training if ft.vision_training != "follow" else FOLLOW[ft.mode]


def resolved(t: VisionTower, ft) -> VisionTower:
    """The tower with its mode resolved under `ft` (tower_mode)."""
    mode = tower_mode(t, ft)
    return t if mode == t.training else replace(t, training=mode)


def launcher_mode(tower_frozen: bool, projector_frozen: bool, ft_mode: str) -> str:
    """The tower's mode a launcher's freeze keys give (LAUNCHER_MODES), under the fine-tuning mode it runs."""
    full, lora = LAUNCHER_MODES[(bool(tower_frozen), bool(projector_frozen))]
    return lora if ft_mode in ("lora", "dora", "qlora") else full


def _sum(t: VisionTower, roles) -> int:
    return sum(p.elements for p in tower_tensors(t) if p.role in roles)


def tower_counts(t: VisionTower) -> dict:
    """Parameters of the tower (blocks, embeddings, norms), the projector, and the text model's cross-attention
    extras; "vision" is all three (what a VLM adds to its language model)."""
    tower, projector = _sum(t, ("vision",)), _sum(t, ("projector",))
    extra, adapters = _sum(t, ("cross-attention", "embedding")), _sum(t, ("vision adapter",))
    return {"tower": tower, "projector": projector, "cross_attention": extra, "adapters": adapters,
            "vision": tower + projector + extra + adapters}


def largest_tower_module(t: VisionTower) -> tuple:
    """(module, parameters) of the tower's largest module: what ZeRO-3 gathers at once there."""
    mods = {}
    for p in tower_tensors(t):
        mods[p.module] = mods.get(p.module, 0) + p.elements
    name = max(mods, key=lambda k: mods[k])
    return name, mods[name]


_QWEN = dict(fused_qkv=True, temporal_patch=2, merge=2, channels=3)
_SIGLIP_SO400M = dict(projector="gemma3", depth=27, width=1152, heads=16, mlp=4304, patch=14,
                      positions=(896 // 14) ** 2, post_norm=True, merge=4)
# preset name (model/presets.py, the language model's row) -> its tower. Sources: each model's config.json, kept
# in tests/fixtures/vision_configs/ (Qwen, InternVL, Llama) and tests/fixtures/model_configs/ (Gemma 3) with
# where it was read.
TOWERS = MappingProxyType({
    "qwen2.5-vl-7b": VisionTower(projector="qwen2.5-vl", depth=32, width=1280, heads=16, mlp=3420, patch=14,
                                 out=3584, norm="rmsnorm", gated_mlp=True, patch_bias=False, **_QWEN),
    "qwen3-vl-8b": VisionTower(projector="qwen3-vl", depth=27, width=1152, heads=16, mlp=4304, patch=16, out=4096,
                               positions=2304, deepstack=3, **_QWEN),
    "gemma-3-4b": VisionTower(out=2560, **_SIGLIP_SO400M),
    "gemma-3-27b": VisionTower(out=5376, **_SIGLIP_SO400M),
    "internvl3-8b": VisionTower(projector="internvl", depth=24, width=1024, heads=16, mlp=4096, patch=14, out=3584,
                                positions=(448 // 14) ** 2 + 1, cls_token=True, layer_scale=True, merge=2),
    "llama-3.2-11b-vision": VisionTower(projector="mllama", depth=32, width=1280, heads=16, mlp=5120, patch=14,
                                        out=4096, attn_bias=False, patch_bias=False, positions=(560 // 14) ** 2 + 1,
                                        cls_token=True, global_depth=8, tiles=4, aspect_ratios=8, feature_layers=5,
                                        cross_layers=8, cross_head_dim=128, extra_vocab=8),
})
