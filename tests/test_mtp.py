"""Multi-token prediction (issue 21): DeepSeek-V3's MTP modules as Megatron trains them (megatron-core 0.16.1
transformer/multi_token_prediction.py, models/gpt/gpt_model.py): their parameters in the inventory on the last
pipeline stage, their activations on the output end, checked against the published totals and measured with
Hugging Face's own MtpLayer (transformers 5.24 modeling_layers.py) trained as Megatron trains it
(tests/measure/mtp_activations.py)."""

from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.hf_config import architecture_from_config
from zerocalc.model.inventory import param_count, tensors, _instances
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.output.report import full_report
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.activations import activations
from zerocalc.step.workload import Workload

V3 = MODEL_PRESETS["deepseek-v3"][0]


def test_deepseek_v3_with_its_mtp_module_is_the_hubs_685b():
    # deepseek-ai/DeepSeek-V3 README: "685B, which includes 671B of the Main Model weights and 14B of the
    # Multi-Token Prediction (MTP) Module weights". The checkpoint's MTP layer (model.layers.61) stores its own
    # copies of embed_tokens and shared_head.head, and the FP8 checkpoint a weight_scale_inv per 128 x 128 block of
    # every quantized linear (config.json quantization_config weight_block_size [128, 128]); the routers'
    # e_score_correction_bias are 256 each.
    assert V3.mtp_declared == 1 and V3.mtp_layers == 0
    main, mtp = param_count(V3), param_count(replace(V3, mtp_layers=1))
    assert round(main / 1e9) == 671
    copies = 2 * V3.vocab * V3.hidden
    assert (mtp - main) + copies == 13_463_426_048           # the MTP module as stored: "14B" = 685B - 671B
    blocks = lambda n: -(-n // 128)                          # noqa: E731
    scales = sum(_instances(replace(V3, mtp_layers=1), t) * (
        blocks(t.shape[-2]) * blocks(t.shape[-1]) * (t.shape[0] if len(t.shape) == 3 else 1))
        for t in tensors(replace(V3, mtp_layers=1))
        if not t.tied and len(t.shape) >= 2 and t.role not in ("embedding", "head", "router"))
    biases = 256 * (V3.layers - V3.first_dense_layers + 1)
    assert round((mtp + copies + scales + biases) / 1e9) == 685


def test_mtp_is_read_from_the_config_as_declared_and_trained_only_when_asked():
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
           "intermediate_size": 512, "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2,
           "first_k_dense_replace": 1, "vocab_size": 1000, "num_nextn_predict_layers": 2}
    arch = architecture_from_config(cfg)
    assert (arch.mtp_declared, arch.mtp_layers) == (2, 0)
    s = Scenario.from_convention("megatron", params=param_count(V3), workers=8)
    assert full_report(s, Workload(V3)) == full_report(s, Workload(replace(V3, mtp_layers=0)))


def test_mtp_parameters_sit_on_the_last_stage_with_an_embedding_copy_when_untied():
    arch = replace(V3, mtp_layers=1)
    one = param_count(arch) - param_count(V3)
    s = Scenario.from_convention("megatron", params=param_count(arch), workers=16)
    base = Workload(V3, layout=Layout(pp=4, ep=16, micro_batches=8))
    with_mtp = Workload(arch, layout=Layout(pp=4, ep=16, micro_batches=8))
    before = {v.rank.name: v.rank.params for v in layout_report(s, base).ranks}
    after = {v.rank.name: v.rank.params for v in layout_report(s, with_mtp).ranks}
    for name in before:
        if "last" not in name:
            assert after[name] == before[name]
    last = next(n for n in before if "last" in n)
    local = next(v for v in layout_report(s, with_mtp).ranks if v.rank.last).rank
    mtp_local = sum(h.local_elements * h.instances for h in local.holdings if h.tensor.place == "mtp")
    embedding_copy = V3.vocab * V3.hidden                  # MultiTokenPredictionLayer embeds with the word embedding
    assert after[last] - before[last] == mtp_local + embedding_copy
    assert mtp_local < one                                  # experts split over ep 16 on that stage
    single = Workload(arch, layout=Layout(ep=16))           # pp 1: the embedding is there already
    rank = layout_report(Scenario.from_convention("megatron", params=param_count(arch), workers=16), single).ranks[0]
    assert rank.rank.params == layout_report(
        Scenario.from_convention("megatron", params=param_count(V3), workers=16),
        Workload(V3, layout=Layout(ep=16))).ranks[0].rank.params + sum(
        h.local_elements * h.instances for h in rank.rank.holdings if h.tensor.place == "mtp")


def test_mtp_activations_and_recompute():
    arch = replace(V3, mtp_layers=1)
    plain = activations(V3, 1, 4096, 16, implementation="megatron")
    mtp = activations(arch, 1, 4096, 16, implementation="megatron")
    extra = {k: v for k, v in mtp.head.items() if k not in plain.head}
    assert {k for k in extra if k.startswith("MTP block: ")} == {"MTP block: " + k for k in plain.per_moe_layer}
    assert extra["MTP loss log-softmax (fp32)"] == plain.head["loss log-softmax (fp32)"]
    assert extra["MTP eh_proj input"] == 2 * 2 * 4096 * V3.hidden
    # Megatron's hnorm reads the decoder output, which the output layer keeps: its fp32 statistics only
    assert extra["MTP hnorm"] == 4 * 4096
    full = activations(arch, 1, 4096, 16, implementation="megatron", recompute="full")
    assert not any(k.startswith("MTP block") for k in full.head)
    assert full.head["MTP embedding output (checkpoint)"] == 2 * 4096 * V3.hidden
    assert full.mtp_rebuilt > full.recompute_working             # the MTP module: a block and its norms
    block = activations(arch, 1, 4096, 16, implementation="megatron", recompute="full", recompute_method="block",
                        recompute_num_layers=2)
    assert any(k.startswith("MTP block") for k in block.head)     # "not supported for MTP yet": kept whole
    for bad in (dict(recompute="full", recompute_num_layers=61), dict(compile=True)):
        with pytest.raises(FieldError) as err:
            Workload(arch, **bad)
        assert err.value.field == "mtp_layers"


@pytest.mark.parametrize("model", ["llama", "deepseek_v3"])
def test_mtp_module_saves_what_zerocalc_counts_measured(model):
    pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
    pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
    from tests.measure.moe_activations import TINY
    from tests.measure.mtp_activations import measure_mtp

    cfg = TINY["deepseek_v3"] if model == "deepseek_v3" else dict(
        model_type="llama", num_hidden_layers=2, hidden_size=256, num_attention_heads=8, num_key_value_heads=2,
        intermediate_size=1024, vocab_size=1000, max_position_embeddings=128, pad_token_id=0)
    got = measure_mtp({**cfg, "attn_implementation": "sdpa"}, 2, 128)
    arch = architecture_from_config(cfg)
    plain = activations(arch, 2, 128, 16)
    mtp = sum(v for k, v in activations(replace(arch, mtp_layers=1), 2, 128, 16).head.items() if k.startswith("MTP"))
    # The MTP block is a decoder block of the last one's kind: whatever zerocalc misses of such a block in the main
    # model (DeepSeek's sigmoid router: 16,384 bytes here, and the loss's scalar) it misses there too, no more.
    assert mtp - got["mtp"] == plain.total - got["main"]
    assert abs(plain.total - got["main"]) <= 0.01 * got["main"]
