"""Library versions as rows of the plan (zerocalc/versions.py, issue 31 item 3).

Sources: transformers 4.45.2 models/llama/modeling_llama.py:1213-1229 (the model's .float() and the shifted copy),
4.48.0 loss/loss_utils.py:38 (the copy, removed by PR #35646 in 4.49.0), 4.45.2 models/mixtral/modeling_mixtral.py
(per-expert nn.Linear w1 / w2 / w3); bitsandbytes 0.43.1 autograd/_functions.py:515-516 (ctx.tensors = (A, B);
0.43.2: (None, B)). The loss rows are measured on the CPU against the release they name (tests/measure/
loss_versions.py; 4.45.2 from a separate interpreter, skipped without it).
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.beside_venv import Release, subprocess_env
from zerocalc import Scenario
from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.model.placement import inventory
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.step.losses import CACHED_MOMENT
from zerocalc.output.report import full_report
from zerocalc.scenario import FieldError
from zerocalc.step.losses import loss_row, loss_transients
from zerocalc.step.workload import Workload
from zerocalc.versions import DEFAULTS, applies, older, parse, rows_in_effect

ROOT = Path(__file__).resolve().parent.parent
LLAMA8B, MIXTRAL = MODEL_PRESETS["llama-3-8b"][0], MODEL_PRESETS["mixtral-8x7b"][0]
QWEN_MOE = MODEL_PRESETS["qwen3-30b-a3b"][0]


def test_the_defaults_are_the_measured_releases():
    pinned = dict(line.split("==") for line in (ROOT / "requirements-validation.txt").read_text().splitlines()
                  if "==" in line and not line.startswith("#"))
    assert DEFAULTS == {lib: pinned[lib] for lib in DEFAULTS}
    assert rows_in_effect(()) == ()


def test_parse_keeps_what_differs_and_refuses_by_field():
    assert parse("transformers=4.45, bitsandbytes=0.43.1") == (("bitsandbytes", "0.43.1"), ("transformers", "4.45"))
    assert parse("bitsandbytes=0.43.1,transformers=4.45") == parse("transformers=4.45,bitsandbytes=0.43.1")
    assert parse("torch=2.13.0") == () and parse("") == ()
    for bad in ("vllm=0.6", "transformers", "transformers=four", "transformers=4.45,transformers=4.46"):
        with pytest.raises(FieldError) as err:
            parse(bad)
        assert err.value.field == "versions"
    with pytest.raises(FieldError):
        FineTune(versions=(("transformers", "x"),))


def test_release_order():
    assert older("4.45", "4.46") and older("4.48.3", "4.49") and older("4.57.1", "5")
    assert not older("4.49", "4.49") and not older("5.0", "5") and not older("0.43.2", "0.43.2")
    assert older("0.43.1", "0.43.2")


def _peak(arch, versions="", mode="lora", micro_batch=1, seq=2048, **ft):
    s = Scenario.from_convention("zero-paper", params=param_count(arch), workers=1)
    w = Workload(arch, micro_batch=micro_batch, seq_len=seq, recompute="full",
                 finetune=FineTune(mode=mode, versions=parse(versions), **ft))
    return full_report(s, w)["peak"][0]["phases"]


@pytest.mark.parametrize("versions, micro_batch, extra_bytes_per_tv", [
    ("transformers=4.48", 2, 4),        # + the shifted fp32 copy
    ("transformers=4.48", 1, 0),        # one sequence's slice is contiguous: no copy
    ("transformers=4.45", 2, 2),        # fp32 logits + the copy (8) against bf16 logits + fp32 upcast (6)
    ("transformers=4.45", 1, -2),       # fp32 logits (4): the bf16 ones die at the model's upcast
])
def test_the_loss_rows_move_only_the_loss_forward(versions, micro_batch, extra_bytes_per_tv):
    new, old = _peak(LLAMA8B, versions, micro_batch=micro_batch), _peak(LLAMA8B, micro_batch=micro_batch)
    tv = micro_batch * 2048 * LLAMA8B.vocab
    assert new["forward"]["logits and loss"] - old["forward"]["logits and loss"] == extra_bytes_per_tv * tv
    for phase in new:
        for part, value in new[phase].items():
            if (phase, part) != ("forward", "logits and loss") and part != "allocator reserve":
                assert old[phase][part] == value, (phase, part)


def test_experts_as_linears_quantize_and_adapt_the_experts_only_before_transformers_5():
    v5 = inventory(MIXTRAL, FineTune(mode="qlora"), "bf16")
    v4 = inventory(MIXTRAL, FineTune(mode="qlora", versions=parse("transformers=4.45")), "bf16")
    # fused 3-D experts are no nn.Linear: not quantized, and prepare_model_for_kbit_training upcasts them to fp32
    assert {t.storage for t in v5 if t.role == "expert"} == {"fp32"}
    assert {t.storage for t in v4 if t.role in ("expert", "router")} == {"nf4"}
    assert [t for t in v4 if t.role != "adapter"] == [t._replace(storage="nf4") if t.role in ("expert", "router")
                                                      else t for t in v5 if t.role != "adapter"]
    # q,v LoRA: Mixtral's w1 / w2 / w3 match no named target; all-linear targets every expert and the router
    assert not [t for t in v4 if t.role == "adapter" and t.module.startswith(("experts", "router"))]
    every = inventory(MIXTRAL, FineTune(mode="lora", lora_targets=("all-linear",),
                                        versions=parse("transformers=4.45")), "bf16")
    E, r, h, f = MIXTRAL.experts, 8, MIXTRAL.hidden, MIXTRAL.moe_ffn
    expert_adapters = sum(t.elements for t in every if t.role == "adapter" and t.module.startswith("experts"))
    assert expert_adapters == E * (2 * (r * h + f * r) + (r * f + h * r))  # gate, up [f, h]; down [h, f]
    assert sum(t.elements for t in every if t.role == "adapter" and t.module.startswith("router")) == r * h + E * r
    # Qwen3-MoE names its v4 experts gate_proj / up_proj / down_proj: the named targets reach them
    named = inventory(QWEN_MOE, FineTune(mode="lora", lora_targets=("down",), versions=parse("transformers=4.45")),
                      "bf16")
    assert {t.module for t in named if t.role == "adapter" and t.module.startswith("experts")} == \
        {"experts.down.lora_A", "experts.down.lora_B"}


def test_a_2024_mixtral_qlora_reads_far_lower_with_its_release():
    today, then = _peak(MIXTRAL, mode="qlora"), _peak(MIXTRAL, "transformers=4.45", mode="qlora")
    assert today["backward"]["model states"] > 5 * then["backward"]["model states"]
    # a dense model has no experts: the release moves nothing but the loss
    dense = _peak(LLAMA8B, "transformers=4.48", mode="qlora")
    assert dense["backward"]["model states"] == _peak(LLAMA8B, mode="qlora")["backward"]["model states"]


def _qlora_bf16(versions: str, recompute: str):
    """Llama-3-8B QLoRA on q and v, a bf16 stream (no kbit prepare) and fp32 adapters (their own input copies)."""
    s = Scenario.from_convention("pure-bf16", params=param_count(LLAMA8B), workers=1)
    ft = FineTune(mode="qlora", kbit_prepare=False, versions=parse(versions))
    return full_report(s, Workload(LLAMA8B, micro_batch=1, seq_len=2048, recompute=recompute, finetune=ft))


def test_bitsandbytes_before_0_43_2_keeps_the_4_bit_linears_inputs():
    # bitsandbytes 0.43.1 MatMul4Bit.forward: ctx.tensors = (A, B) when A needs a gradient (measured below); the
    # q / k / v input, the gate / up input and the down input, each once (the linears reading one tensor share it)
    T, h, f, L = 2048, LLAMA8B.hidden, LLAMA8B.ffn, LLAMA8B.layers
    per_block = 2 * T * h + 2 * T * h + 2 * T * f
    old, new = _qlora_bf16("bitsandbytes=0.43.1", "none"), _qlora_bf16("", "none")
    grown = old["peak"][0]["phases"]["forward"]["activations"] - new["peak"][0]["phases"]["forward"]["activations"]
    # the first block's q / k / v input needs no gradient (a frozen embedding, no checkpointing): not kept
    assert grown == L * per_block - 2 * T * h
    # under full recompute only the rebuilt block keeps them
    old, new = _qlora_bf16("bitsandbytes=0.43.1", "full"), _qlora_bf16("", "full")
    rebuilt = [sum(r["peak"][0]["phases"]["backward"].get(k, 0) for k in ("recompute (one block)", CACHED_MOMENT))
               for r in (old, new)]
    assert rebuilt[0] - rebuilt[1] == per_block
    assert [r["row"] for r in old["versions"]["rows"]] == ["4-bit linear input saved"]
    assert old["versions"]["rows"][0]["modelled"] and not old["finetune"]["caveats"]
    assert old["versions"]["assumed"]["bitsandbytes"] == "0.43.1" and new["versions"]["rows"] == []
    # adapters on every linear, in the stream's dtype and without dropout, read the very inputs bitsandbytes keeps
    s = Scenario.from_convention("pure-bf16", params=param_count(LLAMA8B), workers=1)
    shared = [full_report(s, Workload(LLAMA8B, seq_len=2048, finetune=FineTune(
        mode="qlora", kbit_prepare=False, lora_targets=("all-linear",), adapter_dtype="bf16",
        versions=parse(v))))["peak"][0]["phases"]["forward"]["activations"] for v in ("bitsandbytes=0.43.1", "")]
    assert shared[0] == shared[1]


OLD_BNB = Release("bitsandbytes", "0.43.1", "ZEROCALC_OLD_BNB_PATH", "/tmp/bnb431")


@pytest.mark.parametrize("release", ["installed", "0.43.1"])
def test_what_matmul_4bit_keeps_on_the_cpu(release):
    """tests/measure/bnb_versions.py: the installed 0.50.2 keeps nothing of the input, 0.43.1 all of it."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed: pip install -r requirements-validation.txt")
    env = dict(os.environ) if release == "installed" else subprocess_env(OLD_BNB)
    out = subprocess.run([sys.executable, "-m", "tests.measure.bnb_versions", "96", "256", "512"], cwd=ROOT,
                         capture_output=True, text=True, env=env, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["input_grad_ok"] and got["input_bytes"] == 96 * 256 * 2
    if release == "installed":
        assert not applies(parse(f"bitsandbytes={got['bitsandbytes']}"), "4-bit linear input saved")
        assert got["kept_after_forward"] == got["held_after_backward"] == 0
    else:
        assert got["bitsandbytes"] == "0.43.1" and applies(parse("bitsandbytes=0.43.1"), "4-bit linear input saved")
        assert got["kept_after_forward"] == got["input_bytes"]      # what the model counts per kept input
        # ctx.tensors, not saved tensors: backward does not release it; it lives while the output is held
        assert got["held_after_backward"] == got["input_bytes"]     # activations.graph_held (test_held_graph.py)


def test_the_cli_flag_and_the_report_line():
    out = subprocess.run([sys.executable, "-m", "zerocalc", "--model", "llama-3-8b", "--micro-batch", "2",
                          "--versions", "transformers=4.48.3"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "library versions assumed: transformers 4.48.3, bitsandbytes 0.50.2 (default)" in out.stdout
    assert "transformers < 4.49: shifted logits copy" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "zerocalc", "--model", "llama-3-8b", "--versions", "jax=0.4"],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "versions" in bad.stderr and "Traceback" not in bad.stderr


def _model_transients(versions: str, batch: int, seq: int, vocab: int):
    from zerocalc.model.hf_config import architecture_from_config
    arch = architecture_from_config(dict(model_type="llama", num_hidden_layers=1, hidden_size=64,
                                         num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
                                         vocab_size=vocab, max_position_embeddings=seq, tie_word_embeddings=False))
    w = Workload(arch, micro_batch=batch, seq_len=seq, finetune=FineTune(versions=parse(versions)))
    return loss_transients(w, SimpleNamespace(logits_elements=batch * seq * vocab, act_bits=16)), loss_row(w)


OLD_PYTHON = os.environ.get("ZEROCALC_OLD_TRANSFORMERS_PYTHON", "/tmp/tf445/bin/python")


@pytest.mark.parametrize("batch", [2, 1])
def test_the_loss_rows_against_transformers_4_45_2_on_the_cpu(batch):
    if not os.path.exists(OLD_PYTHON):
        pytest.skip(f"no interpreter with transformers 4.45.2 at {OLD_PYTHON} (ZEROCALC_OLD_TRANSFORMERS_PYTHON)")
    out = subprocess.run([OLD_PYTHON, "-m", "tests.measure.loss_versions", str(batch), "128", "4096"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["transformers"] == "4.45.2"
    model, _ = _model_transients("transformers=4.45.2", batch, 128, 4096)
    # the shifted copy has T - b rows (one per sequence dropped): the model counts T x V
    assert model["forward"] - got["forward_transients"] == (4 * batch * 4096 if batch > 1 else 0)
    assert abs(model["backward"] - got["backward_transients"]) <= 0.01 * model["backward"]


@pytest.mark.parametrize("batch", [2, 1])
def test_the_default_row_against_transformers_5_24_on_the_cpu(batch):
    pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
    from tests.measure.loss_versions import measure

    got = measure(batch, 128, 4096)
    model, row = _model_transients("", batch, 128, 4096)
    assert got["transformers"] == "5.24.0" and row.source.startswith("transformers loss_utils.py")
    # to the byte, or with 5.24's padded labels (b x (s + 1) int64) alive at the peak (seen at batch 2, not at 1)
    assert got["forward_transients"] - model["forward"] in (0, 8 * batch * 129)
    assert abs(model["backward"] - got["backward_transients"]) <= 0.01 * model["backward"]
    assert applies((), "experts as linears") is False


def test_the_page_field_and_link_key_give_the_plan_its_versions():
    from ui.state import convert as S

    st, warnings = S.from_query({"model": "mixtral-8x7b", "finetune": "qlora", "transformers_version": "4.45.2",
                                 "bitsandbytes_version": "0.43.1"})
    assert warnings == []
    assert S.finetune(st).versions == parse("transformers=4.45.2,bitsandbytes=0.43.1")
    link = S.to_query(st)
    assert (link["transformers_version"], link["bitsandbytes_version"]) == ("4.45.2", "0.43.1")
    default, _ = S.from_query({"model": "mixtral-8x7b"})
    assert S.finetune(default).versions == () and "transformers_version" not in S.to_query(default)
    _, refused = S.from_query({"transformers_version": "4.44"})
    assert refused and "transformers_version" in refused[0]


def test_experts_as_linears_against_transformers_4_45_2_and_peft_0_13_2_on_the_cpu():
    """What transformers 4.45.2's bitsandbytes integration replaces with Linear4bit, and what peft 0.13.2 trains
    (tests/measure/experts_v4.py), against the inventory at transformers=4.45, element for element."""
    if not os.path.exists(OLD_PYTHON):
        pytest.skip(f"no interpreter with transformers 4.45.2 at {OLD_PYTHON} (ZEROCALC_OLD_TRANSFORMERS_PYTHON)")
    from zerocalc.model.hf_config import architecture_from_config
    from tests.measure.experts_v4 import CONFIGS

    out = subprocess.run([OLD_PYTHON, "-m", "tests.measure.experts_v4"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["transformers"], got["peft"]) == ("4.45.2", "0.13.2")
    v4 = parse("transformers=4.45.2")
    for family, config in CONFIGS.items():
        arch = architecture_from_config(dict(config))

        def total(rows, keep):       # every block is a MoE block here: the dense-MLP rows hold none
            return sum(t.elements * arch.layers for t in rows if t.place == "layer" and t.kind != "dense" and keep(t))
        q = inventory(arch, FineTune(mode="qlora", versions=v4), "bf16")
        assert total(q, lambda t: t.storage == "nf4") == sum(got[family]["quantized"].values()), family
        for targets, key in ((("all-linear",), "all-linear"), (("down",), "down")):
            rows = inventory(arch, FineTune(mode="lora", lora_targets=targets, versions=v4), "bf16")
            assert total(rows, lambda t: t.role == "adapter") == sum(got[family][key].values()), (family, key)
    assert got["mixtral"]["down"] == {}          # w1 / w2 / w3: no named target reaches Mixtral's experts


def test_the_page_offers_a_release_in_every_range_the_rows_tell_apart():
    from zerocalc.versions import PAGE_RELEASES, ROWS
    for lib, releases in PAGE_RELEASES.items():
        bounds = sorted({r.below for r in ROWS if r.library == lib}, key=lambda v: tuple(map(int, v.split("."))))
        edges = [None] + bounds + [None]          # each range [lo, hi) holds one offered release
        for lo, hi in zip(edges, edges[1:]):
            inside = [v for v in releases if (lo is None or not older(v, lo)) and (hi is None or older(v, hi))]
            assert len(inside) == 1, (lib, lo, hi, inside)
