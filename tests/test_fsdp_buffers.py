"""Communication buffers per framework (zerocalc/step/buffers.py): the rule table, and FSDP2's per-unit buffers
against fully_shard on 2 gloo processes (tests/measure/fsdp2_buffers.py), exactly.

Measured: a 4-block Llama (odd vocabulary and FFN rows, so FSDP2 pads) with bf16 param_dtype and fp32 reduce_dtype,
and a tied 3-block one with a bf16 reduce, each wrapped per block + root and as torchtitan wraps it. The FSDP-held
bytes at the loss are zerocalc's forward "gathered parameters"; the largest from the start of backward to block 0
is its backward "gathered parameters" + "gradient buckets".
"""

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

BUFFER_PARTS = ("gathered parameters", "gradient buckets", "all-gather bucket", "persistent parameters")


def peak(convention="zero-paper", workers=8, stage=3, arch="llama-3-8b", **work):
    a = MODEL_PRESETS[arch][0]
    sc = Scenario.from_convention(convention, params=param_count(a), workers=workers)
    report = layout_report(sc, Workload(a, micro_batch=1, seq_len=1024, **work))
    return report.ranks[0].peaks[stage]


def buffers(p):
    return {phase: {k: v for k, v in parts.items() if k in BUFFER_PARTS} for phase, parts in p.phases.items()}


def test_deepspeed_numbers_are_todays():
    for conv in ("zero-paper", "deepspeed"):
        for stage in range(4):
            assert buffers(peak(conv, stage=stage)) == buffers(peak(conv, stage=stage, comm_buffers="deepspeed"))


def test_auto_follows_the_convention():
    assert buffers(peak("megatron", stage=1)) == {"forward": {}, "backward": {}, "optimizer_step": {}}
    assert buffers(peak("fsdp2")) == buffers(peak("fsdp2", comm_buffers="fsdp"))
    assert buffers(peak("fsdp2")) != buffers(peak("fsdp2", comm_buffers="deepspeed"))


def test_no_data_parallelism_reduces_and_gathers_nothing():
    for conv in ("zero-paper", "megatron", "fsdp2", "pure-bf16"):
        for stage in range(4):
            assert not any(buffers(peak(conv, workers=1, stage=stage)).values())
    # DeepSpeed allocates its ipg buckets whatever the world size (stage_1_and_2.py setup_buckets)
    assert buffers(peak("deepspeed", workers=1, stage=2))["backward"]["gradient buckets"] == 2 * 500_000_000
    assert buffers(peak("zero-paper", workers=1, stage=2, comm_buffers="deepspeed"))["backward"]


def test_fsdp_units_for_llama_3_8b():
    """Llama-3-8B on 8 ranks, bf16 gathers, fp32 reduce: the root (embedding + norm + head) kept, or torchtitan's
    [norm, lm_head]; a block is 218,112,000 elements (divisible by 8: no padding)."""
    V, h, block = 128256 * 4096, 4096, 218_112_000
    blocks = peak("fsdp2", reduce_dtype="fp32")
    assert blocks.phases["forward"]["gathered parameters"] == 2 * (2 * V + h)
    # the root + the block + the next block prefetched; the output end's gradients, the block's, its reduce input
    assert blocks.phases["backward"]["gathered parameters"] == 2 * (2 * V + h) + 2 * 2 * block
    assert blocks.phases["backward"]["gradient buckets"] == 2 * (V + h) + 2 * block + 4 * block
    tt = peak("fsdp2", reduce_dtype="fp32", fsdp_wrap="torchtitan")
    assert tt.phases["forward"]["gathered parameters"] == 2 * (V + h)
    # the largest window: [norm, lm_head]'s reduce-scatter, its gradients and the last block prefetched
    assert tt.phases["backward"]["gathered parameters"] == 2 * block
    assert tt.phases["backward"]["gradient buckets"] == 2 * (V + h) + 4 * (V + h)
    assert "persistent parameters" not in tt.phases["optimizer_step"]


def test_bad_choices_are_field_errors():
    a = MODEL_PRESETS["llama-3-8b"][0]
    for field in ("comm_buffers", "fsdp_wrap"):
        with pytest.raises(FieldError) as e:
            Workload(a, **{field: "nccl"})
        assert e.value.field == field


def test_the_cli_flag(capsys):
    import json

    from zerocalc.cli.main import main

    def stage3(*flags):
        main(["--model", "llama-3-8b", "--workers", "8", "--convention", "fsdp2", "--json", *flags])
        out = json.loads(capsys.readouterr().out)
        return out["peak"], out["comm_buffers"]

    assert stage3("--comm-buffers", "fsdp")[0] == stage3()[0]
    assert stage3()[1]["counted"] == "fsdp" and stage3()[1]["why"].startswith("auto (convention fsdp2)")
    assert stage3("--comm-buffers", "deepspeed")[0] != stage3()[0]
    assert stage3("--comm-buffers", "fsdp", "--fsdp-wrap", "torchtitan")[0] != stage3()[0]
    main(["--model", "llama-3-8b", "--workers", "1", "--json", "--comm-buffers", "fsdp"])
    assert json.loads(capsys.readouterr().out)["comm_buffers"]["counted"] == "none"


# --- measured on gloo ------------------------------------------------------------------------------------------

try:
    import torch
except ImportError:                  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed: pip install -r requirements-validation.txt")

RUNS = [{"wrap": "blocks", "tie": False, "layers": 4, "reduce": "fp32"},
        {"wrap": "torchtitan", "tie": False, "layers": 4, "reduce": "fp32"},
        {"wrap": "blocks", "tie": True, "layers": 3, "reduce": "bf16"},
        {"wrap": "torchtitan", "tie": True, "layers": 3, "reduce": "bf16"}]


def _config(run):
    from tests.measure.peft_lora import llama_config
    return llama_config(layers=run["layers"], hidden=64, heads=4, kv_heads=2, intermediate=176, vocab=1001, seq=32,
                        tie=run["tie"])


@pytest.fixture(scope="module")
def measured():
    pytest.importorskip("transformers")
    from tests.measure.fsdp2_buffers import fsdp2_buffers
    return fsdp2_buffers(runs=[{"wrap": r["wrap"], "config": _config(r), "reduce_dtype": r["reduce"]} for r in RUNS],
                         timeout=300)


def _predicted(run):
    from zerocalc.model.hf_config import architecture_from_config
    arch = architecture_from_config(_config(run))
    sc = Scenario.from_convention("fsdp2", params=param_count(arch), workers=2)
    work = Workload(arch, micro_batch=2, seq_len=32, comm_buffers="fsdp", fsdp_wrap=run["wrap"],
                    reduce_dtype=run["reduce"], layout=Layout())
    return layout_report(sc, work).ranks[0].peaks[3].phases


@needs_torch
@pytest.mark.parametrize("i", range(len(RUNS)))
def test_fsdp2_buffers_are_exact(measured, i):
    phases = _predicted(RUNS[i])
    backward = phases["backward"]["gathered parameters"] + phases["backward"]["gradient buckets"]
    for rank in measured:
        got = rank["results"][i]
        assert got["at_loss"] == phases["forward"]["gathered parameters"]
        assert got["backward"] == backward


def test_a_qlora_base_is_gathered_in_its_packed_storage_not_in_bf16():
    """QLoRA under FSDP (Answer.AI fsdp_qlora; bnb_4bit_quant_storage=bfloat16): a block's nf4 linears are
    all-gathered as bitsandbytes packs them, two 4-bit values a byte, never cast by FSDP's mixed precision (it casts
    floating tensors; the packed storage is what the module holds). The packed bytes are measured with bitsandbytes'
    own Params4bit on the CPU (tests/measure/quantized_storage.py); a block of Llama-3-8B (hidden 4096, FFN 14336,
    8 KV heads) gathers its linears at 0.5 bytes a weight, its norms and adapters at their own width."""
    bnb_storage = pytest.importorskip("tests.measure.quantized_storage")
    packed = bnb_storage.linear4bit_storage(256, 128, quant_storage="bf16")["tensors"][0]
    assert packed["bytes"] * 2 == 256 * 128                                  # 0.5 bytes a weight
    h, kv, ffn = 4096, 1024, 14336
    linears = 2 * h * h + 2 * h * kv + 3 * h * ffn
    full = peak("fsdp2", workers=2, stage=3, finetune=FineTune("qlora", lora_rank=8, lora_targets=("q", "v")))
    lora = peak("fsdp2", workers=2, stage=3, finetune=FineTune("lora", lora_rank=8, lora_targets=("q", "v")))
    gathered = {k: p.phases["backward"]["gathered parameters"] for k, p in (("qlora", full), ("lora", lora))}
    # two blocks in the backward window (the running one and the next, prefetched): each 1.5 bytes a weight less
    assert gathered["lora"] - gathered["qlora"] == 2 * (linears * 2 - linears // 2)
