"""Parameter counts of the presets against published counts; largest layer; config.json import."""

import json

import pytest

from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import largest_layer, param_count
from zerocalc.model.hf_config import ConfigError, architecture_from_config
from zerocalc.model.presets import MODEL_PRESETS, PUBLISHED_DIFFERENCES, ROUNDED
from zerocalc.scenario import FieldError

EXACT = [name for name in MODEL_PRESETS if name not in ROUNDED]


def test_there_are_at_least_30_presets():
    assert len(MODEL_PRESETS) >= 30


@pytest.mark.parametrize("name", EXACT)
def test_preset_parameter_count_equals_the_published_count(name):
    # Published counts: the Hugging Face checkpoints' unique-tensor totals for the repository named in the
    # preset's third field (zerocalc/model/presets.py), e.g. 124,439,808 for openai-community/gpt2 and 6,738,415,616 for
    # meta-llama/Llama-2-7b-hf (the Hub's safetensors parameter total); a checkpoint that stores more than the
    # model (a tied head stored twice, a vision tower) differs by exactly that, named in PUBLISHED_DIFFERENCES.
    arch, published, source = MODEL_PRESETS[name]
    extra, _why = PUBLISHED_DIFFERENCES.get(name, (0, ""))
    assert param_count(arch) + extra == published, source


@pytest.mark.parametrize("name", sorted(ROUNDED))
def test_rounded_published_counts_match_to_their_digits(name):
    # DeepSeek-V3 (671B), gpt-oss (20.91B, 116.83B), GPT-3 (175B): only rounded totals are published.
    arch, published, _ = MODEL_PRESETS[name]
    digits = ROUNDED[name]
    assert f"{param_count(arch):.{digits}g}" == f"{published:.{digits}g}"


def test_gpt3_matches_its_published_count_to_the_digits_published():
    # Brown et al. 2020, Table 2.1, publishes "175.0B"; the architecture (96 x 12288, vocab 50257, 2048 positions)
    # holds 174,604,259,328 parameters, which is 175B at the three significant digits the name carries.
    arch, _, _ = MODEL_PRESETS["gpt3-175b"]
    assert param_count(arch) == 174_604_259_328
    assert round(param_count(arch) / 1e9) == 175


def test_largest_layer_is_the_embedding_for_these_models():
    # DeepSpeed's model_to_params: the largest single module's own parameters; for GPT-2 that is wte (50257 x 768).
    assert largest_layer(MODEL_PRESETS["gpt2"][0]) == ("embed_tokens", 50257 * 768)
    assert largest_layer(MODEL_PRESETS["llama-3-8b"][0]) == ("embed_tokens", 128256 * 4096)


def test_largest_layer_can_be_an_mlp_projection():
    a = Architecture(layers=2, hidden=1024, heads=8, ffn=65536, vocab=1000, seq_len=128)
    assert largest_layer(a) == ("gate_proj", 1024 * 65536)


def test_grouped_query_attention_shrinks_k_and_v():
    mha = Architecture(layers=1, hidden=4096, heads=32, ffn=1, vocab=1, seq_len=1)
    gqa = Architecture(layers=1, hidden=4096, heads=32, kv_heads=8, ffn=1, vocab=1, seq_len=1)
    assert param_count(mha) - param_count(gqa) == 2 * 4096 * (4096 - 1024)


@pytest.mark.parametrize("field, value, allowed", [
    ("layers", 0, "an integer from 1"),
    ("heads", 7, "a divisor of hidden"),
    ("kv_heads", 5, "a divisor of heads"),
    ("norm", "batchnorm", "one of layernorm, rmsnorm"),
    ("activation", "swish", "one of gelu_new"),
    ("attn_dropout", 1.0, "a probability"),
])
def test_bad_architecture_fields_are_named(field, value, allowed):
    base = dict(layers=2, hidden=64, heads=8, ffn=256, vocab=100, seq_len=32)
    with pytest.raises(FieldError) as err:
        Architecture(**{**base, field: value})
    assert err.value.field == field and allowed in str(err.value)


LLAMA_2_7B_CONFIG = {  # meta-llama/Llama-2-7b-hf config.json (the fields that shape the model)
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
    "hidden_act": "silu", "tie_word_embeddings": False, "rms_norm_eps": 1e-05, "torch_dtype": "float16",
}


def test_config_json_import_reproduces_the_preset(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_2_7B_CONFIG))
    for source in (str(path), json.dumps(LLAMA_2_7B_CONFIG), LLAMA_2_7B_CONFIG):
        assert param_count(architecture_from_config(source)) == 6_738_415_616


def test_gpt2_config_honours_activation_and_dropout():
    arch = architecture_from_config({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                                     "vocab_size": 50257, "n_positions": 1024, "activation_function": "gelu",
                                     "attn_pdrop": 0.0, "resid_pdrop": 0.2, "embd_pdrop": 0.1})
    assert param_count(arch) == 124_439_808
    assert (arch.activation, arch.attn_dropout, arch.resid_dropout, arch.embd_dropout) == ("gelu", 0.0, 0.2, 0.1)


@pytest.mark.parametrize("source, key, allowed", [
    ("{not json", "config", "valid JSON"),
    ("[1, 2]", "config", "a JSON object"),
    ('{"model_type": "bert"}', "model_type", "one of gpt2, llama"),
    ('{"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 9}', "num_experts_per_tok",
     "an integer from 1 to the experts (8)"),
    ('{"model_type": "llama", "hidden_size": "4096"}', "hidden_size", "an integer from 1"),
    ('{"model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": -1}', "num_hidden_layers",
     "an integer from 1"),
    ('{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 8, "vocab_size": 10, "n_positions": 8, '
     '"attn_pdrop": NaN}', "attn_pdrop", "a probability"),
    ("/no/such/config.json", "config", "a path to a config.json"),
    ('{"model_type": "gpt2", "n_layer": ' + "9" * 5000 + "}", "config", "valid JSON"),
    ('{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 7, '
     '"intermediate_size": 8, "vocab_size": 9, "max_position_embeddings": 8}', "num_attention_heads",
     "a divisor of hidden"),
])
def test_malformed_or_unsupported_configs_are_refused_by_name(source, key, allowed):
    with pytest.raises(ConfigError) as err:
        architecture_from_config(source)
    assert err.value.field == key and allowed in str(err.value)


def test_oversized_config_is_refused_before_parsing():
    with pytest.raises(ConfigError) as err:
        architecture_from_config("{" + " " * 2_000_000 + "}")
    assert "at most 1,000,000" in str(err.value)
