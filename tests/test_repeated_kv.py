"""K and V repeated to every query head before the attention kernel (zerocalc/step/repeated_kv.py): torchtune's
MultiHeadAttention (torchtune/modules/attention.py at bd2a0fc7, torchtune 0.6.1) and LitGPT's CausalSelfAttention
(litgpt 0.5.13) against Hugging Face's SDPA path, measured on the CPU eager and compiled
(tests/measure/repeated_kv_attention.py), and the plan's field end to end."""

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from tests.beside_venv import ROOT, Release, subprocess_env
from zerocalc.frameworks import import_config
from zerocalc.model.architecture import Architecture
from zerocalc.scenario import FieldError, Scenario
from zerocalc.step.activations import activations
from zerocalc.step.repeated_kv import TERM
from zerocalc.step.workload import Workload

RELEASES = (Release("torchtune", "0.6.1", "ZEROCALC_TORCHTUNE_PATH", "/tmp/zerocalc-torchtune-0.6.1"),
            Release("litgpt", "0.5.13", "ZEROCALC_LITGPT_PATH", "/tmp/zerocalc-litgpt-0.5.13"))


def _arch(**kw):
    return Architecture(**{"layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn": 352, "vocab": 512,
                           "seq_len": 256, **kw})


def _layer_bytes(a, repeat: bool, **kw) -> int:
    return sum(activations(a, 2, 256, 16, repeat_kv=repeat, **kw).per_layer.values())


@pytest.fixture(scope="module")
def measured():
    for name in ("torch", "transformers", "torchao"):
        pytest.importorskip(name, reason="pip install -r requirements-validation.txt")
    env = subprocess_env(*(r for r in RELEASES if importlib.util.find_spec(r.package) is None))
    out = subprocess.run([sys.executable, "-m", "tests.measure.repeated_kv_attention"], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("framework", ["torchtune", "litgpt"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_the_attention_saves_what_the_term_adds(measured, framework, mode):
    """The kernel's saved q, k, v and output: torchtune's and LitGPT's all at the 4 query heads (K and V expanded
    and flattened, or repeat_interleave'd: copies), Hugging Face's K and V at the 2 KV heads; the difference is the
    term, to the byte."""
    assert measured["torchtune"].startswith("0.6.1") and measured["litgpt"] == "0.5.13"
    tt, hf = measured[f"{framework} {mode}"], measured[f"huggingface {mode}"]
    assert tt["heads"] == [4, 4, 4, 4] and hf["heads"] == [2, 2, 4, 4]
    a = _arch()
    compiled = mode == "compiled"
    added = _layer_bytes(a, True, compiled=compiled) - _layer_bytes(a, False, compiled=compiled)
    assert added == tt["bytes"] - hf["bytes"] == 2 * 2 * 256 * (128 - 64) * 2      # 2 x b x s x (q - kv) x 2 bytes


def test_transformers_sdpa_repeats_them_under_a_padding_mask(measured):
    """transformers 5.24's SDPA path passes K and V grouped (enable_gqa) only without a mask; a padded batch has one,
    so it repeats them (integrations/sdpa_attention.py): what the imports infer for a padded micro-batch of two or
    more under SDPA (frameworks/common.py Builder.build)."""
    assert measured["huggingface padded eager"] == measured["torchtune eager"]


def test_the_term_is_only_where_a_fused_kernel_saves_a_grouped_pair():
    gqa = _arch()
    assert activations(gqa, 2, 256, 16, repeat_kv=True).per_layer[TERM] == 2 * 2 * 256 * 64 * 2
    for a, attention in ((gqa, "eager"), (_arch(kv_heads=4), "flash")):     # eager repeats anyway; no grouping
        assert activations(a, 2, 256, 16, attention, repeat_kv=True) == activations(a, 2, 256, 16, attention)


def test_recompute_keeps_the_copies_only_in_the_rebuilt_block():
    a = _arch()
    full = activations(a, 2, 256, 16, recompute="full", repeat_kv=True)
    plain = activations(a, 2, 256, 16, recompute="full")
    assert TERM not in full.per_layer and full.per_layer == plain.per_layer
    assert full.recompute_working - plain.recompute_working == 2 * 2 * 256 * 64 * 2
    op = activations(a, 2, 256, 16, recompute="op", repeat_kv=True)      # rebuilt with the ops it does not save
    assert TERM not in op.per_layer


def test_lora_blocks_keep_the_copies_where_attention_runs_backward():
    """Every trained block but the first runs its attention backward (the gradient goes on to the blocks before),
    so it saves q, k, v and the copies. The first trained block's attention core runs backward only for an adapter
    at or before it: q and v, not o and down alone; its delta against the others follows."""
    from zerocalc.parallel.ranks import layout_report
    from zerocalc.model.finetune import FineTune
    for targets in (("q", "v"), ("o", "down")):
        plain = Workload(_arch(), 2, 256, finetune=FineTune(mode="lora", lora_targets=targets))
        on, off = (layout_report(Scenario(params=1), replace(plain, repeat_kv=r)).ranks[-1].shape.act
                   for r in (True, False))
        term = 2 * 2 * 256 * 64 * 2
        assert on.per_layer[TERM] == term and sum(on.per_layer.values()) - sum(off.per_layer.values()) == term
        assert on.first_block_delta - off.first_block_delta == (0 if targets == ("q", "v") else -term)


def test_the_field_refuses_a_non_boolean():
    with pytest.raises(FieldError) as e:
        Workload(_arch(), repeat_kv="yes")
    assert e.value.field == "repeat_kv"


def test_torchtune_and_litgpt_imports_set_it_and_a_current_torchtitan_does_not():
    tune = import_config("torchtune", "# Config for single device full finetuning in full_finetune_single_device.py\n"
                         "model:\n  _component_: torchtune.models.llama3_2.llama3_2_3b\nbatch_size: 2\n")
    assert tune.workload["repeat_kv"] is True
    lit = import_config("litgpt", "checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B\ndevices: 1\n")
    assert lit.workload["repeat_kv"] is True
    titan = import_config("torchtitan", "[training]\nlocal_batch_size = 2\nseq_len = 4096\n")
    assert "repeat_kv" not in titan.workload


@pytest.mark.parametrize("fmt, text, repeats", [
    ("llamafactory", "model_name_or_path: m\nstage: sft\nfinetuning_type: lora\nper_device_train_batch_size: 2\n", True),
    ("llamafactory", "model_name_or_path: m\nstage: sft\nper_device_train_batch_size: 2\nflash_attn: fa2\n", None),
    ("llamafactory", "model_name_or_path: m\nstage: sft\nper_device_train_batch_size: 1\n", None),
    ("llamafactory", "model_name_or_path: m\nstage: sft\nper_device_train_batch_size: 2\npacking: true\n", None),
    ("axolotl", "base_model: m\nmicro_batch_size: 2\ngradient_accumulation_steps: 1\n", True),
    ("axolotl", "base_model: m\nmicro_batch_size: 2\ngradient_accumulation_steps: 1\nflash_attention: true\n", None),
    ("hf_trainer", '{"per_device_train_batch_size": 4}', True),
    ("hf_trainer", '{"per_device_train_batch_size": 4, "attn_implementation": "flash_attention_2"}', None)])
def test_hugging_face_launchers_under_sdpa_with_padded_batches_set_it(fmt, text, repeats):
    """A padded micro-batch of two or more under transformers' SDPA (the launchers' default kernel): a padding mask,
    so K and V repeated; flash-attention 2 unpads instead, one sample pads nothing, packing is not padding."""
    assert import_config(fmt, text).workload.get("repeat_kv") is repeats


def test_an_older_torchtitan_file_sets_it():
    """Names only torchtitans before 238fa99 read (here training.batch_size, renamed by #1238 in 2025-06): that
    torchtitan repeated K and V (repeat_kv until #2259, 2026-01-27)."""
    titan = import_config("torchtitan", "[training]\nbatch_size = 2\nseq_len = 4096\n")
    assert titan.workload["repeat_kv"] is True


def test_the_cli_flag():
    args = ["--model", "llama-3.2-1b", "--micro-batch", "1", "--seq-len", "1024", "--json"]
    peaks = []
    for extra in ([], ["--repeat-kv"]):
        out = subprocess.run([sys.executable, "-m", "zerocalc", *args, *extra], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        peaks.append(json.loads(out.stdout)["peak"][0]["phases"]["backward"]["activations"])
    # Llama 3.2 1B: 16 layers, 32 heads over 8 KV heads of 64: 2 x 1024 tokens x (2048 - 512) x 2 bytes a layer
    assert peaks[1] - peaks[0] == 16 * 2 * 1024 * (2048 - 512) * 2
