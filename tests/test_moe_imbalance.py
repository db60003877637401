"""MoE routing as it is (issue 37): Hugging Face's load-balancing loss, a library term outside the layers
(zerocalc/step/router_loss.py), measured on the CPU with transformers' own function, and the hot expert's rank.

Sources: transformers 5.24.0 models/qwen3_moe/modeling_qwen3_moe.py load_balancing_loss_func (one layer at a time
since huggingface/transformers PR #48131, released in 5.16.0) and the 5.15.1 function from its wheel; the PR's
figure: a 48 GiB one-hot for Qwen3-30B-A3B (48 layers, 128 experts, top-8) at 131K tokens per device."""

from dataclasses import replace

import pytest

from zerocalc import Scenario
from zerocalc.layout import Layout
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.router_loss import router_loss_bytes
from zerocalc.step.workload import Workload

QWEN3_MOE = MODEL_PRESETS["qwen3-30b-a3b"][0]


class _Shape:
    """The two fields router_loss_bytes reads of a rank's step shape."""
    def __init__(self, tokens, vocab_columns, act_bits=16):
        self.logits_elements, self.act_bits = tokens * vocab_columns, act_bits


def test_the_published_one_hot_before_transformers_5_16():
    """PR #48131: training Qwen3-30B-A3B with output_router_logits at 131K tokens per device allocates a 48 GiB
    one-hot; the formula's int64 one-hot is that tensor (the .float() beside it is half of it again)."""
    a = QWEN3_MOE
    assert (a.moe_layers, a.experts, a.experts_per_token) == (48, 128, 8)
    T = 131072
    old = Workload(a, seq_len=T, router_loss=True, finetune=replace(Workload(a).finetune,
                                                                    versions=(("transformers", "5.15.1"),)))
    new = Workload(a, seq_len=T, router_loss=True)
    shape = _Shape(T, old.vocab_columns)
    one_hot = a.moe_layers * T * a.experts_per_token * a.experts * 8
    assert one_hot == 48 * 2**30
    old_bytes, new_bytes = router_loss_bytes(old, shape), router_loss_bytes(new, shape)
    kept = a.moe_layers * T * a.experts * 2
    assert old_bytes["forward"] - kept > one_hot * 12 // 8            # one-hot, its .float(), and the rest
    # after the PR: the kept logits, the saved softmaxes and one layer's transients (3.3 GB, not 80)
    assert new_bytes["forward"] == kept * 2 + T * a.experts * 4 + T * a.experts_per_token * (2 + 8)
    assert old_bytes["backward"] == new_bytes["backward"] == kept


def test_formula_against_the_cpu_measurement():
    """tests/measure/router_loss.py runs transformers' own function (and 5.15.1's when its wheel is there)."""
    pytest.importorskip("transformers")
    from tests.measure.router_loss import function_peak, model_router_terms, old_loss_func
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    L, T, E, k = 4, 512, 16, 4
    w = 2
    measured = function_peak(load_balancing_loss_func, L, T, E, k)
    formula = L * T * E * w + T * E * 4 + T * k * (w + 8)
    assert formula <= measured["forward_peak"] <= formula * 1.01
    assert L * T * E * w <= measured["saved"] <= L * T * E * w * 1.01
    model = model_router_terms()
    assert model["on"]["router_logits_kept"] == model["LTE"] * w
    assert model["LTE"] * w <= model["saved_difference"] <= model["LTE"] * w * 1.01
    old = old_loss_func()
    if old is None:
        pytest.skip("the transformers 5.15.1 wheel is not downloaded (TRANSFORMERS_OLD_WHEEL)")
    measured = function_peak(old, L, T, E, k)
    formula = 2 * L * T * E * w + L * T * k * (w + 8) + 12 * L * T * k * E
    assert formula <= measured["forward_peak"] <= formula * 1.01


def _report(**kw):
    a = MODEL_PRESETS["mixtral-8x7b"][0]
    a = replace(a, layers=2)
    s = Scenario(params=param_count(a), workers=8)
    return layout_report(s, Workload(a, seq_len=4096, gpu_memory=10**12, **kw))


def test_router_loss_is_its_own_row_and_off_by_default():
    off, on = _report(), _report(router_loss=True)
    assert all("router load-balancing loss" not in p.phases["forward"] for p in off.peaks)
    for p_off, p_on in zip(off.peaks, on.peaks):
        row = p_on.phases["forward"]["router load-balancing loss"]
        assert row > 0 and p_on.phases["backward"]["router load-balancing loss"] > 0
        assert p_on.peak_bytes >= p_off.peak_bytes


def test_router_loss_refused_where_it_does_not_exist():
    with pytest.raises(FieldError) as exc:
        Workload(MODEL_PRESETS["qwen3-0.6b"][0], router_loss=True)
    assert exc.value.field == "router_loss"
    with pytest.raises(FieldError) as exc:
        Workload(QWEN3_MOE, router_loss=True, implementation="megatron")
    assert exc.value.field == "router_loss"


def test_the_hot_experts_rank_holds_more_expert_activations():
    """moe_imbalance_percent (the busiest expert-parallel rank's pairs over a balanced share) moves the experts'
    activations on that rank; a capacity factor caps it; without expert parallelism it changes nothing."""
    a = replace(MODEL_PRESETS["mixtral-8x7b"][0], layers=2)
    s = Scenario(params=param_count(a), workers=8)
    base = dict(seq_len=4096, gpu_memory=10**12, layout=Layout(ep=8))
    act = lambda **kw: max(v.shape.activation_bytes for v in layout_report(s, Workload(a, **base, **kw)).ranks)
    balanced, hot, capped = act(), act(moe_imbalance_percent=200), act(moe_imbalance_percent=200,
                                                                       moe_capacity_percent=125)
    assert balanced < capped < hot
    no_ep = dict(base, layout=Layout())
    assert layout_report(s, Workload(a, **no_ep)).peaks == layout_report(s, Workload(a, **no_ep,
                                                                          moe_imbalance_percent=200)).peaks


def test_the_imbalance_band_is_in_the_default_band_under_expert_parallelism():
    """answers/ranges.py "moe_imbalance": 100 % to 125 % (or the capacity factor), in the default band of a MoE
    model with ep > 1 (default_vary), the point balanced; the band's notes say which assumption decides it."""
    from zerocalc.answers.ranges import DEFAULT_VARY, default_vary, ranges

    assert "moe_imbalance" not in DEFAULT_VARY
    a = replace(MODEL_PRESETS["mixtral-8x7b"][0], layers=2)
    s = Scenario(params=param_count(a), workers=8)
    w = Workload(a, seq_len=4096, gpu_memory=10**12, layout=Layout(ep=8))
    assert default_vary(w) == DEFAULT_VARY + ("moe_imbalance",)
    assert default_vary(replace(w, layout=Layout())) == DEFAULT_VARY          # without ep it moves nothing
    r = ranges(s, w)
    assert (r.low["moe_imbalance_percent"], r.point["moe_imbalance_percent"], r.high["moe_imbalance_percent"]) \
        == (100, 100, 125)
    alone = ranges(s, w, vary=("moe_imbalance",))
    assert all(b.low_bytes == b.point_bytes < b.high_bytes for b in alone.bands)
    assert all(b.swing["moe_imbalance"][0] < b.swing["moe_imbalance"][1] for b in r.bands)
    assert any("dropless" in n for n in r.notes)
    capped = ranges(s, replace(w, moe_capacity_percent=110))
    assert capped.high["moe_imbalance_percent"] == 110 and any("capacity factor 1.1" in n for n in capped.notes)
