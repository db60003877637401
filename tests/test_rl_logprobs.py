"""The RL frameworks' log-probability ends (zerocalc/rl/logprobs.py scoring rows, zerocalc/step/losses.py update
rows) against verl 0.9.1's own utils/torch_functional.py run on the CPU under CUDA autocast's fp32 policies
(tests/measure/rl_logprobs.py; the figures pinned in tests/fixtures/rl/logprob_peaks.json, re-measured when the
unpacked wheel is at VERL_SRC), and each row's terms as its framework's code writes them."""

import json
import os
from pathlib import Path

import pytest

from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.rl.logprobs import LOGPROB_PATHS, SCORING_ENDS, scoring_end_bytes
from zerocalc.scenario import Scenario
from zerocalc.step.losses import LOSS_CHOICES, LOSSES, TILE_COLUMNS, TILE_TOKENS
from zerocalc.step.workload import Workload

FIXTURE = Path(__file__).parent / "fixtures" / "rl" / "logprob_peaks.json"
PINNED = json.loads(FIXTURE.read_text())
T, V = PINNED["T"], PINNED["V"]
VECTORS = 16 * T            # per-token fp32 vectors (the entropy, lse, a row's statistics) beside the T x V terms


def _above_logits(row: str, chunk: int = 2048) -> int:
    return scoring_end_bytes(row, T, V, 16, chunk) - 2 * T * V


def test_verl_eager_entropy_holds_8_bytes_per_token_and_entry_above_the_logits():
    measured = PINNED["verl_entropy_eager_nograd"]
    assert _above_logits("verl, entropy (eager)") == 8 * T * V
    assert 0 <= measured - 8 * T * V <= VECTORS


def test_verl_chunked_entropy_holds_12_bytes_per_chunk_row():
    chunk = PINNED["verl_entropy_chunked_nograd"]["chunk"]
    measured = PINNED["verl_entropy_chunked_nograd"]["peak"]
    assert _above_logits("verl, entropy (chunked)", chunk) == 12 * chunk * V
    assert 0 <= measured - 12 * chunk * V <= VECTORS


def test_verl_compiled_entropy_keeps_one_fp32_buffer_of_the_logits_shape():
    two_d = [b for b in PINNED["verl_entropy_compiled_buffers"] if "," in b and not b.endswith(" 1")]
    assert len(two_d) == 1                  # Inductor's float32 [T, V] (the exponentials)
    assert _above_logits("verl, entropy") == 4 * T * V


def test_verl_logprobs_without_entropy_hold_nothing_of_the_logits_shape():
    assert _above_logits("verl") == 0
    assert PINNED["verl_logprobs_v2_nograd"] < 0.02 * 4 * T * V     # one row's fp32 at a time


def test_the_rowwise_update_row_is_verls_function_with_gradients():
    m, row = PINNED["verl_logprobs_v2_train"], LOSSES["rowwise"]
    assert row.saved == 32 and m["saved"] == 4 * T * V
    assert m["forward_peak"] <= 1.01 * m["saved"] and m["backward_peak"] <= 1.01 * m["saved"]


def test_remeasure_from_verls_own_file():
    from tests.measure.rl_logprobs import verl_path
    if not os.path.exists(verl_path()):
        pytest.skip("verl 0.9.1's unpacked wheel is not at VERL_SRC (pip download --no-deps verl==0.9.1; unzip): "
                    "the pinned figures stand")
    pytest.importorskip("torch")
    from tests.measure.rl_logprobs import measure
    fresh = measure(T, V)
    for key in ("verl_entropy_eager_nograd", "verl_entropy_chunked_nograd", "verl_logprobs_v2_train",
                "verl_entropy_compiled_buffers"):
        assert fresh[key] == PINNED[key], key


def _report(loss: str, tokens: int = 4096, model: str = "qwen2.5-0.5b"):
    arch = MODEL_PRESETS[model][0]
    from zerocalc.model.inventory import param_count
    scenario = Scenario.from_convention("fsdp2", params=param_count(arch), workers=8)
    workload = Workload(arch, micro_batch=1, seq_len=tokens, recompute="full", loss=loss)
    report = layout_report(scenario, workload)
    return report, report.ranks[report.worst[3]].shape, workload


def test_flash_ce_keeps_only_the_logits_and_writes_the_gradient_into_them():
    report, shape, w = _report("flash-ce")
    tv = 4096 * w.vocab_columns
    assert shape.act.head["loss: logits kept by flash-attn's cross entropy"] == 2 * tv
    phases = report.peaks[3].phases
    assert phases["forward"].get("logits and loss", 0) == 0 and phases["backward"].get("logits and loss", 0) == 0
    auto, _, _ = _report("auto")
    assert report.peaks[3].peak_bytes < auto.peaks[3].peak_bytes


def test_openrlhf_upcasts_then_keeps_fp32_logits():
    report, shape, w = _report("flash-ce-fp32")
    tv = 4096 * w.vocab_columns
    assert shape.act.head["loss: fp32 logits kept by flash-attn's cross entropy"] == 4 * tv
    phases = report.peaks[3].phases
    assert phases["forward"]["logits and loss"] == 2 * tv            # the bf16 logits at the upcast
    assert phases["backward"]["logits and loss"] == 4 * tv           # flash-attn's empty_like(logits) gradient


def test_trls_fused_head_holds_tiles_and_fp32_gradients_not_the_logits():
    tokens = 8192
    report, shape, w = _report("trl-fused", tokens)
    h, cols = w.arch.hidden, w.vocab_columns
    tile = min(tokens, TILE_TOKENS) * min(cols, TILE_COLUMNS)
    phases = report.peaks[3].phases
    assert phases["forward"]["logits and loss"] == 2 * tile
    assert phases["backward"]["logits and loss"] == (4 + 2) * tokens * h + (4 + 2) * cols * h + 2 * tile
    assert not any("log-softmax" in k or "logits kept" in k for k in shape.act.head)


def test_every_path_names_rows_that_exist():
    for path in LOGPROB_PATHS.values():
        assert path.update_loss in LOSS_CHOICES
        for row in (path.policy_scoring, path.other_scoring):
            assert row is None or row in SCORING_ENDS
    for row in SCORING_ENDS.values():
        assert row.source and row.checked
