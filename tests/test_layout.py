"""Model parallelism: the layout, pipeline placement and schedules, per-rank model states and activations under
tensor / sequence / context / pipeline parallelism, the per-rank report's invariants and bad input."""

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from zerocalc import Scenario
from zerocalc.states.zero import model_states
from zerocalc.step.activations import activations
from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import param_count
from zerocalc.parallel.costs import bubble_fraction
from zerocalc.layout import Layout, chunk_layers, in_flight, padded_vocab
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.model.placement import rank_classes, stored_params
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

LLAMA8B = MODEL_PRESETS["llama-3-8b"][0]
S, B, H, A = 2048, 4, 4096, 32


def gpt_block(p=0.1, **kw):
    # A GPT block as Korthikanti et al. model it: LayerNorm, 4h MLP, dropout, MHA.
    return Architecture(layers=32, hidden=H, heads=A, ffn=4 * H, vocab=51200, seq_len=S, gated_mlp=False,
                        norm="layernorm", bias=True, positions="learned", activation="gelu",
                        attn_dropout=p, resid_dropout=p, **kw)


def view(arch=LLAMA8B, dp=8, convention="zero-paper", **layout_and_work):
    layout_keys = {"tp", "pp", "vpp", "cp", "sequence_parallel", "micro_batches", "schedule", "loss_parallel",
                   "vocab_divisor"}
    layout = Layout(**{k: v for k, v in layout_and_work.items() if k in layout_keys})
    work = Workload(arch, layout=layout, **{k: v for k, v in layout_and_work.items() if k not in layout_keys})
    return Scenario.from_convention(convention, params=param_count(arch), workers=dp), work


# --- pipeline schedules (Megatron-LM schedules.py, see zerocalc/layout.py) ------------------------------------

@pytest.mark.parametrize("pp, m", [(4, 8), (4, 2), (8, 16), (2, 1)])
def test_1f1b_rank_r_holds_min_pp_minus_r_micro_batches(pp, m):
    # Non-interleaved 1F1B: warm-up pp - r - 1 forwards, then one forward before each backward.
    for r in range(pp):
        alive, first, last = in_flight("1f1b", pp, 1, m, r)
        assert alive == min(pp - r, m)
        assert first == (alive if r == 0 else 0) and last == (1 if r == pp - 1 else 0)


def test_gpipe_holds_every_micro_batch_on_every_rank():
    assert all(in_flight("gpipe", 4, 1, 12, r)[0] == 12 for r in range(4))


@pytest.mark.parametrize("pp, vpp", [(2, 2), (4, 2), (4, 4), (8, 3)])
def test_interleaved_first_rank_matches_megatrons_memory_factor(pp, vpp):
    # Megatron schedules.py: warm-up 2 (pp - r - 1) + (vpp - 1) pp chunk-micro-batches; rank 0 then holds
    # W + 1 chunks of L / (pp vpp) layers = L (1 + (pp - 1) / (pp vpp)): theoretical_memory_usage.py's factor.
    m = 4 * pp
    alive, _, _ = in_flight("interleaved", pp, vpp, m, 0, 0, 0, 1)
    assert alive == 2 * (pp - 1) + (vpp - 1) * pp + 1
    layers = pp * vpp * 3
    assert alive * Fraction(layers, pp * vpp) == layers * (1 + Fraction(pp - 1, pp * vpp))


def test_interleaved_with_few_micro_batches_holds_them_all():
    assert in_flight("interleaved", 4, 2, 2, 0, 0, 0, 1)[0] == 4          # m x vpp = 4 < the warm-up


def test_chunks_follow_megatrons_virtual_pipeline_layout():
    # Megatron get_transformer_layer_offset: 8 layers, pp 2, vpp 2 -> rank 0 holds [0, 1] and [4, 5].
    assert chunk_layers(8, 2, 2) == ((2, 2), (2, 2))
    # Uneven splits give the first chunks one layer more (numpy.array_split order).
    assert chunk_layers(10, 4, 1) == ((3,), (3,), (2,), (2,))


def test_bubble_is_pp_minus_one_over_vpp_m():
    # Narayanan et al. 2021, section 2.2.
    assert bubble_fraction(Layout(pp=4, micro_batches=8)) == 3 / 8
    assert bubble_fraction(Layout(pp=4, vpp=2, schedule="interleaved", micro_batches=8)) == 3 / 16
    assert bubble_fraction(Layout()) == 0


# --- placement ------------------------------------------------------------------------------------------------

def test_rank_classes_name_the_first_middle_and_last_stages_and_count_every_rank():
    classes = rank_classes(LLAMA8B, Layout(tp=2, pp=4), 8, "huggingface")
    assert [c.name for c in classes] == ["pipeline stage 0 (first)", "pipeline stages 1-2",
                                         "pipeline stage 3 (last)"]
    assert sum(c.count for c in classes) == 8 * 2 * 4
    first, middle, last = classes
    assert first.first and not first.last and last.last and middle.count == 2 * 8 * 2
    # the embedding on the first stage, the head and final norm on the last, 8 layers each
    assert {h.tensor.module for h in first.holdings} >= {"embed_tokens"}
    assert "lm_head" in {h.tensor.module for h in last.holdings} and "lm_head" not in \
        {h.tensor.module for h in first.holdings}
    assert all(c.layers == 8 for c in classes)


def test_tensor_parallel_splits_column_row_vocab_and_keeps_norms_whole():
    tp = 4
    (c,) = rank_classes(LLAMA8B, Layout(tp=tp), 1, "huggingface")
    local = {h.tensor.name: h.local_elements for h in c.holdings}
    h, q, kv, f, V = 4096, 4096, 1024, 14336, 128256
    assert local["q_proj.weight"] == q // tp * h and local["k_proj.weight"] == kv // tp * h
    assert local["o_proj.weight"] == h * q // tp and local["down_proj.weight"] == h * f // tp
    assert local["input_norm.weight"] == h and local["final_norm.weight"] == h
    assert local["embed_tokens.weight"] == V // tp * h
    # every tensor-parallel shard together is the model, plus tp - 1 extra copies of each replicated norm
    norms = (2 * 32 + 1) * h
    assert tp * c.params == param_count(LLAMA8B) + (tp - 1) * norms


def test_row_parallel_biases_stay_whole_and_column_biases_split():
    a = MODEL_PRESETS["gpt2"][0]
    (c,) = rank_classes(a, Layout(tp=4), 1, "huggingface")
    local = {h.tensor.name: h.local_elements for h in c.holdings}
    assert local["qkv_proj.bias"] == 3 * 768 // 4 and local["o_proj.bias"] == 768
    assert local["up_proj.bias"] == 3072 // 4 and local["down_proj.bias"] == 768


def test_tied_embedding_is_copied_to_the_last_stage_only_under_pipeline_parallel():
    # Megatron: the last stage allocates its own output weight, synchronised with the first stage's embedding.
    a = MODEL_PRESETS["llama-3.2-1b"][0]
    (only,) = rank_classes(a, Layout(), 1, "huggingface")
    assert only.params == param_count(a)
    first, last = rank_classes(a, Layout(pp=2), 1, "huggingface")
    V, h = 128256, 2048
    assert first.params + last.params == param_count(a) + V * h
    assert "lm_head" in {x.tensor.module for x in last.holdings}


def test_megatron_kernels_pad_the_vocabulary_to_128_times_tp():
    # Megatron vocab_utils: ceil(V / (128 tp)) * 128 tp; Hugging Face checkpoints are not padded.
    gpt2 = MODEL_PRESETS["gpt2"][0]
    assert padded_vocab(50257, 128) == 50304 and padded_vocab(50257, 128 * 8) == 51200
    assert stored_params(gpt2, Layout(), "huggingface") == param_count(gpt2)
    assert stored_params(gpt2, Layout(), "megatron") == param_count(gpt2) + (50304 - 50257) * 768
    assert stored_params(gpt2, Layout(tp=4, vocab_divisor=1), "megatron") == param_count(gpt2) + 3 * 768


# --- activations under TP / SP / CP (Korthikanti et al. 2022) -------------------------------------------------

def without_norm_stats(total, T):
    return total - 2 * 8 * T                           # fused LayerNorm's fp32 mean and rstd per token, x2


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_parallel_layer_is_sbh_10_plus_24_over_t_plus_5as_over_ht(t):
    # Korthikanti et al. 2022, eq. (2): sbh (10 + 24/t + 5as/(ht)) with tensor parallelism alone.
    r = activations(gpt_block(), B, S, 16, "eager", "none", "megatron", tp=t)
    assert without_norm_stats(r.per_layer_total, S * B) == S * B * H * (10 + 24 // t) + 5 * A * S * S * B // t


@pytest.mark.parametrize("t", [2, 4, 8])
def test_sequence_parallel_divides_the_whole_layer_by_t(t):
    # Korthikanti et al. 2022, eq. (4): sbh/t (34 + 5as/h) with tensor and sequence parallelism.
    r = activations(gpt_block(), B, S, 16, "eager", "none", "megatron", tp=t, sequence_parallel=True)
    assert without_norm_stats(r.per_layer_total, S * B // t) == (S * B * H * 34 + 5 * A * S * S * B) // t


def test_dtensor_sequence_parallel_keeps_the_gathered_linear_inputs_whole():
    # A DTensor plan all-gathers the sequence before q/k/v and gate/up and the matmul saves that full input;
    # Megatron's sequence-parallel linear saves its shard and gathers again in backward.
    t = 4
    hf = activations(LLAMA8B, 1, 4096, 16, "flash", "none", "huggingface", tp=t, sequence_parallel=True)
    meg = activations(LLAMA8B, 1, 4096, 16, "flash", "none", "megatron", tp=t, sequence_parallel=True)
    assert hf.per_layer["attention input"] == 2 * 4096 * 4096 == t * meg.per_layer["attention input"]
    assert hf.per_layer["mlp input"] == 2 * 4096 * 4096


def test_context_parallel_is_the_same_layer_on_a_cp_th_of_the_sequence():
    full = activations(LLAMA8B, 2, 2048, 16, "flash", tp=2, sequence_parallel=True)
    split = activations(LLAMA8B, 2, 4096, 16, "flash", tp=2, sequence_parallel=True, cp=2)
    assert split.per_layer == full.per_layer and split.embed == full.embed


def test_vocab_parallel_loss_keeps_a_tp_th_of_the_fp32_log_softmax():
    s, w = view(tp=4, micro_batch=1, seq_len=1024)
    last = layout_report(s, w).ranks[-1]
    assert last.shape.act.head["loss log-softmax (fp32)"] == 4 * 1024 * 128256 // 4
    s, w = view(tp=4, micro_batch=1, seq_len=1024, loss_parallel=False)
    assert layout_report(s, w).ranks[-1].shape.act.head["loss log-softmax (fp32)"] == 4 * 1024 * 128256


def test_first_stage_holds_pp_micro_batches_and_only_the_last_stage_holds_the_logits():
    s, w = view(pp=4, micro_batches=8, micro_batch=1, seq_len=2048)
    first, middle, last = layout_report(s, w).ranks
    per_mb_layer = first.shape.act.per_layer_total
    embed = sum(first.shape.act.embed.values())
    rotary = sum(first.shape.act.stage.values())       # every stage builds its own rotary tables
    assert rotary == 2 * 2 * 2048 * 128
    assert first.shape.activation_bytes == 4 * (8 * per_mb_layer + embed + rotary)
    assert last.shape.activation_bytes == 8 * per_mb_layer + rotary + sum(last.shape.act.head.values())
    assert first.shape.logits_elements == 0 and last.shape.logits_elements == 2048 * 128256
    assert "logits and loss" not in first.peaks[0].phases["forward"]


# --- invariants -----------------------------------------------------------------------------------------------

models = st.sampled_from(["gpt2", "llama-2-7b", "llama-3-8b", "qwen2.5-0.5b", "llama-3.2-1b", "phi-3-mini"])
conventions = st.sampled_from(["zero-paper", "megatron", "fsdp2", "pure-bf16", "deepspeed"])
# (FSDP2's per-tensor padding: see test_a_trivial_layout_is_pure_data_parallelism_byte_for_byte)


@settings(max_examples=60, deadline=None)
@given(models, conventions, st.integers(1, 300), st.sampled_from([None, 1]), st.integers(1, 8),
       st.sampled_from([512, 2048]), st.sampled_from(["none", "selective", "op", "full"]),
       st.sampled_from(["cpu", "none"]))
def test_a_trivial_layout_is_pure_data_parallelism_byte_for_byte(name, conv, dp, group, mb, seq, recompute, off):
    arch = MODEL_PRESETS[name][0]
    scenario = Scenario.from_convention(conv, params=param_count(arch), workers=dp, shard_group=group,
                                        offload_optimizer=off)
    report = layout_report(scenario, Workload(arch, micro_batch=mb, seq_len=seq, recompute=recompute))
    legacy = model_states(scenario)
    if conv == "fsdp2":
        # FSDP2 pads each tensor's dim-0 shard (measured: tests/test_finetune_validation.py); the pure data-parallel
        # view has no tensors and rounds the whole model up once: the two agree to within ranks - 1 rows a tensor.
        for ours, flat in zip(report.stages, legacy.stages):
            assert flat.per_worker_total <= ours.per_worker_total <= flat.per_worker_total + 16 * 2**20 * dp
        return
    assert report.stages == legacy.stages and report.unique_by_entry == legacy.unique_by_entry
    assert len(report.ranks) == 1 and report.ranks[0].rank.count == dp


layouts = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
                    st.booleans(), st.integers(1, 8))


@settings(max_examples=60, deadline=None)
@given(models, conventions, st.integers(1, 64), layouts)
def test_cluster_totals_are_the_sum_over_every_rank(name, conv, dp, lay):
    tp, pp, cp, sp, m = lay
    arch = MODEL_PRESETS[name][0]
    assume(not (arch.heads % tp or arch.n_kv_heads % tp or pp > arch.layers))
    s, w = view(arch, dp, conv, tp=tp, pp=pp, cp=cp, sequence_parallel=sp, micro_batches=m, seq_len=2048)
    report = layout_report(s, w)
    assert sum(v.rank.count for v in report.ranks) == dp * tp * pp * cp
    for stage in range(4):
        total = sum(v.rank.count * v.stages[stage].per_worker_total for v in report.ranks)
        assert report.stages[stage].cluster_total == total
        assert report.stages[stage].redundant_bytes >= 0
        worst = report.ranks[report.worst[stage]]
        assert report.peaks[stage].peak_bytes == max(v.peaks[stage].peak_bytes for v in report.ranks)
        assert report.stages[stage] == worst.stages[stage]._replace(cluster_total=total)


@settings(max_examples=40, deadline=None)
@given(models, st.integers(1, 32), layouts, st.sampled_from(["tp", "pp", "dp"]))
def test_per_rank_bytes_never_grow_when_tp_pp_or_dp_grows(name, dp, lay, grow):
    tp, pp, cp, sp, m = lay
    arch = MODEL_PRESETS[name][0]
    bigger = {"tp": (2 * tp, pp, dp), "pp": (tp, 2 * pp, dp), "dp": (tp, pp, 2 * dp)}[grow]
    for t, p in ((tp, pp), bigger[:2]):
        assume(not (arch.heads % t or arch.n_kv_heads % t or arch.ffn % t or p > arch.layers))
    small = layout_report(*view(arch, dp, tp=tp, pp=pp, cp=cp, micro_batches=m))
    big = layout_report(*view(arch, bigger[2], tp=bigger[0], pp=bigger[1], cp=cp, micro_batches=m))
    stages = (0, 1, 2, 3) if grow != "dp" else (1, 2, 3)      # dp shards only what the stage partitions
    for s in stages:
        assert max(v.stages[s].per_worker_total for v in big.ranks) <= \
            max(v.stages[s].per_worker_total for v in small.ranks)


def test_zero_shards_over_dp_times_cp():
    # Megatron's distributed optimizer and torchtitan's FSDP mesh (dp_shard_cp) include the context-parallel
    # ranks: they hold the same weights.
    s, w = view(dp=4, cp=2, seq_len=4096)
    (v,) = layout_report(s, w).ranks
    assert [g.shard for g in v.shape.groups] == [8]
    opt = v.stages[1].per_worker_by_category["optimizer"]
    assert opt == 3 * 4 * -(-param_count(LLAMA8B) // 8)


# --- bad input ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout, field, allowed", [
    (dict(tp=3), "tp", "a divisor of heads, kv_heads and ffn"),
    (dict(tp=16), "tp", "not of kv_heads (8)"),
    (dict(pp=33), "pp", "at most the layers (32)"),
    (dict(pp=4, vpp=3, schedule="interleaved"), "vpp", "dividing the layers"),
    (dict(cp=2), "cp", "eager attention"),
])
def test_layouts_a_model_cannot_take_are_named(layout, field, allowed):
    with pytest.raises(FieldError) as err:
        Workload(LLAMA8B, attention="eager", layout=Layout(**layout))
    assert err.value.field == field and allowed in str(err.value)


@pytest.mark.parametrize("kwargs, field", [(dict(tp=0), "tp"), (dict(vpp=2), "vpp"),
                                           (dict(schedule="zb-v"), "schedule"), (dict(micro_batches=0),
                                                                                  "micro_batches"),
                                           (dict(schedule="interleaved", vpp=2), "schedule")])
def test_bad_layout_fields_are_named(kwargs, field):
    with pytest.raises(FieldError) as err:
        Layout(**kwargs)
    assert err.value.field == field


def test_context_parallel_needs_2cp_dividing_the_sequence():
    with pytest.raises(FieldError) as err:
        Workload(LLAMA8B, seq_len=1000, layout=Layout(cp=16))
    assert err.value.field == "cp" and "2 x cp dividing the sequence length (1,000)" in str(err.value)


def test_a_layout_keeps_its_fields_through_replace():
    s, w = view(tp=2, pp=2, micro_batches=4)
    assert replace(w, micro_batch=3).layout == w.layout
