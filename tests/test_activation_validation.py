"""The activation model against real Hugging Face models: bytes saved for backward, measured on CPU.

Builds GPT-2, Llama (MHA and GQA), Qwen2 and Phi-3 models from configs with random weights, measures every
tensor autograd saves (tests/measure/saved_tensors.py, deduplicated by storage, CUDA's dropout and attention
kernels accounted for explicitly there) and checks zerocalc's prediction within 10% for the layers with their
embedding end, and for the output end. Needs torch and transformers (requirements-validation.txt); skipped with
a reason when torch is absent, and CI installs both.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")

from tests.measure.saved_tensors import build_from_config, measure  # noqa: E402
from zerocalc.step.activations import activations  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402

TOLERANCE = 0.10
L, H, HEADS, FFN, VOCAB, SEQ, BATCH = 2, 256, 8, 1024, 1000, 128, 2


def gpt2(p=0.0, act="gelu_new"):
    return dict(model_type="gpt2", n_layer=L, n_embd=H, n_head=HEADS, n_inner=FFN, vocab_size=VOCAB, n_positions=SEQ,
                attn_pdrop=p, resid_pdrop=p, embd_pdrop=p, activation_function=act)


def llama(p=0.0, kv=HEADS, model_type="llama"):
    return dict(model_type=model_type, num_hidden_layers=L, hidden_size=H, num_attention_heads=HEADS,
                num_key_value_heads=kv, intermediate_size=FFN, vocab_size=VOCAB, max_position_embeddings=SEQ,
                attention_dropout=p, pad_token_id=0)


DTYPES = {"fp32": (torch.float32, 32), "bf16": (torch.bfloat16, 16)}
CASES = [  # (id, config, dtype, attention implementation, gradient checkpointing)
    ("gpt2-fp32-eager", gpt2(), "fp32", "eager", False),
    ("gpt2-fp32-eager-dropout", gpt2(0.1), "fp32", "eager", False),
    ("gpt2-bf16-eager-dropout", gpt2(0.1), "bf16", "eager", False),
    ("gpt2-fp32-sdpa", gpt2(), "fp32", "sdpa", False),
    ("gpt2-bf16-sdpa-dropout", gpt2(0.1), "bf16", "sdpa", False),
    ("gpt2-bf16-eager-checkpointed", gpt2(0.1), "bf16", "eager", True),
    ("gpt2-fp32-sdpa-checkpointed", gpt2(), "fp32", "sdpa", True),
    ("gpt2-bf16-eager-gelu", gpt2(act="gelu"), "bf16", "eager", False),
    ("gpt2-fp32-sdpa-relu", gpt2(act="relu"), "fp32", "sdpa", False),
    ("llama-fp32-eager", llama(), "fp32", "eager", False),
    ("llama-bf16-eager", llama(), "bf16", "eager", False),
    ("llama-bf16-eager-dropout", llama(0.1), "bf16", "eager", False),
    ("llama-fp32-sdpa", llama(), "fp32", "sdpa", False),
    ("llama-bf16-sdpa", llama(), "bf16", "sdpa", False),
    ("llama-bf16-eager-checkpointed", llama(), "bf16", "eager", True),
    ("llama-bf16-sdpa-checkpointed", llama(), "bf16", "sdpa", True),
    ("llama-gqa-bf16-eager", llama(kv=2), "bf16", "eager", False),
    ("llama-gqa-bf16-sdpa", llama(kv=2), "bf16", "sdpa", False),
    ("qwen2-gqa-bf16-sdpa", llama(kv=2, model_type="qwen2"), "bf16", "sdpa", False),
    ("phi3-bf16-eager", llama(model_type="phi3"), "bf16", "eager", False),
]


@pytest.mark.parametrize("config, dtype, attention, checkpointing", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_prediction_within_10_percent_of_measurement(config, dtype, attention, checkpointing):
    torch_dtype, bits = DTYPES[dtype]
    model = build_from_config({**config, "attn_implementation": attention}, torch_dtype)
    measured = measure(model, BATCH, SEQ, checkpointing=checkpointing)

    arch = architecture_from_config(config)
    predicted = activations(arch, BATCH, SEQ, bits, attention="eager" if attention == "eager" else "flash",
                            recompute="full" if checkpointing else "none", implementation="huggingface")
    # The rotary cos/sin tables are first saved inside layer 0, so layers and the embedding end are compared
    # together; the output end (final norm, projection input, fp32 log-softmax) on its own.
    body = (measured["embed"] + measured["layer"],
            sum(predicted.embed.values()) + sum(predicted.stage.values()) + L * predicted.per_layer_total)
    head = (measured["head"], sum(predicted.head.values()))
    for what, (got, want) in (("layers + embedding", body), ("output end", head)):
        assert abs(want - got) <= TOLERANCE * got, f"{what}: predicted {want:,} vs measured {got:,}"


EVERY_CASES = [  # (id, config, attention, N): one block in N checkpointed, the others save everything
    ("llama-4-layers-sdpa-every-2", {**llama(), "num_hidden_layers": 4}, "sdpa", 2),
    ("llama-4-layers-sdpa-every-3", {**llama(), "num_hidden_layers": 4}, "sdpa", 3),
    ("llama-gqa-4-layers-eager-every-2", {**llama(kv=2), "num_hidden_layers": 4}, "eager", 2),
    ("gpt2-4-layers-eager-every-2", {**gpt2(), "n_layer": 4}, "eager", 2),
]


@pytest.mark.parametrize("config, attention, every", [c[1:] for c in EVERY_CASES], ids=[c[0] for c in EVERY_CASES])
def test_one_block_in_n_checkpointed_within_2_percent(config, attention, every):
    # torchtitan's layer SAC (torchtitan/distributed/activation_checkpoint.py _apply_layer_sac): the blocks at
    # running positions N, 2N, ... are wrapped in checkpoint_wrapper; measured here by checkpointing exactly those
    # blocks of a Hugging Face model (GradientCheckpointingLayer.gradient_checkpointing off for the others).
    model = build_from_config({**config, "attn_implementation": attention}, torch.bfloat16)
    measured = measure(model, BATCH, SEQ, checkpointing=True, every=every)
    arch = architecture_from_config(config)
    predicted = activations(arch, BATCH, SEQ, 16, attention="eager" if attention == "eager" else "flash",
                            recompute="full", implementation="huggingface", recompute_every=every)
    assert predicted.checkpointed_layers == arch.layers // every
    body = (measured["embed"] + measured["layer"], predicted.total - sum(predicted.head.values()))
    head = (measured["head"], sum(predicted.head.values()))
    for what, (got, want) in (("layers + embedding", body), ("output end", head)):
        assert abs(want - got) <= 0.02 * got, f"{what}: predicted {want:,} vs measured {got:,}"
