"""Shaped optimizers (tables.SHAPED_OPTIMIZERS) in the core, without torch: which tensors keep which state, the
params-only assumption, the step's working set (Muon's gather under ZeRO-3, paged states), and refusals. Byte-exact
checks against optimizer.state are in tests/test_optimizers_measured.py (torch 2.13, bitsandbytes 0.50.2, torchao
0.18.0, galore-torch 1.0, apollo-torch 1.0.3)."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerocalc import FieldError, Scenario, build_ledger, bytes_per_param
from zerocalc.layout import Layout
from zerocalc.model.architecture import Architecture
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.states.zero import model_states
from zerocalc.step.workload import Workload
from zerocalc.tables import OPTIMIZERS, SHAPED_OPTIMIZERS

LLAMA = MODEL_PRESETS["llama-3.1-8b"][0]
MIXTRAL = MODEL_PRESETS["mixtral-8x7b"][0]


def report(arch=LLAMA, workers=8, layout=Layout(), convention="megatron", **fields):
    s = Scenario.from_convention(convention, params=param_count(arch), workers=workers, **fields)
    return layout_report(s, Workload(arch, micro_batch=1, seq_len=4096, layout=layout))


def optimizer_bytes(r, stage=0, rank=0) -> dict:
    view = r.ranks[rank]
    return {row.entry.name: b for row, b in zip(view.rows, view.stages[stage].per_worker_by_entry)
            if row.entry.category == "optimizer" and row.entry.name != "master parameters"}


def test_existing_rows_are_untouched_and_adam_stays_16_bytes():
    # ZeRO paper section 3.1: 2 + 2 + 12; the per-parameter rows keep their own table.
    assert bytes_per_param(build_ledger(Scenario(params=10**9))) == 16
    assert not set(OPTIMIZERS) & set(SHAPED_OPTIMIZERS)


def test_muon_keeps_one_momentum_on_hidden_matrices_and_adamw_on_the_rest():
    # Moonlight toy_train.py @abaa96e: ndim >= 2 and not embed_tokens / lm_head -> Muon; the rest AdamW.
    a, h, V = LLAMA, LLAMA.hidden, LLAMA.vocab
    ends = 2 * V * h                                   # untied embedding and head
    norms = (2 * a.layers + 1) * h
    matrices = param_count(a) - ends - norms
    got = optimizer_bytes(report(workers=1, optimizer="muon"))
    assert got["momentum_buffer"] == 4 * matrices
    assert got["exp_avg"] == got["exp_avg_sq"] == 4 * (ends + norms)


def test_muon_fallback_is_choosable():
    got = optimizer_bytes(report(workers=1, optimizer="muon", fallback_optimizer="lion"))
    assert "exp_avg_sq" not in got and got["exp_avg"] > 0          # Lion: one moment


def test_muon_under_zero3_names_the_gather_of_its_largest_matrix_in_the_step():
    r = report(optimizer="muon")
    parts = r.peaks[3].phases["optimizer_step"]
    gather = [k for k in parts if k.startswith("Muon gathered")]
    assert gather == ["Muon gathered: up_proj.weight 14,336 x 4,096 (fp32)"]
    assert parts[gather[0]] == 14336 * 4096 * 4
    assert parts["Newton-Schulz 2 x 14,336 x 4,096 + 2 x 4,096^2 (bf16)"] == (2 * 14336 * 4096 + 2 * 4096**2) * 2
    # one rank, nothing sharded: Nesterov's update, the same size, not a gather
    assert any(k.startswith("Muon Nesterov update") for k in report(workers=1, optimizer="muon").peaks[0]
               .phases["optimizer_step"])


def test_muon_tensor_parallel_full_or_local():
    full = report(optimizer="muon", layout=Layout(tp=2)).peaks[0].phases["optimizer_step"]
    local = report(optimizer="muon", muon_tp="local", layout=Layout(tp=2)).peaks[0].phases["optimizer_step"]
    assert "Muon gathered: up_proj.weight 14,336 x 4,096 (fp32)" in full
    assert "Muon Nesterov update: up_proj.weight 7,168 x 4,096 (fp32)" in local


def test_muon_orthogonalises_one_expert_matrix_at_a_time():
    parts = report(arch=MIXTRAL, optimizer="muon", layout=Layout(ep=8)).peaks[3].phases["optimizer_step"]
    name = next(k for k in parts if k.startswith("Muon"))
    assert "32,000" not in name and "28,672 x 4,096" in name     # gate_up [E, 2f, h]: one expert's 2f x h


def test_paged_states_live_on_the_host_and_the_largest_is_paged_in_at_the_step():
    r = report(workers=1, optimizer="paged-adamw")
    paged = sum(b for k, b in optimizer_bytes(r).items() if "paged" in k)
    assert r.stages[0].cpu_bytes == paged > 0
    step = r.peaks[0].phases["optimizer_step"]["paged optimizer state (largest tensor, paged in)"]
    assert step == 2 * 4 * LLAMA.vocab * LLAMA.hidden             # state1 + state2 of the embedding, fp32


def test_states_shard_over_zero_like_every_optimizer_state():
    one, eight = optimizer_bytes(report(workers=1, optimizer="muon")), optimizer_bytes(report(optimizer="muon"), 1)
    assert all(eight[k] == -(-one[k] // 4 // 8) * 4 for k in one)


def test_params_only_reads_the_rows_on_assumed_square_matrices():
    # No architecture: the Adafactor precedent, d = factored_dim; Muon takes every parameter.
    s = Scenario(params=10**9, optimizer="muon")
    assert bytes_per_param(build_ledger(s)) == 16 - 4
    g = Scenario(params=10**9, optimizer="galore-adamw", factored_dim=4096, optimizer_rank=128)
    # fp32: the whole 4096 x 4096 SVD factor, and two 128 x 4096 moments
    assert bytes_per_param(build_ledger(g)) == 8 + 4 * (1 + Fraction(2 * 128, 4096))
    assert model_states(g).stage(0).per_worker_total > 0


@pytest.mark.parametrize("field, value", [("optimizer", "dion"), ("fallback_optimizer", "muon"),
                                          ("ns_dtype", "fp9"), ("muon_tp", "half"), ("optimizer_rank", 0)])
def test_bad_optimizer_fields_are_refused_by_name(field, value):
    with pytest.raises(FieldError) as e:
        Scenario(params=10, **{field: value})
    assert e.value.field == field


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(SHAPED_OPTIMIZERS)), st.integers(1, 4), st.sampled_from([1, 2]),
       st.sampled_from(["fp32", "bf16"]))
def test_shaped_state_never_grows_with_the_stage_and_one_rank_is_one_copy(optimizer, layers, tp, dtype):
    arch = Architecture(hidden=256, layers=layers, heads=4, kv_heads=2, ffn=704, vocab=1000, seq_len=64)
    s = Scenario(params=param_count(arch), workers=4, optimizer=optimizer, optimizer_dtype=dtype)
    r = layout_report(s, Workload(arch, micro_batch=1, seq_len=64, layout=Layout(tp=tp)))
    totals = [st.per_worker_total for st in r.ranks[0].stages]
    assert totals == sorted(totals, reverse=True)
    if tp == 1:
        assert r.ranks[0].stages[0].per_worker_total == r.unique_total


def test_cli_flags_json_and_text():
    import json

    from zerocalc.cli.main import run
    out = json.loads(run(["--model", "llama-3.1-8b", "--workers", "8", "--convention", "megatron", "--optimizer",
                          "muon", "--fallback-optimizer", "adamw", "--ns-dtype", "fp32", "--optimizer-dtype", "bf16",
                          "--json"]))
    assert out["scenario"]["optimizer"] == "muon" and out["scenario"]["ns_dtype"] == "fp32"
    rows = {r["name"]: r for r in out["ledger"]}
    assert rows["momentum_buffer"]["dtype"] == "bf16" and "Muon" in rows["momentum_buffer"]["kept_by"]
    step = out["peak"][3]["phases"]["optimizer_step"]
    assert step["Muon gathered: up_proj.weight 14,336 x 4,096 (bf16)"] == 14336 * 4096 * 2
    assert step["Newton-Schulz 2 x 14,336 x 4,096 + 2 x 4,096^2 (fp32)"] == (2 * 14336 * 4096 + 2 * 4096**2) * 4
    # bytes per parameter: the rows as measured on the architecture, summing to the one copy
    assert sum(r["one_copy_bytes"] for r in out["ledger"]) == out["one_copy_bytes"]
    text = run(["--params", "7B", "--optimizer", "galore-adamw", "--optimizer-rank", "64"])
    assert "square 4,096 x 4,096 hidden matrices (factored_dim): give a model" in text


def test_cli_refuses_a_bad_optimizer_option():
    from zerocalc.cli.main import UsageError, run
    with pytest.raises(UsageError, match="--muon-tp"):
        run(["--params", "7B", "--optimizer", "muon", "--muon-tp", "half"])
    with pytest.raises(UsageError, match="--optimizer-rank: got 2000000"):
        run(["--params", "7B", "--optimizer", "galore-adamw", "--optimizer-rank", "2000000"])


def test_importers_name_muon():
    import json

    from zerocalc.frameworks import import_deepspeed, import_torchtitan
    # DeepSpeed 0.19.8 runtime/config.py MUON_OPTIMIZER = 'muon' -> MuonWithAuxAdam
    r = import_deepspeed(json.dumps({"optimizer": {"type": "Muon"}, "zero_optimization": {"stage": 3}}), None)
    assert r.scenario["optimizer"] == "muon" and any("MuonWithAuxAdam" in n for n in r.notes)
    t = import_torchtitan('[optimizer]\nname = "Muon"\n', {"gpus": 8})
    assert t.scenario["optimizer"] == "muon" and any("torch.optim.Muon" in n for n in t.notes)
    assert import_torchtitan('[optimizer]\nname = "AdamW"\n', {"gpus": 8}).scenario["optimizer"] == "adamw"


def test_fsdp2_pads_state_shaped_like_its_parameter_as_it_pads_adams():
    # FSDP2 pads each tensor's dim-0 shard (placement.Holding.fsdp_shard); Muon's momentum and its fallback's
    # moments cover every tensor once, so together they pad exactly as one Adam moment does.
    a = MODEL_PRESETS["qwen3-0.6b"][0]

    def rows(optimizer):
        s = Scenario.from_convention("fsdp2", params=param_count(a), workers=3, optimizer=optimizer)
        return {r.entry.name: r.sharded for r in layout_report(s, Workload(a)).ranks[0].rows
                if r.entry.category == "optimizer"}
    adam, muon = rows("adamw"), rows("muon")
    assert muon["momentum_buffer"] + muon["exp_avg"] == adam["exp_avg"]
    assert adam["exp_avg"] > -(-param_count(a) // 3)              # padding: more than an even third
