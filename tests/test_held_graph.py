"""A loop that keeps the last step's loss (Workload.holds_graph) and what the autograd graph holds beyond backward
(step/activations.py graph_held, step/trainable.py graph_held_bits).

Sources: LitGPT's fit loops (Lightning-AI/litgpt 0d207708 litgpt/finetune/lora.py:266-270, the loop the ledger's
LITGPT cases ran; the same lines at 26857050, the commit the LitGPT importer reads) assign `logits = model(...)`
and `loss = chunked_cross_entropy(...)` at the top of each iteration and delete neither, so the last step's logits
and loss, and the graph behind the loss, live until the next step's replace them. bitsandbytes keeps its base
linears' inputs as ctx attributes (MatMul8bitLt: ctx.tensors = (CAt, subA, A); MatMul4Bit before 0.43.2:
ctx.tensors = (A, B); bitsandbytes 0.42.0 / 0.43.1 autograd/_functions.py), which backward does not release as it
releases saved tensors. Measured on the CPU: tests/measure/bnb_versions.py (held_after_backward), the 4-bit case at
0.43.1 in tests/test_versions.py.
"""

import pytest

from zerocalc import Scenario
from zerocalc.model.finetune import FineTune
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.output.report import full_report
from zerocalc.parallel.ranks import layout_report
from zerocalc.step.losses import GRAPH, HELD, PREVIOUS
from zerocalc.step.workload import Workload
from zerocalc.versions import parse

LLAMA8B = MODEL_PRESETS["llama-3-8b"][0]
T = 1024


def _report(versions="bitsandbytes=0.43.1", quant="nf4", recompute="none", **loop):
    s = Scenario.from_convention("pure-bf16", params=param_count(LLAMA8B), workers=1)
    ft = FineTune(mode="qlora", quant_type=quant, kbit_prepare=False, versions=parse(versions))
    w = Workload(LLAMA8B, micro_batch=1, seq_len=T, recompute=recompute, loss="chunked", loss_chunks=8,
                 finetune=ft, **loop)
    return layout_report(s, w)


def test_the_graph_holds_each_quantized_linears_input():
    # per block: the q / k / v input, the attention output (o's input), the gate / up input and the down input,
    # 2 bytes each; the first block's q / k / v input needs no gradient (a frozen embedding): not kept
    h, f, L = LLAMA8B.hidden, LLAMA8B.ffn, LLAMA8B.layers
    per_block = 2 * T * (h + LLAMA8B.q_size + h + f)
    assert _report().ranks[0].shape.act.graph_held == L * per_block - 2 * T * h
    assert _report(quant="int8", versions="").ranks[0].shape.act.graph_held == L * per_block - 2 * T * h
    assert _report(versions="").ranks[0].shape.act.graph_held == 0          # 0.43.2 on: (None, B)
    # under full recompute the reentrant re-run's graph is local to backward (not modelled for non-reentrant)
    assert _report(recompute="full").ranks[0].shape.act.graph_held == 0


def test_the_loop_that_keeps_the_loss_holds_it_into_the_next_forward():
    logits = 2 * T * LLAMA8B.vocab                     # the chunked head's bf16 chunks
    plain, kept = _report().peaks[0].phases, _report(holds_graph=True).peaks[0].phases
    graph = _report().ranks[0].shape.act.graph_held
    assert kept["forward"][PREVIOUS] == logits + graph
    assert kept["backward"][HELD] == logits
    assert kept["optimizer_step"][HELD] == logits and kept["optimizer_step"][GRAPH] == graph
    for phase in ("forward", "backward", "optimizer_step"):
        grown = sum(v for k, v in kept[phase].items() if k != "allocator reserve") - \
            sum(v for k, v in plain[phase].items() if k != "allocator reserve")
        assert grown == {"forward": logits + graph, "backward": logits, "optimizer_step": logits + graph}[phase]
    assert PREVIOUS not in plain["forward"] and GRAPH not in plain["optimizer_step"]


def test_a_held_output_keeps_the_graph_through_the_step():
    # Answer.AI's loop: output = None only after optimizer.step(), so the graph's inputs live through the step
    s = Scenario.from_convention("pure-bf16", params=param_count(LLAMA8B), workers=1)
    ft = FineTune(mode="qlora", kbit_prepare=False, versions=parse("bitsandbytes=0.43.1"))
    phases = full_report(s, Workload(LLAMA8B, seq_len=T, finetune=ft, holds_output=True))["peak"][0]["phases"]
    assert phases["optimizer_step"][GRAPH] > 0 and PREVIOUS not in phases["forward"]


def test_the_cpu_measurement_int8_keeps_its_input_past_backward():
    pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
    pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed: pip install -r requirements-validation.txt")
    from tests.measure.bnb_versions import measure, measure_int8
    got = measure_int8(96, 256, 512)
    assert got["kept_after_forward"] == got["held_after_backward"] == got["input_bytes"] == 96 * 256 * 2
    assert measure(96, 256, 512)["held_after_backward"] == 0                 # 4-bit, the installed 0.50.2
