"""The CUDA context by card and torch release (zerocalc/step/context.py, issue 32).

Sources (each quoted in context.py): bare contexts under lazy loading, meta-pytorch/torchcomms#777 (H100, ~534 MiB),
unslothai/unsloth#8677 (B200, 612 MiB), unslothai/unsloth-zoo#1053 (RTX 6000 Ada, 426 MiB), invoke-ai/InvokeAI#9413
(RTX 3090, 256 MiB); stas00/ml-engineering@744d01e1 training/performance/README.md (A100 80GB used after torch.ones:
0.47 GiB lazy and 0.92 GiB eager under torch 2.1.1+cu121, 1.78 GiB under torch 1.10.2); huggingface/transformers
@7d5e65fe model_memory_anatomy.md (V100 16GB, 1,343 MB after torch.ones, eager); pytorch/pytorch#55277 (RTX 3090,
cu111, 1,687 MiB). SM counts: NVIDIA's datasheets; threads per SM: the CUDA C++ Programming Guide.
"""

from dataclasses import replace

import pytest

from tools.validation_ledger import zerocalc_report
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.step.context import (FLAT, MEASURED, MIB, PER_THREAD, SMS, THREADS_PER_SM, bare_context,
                                   context_band, context_bytes, estimate)
from zerocalc.gpus import GPU_CATALOG
from zerocalc.step.workload import Workload
from zerocalc.versions import parse

W = Workload(MODEL_PRESETS["llama-3-8b"][0])


def _on(gpu, torch=None, **fields):
    ft = replace(W.finetune, versions=parse(f"torch={torch}")) if torch else W.finetune
    return replace(W, gpu=gpu, finetune=ft, **fields)


@pytest.mark.parametrize("gpu", sorted(MEASURED))
def test_the_per_thread_rule_gives_every_published_bare_context_within_three_percent(gpu):
    threads = SMS[gpu] * THREADS_PER_SM[GPU_CATALOG[gpu].compute_capability]
    assert abs(threads * PER_THREAD - MEASURED[gpu][0]) <= 0.03 * MEASURED[gpu][0]
    assert bare_context(gpu)[0] == MEASURED[gpu][0]        # the card's own figure wins over the rule


def test_every_nvidia_card_of_the_catalogue_has_its_sms_and_threads():
    nvidia = [k for k, g in GPU_CATALOG.items() if g.compute_capability is not None]
    assert sorted(nvidia) == sorted(SMS)
    assert all(GPU_CATALOG[k].compute_capability in THREADS_PER_SM for k in SMS)


def test_the_point_holds_what_the_published_whole_processes_used():
    # lazy: A100 80GB, 0.47 GiB after torch.ones (torch 2.1.1); eager: the same card 1.78 GiB (torch 1.10.2),
    # V100 16GB 1,343 MB (NVML "MB" of 2^20), RTX 3090 1,687 MiB (cu111)
    assert estimate(_on("A100-80GB")).bytes >= 0.47 * 2**30
    for gpu, used in (("A100-80GB", 1.78 * 2**30), ("V100-16GB", 1343 * MIB), ("RTX-3090-24GB", 1687 * MIB)):
        e = estimate(_on(gpu, torch="1.10.2"))
        assert e.low <= e.bytes and used <= e.bytes <= e.high
    assert estimate(_on("H100-SXM-80GB")).bytes == 984 * MIB        # 534 + 450


def test_lazy_loading_starts_with_torch_1_13():
    assert estimate(_on("H100-SXM-80GB", torch="1.13")).modules == 450 * MIB
    assert estimate(_on("H100-SXM-80GB", torch="1.12.1")).modules == 1436 * MIB


def test_a_given_context_an_amd_card_and_a_custom_capacity():
    assert context_bytes(_on("H100-SXM-80GB", cuda_context_bytes=123 * MIB)) == 123 * MIB
    assert context_band(_on("H100-SXM-80GB", cuda_context_bytes=123 * MIB)) == (2**29, 3 * 2**29)
    assert context_bytes(_on("MI300X-192GB")) == FLAT
    assert context_bytes(replace(W, gpu_memory=24 * 10**9)) == FLAT
    e = estimate(_on("RTX-4090-24GB"))
    assert context_band(_on("RTX-4090-24GB")) == (e.low, e.high) and e.low < e.bytes < e.high


def test_the_report_counts_the_cards_context_and_says_why():
    _s, _w, rep = zerocalc_report(["--model", "llama-3-8b", "--gpu", "RTX-4090-24GB", "--finetune", "qlora"])
    c = rep["cuda_context"]
    assert c["bytes"] == estimate(_on("RTX-4090-24GB")).bytes
    assert "128 SMs" in c["how"] and not c["given"]
    assert all(p["CUDA context"] == c["bytes"] for p in rep["peak"][0]["phases"].values())


def test_the_page_link_estimates_by_default_and_keeps_a_measured_figure():
    from ui.state import convert as S
    st, _ = S.from_query({"model": "llama-3-8b", "gpu": "RTX-4090-24GB"})
    assert S.resolve(st).workload.cuda_context_bytes is None
    st, warnings = S.from_query({"model": "llama-3-8b", "cuda_context_bytes": str(700 * MIB)})
    assert warnings == [] and S.resolve(st).workload.cuda_context_bytes == 700 * MIB


def test_another_card_moves_the_peak_by_its_context_too():
    from zerocalc.parallel.ranks import layout_report
    from zerocalc.step.peak import peak_on_gpu
    from zerocalc import Scenario
    s = Scenario(params=8_030_261_248, workers=1)
    w = _on("RTX-4090-24GB", fragmentation_percent=5)
    here = layout_report(s, w).peaks[0]
    there = layout_report(s, replace(w, gpu="A100-80GB")).peaks[0]
    assert peak_on_gpu(here, s, w, "A100-80GB") == there.peak_bytes


def test_an_rl_engine_process_holds_the_cards_bare_context():
    """vLLM's own process (rl/rollout.py): its context exists before vLLM's init snapshot, the kernels it loads
    later are its logged non-torch memory, so it counts the card's bare context."""
    from zerocalc.rl.rollout import CONTEXT_BYTES, engine_context_bytes
    assert engine_context_bytes("H100-SXM-80GB") == 534 * MIB
    assert engine_context_bytes("RTX-4090-24GB") == bare_context("RTX-4090-24GB")[0]
    assert engine_context_bytes("MI300X-192GB") == engine_context_bytes("") == CONTEXT_BYTES
