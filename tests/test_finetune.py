"""Fine-tuning in the ledger: frozen weights keep only their stored bytes, adapters train with the full ledger,
ZeRO shards a frozen base only at stage 3, and the properties issue 10 names."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerocalc import Scenario
from zerocalc.model.inventory import param_count
from zerocalc.model.finetune import TARGETS, FineTune
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.output.report import full_report, trainable_counts
from zerocalc.scenario import FieldError
from zerocalc.step.workload import Workload

LLAMA = MODEL_PRESETS["llama-3-8b"][0]


def view(ft=FineTune(), arch=LLAMA, convention="zero-paper", workers=8, **work):
    s = Scenario.from_convention(convention, params=param_count(arch), workers=workers)
    return layout_report(s, Workload(arch, seq_len=2048, finetune=ft, **work))


def test_llama3_8b_lora_r16_all_linear_trains_what_peft_reports():
    # peft's print_trainable_parameters for Llama-3-8B, r = 16 on every linear: 41,943,040 trainable.
    counts = trainable_counts(view(FineTune(mode="lora", lora_rank=16, lora_targets=("all-linear",))))
    assert counts["trainable_params"] == 41_943_040 == counts["adapter_params"]
    assert counts["frozen_params"] == param_count(LLAMA)


def test_frozen_weights_keep_only_their_stored_bytes():
    r = view(FineTune(mode="lora"), convention="megatron")
    stage0 = r.ranks[0].stages[0].per_worker_by_category
    trainable = trainable_counts(r)["trainable_params"]
    # megatron ledger: bf16 params 2 + fp32 grads 4 + 12; fp32 adapters (peft's default on a bf16 base) are their
    # own master copy, as Megatron's optimizer keeps fp32 parameters (fp32_from_fp32_groups) and torch AMP trains
    # them: 4 + 4 + Adam's 8 = 16 bytes per adapter parameter, not 20.
    assert stage0["parameters"] == 2 * param_count(LLAMA) + 4 * trainable
    assert stage0["gradients"] == 4 * trainable and stage0["optimizer"] == 8 * trainable
    entries = [row.entry.name for row in r.ranks[0].rows]
    assert not any("master" in name for name in entries if name.startswith("fp32"))


def test_a_16_bit_adapter_keeps_its_master_copy():
    # --adapter-dtype bf16 (what DeepSpeed's engine does when it casts the module to bf16): 2 + 4 + 12 = 18 bytes
    # per adapter parameter in the megatron ledger, the fp32 master copy included.
    r = view(FineTune(mode="lora", adapter_dtype="bf16"), convention="megatron")
    stage0 = r.ranks[0].stages[0].per_worker_by_category
    trainable = trainable_counts(r)["trainable_params"]
    assert stage0["parameters"] == 2 * (param_count(LLAMA) + trainable)
    assert stage0["gradients"] == 4 * trainable            # Megatron's fp32 main_grad, as for any bf16 weight
    assert stage0["optimizer"] == 12 * trainable


def test_a_frozen_base_is_sharded_only_at_stage_3():
    r = view(FineTune(mode="lora"))
    frozen = {s: dict(zip([row.entry.name for row in r.ranks[0].rows], r.ranks[0].stages[s].per_worker_by_entry))
              ["frozen: parameters"] for s in range(4)}
    assert frozen[0] == frozen[1] == frozen[2] == 2 * param_count(LLAMA)
    assert frozen[3] == 2 * -(-param_count(LLAMA) // 8)


def test_training_every_module_is_full_fine_tuning():
    everything = FineTune(mode="freeze", train_last_layers=LLAMA.layers,
                          train_modules=("embed_tokens", "lm_head", "norms"))
    full, frozen_none = view(), view(everything)
    assert [s.per_worker_total for s in full.stages] == [s.per_worker_total for s in frozen_none.stages]
    assert full.ranks[0].shape.activation_bytes == frozen_none.ranks[0].shape.activation_bytes


def test_lora_without_targets_is_everything_frozen():
    no_adapters = view(FineTune(mode="lora", lora_targets=()))
    all_frozen = view(FineTune(mode="freeze"))
    assert [s.per_worker_total for s in no_adapters.stages] == [s.per_worker_total for s in all_frozen.stages]
    assert trainable_counts(no_adapters)["trainable_params"] == 0


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 256), st.lists(st.sampled_from(TARGETS), min_size=1, max_size=7, unique=True),
       st.booleans())
def test_trainable_bytes_grow_linearly_in_the_rank(rank, targets, dora):
    mode = "dora" if dora else "lora"

    def trained(r):
        v = view(FineTune(mode=mode, lora_rank=r, lora_targets=tuple(targets)))
        return v.ranks[0].stages[0].per_worker_by_category["optimizer"]

    one, two = trained(1), trained(2)
    assert trained(rank) == one + (rank - 1) * (two - one)


def test_freezing_all_but_the_last_blocks_saves_nothing_before_them():
    k = 4
    r = view(FineTune(mode="freeze", train_last_layers=k))
    act = r.ranks[0].shape.act
    assert act.layers == k and act.frozen_blocks == LLAMA.layers - k
    full = view().ranks[0].shape.act
    assert r.ranks[0].shape.activation_bytes < full.per_layer_total * (k + 1) + sum(full.head.values())


def test_qlora_storage_and_the_dequantized_weight():
    qlora = view(FineTune(mode="qlora", lora_targets=("all-linear",)), convention="pure-bf16")
    shape = qlora.ranks[0].shape
    assert shape.dequantized == 2 * 14336 * 4096 + 8 * (14336 * 4096 // 64)    # the largest 4-bit linear
    assert "dequantized 4-bit weight" in qlora.peaks[0].phases["forward"]
    names = {row.entry.name for row in qlora.ranks[0].rows}
    assert {"nf4, frozen: nf4 data (packed)", "nf4, frozen: absmax (8-bit)"} <= names
    assert "fp32, frozen: parameters" in names          # prepare_model_for_kbit_training's fp32 embedding, norms


def test_the_report_explains_when_qlora_is_not_smaller():
    s = Scenario.from_convention("pure-bf16", params=param_count(LLAMA), workers=1)
    out = full_report(s, Workload(LLAMA, seq_len=4096, micro_batch=4, finetune=FineTune(mode="qlora")))
    cmp = out["finetune_comparison"]
    assert cmp["quantized_model_state_bytes"][0] < cmp["plain_model_state_bytes"][0]
    assert any("fp32" in reason for reason in cmp["reasons"]) and any("dequantized" in r for r in cmp["reasons"])
    assert out["architecture"]["trainable_params"] > 0 and out["finetune"]["mode"] == "qlora"


@pytest.mark.parametrize("kwargs, field", [
    (dict(mode="lorax"), "finetune"), (dict(lora_rank=0), "lora_rank"), (dict(lora_targets=("qkv",)),
                                                                         "lora_targets"),
    (dict(lora_dropout=1.0), "lora_dropout"), (dict(quant_type="int4"), "quant_type"),
    (dict(quant_block_size=100), "quant_block_size"), (dict(modules_to_save=("norm",)), "modules_to_save"),
])
def test_bad_finetune_fields_are_named(kwargs, field):
    with pytest.raises(FieldError) as err:
        FineTune(**kwargs)
    assert err.value.field == field


def test_fine_tuning_composes_with_a_layout():
    s = Scenario.from_convention("megatron", params=param_count(LLAMA), workers=2)
    w = Workload(LLAMA, seq_len=2048, finetune=FineTune(mode="lora"))
    one = layout_report(s, w)
    tp = layout_report(s, replace(w, layout=replace(w.layout, tp=2, pp=2)))
    assert sum(v.rank.count for v in tp.ranks) == 8
    assert max(v.stages[0].per_worker_total for v in tp.ranks) < one.stages[0].per_worker_total


def test_cli_fine_tuning_flags_and_json_keys():
    import json
    import subprocess
    import sys
    from pathlib import Path
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "zerocalc", "--model", "llama-3-8b", "--finetune", "qlora",
                           "--lora-rank", "16", "--lora-targets", "all-linear", "--quant-type", "nf4",
                           "--double-quant", "yes", "--modules-to-save", "lm_head", "--json"], cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["architecture"]["trainable_params"] == 41_943_040 + 128256 * 4096
    assert out["architecture"]["frozen_params"] == param_count(LLAMA)
    groups = out["stages"][0]["per_worker_group_bytes"]
    assert set(groups) >= {"nf4, frozen", "fp32, frozen", "fp32"}
    bad = subprocess.run([sys.executable, "-m", "zerocalc", "--model", "llama-3-8b", "--lora-targets", "qkv"],
                         cwd=root, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--lora-targets" in bad.stderr


def test_the_text_report_says_what_trains_and_what_each_group_holds():
    from zerocalc.output.text import render_text
    r = view(FineTune(mode="qlora", lora_rank=16, lora_targets=("all-linear",)), workers=1)
    text = render_text(r)
    assert "bytes per parameter that trains (frozen parameters hold their stored weights only)" in text
    assert "QLoRA rank 16 on all linear layers of the blocks, fp32 adapters; base linears in nf4" in text
    assert "41,943,040 of" in text and "frozen (nf4)" in text and "trained (fp32)" in text
    assert "against the same adapters on a fp16 base" in text and "dequantized while it runs" in text
    assert "Fine-tuning:" not in render_text(view())


def test_only_gradients_narrower_than_the_master_get_an_fp32_copy_at_the_step():
    # zero-paper ledger (fp16 gradients, fp32 master): the optimizer step upcasts the fp16 gradient partition
    # (DeepSpeed stage_1_and_2.py); fp32 adapters' gradients are fp32 already and the frozen base has none.
    fp32 = view(FineTune(mode="lora"), workers=1)
    assert "fp32 gradient copy" not in fp32.peaks[0].phases["optimizer_step"]
    fp16 = view(FineTune(mode="lora", adapter_dtype="fp16"), workers=1)
    trainable = trainable_counts(fp16)["trainable_params"]
    assert fp16.peaks[0].phases["optimizer_step"]["fp32 gradient copy"] == 4 * trainable


def test_each_group_ledger_shows_which_entries_vanish():
    # The ledger view: a frozen group keeps only its stored weight, a trained one every entry of the
    # convention except a master copy it does not need (fp32 adapters are their own master).
    from zerocalc.output.report import group_ledgers
    out = group_ledgers(view(FineTune(mode="qlora", lora_targets=("all-linear",)), convention="megatron"))
    by = {g["group"]: g for g in out["groups"]}
    nf4 = by["nf4, frozen"]["bytes_per_param"]
    assert [k for k, v in nf4.items() if v is not None] == ["parameters"]
    # nf4, block 64, double quantization: 1/2 packed + 1/64 absmax + tiny scales and code tables (bitsandbytes)
    assert 0.5 + 1 / 64 < nf4["parameters"] < 0.5 + 1 / 64 + 0.001
    trained = by["fp32"]["bytes_per_param"]
    assert trained == {"parameters": 4.0, "gradients": 4.0, "master parameters": None, "exp_avg": 4.0,
                       "exp_avg_sq": 4.0}
    full = group_ledgers(view())["groups"]
    assert len(full) == 1 and full[0]["total_bytes_per_param"] == 16.0     # zero-paper: 2 + 2 + 12


def test_the_report_is_the_same_json_whatever_the_hash_seed():
    # q, k and v share a position in the block: their LoRA terms once followed a frozenset's order, which changes
    # with PYTHONHASHSEED, so the same link gave differently ordered JSON from one process to the next.
    import subprocess
    import sys
    from pathlib import Path
    code = ("import json; from zerocalc.cli.main import main; "
            "main(['--model', 'llama-3-8b', '--finetune', 'lora', '--lora-targets', 'all-linear', '--lora-dropout', "
            "'0.1', '--json'])")
    root = Path(__file__).resolve().parents[1]
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                              env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2", "3", "4")}
    assert len(outputs) == 1 and "lora q: input copy" in outputs.pop()
