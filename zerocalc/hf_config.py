"""Import an Architecture from a Hugging Face config.json (a path or its text). No network, no code execution.

The JSON is parsed with json.loads and every field used is type- and range-checked; the families it knows are a
table (hf_families.py: keys, the config classes' defaults, fixed traits); an unknown model type is refused with
the list of supported ones, never approximated.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .architecture import ACTIVATIONS, Architecture
from .hf_families import FAMILIES, TEXT_CONFIG_WRAPPERS
from .scenario import FieldError, require_choice, require_int, require_probability

MAX_CONFIG_BYTES = 1_000_000
SUPPORTED = ("gpt2",) + tuple(FAMILIES) + tuple(TEXT_CONFIG_WRAPPERS)


class ConfigError(FieldError):
    """A config.json that cannot be read or counted; names the key and what is allowed."""


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
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, integers over Python's 4300-digit limit
        raise ConfigError("config", "malformed JSON", f"valid JSON ({exc.__class__.__name__}: "
                                                      f"{str(exc)[:200]})") from None
    if not isinstance(data, dict):
        raise ConfigError("config", type(data).__name__, "a JSON object")
    return data


def _int(cfg: dict, key: str, default=None) -> int:
    value = cfg.get(key, default)
    require_int(key, value, 1, 10**18, ConfigError)
    return value


def _prob(cfg: dict, key: str) -> float:
    value = cfg.get(key, 0.0)
    if value is None:
        return 0.0
    require_probability(key, value, ConfigError)
    return float(value)


def _activation(cfg: dict, key: str, default: str) -> str:
    value = cfg.get(key, default)
    require_choice(key, value, ACTIVATIONS, ConfigError)
    return value


def _tied(cfg: dict, default: bool) -> bool:
    value = cfg.get("tie_word_embeddings", default)
    if not isinstance(value, bool):
        raise ConfigError("tie_word_embeddings", value, "true or false")
    return value


# How each Architecture field read from a config is checked: (kind, lowest allowed).
FIELD_KINDS = {
    "layers": ("int", 1), "hidden": ("int", 1), "heads": ("int", 1), "ffn": ("int", 1), "vocab": ("int", 1),
    "seq_len": ("int", 1), "kv_heads": ("int or null", 1), "head_dim": ("int or null", 1),
    "q_lora_rank": ("int, null = 0", 0), "kv_lora_rank": ("int", 0), "qk_nope_dim": ("int", 0),
    "qk_rope_dim": ("int", 0), "v_head_dim": ("int", 0), "experts": ("int", 0), "experts_per_token": ("int", 0),
    "expert_ffn": ("int", 0), "shared_expert_ffn": ("int", 0), "first_dense_layers": ("int", 0),
    "moe_step": ("int", 1), "n_shared_experts": ("int", 0),
    "tied_embeddings": ("bool", None), "attn_bias": ("bool", None), "mlp_bias": ("bool", None),
    "qkv_bias": ("bool", None), "norm_topk": ("bool", None),
    "attn_dropout": ("probability", None), "activation": ("activation", None),
    "attn_softcap": ("number or null", None), "final_softcap": ("number or null", None),
    "dense_layer_ids": ("int list or null", None), "sliding_window": ("int, null = 0", 0),
    "sliding_pattern": ("int", 1),
}
_ABSENT = object()


def _read(cfg: dict, key: str, field: str, default):
    """One config value, checked by its field's kind; the family default when the key is absent."""
    value = cfg.get(key, _ABSENT)
    if value is _ABSENT:
        return default
    kind, lo = FIELD_KINDS[field]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(key, value, "true or false")
        return value
    if kind == "probability":
        if value is None:
            return 0.0
        require_probability(key, value, ConfigError)
        return float(value)
    if kind == "activation":
        require_choice(key, value, ACTIVATIONS, ConfigError)
        return value
    if kind == "number or null":
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
            raise ConfigError(key, value, "a number from 0 to 1,000,000, or null")
        return float(value)
    if kind == "int list or null":
        if value is None:
            return ()
        if not isinstance(value, list) or len(value) > 10_000:
            raise ConfigError(key, value, "a list of layer indices, or null")
        for item in value:
            require_int(key, item, 0, 10**6, ConfigError)
        return tuple(sorted(set(value)))
    if value is None and kind != "int":
        return 0 if kind == "int, null = 0" else None
    require_int(key, value, lo, 10**18, ConfigError)
    return value


def _family_architecture(cfg: dict, model_type: str) -> Architecture:
    family = FAMILIES[model_type]
    keys, defaults = family["keys"], family["defaults"]
    fields = dict(family["traits"])
    for field, key in keys.items():
        value = _read(cfg, key, field, defaults.get(field, _ABSENT))
        if value is not _ABSENT:
            fields[field] = value
    if "n_shared_experts" in defaults:             # DeepSeek: shared experts of the routed experts' width
        shared = _read(cfg, "n_shared_experts", "n_shared_experts", defaults["n_shared_experts"])
        fields["shared_expert_ffn"] = (shared or 0) * fields["expert_ffn"]
    if fields.get("kv_heads") is None:
        fields["kv_heads"] = fields["heads"]
    _sliding_from_layer_types(cfg, fields)
    if model_type == "phi3":
        fields["resid_dropout"] = _read(cfg, "resid_pdrop", "attn_dropout", 0.0)
        fields["embd_dropout"] = _read(cfg, "embd_pdrop", "attn_dropout", 0.0)
    return Architecture(**fields)


def _sliding_from_layer_types(cfg: dict, fields: dict) -> None:
    """An explicit layer_types list ("sliding_attention" / "full_attention") sets the local-attention pattern:
    all local, or every p-th layer global; any other arrangement is refused rather than guessed."""
    types = cfg.get("layer_types")
    if types is None:
        return
    if not isinstance(types, list) or not all(t in ("sliding_attention", "full_attention") for t in types):
        raise ConfigError("layer_types", types, 'a list of "sliding_attention" / "full_attention", or null')
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
def _sliding_from_layer_types(cfg: dict, fields: dict) -> None:
    """An explicit layer_types list ("sliding_attention" / "full_attention") sets the local-attention pattern:
    all local, or every p-th layer global; any other arrangement is refused rather than guessed."""
    types = cfg.get("layer_types")
    if types is None:
        return
    if not isinstance(types, list) or not all(t in ("sliding_attention", "full_attention") for t in types):
        raise ConfigError("layer_types", types, 'a list of "sliding_attention" / "full_attention", or null')
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
             "seq_len": "n_positions"},
    "llama": {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
              "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "ffn": "intermediate_size",
              "vocab": "vocab_size", "seq_len": "max_position_embeddings"},
}


def architecture_from_config(source) -> Architecture:
    """Architecture from a config.json path, its text, or an already parsed dict."""
    cfg = source if isinstance(source, dict) else parse_config(source)
    model_type = cfg.get("model_type")
    if model_type in TEXT_CONFIG_WRAPPERS:                     # a multimodal model: its language model
        text = cfg.get("text_config") or {}
        if not isinstance(text, dict):
            raise ConfigError("text_config", type(text).__name__, "a JSON object")
        model_type, cfg = TEXT_CONFIG_WRAPPERS[model_type], {**text, "model_type": TEXT_CONFIG_WRAPPERS[model_type]}
    require_choice("model_type", model_type, SUPPORTED, ConfigError)
    try:
        return _gpt2(cfg) if model_type == "gpt2" else _family_architecture(cfg, model_type)
    except ConfigError:
        raise
    except FieldError as exc:  # a combination Architecture refuses (heads not dividing hidden, ...)
        keys = CONFIG_KEYS["gpt2"] if model_type == "gpt2" else FAMILIES[model_type]["keys"]
        raise ConfigError(keys.get(exc.field, exc.field), exc.value, exc.allowed) from None


def _gpt2(cfg: dict) -> Architecture:
    hidden = _int(cfg, "n_embd")
    ffn = cfg.get("n_inner") or 4 * hidden
    return Architecture(
        layers=_int(cfg, "n_layer"), hidden=hidden, heads=_int(cfg, "n_head"), ffn=_int({"n_inner": ffn}, "n_inner"),
        vocab=_int(cfg, "vocab_size"), seq_len=_int(cfg, "n_positions"), tied_embeddings=_tied(cfg, True),
        gated_mlp=False, norm="layernorm", bias=True, positions="learned", fused_qkv=True,
        activation=_activation(cfg, "activation_function", "gelu_new"), softmax_fp32=False,
        attn_dropout=_prob(cfg, "attn_pdrop"), resid_dropout=_prob(cfg, "resid_pdrop"),
        embd_dropout=_prob(cfg, "embd_pdrop"))
