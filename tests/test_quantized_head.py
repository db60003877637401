"""The output head quantized with the blocks' linears (FineTune.quantize_head, issue 31 item 5): Lightning Fabric's
BitsandbytesPrecision, which LitGPT's `--quantize bnb.*` uses, builds every torch.nn.Linear under
`fabric.init_module()` as a 4-bit one, lm_head included; transformers' bitsandbytes quantizer leaves the head in
16 bits (model/finetune.py keeps that the default).

Sources: the CPU measurement of tests/measure/fabric_quantized_head.py (lightning 2.6.6 and bitsandbytes 0.50.2, as
requirements-validation.txt pins); Lightning-AI/litgpt litgpt/finetune/lora.py (`BitsandbytesPrecision(quantize[4:],
dtype)` with no ignore_modules, the model built under `fabric.init_module`).
"""

import pytest

from zerocalc.frameworks import import_litgpt
from zerocalc.model.finetune import FineTune, quantized_storage
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import Scenario
from zerocalc.step.workload import Workload


def test_fabric_quantizes_the_head_with_the_block_linears():
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("lightning", reason="lightning==2.6.6 is in requirements-validation.txt (CI installs it)")
    from tests.measure.fabric_quantized_head import HIDDEN, QKV, VOCAB, quantized_model
    got = quantized_model("nf4")
    assert got["wte"]["quantized"] is False and got["wte"]["bytes"] == VOCAB * HIDDEN * 2      # bf16 embedding
    for name, out in (("qkv", QKV), ("lm_head", VOCAB)):
        assert got[name]["quantized"], name
        # the packed codes and absmax as zerocalc lays a 4-bit weight out (no double quantization: plain nf4)
        layout = quantized_storage(out * HIDDEN, out, FineTune(mode="qlora", double_quant=False))
        assert got[name]["bytes"] == layout["nf4 data (packed)"][1]
        assert got[name]["absmax"] == layout["absmax"][1]


def _head_storage(model: str, quantize_head: bool) -> dict:
    arch = MODEL_PRESETS[model][0]
    ft = FineTune(mode="qlora", kbit_prepare=False, base_dtype="bf16", quantize_head=quantize_head)
    report = layout_report(Scenario.from_convention("pure-bf16", params=param_count(arch), workers=1),
                           Workload(arch, seq_len=512, finetune=ft))
    return {h.tensor.name: h.tensor.storage for v in report.ranks for g in v.shape.groups for h in g.holdings
            if h.tensor.role in ("head", "embedding")}


def test_an_untied_head_is_stored_in_four_bits_only_when_asked():
    assert _head_storage("llama-2-7b", False)["lm_head.weight"] == "bf16"
    assert _head_storage("llama-2-7b", True)["lm_head.weight"] == "nf4"
    assert _head_storage("llama-2-7b", True)["embed_tokens.weight"] == "bf16"     # an Embedding, not a Linear


def test_a_tied_head_stays_the_embeddings_weight():
    assert _head_storage("llama-3.2-1b", True) == {"embed_tokens.weight": "bf16"}     # no head tensor of its own


def test_litgpt_qlora_sets_it_and_the_cli_flag_matches():
    got = import_litgpt("checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf\nquantize: bnb.nf4\nprecision: bf16-true\n")
    assert got.finetune["quantize_head"] is True
    from zerocalc.cli.main import _inputs, build_parser
    _s, _a, workload, _i = _inputs(build_parser().parse_args(
        ["--model", "llama-2-7b", "--finetune", "qlora", "--quantize-head", "yes"]))
    assert workload.finetune.quantize_head is True
