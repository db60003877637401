"""Backward under full recompute: the loss moment and the rebuilt block's re-run with its backward's gradients,
walked op by op (zerocalc/step/block_backward.py; issue 31 item 4). The walk is exact against CPU traces; the
allocated figure (max_memory_allocated) is the larger moment, and the reserved and device figures keep the two
summed on the safe side, the smaller one as the part "smaller backward moment (cached, not live)" (step/peak.py
_split_moments: published reserved figures sit above the larger moment, with a flat reserve or the allocator's
model).

Source: lifetime traces on the CPU (tests/measure/recompute_loss_overlap.py: transformers 5.24 LlamaForCausalLM
with eager or SDPA attention and its ForCausalLMLoss, peft 0.21.2 LoRA or full training,
gradient_checkpointing_enable(use_reentrant=False), live bytes through a TorchDispatchMode, every trainable
parameter's .grad made before the trace as a framework's gradient buffers are). The traced backward peak is
compared with zerocalc's: max(activations + the loss's 8 bytes per T x V, activations less the output end +
the rebuilt block + its backward's gradients).
"""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from zerocalc.step.block_backward import Step, walk
from zerocalc.step.losses import CACHED_MOMENT
from zerocalc.step.peak import OUTSIDE, RESERVE, phase_figures
REBUILT = "recompute (one block)"

ROOT = Path(__file__).resolve().parent.parent


def test_walk_holds_gradients_and_releases_saves_as_each_op_finishes():
    saved = {"a": 100, "lora x: copy": 10, "lora x: rank": 5, "b": 50}
    steps = [Step((("g1", 40),)),                                  # 7 (residual) + 40
             Step((("g2", 30), ("g3", 30)), ("g1",), ("a",)),      # 7 + 40 + 60, then a and g1 go
             Step((("g4", 200),), ("g2", "g3"), ("lora x:", ("b", 20))),   # 7 + 60 + 200 - 100
             Step((("g5", 10),), ("g4",), ("b",))]
    assert walk(saved, steps, 7) == 7 + 60 + 200 - 100          # g4 beside g2, g3 (dropped after)
    assert walk(saved, steps[:1] + [Step((("g9", 500),), (), ("a",))], 7) == 547
    assert walk(saved, steps[:3] + [Step((("g6", 300),), ("g4",), ("b",))], 7) == 7 + 200 + 300 - 100 - 15 - 20


def _backward(seq: int, mode: str, lifetime: str = "step", vocab: int = None, percent=None):
    """The backward phase's parts and the activation terms, with the allocator's model (fragmentation_percent None,
    the default) or under a flat percent."""
    from zerocalc import Scenario
    from zerocalc.model.finetune import FineTune
    from zerocalc.model.inventory import param_count
    from zerocalc.model.presets import MODEL_PRESETS
    from zerocalc.output.report import full_report
    from zerocalc.step.workload import Workload

    arch = MODEL_PRESETS["llama-3-8b"][0]
    arch = replace(arch, vocab=vocab) if vocab else arch
    s = Scenario.from_convention("zero-paper", params=param_count(arch), workers=1)
    d = full_report(s, Workload(arch, seq_len=seq, recompute="full", finetune=FineTune(mode=mode),
                                grad_lifetime=lifetime, fragmentation_percent=percent))
    return d["peak"][0]["phases"]["backward"], d["activation_terms"]


@pytest.mark.parametrize("percent", [None, 5])
@pytest.mark.parametrize("vocab", [None, 4096])
def test_backward_keeps_the_loss_moment_and_the_rebuilt_block_summed(vocab, percent):
    # Llama-3's 128,256 columns (the loss's 8 bytes per T x V outweigh a rebuilt block) and 4,096 (the re-run
    # outweighs it): both moments in the phase, the walk's gradients (recompute_backward) reported, not added
    parts, terms = _backward(4096, "lora", vocab=vocab, percent=percent)
    loss = 8 * 4096 * (vocab or 128256)
    assert parts["logits and loss"] == loss
    assert parts.get(REBUILT, 0) + parts.get(CACHED_MOMENT, 0) == terms["recompute_working"]
    assert terms["recompute_backward"] > 0
    assert "recompute (its backward's gradients)" not in parts
    # allocated: the larger moment, within the sum (the re-run's backward gradients are reported, not added:
    # with 4,096 columns they outweigh the loss and the head, and the sum is the figure); the sum stays in
    # reserved (and the device figure), the smaller moment cached
    head = sum(v for k, v in terms["output_end"].items() if k != "labels")
    larger = min(loss + terms["recompute_working"],
                 max(loss, terms["recompute_working"] + terms["recompute_backward"] - head))
    assert (CACHED_MOMENT in parts) == (vocab is None)
    others = sum(v for k, v in parts.items() if k not in (REBUILT, CACHED_MOMENT, "logits and loss", RESERVE,
                                                          *OUTSIDE))
    figures = phase_figures(parts)
    assert figures["allocated_bytes"] == others + larger
    assert figures["reserved_bytes"] == others + loss + terms["recompute_working"] + parts[RESERVE]
    assert figures["device_bytes"] == figures["reserved_bytes"] + sum(parts.get(k, 0) for k in OUTSIDE)


def test_backward_end_keeps_the_first_block_rebuilt():
    # full training, gradients from backward on (grad_lifetime.py): at backward's end every gradient, the first
    # block's saves and the first block rebuilt
    parts, terms = _backward(1024, "full", "backward")
    assert "activations (first block)" in parts and "activations" not in parts
    assert parts[REBUILT] == terms["recompute_working"] and CACHED_MOMENT not in parts   # no loss moment here


torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("transformers", reason="transformers not installed: pip install -r requirements-validation.txt")
pytest.importorskip("peft", reason="peft not installed: pip install -r requirements-validation.txt")

ALL = ("q", "k", "v", "o", "gate", "up", "down")
# (mode, attention, hidden, ffn, heads, kv heads, vocab, seq, LoRA targets)
CASES = [
    ("lora", "flash", 128, 352, 4, 4, 512, 512, None),       # ffn / hidden 2.75
    ("lora", "flash", 256, 896, 8, 8, 1000, 512, None),      # 3.5
    ("lora", "flash", 128, 352, 8, 2, 512, 512, None),       # grouped-query
    ("lora", "flash", 128, 512, 4, 4, 32000, 256, None),     # a big vocabulary: the loss moment is the peak
    ("full", "flash", 128, 352, 4, 4, 512, 512, None),
    ("full", "flash", 256, 896, 8, 8, 1000, 512, None),
    ("full", "flash", 64, 128, 4, 4, 512, 512, None),        # ffn / hidden 2: the loss moment again
    ("lora", "eager", 128, 352, 4, 4, 512, 512, None),
    ("lora", "eager", 64, 128, 4, 4, 512, 512, None),
    ("lora", "eager", 128, 352, 8, 2, 512, 512, None),
    ("full", "eager", 128, 352, 4, 4, 512, 512, None),
    ("full", "eager", 128, 352, 8, 2, 512, 512, None),
]


def zerocalc_figures(config: dict, mode: str, attention: str, seq: int, targets, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    argv = ["--config", str(path), "--finetune", mode, "--recompute", "full", "--attention", attention,
            "--seq-len", str(seq), "--micro-batch", "1", "--param-dtype", "bf16", "--fragmentation-percent",
            "model", "--json"]
    if mode == "lora":
        argv += ["--lora-targets", ",".join(targets)]
    out = subprocess.run([sys.executable, "-m", "zerocalc", *argv], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    d = json.loads(out)
    terms = d["activation_terms"]
    act, head = d["activation_bytes"], sum(terms["output_end"].values())
    loss = act + 8 * seq * config["vocab_size"]          # HF bf16: logits, fp32 gradient, cast back (LOSSES)
    recompute = act - head + terms["recompute_working"] + terms["recompute_backward"]
    # the report's allocated figure: the larger moment, beside what the activations do not hold (the labels stay:
    # the trace's 8 bytes per token below), within the two summed (the re-run's backward gradients are reported,
    # not added: at 512 columns they can outweigh the loss and the head, and the sum is the figure)
    parts = d["peak"][0]["phases"]["backward"]
    others = sum(v for k, v in parts.items() if k not in ("activations", "logits and loss", REBUILT, CACHED_MOMENT,
                                                          RESERVE, *OUTSIDE))
    labels = terms["output_end"].get("labels", 0)
    allocated = d["peak"][0]["phase_figures"]["backward"]["allocated_bytes"] - others
    summed = act + 8 * seq * config["vocab_size"] + terms["recompute_working"]
    assert allocated == min(summed, max(loss, recompute + labels))
    return loss, recompute, summed


def traced(mode, attention, h, f, heads, kv, vocab, seq, targets):
    from tests.measure.recompute_loss_overlap import LORA_TARGETS, llama, trace

    config = llama(hidden=h, ffn=f, heads=heads, vocab=vocab, seq=seq, kv_heads=kv)
    impl = "sdpa" if attention == "flash" else "eager"
    t = trace({**config, "attn_implementation": impl}, dtype="bf16", mode=mode, seq=seq, grads_first=True,
              targets=targets or LORA_TARGETS)
    return config, t


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x) for x in c[:8]))
def test_backward_peak_under_recompute_matches_the_trace(case, tmp_path):
    mode, attention, h, f, heads, kv, vocab, seq, targets = case
    config, t = traced(*case)
    loss, recompute, summed = zerocalc_figures(config, mode, attention, seq, targets or ("q", "k", "v", "o"),
                                               tmp_path)
    # no T x V storage at the re-run (eager: HF's 4-D causal mask, a checkpoint input, can be as large)
    assert t["T x V storages live at recompute"] in {0, 2 * seq * seq * (attention == "eager")}
    loss_peak = t["loss-gradient moment peak"] > t["recompute moment peak"]
    assert (loss > recompute) == loss_peak                       # the same moment is the peak
    # Bytes apart, all named: the trace holds the loss scalar and its gradient (8 bytes) through backward, which
    # the model leaves out; at the loss moment nll_loss's backward has released the labels (8 per token,
    # counted as "labels"); a trained embedding's token ids (8 per token, counted) were made before the trace.
    explained = -8 + 8 * seq * (loss_peak + (mode == "full"))
    assert max(loss, recompute) - t["backward peak"] == explained
    if not loss_peak:        # the sum read far off: high with SDPA, low with eager's s x s gradients
        assert abs(summed / t["backward peak"] - 1) > 0.02


@pytest.mark.parametrize("targets", [("gate", "up"), ("up", "down"), ALL])
def test_lora_on_the_mlp_peaks_in_the_re_run_forward(targets, tmp_path):
    """peft's fp32 adapters on gate / up: the peak is the re-run forward at up's adapter (its base output, the
    scaled fp32 LoRA result and their fp32 sum: block_backward.forward_moments). Exact with adapters on gate and
    up; with one on down_proj too the trace holds 393,216 bytes more there (3 x 2 x T x h: a bf16 and an fp32
    hidden-size tensor of the attention half, the input norm's fp32 product and a bf16 copy, still alive): an open
    residual, 5.6-7.9 % low on the traced shapes, not explained yet."""
    case = ("lora", "flash", 128, 352, 4, 4, 512, 512, targets)
    config, t = traced(*case)
    loss, recompute, _ = zerocalc_figures(config, "lora", "flash", 512, targets, tmp_path)
    assert recompute > loss and t["recompute moment peak"] > t["loss-gradient moment peak"]
    assert recompute - t["backward peak"] == -8 - (3 * 2 * 512 * 128 if "down" in targets else 0)
