"""Shaped optimizer state against optimizer.state after one step on the CPU, exact to the byte
(tests/measure/optimizer_states.py): torch.optim.Muon with its AdamW fallback (torch 2.13), GaLore (galore-torch 1.0)
and APOLLO (apollo-torch 1.0.3), torchao's 8-bit, 4-bit and float8 AdamW (0.18.0), bitsandbytes' AdamW8bit,
PagedAdamW8bit and PagedAdamW (0.50.2; paged ones fall back to ordinary buffers on the CPU, so their bytes are
measured and their placement is read from get_state_buffer). Tiny Llama models with and without tied embeddings, a
Qwen3-MoE model (fused 3-D experts, a 2-D router) and LoRA adapters, in fp32 and bf16.
Needs torch, transformers, peft, bitsandbytes, torchao, galore-torch, apollo-torch (requirements-validation.txt).
"""

import importlib.util
import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")

from tests.measure.moe_activations import TINY  # noqa: E402
from tests.measure.peft_lora import llama_config  # noqa: E402
from zerocalc import Scenario  # noqa: E402
from zerocalc.model.finetune import FineTune  # noqa: E402
from zerocalc.model.hf_config import architecture_from_config  # noqa: E402
from zerocalc.model.inventory import param_count  # noqa: E402
from zerocalc.parallel.ranks import layout_report  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

NEEDS = {"galore-adamw": "galore_torch", "apollo-adamw": "apollo_torch", "adamw-8bit-ao": "torchao",
         "adamw-4bit-ao": "torchao", "adamw-fp8-ao": "torchao", "adamw-8bit-bnb": "bitsandbytes",
         "paged-adamw-8bit": "bitsandbytes", "paged-adamw": "bitsandbytes", "muon": "torch",
         "soap": "pytorch_optimizer", "adam-mini": "adam_mini"}
CONFIGS = {
    "llama": llama_config(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176, vocab=1000),
    "llama-tied": llama_config(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176, vocab=1000, tie=True),
    # 128 x 256 attention and 768 x 256 gate_up: past 4096 and past 1e5 elements (the quantized and paged sizes)
    "llama-wide": llama_config(layers=1, hidden=256, heads=4, kv_heads=2, intermediate=384, vocab=3000),
    "qwen3_moe": TINY["qwen3_moe"],
}


def _need(optimizer):
    module = NEEDS[optimizer]
    if os.environ.get("CI") != "true":
        pytest.importorskip(module, reason=f"{module} not installed: pip install -r requirements-validation.txt")


def ours(config, optimizer, dtype="fp32", rank=8, lora=None) -> dict:
    """The optimizer-state bytes of the one rank class, by entry (no master copy: the model's own dtype)."""
    arch = architecture_from_config(config)
    s = Scenario(params=param_count(arch), param_dtype=dtype, grad_dtype=dtype, master_dtype=None,
                 optimizer=optimizer, optimizer_dtype=dtype, optimizer_rank=rank)
    ft = FineTune(mode="lora", lora_rank=lora["rank"], lora_targets=tuple(lora["target"].split(",")),
                  adapter_dtype=dtype) if lora else FineTune()
    report = layout_report(s, Workload(arch, micro_batch=1, seq_len=64, finetune=ft))
    out = {}
    for row in report.ranks[0].rows:
        if row.entry.category == "optimizer":
            out[row.entry.name] = out.get(row.entry.name, 0) + row.entry.nbytes(row.elements)
    return out


def check(config, optimizer, **kw):
    from tests.measure.optimizer_states import measure
    _need(optimizer)
    measured = measure(config, optimizer, **kw)
    mine = ours(config, optimizer, kw.get("dtype", "fp32"), kw.get("rank", 8), kw.get("lora"))
    # Muon: a 3-D expert tensor is not stepped by torch.optim.Muon; its momentum is its elements (see measure).
    unstepped = sum(measured["unstepped"].values()) * (4 if kw.get("dtype", "fp32") == "fp32" else 2)
    assert sum(mine.values()) == measured["gpu"] + unstepped, (mine, measured["by_key"])
    return measured, mine


@pytest.mark.parametrize("optimizer", sorted(NEEDS))
@pytest.mark.parametrize("model", ["llama", "llama-tied", "qwen3_moe"])
def test_fp32_state_is_exact(model, optimizer):
    if optimizer == "adam-mini" and model == "qwen3_moe":
        return test_adam_mini_refuses_what_it_cannot_step()
    check(CONFIGS[model], optimizer)


def test_adam_mini_refuses_what_it_cannot_step():
    """adam-mini 1.1.1 raises on a fused 3-D expert tensor (stepsize.view(rows, 1)) and on a LoRA adapter of q/k
    (m.view(-1, dim * dim // heads)): zerocalc refuses both by name instead of a number."""
    from zerocalc import FieldError
    _need("adam-mini")
    for config, lora in ((CONFIGS["qwen3_moe"], None), (CONFIGS["llama"], {"rank": 8, "target": "q,v"})):
        with pytest.raises(RuntimeError, match="is invalid for input of size"):
            from tests.measure.optimizer_states import measure
            measure(config, "adam-mini", lora=lora)
        with pytest.raises(FieldError, match="adam-mini 1.1.1 raises on it"):
            ours(config, "adam-mini", lora=lora)


@pytest.mark.parametrize("optimizer", ["muon", "galore-adamw", "adamw-8bit-bnb", "paged-adamw-8bit", "adamw-4bit-ao"])
def test_past_the_quantized_and_paged_sizes(optimizer):
    measured, mine = check(CONFIGS["llama-wide"], optimizer)
    if optimizer == "paged-adamw-8bit":      # 768 x 256 gate_up and the 3000 x 256 ends are paged on a GPU
        assert mine["state1 (8-bit, paged)"] > 0 and mine["state1 (8-bit)"] > 0


# SOAP in bf16: the reference (nikhilvyas/SOAP @f42d296 init_preconditioner) makes GG with torch.zeros(d, d), fp32
# whatever the gradient, and Q by eigh of that fp32 GG; pytorch-optimizer's port makes them in the gradient's dtype.
# zerocalc follows the reference, so the port is not its measurement there.
@pytest.mark.parametrize("optimizer", sorted(set(NEEDS) - {"soap"}))
def test_bf16_state_is_exact(optimizer):
    # GaLore on a bf16 gradient copies rank rows of its SVD factor instead of holding the whole fp32 factor.
    check(CONFIGS["llama"], optimizer, dtype="bf16")


@pytest.mark.parametrize("optimizer", sorted(set(NEEDS) - {"adam-mini"}))     # see the refusal test
def test_lora_adapters_state_is_exact(optimizer):
    # Only the adapters train: lora_A [r, in] and lora_B [out, r] are 2-D, so Muon takes them (Moonlight's rule).
    check(CONFIGS["llama"], optimizer, lora={"rank": 8, "target": "q,v"})


def test_galore_rank_moves_only_the_projected_rows():
    _need("galore-adamw")
    from tests.measure.optimizer_states import measure
    for rank in (2, 16):
        m = measure(CONFIGS["llama"], "galore-adamw", rank=rank, dtype="bf16")
        assert sum(ours(CONFIGS["llama"], "galore-adamw", "bf16", rank).values()) == m["gpu"]


@pytest.mark.parametrize("m, n", [(64, 32), (32, 96), (128, 128)])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_muon_step_working_set_equals_the_allocation_trace(m, n, dtype):
    """step/optimizer_step.py muon_items at one rank: the Nesterov update (m x n, state dtype) and Newton-Schulz
    2 m n + 2 min(m, n)^2 in bf16, against every tensor torch.optim.Muon.step() allocates (traced)."""
    from tests.measure.optimizer_states import muon_step_peak
    from zerocalc.model.inventory import ParamTensor
    from zerocalc.model.placement import Holding
    from zerocalc.states.groups import ParamGroup
    from zerocalc.step.optimizer_step import muon_items

    t = ParamTensor("w.weight", "w", (m, n), "mlp", "column", "layer")
    group = ParamGroup("", m * n, m * n, 1, (Holding(t, m * n, 1, "", m, (m, n)),))

    class Shape:
        groups = (group,)
    s = Scenario(params=m * n, param_dtype=dtype, grad_dtype=dtype, master_dtype=None, optimizer="muon",
                 optimizer_dtype=dtype)
    ours = sum(b for _, b in muon_items(s, 0, Shape))
    assert ours == muon_step_peak(m, n, dtype)


@pytest.mark.parametrize("optimizer", ["muon", "galore-adamw", "adamw-8bit-bnb", "adamw-4bit-ao"])
@pytest.mark.parametrize("target", ["q,v", "all-linear"])
def test_lora_on_a_moe_model_is_exact(optimizer, target):
    check(CONFIGS["qwen3_moe"], optimizer, lora={"rank": 4, "target": target})


SHAMPOO = Path(__file__).parent / "fixtures" / "optimizers" / "shampoo_states.json"


@pytest.mark.parametrize("key", sorted(json.loads(SHAMPOO.read_text())["bytes"]))
def test_distributed_shampoo_equals_its_measured_state(key):
    """Distributed Shampoo (facebookresearch/optimizers @f6066066, defaults): not on PyPI, so its state was measured
    with the source on the CPU and pinned; with SHAMPOO_SRC set (or distributed_shampoo importable) it is measured
    again here. Covers blocking past 1024 (llama-wide's 3000-row embedding), merged 3-D experts, bf16, LoRA."""
    measured = json.loads(SHAMPOO.read_text())["bytes"][key]
    model, dtype, *lora = key.split("/")
    lora = {"target": lora[0].split("-")[1], "rank": int(lora[0].split("-")[2])} if lora else None
    assert sum(ours(CONFIGS[model], "shampoo", dtype, lora=lora).values()) == measured
    live = os.environ.get("SHAMPOO_SRC") or importlib.util.find_spec("distributed_shampoo")
    if live:
        from tests.measure.optimizer_states import measure
        assert measure(CONFIGS[model], "shampoo", dtype=dtype, lora=lora)["gpu"] == measured
