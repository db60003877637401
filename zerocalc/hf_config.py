"""Import an Architecture from a Hugging Face config.json (a path or its text). No network, no code execution.

The JSON is parsed with json.loads and every field used is type- and range-checked; unknown model types and
features we cannot count exactly (mixture of experts, latent attention, biased output projections) are refused
with a message naming the field, never approximated silently.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .architecture import ACTIVATIONS, Architecture
from .scenario import FieldError, require_choice, require_int, require_probability

MAX_CONFIG_BYTES = 1_000_000
LLAMA_LIKE = ("llama", "mistral", "qwen2", "phi3")
SUPPORTED = ("gpt2",) + LLAMA_LIKE
UNSUPPORTED_KEYS = {  # key -> why we refuse it when set to a true value
    "num_local_experts": "mixture-of-experts models",
    "num_experts": "mixture-of-experts models",
    "n_routed_experts": "mixture-of-experts models",
    "kv_lora_rank": "multi-head latent attention",
    "mlp_bias": "biases on the MLP projections",
    "attention_bias": "biases on the attention projections",
}


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
    try:
        return _architecture(cfg)
    except ConfigError:
        raise
    except FieldError as exc:  # a combination Architecture refuses (heads not dividing hidden, ...)
        keys = CONFIG_KEYS["gpt2" if cfg.get("model_type") == "gpt2" else "llama"]
        raise ConfigError(keys.get(exc.field, exc.field), exc.value, exc.allowed) from None


def _architecture(cfg: dict) -> Architecture:
    model_type = cfg.get("model_type")
    require_choice("model_type", model_type, SUPPORTED, ConfigError)
    for key, what in UNSUPPORTED_KEYS.items():
        if cfg.get(key):
            raise ConfigError(key, cfg[key], f"absent, false or 0: {what} are not supported yet")
    if model_type == "gpt2":
        hidden = _int(cfg, "n_embd")
        ffn = cfg.get("n_inner") or 4 * hidden
        return Architecture(
            layers=_int(cfg, "n_layer"), hidden=hidden, heads=_int(cfg, "n_head"), ffn=_int({"n_inner": ffn}, "n_inner"),
            vocab=_int(cfg, "vocab_size"), seq_len=_int(cfg, "n_positions"), tied_embeddings=_tied(cfg, True),
            gated_mlp=False, norm="layernorm", bias=True, positions="learned", fused_qkv=True,
            activation=_activation(cfg, "activation_function", "gelu_new"), softmax_fp32=False,
            attn_dropout=_prob(cfg, "attn_pdrop"), resid_dropout=_prob(cfg, "resid_pdrop"),
            embd_dropout=_prob(cfg, "embd_pdrop"))
    heads = _int(cfg, "num_attention_heads")
    head_dim = cfg.get("head_dim")
    return Architecture(
        layers=_int(cfg, "num_hidden_layers"), hidden=_int(cfg, "hidden_size"), heads=heads,
        kv_heads=_int(cfg, "num_key_value_heads", heads), head_dim=None if head_dim is None else _int(cfg, "head_dim"),
        ffn=_int(cfg, "intermediate_size"), vocab=_int(cfg, "vocab_size"),
        seq_len=_int(cfg, "max_position_embeddings"), tied_embeddings=_tied(cfg, False), gated_mlp=True,
        norm="rmsnorm", qkv_bias=model_type == "qwen2", positions="rotary",
        fused_qkv=model_type == "phi3", fused_gate_up=model_type == "phi3",
        activation=_activation(cfg, "hidden_act", "silu"), softmax_fp32=True,
        attn_dropout=_prob(cfg, "attention_dropout"), resid_dropout=_prob(cfg, "resid_pdrop"),
        embd_dropout=_prob(cfg, "embd_pdrop"))
