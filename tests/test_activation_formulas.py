"""Each activation term's formula (zerocalc.step.formulas) against the bytes the report counts.

The formulas come from running activations.activations() on symbolic dimensions, so they cannot drift from the
arithmetic; these tests check that the run is faithful (same terms, same bytes, for every preset and the
implementation / kernel / recompute / layout / fine-tuning variants) and that the text itself computes the number:
the values column, evaluated by a small arithmetic parser (numbers, + − · / and parentheses only), gives the bits.
The terms' sources are cited where they are computed (zerocalc/step/activations.py: Korthikanti et al. 2022 and the
Hugging Face modeling files; zerocalc/step/moe.py; zerocalc/step/trainable.py)."""

import ast
import operator
import re

import pytest
from hypothesis import given, settings, strategies as st

from ui.state.convert import from_query, resolve
from zerocalc.step.formulas import Sym, SymbolicArchitecture, activation_formulas, formulas_for
from zerocalc.step.activations import activations
from zerocalc.model.architecture import Architecture
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.step.shape import activation_args

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def evaluate(text: str) -> int:
    """The integer a formula's values column computes: integers, + − · / (floor) and parentheses, nothing else."""
    expr = text.replace(",", "")
    while "⌈" in expr:                                  # ⌈x/n⌉, innermost first: -(-x // n)
        expr = re.sub(r"⌈([^⌈⌉]*)/(\d+)⌉", r"(-(-(\1)//\2))", expr)
    expr = expr.replace("·", "*").replace("−", "-")
    expr = re.sub(r"(?<!/)/(?!/)", "//", expr)
    tree = ast.parse(expr, mode="eval")

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](walk(node.left), walk(node.right))
        raise AssertionError(f"not arithmetic: {ast.dump(node)}")

    return walk(tree)


def report_terms(query: dict) -> tuple:
    r = resolve(from_query(query)[0])
    args = activation_args(r.scenario, r.workload)
    real = activations(*args)
    groups = {"per_layer": real.per_layer, "per_moe_layer": real.per_moe_layer,
              "per_sliding_layer": real.per_sliding_layer, "checkpointed_block": real.checkpointed,
              "embedding_end": real.embed, "every_stage": real.stage,
              "output_end": real.head}
    return groups, formulas_for(r.scenario, r.workload)


def check(query: dict) -> int:
    groups, formulas = report_terms(query)
    checked = 0
    for group, terms in groups.items():
        assert list(formulas[group]) == list(terms), (query, group)
        for term, nbytes in terms.items():
            row = formulas[group][term]
            assert row["bytes"] == nbytes, (query, group, term, row)
            assert -(-row["bits"] // 8) == nbytes, (query, group, term, row)
            assert evaluate(row["values"]) == row["bits"], (query, group, term, row["values"])
            assert row["formula"] and not row["formula"][0].isdigit() or "·" in row["formula"] or \
                row["formula"].endswith("bytes"), (term, row["formula"])
            checked += 1
    return checked


@pytest.mark.parametrize("model", sorted(MODEL_PRESETS))
def test_every_preset_formula_computes_the_reported_bytes(model):
    assert check({"model": model}) >= 10


VARIANTS = [
    {"attention": "eager"}, {"attention": "eager", "recompute": "selective"}, {"recompute": "full"},
    {"recompute": "full", "recompute_every": "2"}, {"model": "mixtral-8x7b", "recompute": "full", "recompute_every": "3"},
    {"implementation": "megatron"}, {"model": "gpt2", "attention": "eager", "resid_dropout": "0.1"},
    {"model": "llama-3-70b", "workers": "8", "tp": "8", "sequence_parallel": "true"},
    {"model": "llama-3-70b", "workers": "8", "tp": "8", "implementation": "megatron", "sequence_parallel": "true"},
    {"model": "llama-3-8b", "workers": "4", "cp": "2", "seq_len": "8192"},
    {"model": "mixtral-8x7b", "workers": "8", "ep": "8", "moe_imbalance_percent": "150"},
    {"model": "deepseek-v3", "workers": "64", "ep": "64", "tp": "2"},
    {"model": "gemma-3-27b", "seq_len": "8192"}, {"model": "gemma-3-4b", "attention": "eager"},
    {"model": "llama-3-8b", "finetune": "lora", "lora_targets": "all-linear", "lora_dropout": "0.1"},
    {"model": "llama-3-8b", "finetune": "qlora", "recompute": "full"},
    {"model": "llama-3-8b", "finetune": "freeze", "train_last_layers": "4"},
    {"model": "llama-3-8b", "activation_dtype": "fp32", "micro_batch": "3", "seq_len": "1000"},
    # an fp32 residual stream (axolotl's fp32 embeddings and norms: zerocalc/step/fp32_stream.py)
    {"model": "llama-3-8b", "fp32_parts": "embed-head-norms"},
    {"model": "qwen3-8b", "fp32_parts": "embed-head-norms", "recompute": "full"},
    {"model": "llama-3-8b", "finetune": "lora", "fp32_parts": "norms"},
    # Megatron's recompute modules and methods (zerocalc/step/megatron_recompute.py)
    {"model": "deepseek-v2-lite", "recompute": "selective", "recompute_modules": "layernorm,mla_up_proj,moe"},
    {"model": "deepseek-v3", "workers": "8", "tp": "2", "sequence_parallel": "true", "implementation": "megatron",
     "recompute": "selective", "recompute_modules": "mla_up_proj,mlp,moe_act,shared_experts"},
    {"model": "llama-3-8b", "recompute": "full", "recompute_method": "block", "recompute_num_layers": "5"},
    # multi-token prediction (zerocalc/step/mtp.py): its terms on the output end, kept and checkpointed
    {"model": "deepseek-v3", "workers": "64", "ep": "64", "mtp_layers": "1"},
    {"model": "deepseek-v3", "workers": "64", "ep": "64", "mtp_layers": "1", "implementation": "megatron",
     "recompute": "full"},
]


@pytest.mark.parametrize("query", VARIANTS, ids=str)
def test_variant_formulas_compute_the_reported_bytes(query):
    assert check(query) >= 5


def test_formulas_read_as_the_docs_write_them():
    # Korthikanti et al. (2022) section 4: the MLP's fc2 input is s·b·f elements, the attention input s·b·h.
    _, f = report_terms({"model": "llama-3-8b"})
    layer = f["per_layer"]
    assert layer["mlp fc2 input"]["formula"] == "w·b·s·f"
    assert layer["mlp fc2 input"]["values"] == "16·1·2,048·14,336"
    assert layer["attention input"]["formula"] == "w·b·s·h"
    assert layer["q, k, v"]["formula"] == "w·b·s·(a·d + kv·d + kv·d)"      # rotated q and k, then v
    assert f["output_end"]["loss log-softmax (fp32)"]["formula"] == "32·b·s·V"
    # Under tp 8 with sequence parallelism the norms see s/tp of the sequence (Korthikanti section 4.2.2) and
    # the heads and FFN are split (heads a/tp, f/tp); vocab-parallel cross entropy keeps V/tp columns.
    _, f = report_terms({"model": "llama-3-70b", "workers": "8", "tp": "8", "sequence_parallel": "true"})
    assert f["per_layer"]["input norm"]["formula"] == "(32 + w)·(b·s/tp)·h + 32·(b·s/tp)"
    assert f["per_layer"]["mlp fc2 input"]["formula"] == "w·b·s·f/tp"
    assert f["output_end"]["loss log-softmax (fp32)"]["formula"] == "32·b·s·V/tp"
    # Balanced routing: S = T·k routed pairs (transformers integrations/moe.py grouped_mm dispatch).
    _, f = report_terms({"model": "mixtral-8x7b", "workers": "8", "ep": "8"})
    assert f["per_moe_layer"]["experts: dispatched tokens"]["formula"] == "w·b·s·k·h"
    assert f["per_moe_layer"]["experts: group offsets"]["formula"] == "32·(E/ep)"


def test_the_symbolic_run_never_enters_the_caches():
    a = MODEL_PRESETS["llama-3-8b"][0]
    before = activations.cache_info().currsize
    activation_formulas(a, 1, 2048, 16, tp=2)
    assert activations.cache_info().currsize == before
    real = activations(a, 1, 2048, 16, tp=2)
    assert all(isinstance(v, int) and not isinstance(v, Sym) for v in real.per_layer.values())


def test_a_symbolic_architecture_runs_the_architectures_own_properties():
    a = Architecture(layers=2, hidden=64, heads=4, ffn=128, vocab=100, seq_len=32, kv_heads=2)
    s = SymbolicArchitecture(a)
    assert s.q_size == a.q_size and s.q_size.text == "a·d"
    assert s.kv_size == a.kv_size and s.kv_size.text == "kv·d"
    assert s.is_moe_layer(0) is False


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 4096), st.sampled_from([8, 16, 32]),
       st.sampled_from(["eager", "flash"]), st.sampled_from(["none", "selective", "op", "full"]),
       st.sampled_from(["huggingface", "megatron"]), st.sampled_from([1, 2, 4]), st.booleans())
def test_any_step_formula_computes_its_bytes(b, s, w, attention, recompute, impl, tp, sp):
    # Invariant: for any micro-batch, sequence, width, kernel, recompute, implementation and tp split, the
    # symbolic run gives the same terms and bytes as the numeric one, and each values column evaluates to them.
    a = MODEL_PRESETS["llama-2-7b"][0]
    real = activations(a, b, s, w, attention, recompute, impl, tp, 1, sp)
    f = activation_formulas(a, b, s, w, attention, recompute, impl, tp, 1, sp)
    for group, terms in (("per_layer", real.per_layer), ("embedding_end", real.embed), ("output_end", real.head)):
        assert list(f[group]) == list(terms)
        for term, nbytes in terms.items():
            assert f[group][term]["bytes"] == nbytes
            assert evaluate(f[group][term]["values"]) == f[group][term]["bits"]
