"""torch.compile'd LoRA blocks (zerocalc/step/compiled.py compiled_adapter_terms) against Inductor on the CPU: what
the compiled autograd function of one peft-adapted Llama block saves, recorded with saved-tensor hooks
(tests/measure/compiled_lora_saves.py; peft 0.21.2, torch 2.13.0). Exact to the byte for
adapters in bf16 (torchtune's LoRALinear runs in the model's dtype) and fp32 (peft's autocast default), on every
block and on the first (whose input needs no gradient). A compile here takes 10-30 s: the cases are few."""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("peft", reason="peft not installed: pip install -r requirements-validation.txt")

from tests.measure import compiled_saves as cs  # noqa: E402
from tests.measure.compiled_lora_saves import compiled_lora_block_saves  # noqa: E402
from zerocalc.model.finetune import FineTune  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.step.activations import activations  # noqa: E402
from zerocalc.step.trainable import training_for  # noqa: E402
from zerocalc.tables import DTYPE_BITS  # noqa: E402

BATCH, SEQ, RANK = 2, 64, 8
CASES = [  # (id, targets, adapter dtype, the first block)
    ("q,v bf16", "q,v", "bf16", False),
    ("all fp32", "q,k,v,o,gate,up,down", "fp32", False),
    ("o,down bf16 first block", "o,down", "bf16", True),
    ("q,v,gate,up fp32 first block", "q,v,gate,up", "fp32", True),
]


def _predicted(arch, targets, adapter_dtype, first):
    ft = FineTune(mode="lora", lora_rank=RANK, lora_targets=tuple(targets.split(",")), adapter_dtype=adapter_dtype)
    tr = training_for(ft, arch, "none", "bf16", DTYPE_BITS)
    act = activations(arch, BATCH, SEQ, 16, "flash", training=tr, compiled=True)
    return act.per_layer_total + (act.first_block_delta if first else 0), act


@pytest.mark.parametrize("targets, adapter_dtype, first", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_compiled_lora_block_exact(targets, adapter_dtype, first):
    config = cs.llama_config()
    measured = compiled_lora_block_saves(config, targets, RANK, getattr(torch, {"bf16": "bfloat16",
                                            "fp32": "float32"}[adapter_dtype]), BATCH, SEQ, input_grad=not first)
    got = measured["compiled_bytes"] + sum(e[2] for e in measured["compiled_input"])
    want, act = _predicted(architecture_from_config(config), targets, adapter_dtype, first)
    assert want == got
    assert "adapters' rank-r intermediates" in act.per_layer


def test_eager_terms_stay_where_compile_was_not_measured():
    arch = architecture_from_config(cs.llama_config())
    for ft in (FineTune(mode="dora", lora_targets=("q", "v")), FineTune(mode="lora", lora_dropout=0.1)):
        tr = training_for(ft, arch, "none", "bf16", DTYPE_BITS)
        assert activations(arch, BATCH, SEQ, 16, training=tr, compiled=True) == \
            activations(arch, BATCH, SEQ, 16, training=tr)
