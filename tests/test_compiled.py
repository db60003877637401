"""torch.compile'd blocks and losses (zerocalc/step/compiled.py, step/losses.py "compiled") against Inductor on the
CPU: what the compiled autograd function saves, recorded with saved-tensor hooks (tests/measure/compiled_saves.py).
A first compile of a tiny block takes 6-20 s here, so the cases are few and tiny.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")

from tests.measure import compiled_saves as cs  # noqa: E402
from zerocalc.model.architecture import Architecture  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.step.activations import activations  # noqa: E402

BATCH, SEQ = 2, 64
CASES = [  # (id, config, checkpoint, CUDA-minus-CPU bytes: LayerNorm's mean and rstd are fp32 on CUDA, bf16 here)
    ("llama", cs.llama_config(), None, 0),
    ("llama-op", cs.llama_config(), "op", 0),
    ("qwen3-qk-norm", cs.qwen3_config(), None, 0),
    ("gpt2", cs.gpt2_config(), None, 2 * 2 * 2 * BATCH * SEQ),
    ("qwen3-moe", cs.qwen3_moe_config(), None, None),
]


@pytest.mark.parametrize("config, checkpoint, cuda_extra", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_compiled_block_within_2_percent(config, checkpoint, cuda_extra):
    measured = cs.compiled_block_saves(config, torch.bfloat16, BATCH, SEQ, checkpoint=checkpoint)
    got = measured["compiled_bytes"] + sum(e[2] for e in measured["compiled_input"])
    arch = architecture_from_config(config)
    act = activations(arch, BATCH, SEQ, 16, "flash", "op" if checkpoint else "none", compiled=True)
    want = act.per_moe_layer_total if arch.experts else act.per_layer_total
    if cuda_extra is not None:
        assert want == got + cuda_extra
    # Qwen3-MoE: the router's probabilities counted fp32 (the partitioner kept bf16 logits at this size)
    assert abs(want - got) <= 0.02 * got
    assert want < sum((act_eager := activations(arch, BATCH, SEQ, 16, "flash",
                                                "op" if checkpoint else "none")).per_layer.values()) or arch.experts
    assert act_eager.per_layer_total >= act.per_layer_total


def test_compiled_loss_keeps_the_bf16_logits_not_an_fp32_log_softmax():
    measured = cs.compiled_loss_saves(cs.llama_config(), torch.bfloat16, BATCH, SEQ, what="loss")
    logits = BATCH * SEQ * 512 * 2
    assert sum(e[2] for e in measured.get("compiled_input", [])) in (0, logits)
    assert measured["compiled_bytes"] < 0.01 * logits < measured["eager_bytes"]       # row statistics only
    from zerocalc.scenario import Scenario
    from zerocalc.parallel.ranks import layout_report
    from zerocalc.step.workload import Workload
    arch = Architecture(layers=2, hidden=64, heads=4, ffn=160, vocab=512, seq_len=256)
    shape = layout_report(Scenario(params=1), Workload(arch, BATCH, SEQ, loss="compiled")).ranks[-1].shape
    assert shape.act.head["loss: logits kept by the compiled loss"] == logits * (shape.act_bits // 16)
    assert "loss log-softmax (fp32)" not in shape.act.head


def test_compile_leaves_unmeasured_kinds_eager():
    mla = Architecture(layers=2, hidden=256, heads=4, ffn=512, vocab=1000, seq_len=256, kv_lora_rank=64,
                       qk_nope_dim=32, qk_rope_dim=16, v_head_dim=32)
    assert activations(mla, 1, 128, 16, compiled=True) == activations(mla, 1, 128, 16)
