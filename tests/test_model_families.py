"""Today's model families from their real config.json files (tests/fixtures/model_configs/, each with the source it
was copied from): zerocalc's counts equal what transformers builds from the same config on the meta device.

For every fixture and every preset: total parameters, expert and dense parameters, active parameters per token
(dense + shared experts + routers + top-k / E of each MoE block's routed experts) and the largest single module
(what ZeRO-3 gathers at once: for fused 3-D experts, every expert of a block), from tests/measure/meta_counts.py.
Needs torch and transformers (requirements-validation.txt); CI installs them.
"""

import json
from pathlib import Path

import pytest

from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import counts, largest_layer
from zerocalc.model.hf_config import SUPPORTED, ConfigError, architecture_from_config
from zerocalc.model.presets import MODEL_PRESETS

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "model_configs"
CONFIGS = sorted(p.stem for p in FIXTURES.glob("*.json") if not p.name.endswith(".source.json"))


def fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_every_fixture_names_its_source():
    for name in CONFIGS:
        source = json.loads((FIXTURES / f"{name}.source.json").read_text())
        assert source["repo"] and source["where_found"], name


@pytest.mark.parametrize("name", [n for n in CONFIGS if n in MODEL_PRESETS])
def test_presets_are_their_config_json(name):
    # The preset's fields are what the importer reads from the real config.json (a context length aside: some
    # presets keep the shorter one the model was published with).
    preset = MODEL_PRESETS[name][0]
    imported = architecture_from_config(fixture(name))
    assert counts(preset) == counts(imported) and largest_layer(preset) == largest_layer(imported)


def test_unknown_model_types_list_what_is_supported():
    with pytest.raises(ConfigError) as err:
        architecture_from_config({"model_type": "mamba", "hidden_size": 8})
    assert err.value.field == "model_type" and "deepseek_v3" in err.value.allowed and "gemma3" in err.value.allowed
    assert set(SUPPORTED) >= {"mixtral", "qwen3", "qwen3_moe", "qwen2_moe", "deepseek_v2", "deepseek_v3", "gpt_oss",
                              "olmoe", "olmo2", "gemma2", "gemma3", "gemma3_text", "phi3", "llama"}


def test_an_explicit_null_q_lora_rank_is_not_an_absent_one():
    # STACK-NOTES: some public DeepSeek-V2 configs drop "q_lora_rank": null; transformers then defaults it to 1536.
    cfg = fixture("deepseek-v2-lite")
    assert cfg["q_lora_rank"] is None
    explicit = architecture_from_config(cfg)
    dropped = architecture_from_config({k: v for k, v in cfg.items() if k != "q_lora_rank"})
    assert explicit.q_lora_rank == 0 and dropped.q_lora_rank == 1536
    assert counts(dropped)["params"] > counts(explicit)["params"]


@pytest.mark.parametrize("key, value, allowed", [
    ("num_experts_per_tok", 0, "an integer from 1"),
    ("num_local_experts", -1, "an integer from 0"),
    ("mlp_only_layers", "all", "a list of layer indices"),
    ("final_logit_softcapping", "30", "a number from 0"),
])
def test_bad_moe_keys_are_named(key, value, allowed):
    cfg = {"model_type": "mixtral" if key != "final_logit_softcapping" else "gemma2", "num_local_experts": 8,
           "num_experts_per_tok": 2, key: value}
    if key == "mlp_only_layers":
        cfg["model_type"] = "qwen3_moe"
    with pytest.raises(ConfigError) as err:
        architecture_from_config(cfg)
    assert err.value.field == key and allowed in err.value.allowed


torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
from tests.measure.meta_counts import meta_counts  # noqa: E402


def preset_config(arch: Architecture) -> dict:
    """A transformers config for a preset without a fixture (the existing dense families)."""
    if arch.positions == "learned":
        return dict(model_type="gpt2", n_layer=arch.layers, n_embd=arch.hidden, n_head=arch.heads, n_inner=arch.ffn,
                    vocab_size=arch.vocab, n_positions=arch.seq_len, tie_word_embeddings=arch.tied_embeddings)
    model_type = "phi3" if arch.fused_qkv else ("qwen2" if arch.qkv_bias else "llama")
    return dict(model_type=model_type, num_hidden_layers=arch.layers, hidden_size=arch.hidden,
                num_attention_heads=arch.heads, num_key_value_heads=arch.n_kv_heads, intermediate_size=arch.ffn,
                vocab_size=arch.vocab, max_position_embeddings=arch.seq_len, tie_word_embeddings=arch.tied_embeddings,
                **({"head_dim": arch.head_dim} if arch.head_dim else {}))


CASES = [("fixture", n) for n in CONFIGS] + [("preset", n) for n in MODEL_PRESETS if n not in CONFIGS]


@pytest.mark.parametrize("kind, name", CASES, ids=[f"{k}:{n}" for k, n in CASES])
def test_counts_equal_what_transformers_builds_on_the_meta_device(kind, name):
    cfg = fixture(name) if kind == "fixture" else preset_config(MODEL_PRESETS[name][0])
    assert_counts_match_the_meta_device(cfg)


def assert_counts_match_the_meta_device(cfg) -> None:
    """Total, expert, dense and active parameters and the largest module equal transformers' meta-device build."""
    arch = architecture_from_config(cfg)
    built = meta_counts(cfg)
    ours = counts(arch)
    assert ours["params"] == built["params"]
    assert ours["expert_params"] == built["expert_params"]
    assert ours["dense_params"] == built["params"] - built["expert_params"]
    assert ours["active_params"] == built["active_params"]
    module, size = largest_layer(arch)
    assert size == built["largest_module"]["params"], (module, built["largest_module"])
