"""Import an Architecture from a Hugging Face config.json (a path or its text). No network, no code execution.

The JSON is parsed with json.loads and every field used is type- and range-checked; the families it knows are a
table (hf_families.py: keys, the config classes' defaults, fixed traits); an unknown model type is refused with
the list of supported ones, never approximated.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..values import count, long_integer_refusal, number
from ..scenario import FieldError, require_choice, require_probability
from .architecture import ACTIVATIONS, ARCH_LIMITS, MOE_LIMITS, Architecture
from .families import FAMILIES, TEXT_CONFIG_WRAPPERS, WRAPPER_TIES

MAX_CONFIG_BYTES = 1_000_000
SUPPORTED = ("gpt2",) + tuple(FAMILIES) + tuple(TEXT_CONFIG_WRAPPERS)


class ConfigError(FieldError):
    """A config.json that cannot be read or counted; names the key and what is allowed."""


_JSON_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a number with a fraction or exponent"),
               (str, "a string"), (list, "a list"), (dict, "an object"), (type(None), "null"))


def json_type(value) -> str:
    """What a json.loads value is, in JSON's words (bool before int: True is an int in Python)."""
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def _refuse(key: str, value, allowed: str) -> ConfigError:
    """The refusal of a value read from the file: the key, the value, what is allowed and the value's JSON type,
    which the CLI and the page show too since they print the allowed text ("... (given: a string)")."""
    return ConfigError(key, value, f"{allowed} (given: {json_type(value)})")


def _check_int(key: str, value, lo: int, hi: int) -> int:
    """An integer config value within [lo, hi], or a ConfigError naming the key, the value, its type and the range
    (1e12 and 32.0 are JSON numbers but not integers; true is not 1): the importers' one typed reader."""
    return count(key, value, lo, hi, error=_refuse)


def _text(source) -> str:
    if isinstance(source, bytes):
        if len(source) > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{len(source):,} bytes", f"at most {MAX_CONFIG_BYTES:,} bytes")
        return source.decode("utf-8", errors="strict")
    text = str(source)
    if text.lstrip()[:1] in ("{", "["):  # JSON text, not a path
        return text
    path = Path(text)
    if not path.is_file():
        raise ConfigError("config", text, "a path to a config.json file, or its JSON text")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError("config", text, f"a file of at most {MAX_CONFIG_BYTES:,} bytes")
    return path.read_text(encoding="utf-8")


def parse_config(source) -> dict:
    try:
        text = _text(source)
    except UnicodeDecodeError:
        raise ConfigError("config", "(binary data)", "UTF-8 JSON text") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError("config", f"{len(text):,} characters", f"at most {MAX_CONFIG_BYTES:,}")
    try:
        data = json.loads(text, parse_constant=lambda c: math.nan)
    except json.JSONDecodeError as exc:
        raise ConfigError("config", "malformed JSON", f"valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    except ValueError:                     # an integer over Python's 4,300-digit limit: said in words
        raise (long_integer_refusal(ConfigError, text, "JSON") or ConfigError("config", "JSON that cannot be read",
                                                                              "valid JSON")) from None
    except RecursionError:
        raise ConfigError("config", "JSON nested too deep to read", "valid JSON") from None
    if not isinstance(data, dict):
        raise ConfigError("config", type(data).__name__, "a JSON object")
    return data


# How each Architecture field read from a config is checked: (kind, lowest allowed).
FIELD_KINDS = {
    "layers": ("int", 1), "hidden": ("int", 1), "heads": ("int", 1), "ffn": ("int", 1), "vocab": ("int", 1),
    "seq_len": ("int", 1), "kv_heads": ("int or null", 1), "head_dim": ("int or null", 1),
    "q_lora_rank": ("int, null = 0", 0), "kv_lora_rank": ("int", 0), "qk_nope_dim": ("int", 0),
    "qk_rope_dim": ("int", 0), "v_head_dim": ("int", 0), "experts": ("int", 0), "experts_per_token": ("int", 0),
    "expert_ffn": ("int", 1), "shared_expert_ffn": ("int", 0), "first_dense_layers": ("int", 0),
    "moe_step": ("int", 1), "n_shared_experts": ("int", 0),
    "resid_dropout": ("probability", None), "embd_dropout": ("probability", None),
    "tied_embeddings": ("bool", None), "attn_bias": ("bool", None), "mlp_bias": ("bool", None),
    "qkv_bias": ("bool", None), "norm_topk": ("bool", None),
    "attn_dropout": ("probability", None), "activation": ("activation", None),
    "attn_softcap": ("number or null", None), "final_softcap": ("number or null", None),
    "dense_layer_ids": ("int list or null", None), "sliding_window": ("int, null = 0", 0),
    "sliding_pattern": ("int", 1), "mtp_declared": ("int", 0),
    "parallel_residual": ("bool", None), "bias": ("bool", None), "qk_layernorm": ("bool", None),
    "multi_query": ("bool", None), "new_decoder_architecture": ("bool", None), "alibi": ("bool", None),
}
# Every integer field's range is the core's own (architecture.py ARCH_LIMITS, MOE_LIMITS), so a config value is
# refused here by its config key rather than later by the field's name; DeepSeek's n_shared_experts (a count of
# shared experts, not a field) is held to the routed experts' range.
INT_LIMITS = {**ARCH_LIMITS, **MOE_LIMITS, "n_shared_experts": MOE_LIMITS["experts"]}
_ABSENT = object()


def _int_range(field: str) -> tuple:
    kind, lo = FIELD_KINDS[field]
    low, high = INT_LIMITS[field]
    return max(lo, low), high


def _read(cfg: dict, key: str, field: str, default):
    """One config value, checked by its field's kind; the family default when the key is absent."""
    value = cfg.get(key, _ABSENT)
    if value is _ABSENT:
        return default
    kind = FIELD_KINDS[field][0]
    if kind == "bool":
        if not isinstance(value, bool):
            raise _refuse(key, value, "true or false")
        return value
    if kind == "probability":
        if value is None:
            return 0.0
        try:
            require_probability(key, value, ConfigError)
        except ConfigError as exc:
            raise _refuse(key, value, exc.allowed) from None
        return float(value)
    if kind == "activation":
        require_choice(key, value, ACTIVATIONS, ConfigError)
        return value
    if kind == "number or null":
        if value is None:
            return 0.0
        return number(key, value, 0, 1e6, what="a number from 0 to 1,000,000, or null", error=_refuse)
    if kind == "int list or null":
        if value is None:
            return ()
        if not isinstance(value, list) or len(value) > ARCH_LIMITS["layers"][1]:
            raise _refuse(key, value, "a list of layer indices, or null")
        for item in value:
            _check_int(f"{key}[]", item, 0, ARCH_LIMITS["layers"][1] - 1)
        return tuple(sorted(set(value)))
    if value is None and kind != "int":
        return 0 if kind == "int, null = 0" else None
    return _check_int(key, value, *_int_range(field))


def _family_architecture(cfg: dict, model_type: str) -> Architecture:
    family = FAMILIES[model_type]
    keys, defaults = family["keys"], family["defaults"]
    fields = dict(family["traits"])
    for field, key in keys.items():
        if key is None:                            # a common key this family's modelling code does not read
            continue
        value = _read(cfg, key, field, defaults.get(field, _ABSENT))
        if value is not _ABSENT:
            fields[field] = value
    if "n_shared_experts" in defaults:             # DeepSeek: shared experts of the routed experts' width
        shared = _read(cfg, "n_shared_experts", "n_shared_experts", defaults["n_shared_experts"]) or 0
        fields["shared_expert_ffn"] = shared * fields["expert_ffn"]
        if fields["shared_expert_ffn"] > MOE_LIMITS["shared_expert_ffn"][1]:
            raise ConfigError("n_shared_experts", shared, f"at most {MOE_LIMITS['shared_expert_ffn'][1]:,} "
                              f"shared-expert channels in all (n_shared_experts x moe_intermediate_size)")
    if fields.get("kv_heads") is None or fields.get("kv_lora_rank"):
        # MLA (modeling_deepseek_v3.py DeepseekV3Attention) builds K and V per query head from kv_b_proj;
        # num_key_value_heads (DeepseekV3Config default 128, whatever the heads) shapes no tensor.
        fields["kv_heads"] = fields["heads"]
    if "sliding_window" in keys:                   # only where the modelling code has local layers
        _sliding_from_layer_types(cfg, fields)
    if model_type == "phi3":
        fields["resid_dropout"] = _read(cfg, "resid_pdrop", "resid_dropout", 0.0)
        fields["embd_dropout"] = _read(cfg, "embd_pdrop", "embd_dropout", 0.0)
    if "rotary_pct" in defaults:
        fields["rotary_pct"] = _rotary_fraction(cfg, defaults["rotary_pct"])
    if model_type in _PARALLEL_BLOCKS:
        _PARALLEL_BLOCKS[model_type](cfg, fields)
    return Architecture(**fields)


def _rotary_fraction(cfg: dict, default: float) -> float:
    """The rotated share of each head: rope_parameters' partial_rotary_factor, else the legacy key the config
    class folds into it (GPTNeoXConfig: rotary_pct; PhiConfig, StableLmConfig: partial_rotary_factor)."""
    rope = cfg.get("rope_parameters")
    for key, value in ((("rope_parameters.partial_rotary_factor", rope.get("partial_rotary_factor"))
                        if isinstance(rope, dict) else ("", None)),
                       ("partial_rotary_factor", cfg.get("partial_rotary_factor")),
                       ("rotary_pct", cfg.get("rotary_pct"))):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise _refuse(key, value, "a fraction above 0 and at most 1")
        return float(value)
    return default


def _phi(cfg: dict, fields: dict) -> None:
    # PhiAttention: qk_layernorm adds LayerNorm(head_dim) for q and for k, shared by the heads
    if _read(cfg, "qk_layernorm", "qk_layernorm", False):
        fields["qk_norm"] = "head"


def _stablelm(cfg: dict, fields: dict) -> None:
    # StableLmDecoderLayer: with use_parallel_residual there is no post_attention_layernorm
    fields["shared_norm"] = fields.get("parallel_residual", False)
    if cfg.get("hidden_dropout") not in (None, 0, 0.0):   # one dropout, on the MLP output only: not modelled
        raise _refuse("hidden_dropout", cfg.get("hidden_dropout"), "0 (StableLM's MLP-only dropout is not modelled)")
    if _read(cfg, "qk_layernorm", "qk_layernorm", False):   # StableLmLayerNormPerHead: one LayerNorm per head
        raise ConfigError("qk_layernorm", True, "false (StableLM's per-head q/k LayerNorms are not modelled yet)")


def _falcon(cfg: dict, fields: dict) -> None:
    """FalconAttention / FalconDecoderLayer (transformers 5.24): the KV heads, the block's norms, the FFN width."""
    new = _read(cfg, "new_decoder_architecture", "new_decoder_architecture", False)
    if _read(cfg, "alibi", "alibi", False):
        raise ConfigError("alibi", True, "false (ALiBi Falcon, e.g. falcon-rw, is not modelled yet)")
    if new:
        fields["kv_heads"] = _read(cfg, "num_kv_heads", "kv_heads", None) or fields["heads"]
        fields["kv_expand"] = "split"
    elif _read(cfg, "multi_query", "multi_query", True):
        fields["kv_heads"] = 1
        fields["kv_expand"] = "broadcast"
    else:                                     # 3 x hidden_size, whatever num_kv_heads says
        fields["kv_heads"] = fields["heads"]
    ln = cfg.get("num_ln_in_parallel_attn")
    ln = (2 if new else 1) if ln is None else _check_int("num_ln_in_parallel_attn", ln, 1, 2)
    # parallel_attn with one norm (or the old architecture's input_layernorm) feeds attention and MLP both
    fields["shared_norm"] = fields["parallel_residual"] and (ln == 1 or not new)
    if new and not fields["parallel_residual"]:           # the new architecture adds the MLP to attention anyway
        raise ConfigError("parallel_attn", False, "true with new_decoder_architecture (not modelled otherwise)")
    ffn = cfg.get("ffn_hidden_size")
    fields["ffn"] = 4 * fields["hidden"] if ffn is None else _read(cfg, "ffn_hidden_size", "ffn", None)
    for key in ("hidden_dropout", "attention_dropout"):  # dropout_add around the residual: not modelled
        if cfg.get(key) not in (None, 0, 0.0):
            raise _refuse(key, cfg.get(key), "0 (Falcon's dropout_add is not modelled; every release has 0)")


_PARALLEL_BLOCKS = {"phi": _phi, "stablelm": _stablelm, "falcon": _falcon}


def _sliding_from_layer_types(cfg: dict, fields: dict) -> None:
    """An explicit layer_types list ("sliding_attention" / "full_attention", one per layer, as the config classes
    validate it: configuration_utils.layer_type_validation) sets the local-attention pattern: all local, or every
    p-th layer global; any other arrangement is refused rather than guessed. Families without local layers
    (Qwen2 / Qwen3 derive layer_types from use_sliding_window and max_window_layers, but their attention
    windows do not change a count) do not read it."""
    types = cfg.get("layer_types")
    if types is None:
        return
    if not isinstance(types, list) or not all(t in ("sliding_attention", "full_attention") for t in types):
        raise _refuse("layer_types", types, 'a list of "sliding_attention" / "full_attention", or null')
    if len(types) != fields["layers"]:
        raise ConfigError("layer_types", f"{len(types):,} entries",
                          f"one entry per layer (num_hidden_layers: {fields['layers']:,})")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    if not full:
        fields["sliding_pattern"] = 1
        return
    if len(full) == len(types):
        fields["sliding_window"] = 0
        return
    period = full[0] + 1
    if full != [i for i in range(len(types)) if (i + 1) % period == 0]:
        raise ConfigError("layer_types", "(an irregular pattern)", "all local, or every p-th layer global")
    fields["sliding_pattern"] = period


# Architecture field -> the config key that sets it, for messages about a combination the model refuses.
CONFIG_KEYS = {
    "gpt2": {"layers": "n_layer", "hidden": "n_embd", "heads": "n_head", "ffn": "n_inner", "vocab": "vocab_size",
             "seq_len": "n_positions", "tied_embeddings": "tie_word_embeddings",
             "activation": "activation_function", "attn_dropout": "attn_pdrop", "resid_dropout": "resid_pdrop",
             "embd_dropout": "embd_pdrop"},
    "llama": {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
              "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "ffn": "intermediate_size",
              "vocab": "vocab_size", "seq_len": "max_position_embeddings"},
}
# GPT2Config's defaults for absent keys (transformers 5.24 models/gpt2/configuration_gpt2.py); n_inner null
# means 4 x n_embd (GPT2Block: inner_dim = n_inner if not None else 4 * hidden_size).
GPT2_DEFAULTS = {"layers": 12, "hidden": 768, "heads": 12, "vocab": 50257, "seq_len": 1024,
                 "tied_embeddings": True, "activation": "gelu_new", "attn_dropout": 0.1, "resid_dropout": 0.1,
                 "embd_dropout": 0.1}


def _language_model(cfg: dict):
    """(model_type, config) of the language model: a multimodal wrapper's text_config, else the config itself."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):            # a list or mapping is never looked up (or hashed)
        raise _refuse("model_type", model_type, "one of " + ", ".join(SUPPORTED))
    if model_type not in TEXT_CONFIG_WRAPPERS:
        return model_type, cfg
    text = cfg.get("text_config")
    text = {} if text is None else text
    if not isinstance(text, dict):
        raise _refuse("text_config", text, "a JSON object")
    allowed = TEXT_CONFIG_WRAPPERS[model_type]
    text_type = text.get("model_type", allowed[0])
    require_choice("text_config.model_type", text_type, allowed, ConfigError)
    if model_type in WRAPPER_TIES:            # the wrapper's own flag ties the head
        text = {**text, "tie_word_embeddings": cfg.get("tie_word_embeddings", WRAPPER_TIES[model_type])}
    return text_type, {**text, "model_type": text_type}


def architecture_from_config(source) -> Architecture:
    """Architecture from a config.json path, its text, or an already parsed dict."""
    cfg = source if isinstance(source, dict) else parse_config(source)
    model_type, cfg = _language_model(cfg)
    require_choice("model_type", model_type, SUPPORTED, ConfigError)
    try:
        return _gpt2(cfg) if model_type == "gpt2" else _family_architecture(cfg, model_type)
    except ConfigError:
        raise
    except FieldError as exc:  # a combination Architecture refuses (heads not dividing hidden, ...)
        keys = CONFIG_KEYS["gpt2"] if model_type == "gpt2" else FAMILIES[model_type]["keys"]
        raise ConfigError(keys.get(exc.field) or exc.field, exc.value, exc.allowed) from None


def _gpt2(cfg: dict) -> Architecture:
    fields = {field: _read(cfg, key, field, GPT2_DEFAULTS[field])
              for field, key in CONFIG_KEYS["gpt2"].items() if field != "ffn"}
    ffn = None if cfg.get("n_inner") is None else _read(cfg, "n_inner", "ffn", None)
    return Architecture(
        **fields, ffn=4 * fields["hidden"] if ffn is None else ffn, gated_mlp=False, norm="layernorm", bias=True,
        positions="learned", fused_qkv=True, softmax_fp32=False)
