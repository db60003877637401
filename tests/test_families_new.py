"""Issue 31 item 5, the families people train: Gemma 1 / 2, GPT-NeoX (Pythia), phi, StableLM and Falcon.

Parameter counts: the real configs (tests/fixtures/model_configs/, each with its source) are counted against
transformers 5.24's meta-device build in tests/test_model_families.py; here the variants those configs do not
reach (tied phi heads with their bias, Falcon's three attention layouts, StableLM's parallel residual, GPT-NeoX
without attention biases) and the refusals. Saved activations: tests/test_families_activations.py.
"""

import pytest

from zerocalc.model.architecture import Architecture
from zerocalc.model.hf_config import ConfigError, architecture_from_config
from zerocalc.model.inventory import counts, largest_layer
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.scenario import FieldError

TINY = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, vocab_size=1000)
VARIANTS = {
    # StableLM with use_parallel_residual: no post_attention_layernorm (StableLmDecoderLayer)
    "stablelm-parallel": dict(TINY, model_type="stablelm", intermediate_size=512, num_key_value_heads=2,
                              use_parallel_residual=True, use_qkv_bias=False),
    # phi with per-head q/k LayerNorms and a tied head: lm_head still owns its bias
    "phi-qk-layernorm-tied": dict(TINY, model_type="phi", intermediate_size=512, num_key_value_heads=2,
                                  qk_layernorm=True, tie_word_embeddings=True),
    # GPT-NeoX without attention biases, sequential residual (two norms either way), tied
    "neox-sequential": dict(TINY, model_type="gpt_neox", intermediate_size=512, attention_bias=False,
                            use_parallel_residual=False, tie_word_embeddings=True),
    # Falcon: 3 x hidden fused QKV (multi_query false), sequential with biases, an explicit ffn_hidden_size
    "falcon-mha-sequential-bias": dict(TINY, model_type="falcon", multi_query=False, parallel_attn=False, bias=True,
                                       ffn_hidden_size=300),
    # Falcon's new decoder architecture with one norm in parallel attention, untied
    "falcon-new-one-norm": dict(TINY, model_type="falcon", new_decoder_architecture=True, num_kv_heads=2,
                                num_ln_in_parallel_attn=1, tie_word_embeddings=False),
    # ... and with its default two (ln_attn, ln_mlp), as Falcon-40B
    "falcon-new-two-norms": dict(TINY, model_type="falcon", new_decoder_architecture=True, num_kv_heads=4),
    # multi_query false is 3 x hidden whatever num_kv_heads says (FalconAttention)
    "falcon-mha-ignores-kv": dict(TINY, model_type="falcon", multi_query=False, num_kv_heads=2),
    "gemma-mqa": dict(TINY, model_type="gemma", intermediate_size=512, num_key_value_heads=1, head_dim=64),
}


def test_family_traits_read_from_the_configs():
    pythia = architecture_from_config({"model_type": "gpt_neox", "rotary_pct": 0.25})
    assert (pythia.parallel_residual, pythia.shared_norm, pythia.fused_qkv, pythia.attn_bias) == (True, False, True,
                                                                                                  True)
    phi = architecture_from_config({"model_type": "phi", "partial_rotary_factor": 0.4})
    assert (phi.parallel_residual, phi.shared_norm, phi.head_bias, phi.rotary_pct) == (True, True, True, 0.4)
    falcon = architecture_from_config({"model_type": "falcon"})          # FalconConfig's defaults: Falcon-7B
    assert (falcon.n_kv_heads, falcon.ffn, falcon.shared_norm) == (1, 4 * 4544, True)
    assert architecture_from_config({"model_type": "falcon", "new_decoder_architecture": True,
                                     "num_attention_heads": 64, "num_kv_heads": 8}).shared_norm is False
    with pytest.raises(ConfigError) as err:        # a field the family derives is named as the Architecture's
        architecture_from_config({"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 8})
    assert err.value.field == "kv_heads" and "a divisor of heads (71)" in err.value.allowed
    # rope_parameters' partial_rotary_factor wins over the legacy key, as GPTNeoXConfig reads them
    both = {"model_type": "gpt_neox", "rotary_pct": 0.5, "rope_parameters": {"partial_rotary_factor": 0.25}}
    assert architecture_from_config(both).rotary_pct == 0.25
    assert architecture_from_config({"model_type": "stablelm"}).rotary_pct == 0.25


@pytest.mark.parametrize("cfg, key", [
    ({"model_type": "falcon", "alibi": True}, "alibi"),
    ({"model_type": "falcon", "hidden_dropout": 0.1}, "hidden_dropout"),
    ({"model_type": "falcon", "new_decoder_architecture": True, "parallel_attn": False}, "parallel_attn"),
    ({"model_type": "falcon", "num_ln_in_parallel_attn": 3}, "num_ln_in_parallel_attn"),
    ({"model_type": "stablelm", "qk_layernorm": True}, "qk_layernorm"),
    ({"model_type": "gpt_neox", "rotary_pct": 0}, "rotary_pct"),
    ({"model_type": "phi", "rope_parameters": {"partial_rotary_factor": "half"}},
     "rope_parameters.partial_rotary_factor"),
    ({"model_type": "gpt_neox", "use_parallel_residual": "yes"}, "use_parallel_residual"),
])
def test_what_is_not_modelled_is_refused_by_its_key(cfg, key):
    with pytest.raises(ConfigError) as err:
        architecture_from_config(cfg)
    assert err.value.field == key


def test_architecture_refuses_a_shared_norm_without_parallel_blocks():
    with pytest.raises(FieldError) as err:
        Architecture(layers=2, hidden=64, heads=4, ffn=128, vocab=100, seq_len=64, shared_norm=True)
    assert err.value.field == "shared_norm"
    with pytest.raises(FieldError) as err:
        Architecture(layers=2, hidden=64, heads=4, ffn=128, vocab=100, seq_len=64, rotary_pct=1.5)
    assert err.value.field == "rotary_pct"


def test_presets_of_the_new_families_are_listed():
    for name in ("gemma-2b", "gemma-7b", "gemma-2-2b", "gemma-2-9b", "gemma-2-27b", "pythia-1b", "pythia-6.9b",
                 "pythia-12b", "phi-1_5", "phi-2", "stablelm-2-1_6b", "falcon-7b"):
        assert name in MODEL_PRESETS


torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
from tests.measure.meta_counts import meta_counts  # noqa: E402


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants_count_as_transformers_builds_them(name):
    cfg = VARIANTS[name]
    arch = architecture_from_config(cfg)
    built = meta_counts(cfg)
    assert counts(arch)["params"] == built["params"]
    assert largest_layer(arch)[1] == built["largest_module"]["params"], (largest_layer(arch), built["largest_module"])
