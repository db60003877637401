"""Fine-tuning against real peft, bitsandbytes and FSDP2 runs on the CPU (tests/measure/peft_lora.py,
quantized_storage.py, lora_activations.py, fsdp2_lora.py; peft 0.21.2, bitsandbytes 0.50.2, torch 2.13).

- trainable parameters equal peft's own count, for LoRA and DoRA over every target set, ranks 1-64, GQA, and
  modules_to_save (a trained copy beside the frozen original; a tied head untied by its copy);
- a 4-bit or 8-bit base weight's stored bytes equal what bitsandbytes stores, to the byte, per tensor and for a
  whole model loaded with BitsAndBytesConfig (quantization state included, which get_memory_footprint omits);
- saved activations within 2% for LoRA (dropout on and off, q,v and all seven linears), DoRA, QLoRA with
  prepare_model_for_kbit_training, an 8-bit base, a model with only its head training, with and without gradient
  checkpointing;
- FSDP2 (fully_shard per block and at the root, 2 processes) with a frozen bf16 base and fp32 adapters: rank 0's
  frozen and trainable parameter bytes, gradient bytes and AdamW state exact (FSDP2 pads each tensor's dim-0 shard).
Needs torch, transformers, peft and bitsandbytes (requirements-validation.txt); CI installs them.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("peft", reason="peft not installed: pip install -r requirements-validation.txt")

from tests.measure.peft_lora import llama_config, lora_inventory  # noqa: E402
from zerocalc import Scenario  # noqa: E402
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.model.finetune import FineTune, quantized_storage  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.parallel.ranks import layout_report  # noqa: E402
from zerocalc.output.report import trainable_counts  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

TOLERANCE = 0.02
MHA, GQA = llama_config(), llama_config(kv_heads=2)


def report(config, ft, convention="pure-bf16", workers=1, recompute="none", **scenario):
    arch = architecture_from_config(config)
    s = Scenario.from_convention(convention, params=param_count(arch), workers=workers, **scenario)
    return layout_report(s, Workload(arch, micro_batch=2, seq_len=128, recompute=recompute, finetune=ft))


@pytest.mark.parametrize("config", [MHA, GQA], ids=["mha", "gqa"])
@pytest.mark.parametrize("target", ["q,v", "q,k,v,o", "all-linear"])
@pytest.mark.parametrize("rank", [1, 8, 64])
@pytest.mark.parametrize("dora", [False, True])
def test_trainable_parameters_equal_peft(config, target, rank, dora):
    measured = lora_inventory(config, rank=rank, target=target, dora=dora)
    targets = ("all-linear",) if target == "all-linear" else tuple(target.split(","))
    ft = FineTune(mode="dora" if dora else "lora", lora_rank=rank, lora_targets=targets)
    ours = trainable_counts(report(config, ft))
    assert ours["trainable_params"] == measured["peft_trainable"]
    assert ours["trainable_params"] + ours["frozen_params"] == measured["peft_total"]


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("saved", [("lm_head",), ("embed_tokens",)])
def test_modules_to_save_train_a_copy_beside_the_frozen_original(tie, saved):
    config = llama_config(kv_heads=2, tie=tie)
    measured = lora_inventory(config, rank=8, target="q,v", modules_to_save=list(saved))
    ours = trainable_counts(report(config, FineTune(mode="lora", modules_to_save=saved)))
    assert ours["trainable_params"] == measured["peft_trainable"]
    assert ours["trainable_params"] + ours["frozen_params"] == measured["peft_total"]


def test_adapters_are_fp32_on_a_bf16_base_and_their_optimizer_state_too():
    measured = lora_inventory(MHA, rank=8, target="q,v")
    adapter_bytes = sum(t["bytes"] for t in measured["tensors"] if t["role"] in ("lora_A", "lora_B"))
    stage = report(MHA, FineTune(mode="lora")).ranks[0].stages[0]
    rows = dict(zip([r for r in stage.per_worker_by_category], stage.per_worker_by_category.values()))
    assert rows["gradients"] == adapter_bytes and rows["optimizer"] == 2 * adapter_bytes


bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed")
from tests.measure.quantized_storage import linear4bit_storage, linear8bit_storage, load_quantized_model  # noqa


@pytest.mark.parametrize("shape", [(256, 256), (1024, 256), (300, 700), (257, 129)])
@pytest.mark.parametrize("block", [64, 128, 256])
@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("quant", ["nf4", "fp4"])
def test_4bit_storage_is_what_bitsandbytes_stores(shape, block, double, quant):
    measured = linear4bit_storage(*shape, quant_type=quant, blocksize=block, double_quant=double)
    ft = FineTune(mode="qlora", quant_type=quant, quant_block_size=block, double_quant=double)
    ours = quantized_storage(shape[0] * shape[1], shape[0], ft)
    width = {"uint8": 1, "fp32": 4, "int8": 1}
    assert sum(n * width[dtype] for dtype, n in ours.values()) == measured["bytes_per_layer"]


@pytest.mark.parametrize("shape", [(1000, 256), (256, 1024)])
def test_8bit_storage_is_int8_plus_a_row_scale(shape):
    measured = linear8bit_storage(*shape)
    ours = quantized_storage(shape[0] * shape[1], shape[0], FineTune(mode="qlora", quant_type="int8"))
    assert sum(n * (4 if dtype == "fp32" else 1) for dtype, n in ours.values()) == measured["bytes_per_layer"]


@pytest.mark.parametrize("bits, quant", [(4, "nf4"), (8, "int8")])
def test_a_quantized_model_loaded_with_from_pretrained_stores_what_we_count(bits, quant):
    measured = load_quantized_model(GQA, bits=bits, quant_type="nf4", double_quant=True)
    ft = FineTune(mode="qlora", quant_type=quant, kbit_prepare=False, base_dtype="bf16", lora_targets=("q",))
    stage = report(GQA, ft).ranks[0].stages[0]
    frozen = sum(b for name, b in zip([row.entry.name for row in report(GQA, ft).ranks[0].rows],
                                      stage.per_worker_by_entry) if "frozen" in name)
    assert frozen == measured["total_bytes"]


from tests.measure.lora_activations import measure_case  # noqa: E402

ACT_CASES = [  # id, measure_case keywords, FineTune
    ("lora-qv", dict(mode="lora", target="q,v"), FineTune(mode="lora")),
    ("lora-qv-dropout", dict(mode="lora", target="q,v", dropout=0.1), FineTune(mode="lora", lora_dropout=0.1)),
    ("lora-all", dict(mode="lora", target="all-linear"), FineTune(mode="lora", lora_targets=("all-linear",))),
    ("lora-all-dropout", dict(mode="lora", target="all-linear", dropout=0.1),
     FineTune(mode="lora", lora_targets=("all-linear",), lora_dropout=0.1)),
    ("dora-qv", dict(mode="dora", target="q,v"), FineTune(mode="dora")),
    ("qlora-all", dict(mode="qlora", target="all-linear"), FineTune(mode="qlora", lora_targets=("all-linear",))),
    ("lora-8bit-all", dict(mode="lora8bit", target="all-linear", prepare=False),
     FineTune(mode="qlora", quant_type="int8", kbit_prepare=False, lora_targets=("all-linear",))),
    ("head-only", dict(mode="frozen"), FineTune(mode="freeze", train_modules=("lm_head",))),
]


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("case, keywords, ft", ACT_CASES, ids=[c[0] for c in ACT_CASES])
def test_saved_activations_within_2_percent(case, keywords, ft, checkpointing):
    measured = measure_case(GQA, checkpointing=checkpointing, **keywords)["by_region"]
    act = report(GQA, ft, recompute="full" if checkpointing else "none").ranks[0].shape.act
    # the harness runs without autocast; under the Trainer's bf16 autocast k-bit preparation's fp32 head also saves
    # its 16-bit weight copy, which zerocalc counts (measured apart: tests/test_fp32_stream.py)
    head = sum(v for k, v in act.head.items() if k != "output projection weight (autocast's 16-bit copy)")
    body = act.total - sum(act.head.values())
    got_body = sum(v for k, v in measured.items() if k != "head")
    for what, got, want in (("blocks + embedding end", got_body, body), ("output end", measured.get("head", 0),
                                                                          head)):
        assert abs(want - got) <= TOLERANCE * max(got, 1), f"{case} {what}: predicted {want:,} vs {got:,}"


from tests.measure.fsdp2_lora import fsdp2_lora  # noqa: E402


@pytest.mark.parametrize("target", ["q,v", "all-linear"])
def test_fsdp2_rank_bytes_with_a_frozen_base_and_lora_are_exact(target):
    config = llama_config(kv_heads=2)
    rank0 = fsdp2_lora(world=2, rank=8, target=target, dtype="bf16", config=config)[0]
    targets = ("all-linear",) if target == "all-linear" else tuple(target.split(","))
    ft = FineTune(mode="lora", lora_targets=targets, base_dtype="bf16")
    view = report(config, ft, convention="fsdp2", workers=2).ranks[0]
    rows = {row.entry.name: b for row, b in zip(view.rows, view.stages[3].per_worker_by_entry)}
    assert rows["bf16, frozen: parameters"] == rank0["params"]["frozen"]["storage_bytes"]
    assert rows["fp32: parameters"] == rank0["params"]["trainable"]["storage_bytes"]
    assert rows["fp32: gradients"] == rank0["grads"]["trainable"]["storage_bytes"]
    assert rows["fp32: exp_avg"] == rank0["optimizer"]["exp_avg"]["bytes"]
    assert rows["fp32: exp_avg_sq"] == rank0["optimizer"]["exp_avg_sq"]["bytes"]


from tests.measure.moe_activations import TINY  # noqa: E402

MOE_LORA = [("mixtral", "mixtral"), ("qwen2_moe", "qwen2_moe"), ("qwen3_moe", "qwen3_moe"),
            ("qwen3-dense", "qwen3")]


def _tiny(name):
    if name == "qwen3":               # a dense Qwen3 (per-head q/k norms) of the MoE models' size
        return {k: v for k, v in TINY["qwen3_moe"].items() if not k.startswith("_") and "expert" not in k
                and k != "moe_intermediate_size" and k != "norm_topk_prob"} | {"model_type": "qwen3"}
    return {k: v for k, v in TINY[name].items() if not k.startswith("_")}


@pytest.mark.parametrize("case, name", MOE_LORA, ids=[c[0] for c in MOE_LORA])
def test_lora_on_the_attention_of_moe_and_qk_norm_models(case, name):
    # Frozen experts, router and shared experts save only what their inputs' gradients need (autograd saves a
    # matmul's input for its weight's gradient only): no dispatched tokens, no product before the down projection,
    # no router input; frozen q_norm / k_norm keep no normalised copy. Every block after the first exact; the
    # whole model within 3% (the first block's frozen k path saves a little less than counted).
    cfg = _tiny(name)
    measured = measure_case(cfg, mode="lora", target="q,v")
    arch = architecture_from_config(cfg)
    act = report(cfg, FineTune(mode="lora")).ranks[0].shape.act
    block = act.per_moe_layer_total if arch.is_moe_layer(1) else act.per_layer_total
    assert measured["per_layer"]["1"] == block
    body = act.total - sum(act.head.values())
    got = sum(v for k, v in measured["by_region"].items() if k != "head")
    assert abs(body - got) <= 0.03 * got, (body, got)


ALL_LINEAR_MOE = ["mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v2"]


@pytest.mark.parametrize("fam", ALL_LINEAR_MOE)
def test_all_linear_lora_on_moe_models_within_2_percent(fam):
    # peft's ParamWrapper on the fused experts (converted families): the grouped matmuls save each expert's merged
    # weight W + BA, the batched B @ A saves the factors in the compute dtype, and the frozen experts' inputs are
    # kept again (the merged weights need their gradient); the router's merged weight and input likewise.
    # Qwen2-MoE is not converted: its shared expert and shared-expert gate carry plain adapters.
    measured = measure_case(_tiny(fam), mode="lora", target="all-linear")
    act = report(_tiny(fam), FineTune(mode="lora", lora_targets=("all-linear",))).ranks[0].shape.act
    body = act.total - sum(act.head.values())
    got = sum(v for k, v in measured["by_region"].items() if k != "head")
    assert abs(body - got) <= TOLERANCE * got, (body, got)


def test_dora_on_a_moe_models_mlp_says_what_it_leaves_out():
    from zerocalc.model.finetune import caveats
    arch = architecture_from_config(_tiny("mixtral"))
    assert caveats(FineTune(mode="dora", lora_targets=("all-linear",)), arch)
    assert not caveats(FineTune(mode="lora", lora_targets=("all-linear",)), arch)
    assert not caveats(FineTune(mode="dora"), arch)


MOE_COUNTS = [(fam, target) for fam in ("mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v2", "deepseek_v3")
              for target in ("all-linear", "q,k,v,o")] + [("deepseek_v2", "q,v"), ("mixtral", "q,v")]


@pytest.mark.parametrize("fam, target", MOE_COUNTS, ids=[f"{f}-{t}" for f, t in MOE_COUNTS])
@pytest.mark.parametrize("rank", [4, 8])
def test_moe_trainable_parameters_equal_peft(fam, target, rank):
    # peft 0.21.2 utils/transformers_weight_conversion.py (_convert_peft_config_moe): for the model types transformers
    # maps to its "mixtral" / "qwen2_moe" conversion pattern (Mixtral, Qwen3-MoE, DeepSeek), all-linear's v4 MLP
    # names are re-targeted onto the router weight and the fused experts (gate_up_proj at rank 2r, down_proj at r)
    # and leave the dense / shared-expert gate_proj, up_proj, down_proj; Qwen2-MoE itself is not converted. Named
    # targets match module names only: DeepSeek's latent projections are reached by all-linear alone.
    inv = lora_inventory(_tiny(fam), target=target, rank=rank)
    targets = ("all-linear",) if target == "all-linear" else tuple(target.split(","))
    r = report(_tiny(fam), FineTune(mode="lora", lora_targets=targets, lora_rank=rank))
    assert trainable_counts(r)["trainable_params"] == inv["peft_trainable"]


MLA_LORA = [("deepseek_v2", "q,v"), ("deepseek_v2", "q,k,v,o"), ("deepseek_v3", "q,k,v,o")]


@pytest.mark.parametrize("fam, target", MLA_LORA, ids=[f"{f}-{t}" for f, t in MLA_LORA])
def test_lora_on_latent_attention_within_2_percent(fam, target):
    # peft matches module names: latent attention has no k_proj / v_proj (and no q_proj with a q LoRA rank), so
    # "q,v" adapts q_proj alone on DeepSeek-V2; frozen kv_b_proj / q_b_proj keep no input and the frozen latent
    # norms no normalised copy; o_proj reads heads x v_head_dim (modeling_deepseek_v2.py DeepseekV2Attention).
    measured = measure_case(_tiny(fam), mode="lora", target=target)
    act = report(_tiny(fam), FineTune(mode="lora", lora_targets=tuple(target.split(",")))).ranks[0].shape.act
    body = act.total - sum(act.head.values())
    got = sum(v for k, v in measured["by_region"].items() if k != "head")
    assert abs(body - got) <= TOLERANCE * got, (body, got)
