"""LoRA on the LM head (peft target_modules "lm_head", peft 0.21.2 on the CPU): the adapter's parameters equal
peft's own count (tied and untied heads, LoRA and DoRA), and the output end's saved bytes are exact against a
measured tiny Llama (tests/measure/lora_activations.py), bf16 base with peft's fp32 adapters and an fp32 base,
dropout on and off. What the head adapter adds (peft lora.Linear.forward): lora_A saves its input (the fp32 cast
of the head's input on a 16-bit base; with dropout the dropped copy and a 1-byte mask), lora_B saves lora_A's
output, r x T. The one byte count apart: NllLossBackward's fp32 total_weight scalar (4 bytes), which zerocalc
leaves out. Needs torch, transformers and peft (requirements-validation.txt).
"""

import pytest

from zerocalc.model.finetune import FineTune
from zerocalc.scenario import FieldError

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("peft", reason="peft not installed: pip install -r requirements-validation.txt")

from tests.measure.lora_activations import measure_case  # noqa: E402
from tests.measure.peft_lora import llama_config, lora_inventory  # noqa: E402
from tests.test_finetune_validation import report  # noqa: E402
from zerocalc import Scenario  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.output.report import trainable_counts  # noqa: E402
from zerocalc.parallel.ranks import layout_report  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

GQA = llama_config(kv_heads=2)


def test_the_head_is_a_target_beside_the_blocks_and_not_within_all_linear():
    assert FineTune(mode="lora", lora_targets=("q", "v", "lm_head")).head_adapter
    assert FineTune(mode="lora", lora_targets=("q", "v", "lm_head")).targets == ("q", "v")
    assert not FineTune(mode="lora", lora_targets=("all-linear",)).head_adapter
    with pytest.raises(FieldError) as err:
        FineTune(mode="lora", lora_targets=("q", "head"))
    assert "lm_head" in err.value.allowed


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("dora", [False, True])
@pytest.mark.parametrize("target", ["q,v,lm_head", "lm_head"])
def test_head_adapter_parameters_equal_peft(tie, dora, target):
    config = llama_config(kv_heads=2, tie=tie)
    measured = lora_inventory(config, rank=8, target=target, dora=dora)
    ft = FineTune(mode="dora" if dora else "lora", lora_rank=8, lora_targets=tuple(target.split(",")))
    ours = trainable_counts(report(config, ft))
    assert ours["trainable_params"] == measured["peft_trainable"]
    assert ours["trainable_params"] + ours["frozen_params"] == measured["peft_total"]


def _saved(ft, dtype):
    """The activation report of the measured case: a bf16 (pure-bf16) or fp32 base and activations."""
    arch = architecture_from_config(GQA)
    s = Scenario.from_convention("pure-bf16", params=param_count(arch), workers=1,
                                 **({"param_dtype": "fp32", "grad_dtype": "fp32"} if dtype == "fp32" else {}))
    w = Workload(arch, micro_batch=2, seq_len=128, finetune=ft, activation_dtype=dtype)
    return layout_report(s, w).ranks[0].shape.act


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_head_adapter_saved_bytes_are_exact(dtype, dropout):
    with_head = measure_case(GQA, mode="lora", dtype=dtype, target="q,v,lm_head", dropout=dropout)["by_region"]
    without = measure_case(GQA, mode="lora", dtype=dtype, target="q,v", dropout=dropout)["by_region"]
    ft = FineTune(mode="lora", lora_targets=("q", "v", "lm_head"), lora_dropout=dropout)
    act = _saved(ft, dtype)
    base = _saved(FineTune(mode="lora", lora_dropout=dropout), dtype)
    # the head adapter changes the output end only, by exactly what it saves
    assert with_head["layer"] == without["layer"]
    assert sum(act.head.values()) - sum(base.head.values()) == with_head["head"] - without["head"]
    assert sum(act.head.values()) + 4 == with_head["head"]
