"""An fp32 residual stream (FineTune.fp32_parts, zerocalc/step/fp32_stream.py): axolotl's loader keeps
embed_tokens, lm_head and the norms in fp32 beside a 16-bit model unless the attention kernel needs them cast back
(axolotl-ai-cloud/axolotl src/axolotl/loaders/model.py _configure_embedding_dtypes, attn_needs_dtype_cast), so
those weights train in fp32 and the residual stream is fp32 under autocast. The activation terms are checked
against transformers' Llama on the CPU (tests/measure/fp32_stream.py); the states by the ledger's widths."""

import pytest
import yaml

from zerocalc.frameworks import import_axolotl
from zerocalc.model.architecture import Architecture
from zerocalc.model.finetune import FineTune
from zerocalc.step.activations import activations
from zerocalc.step.trainable import Training

H, F, V, T = 256, 1024, 512, 128
BLOCK = ("q", "k", "v", "o", "gate", "up", "down")


def _zerocalc(frozen_norms: bool, kv_heads: int = 4, recompute: str = "none"):
    """zerocalc's per-block and output-end bytes for the measured model, without and with the fp32 stream."""
    a = Architecture(layers=2, hidden=H, heads=4, kv_heads=kv_heads, ffn=F, vocab=V, seq_len=T)
    train = Training(frozenset(BLOCK), frozenset(), norms=False, embedding=True, head=True,
                     final_norm=False) if frozen_norms else None
    out = []
    for stream in (0, 32):
        act = activations(a, 1, T, 16, "flash", recompute, "huggingface", training=train, stream_bits=stream)
        out.append((sum(act.per_layer.values()), sum(act.head.values())))
    return out


@pytest.mark.parametrize("frozen_norms", [False, True])
def test_the_stream_adds_what_transformers_saves_beyond_the_16bit_model(frozen_norms):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.measure.fp32_stream import saved_bytes
    base, wide = saved_bytes(False, frozen_norms), saved_bytes(True, frozen_norms)
    (block16, head16), (block32, head32) = _zerocalc(frozen_norms)
    # measured: +10 bytes per token and feature a block with trained norms, +6 frozen; the head's 16-bit weight copy
    # (V x h x 2) and, with a trained final norm, its fp32 normalised input (+2 per token and feature)
    assert wide["block"] - base["block"] == (6 if frozen_norms else 10) * T * H
    assert block32 - block16 == wide["block"] - base["block"]
    assert head32 - head16 == wide["head"] - base["head"] == 2 * V * H + (0 if frozen_norms else 2 * T * H)


def test_qlora_k_bit_preparation_keeps_the_head_weight_16bit_copy():
    """peft's prepare_model_for_kbit_training leaves the head in fp32: under autocast its bf16 copy (V x h x 2
    bytes) is saved for backward, which zerocalc's 32-bit QLoRA activations add once at the output end."""
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("peft")
    from tests.measure.fp32_stream import qlora_head_copies
    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.step.shape import activation_args
    assert qlora_head_copies(H, V, T) == 2 * V * H
    flags = ["--layers", "2", "--hidden", str(H), "--heads", "4", "--ffn", str(F), "--vocab", str(V), "--seq-len",
             str(T), "--finetune", "qlora", "--lora-targets", "all-linear", "--recompute", "none"]
    for prepare, copy in (("yes", 2 * V * H), ("no", None)):
        s, _a, w, _ = _inputs(build_parser().parse_args(flags + ["--kbit-prepare", prepare]))
        head = activations(*activation_args(s, w)).head
        assert head.get("output projection weight (autocast's 16-bit copy)") == copy
        assert "final norm fp32 output (fp32 stream)" not in head      # 32-bit activations count the norm already


@pytest.mark.parametrize("frozen_norms", [False, True])
def test_fp32_norms_alone_add_what_transformers_saves(frozen_norms):
    """Norms alone in fp32 (fp32_parts norms: axolotl's fp32_norms, LLaMA-Factory's upcast_layernorm): the stream
    stays 16-bit, but each linear casts the norm's fp32 output itself: +6 bytes per token and feature a Llama
    block, trained or frozen, nothing at the head."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.measure.fp32_stream import saved_bytes
    base, norms = saved_bytes(False, frozen_norms), saved_bytes(True, frozen_norms, norms_only=True)
    assert norms["block"] - base["block"] == 6 * T * H and norms["head"] == base["head"]
    a = Architecture(layers=2, hidden=H, heads=4, ffn=F, vocab=V, seq_len=T)
    train = Training(frozenset(BLOCK), frozenset(), norms=False, embedding=True, head=True) if frozen_norms else None
    narrow, wide = (activations(a, 1, T, 16, "flash", "none", "huggingface", training=train, fp32_norms=n)
                    for n in (False, True))
    assert sum(wide.per_layer.values()) - sum(narrow.per_layer.values()) == norms["block"] - base["block"]
    assert wide.head == narrow.head


def test_the_launchers_norm_upcasts_set_fp32_norms():
    from zerocalc.frameworks import import_config
    factory = "model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\nfinetuning_type: lora\nbf16: true\n" \
              "upcast_layernorm: true\n"
    assert import_config("llamafactory", factory).finetune["fp32_parts"] == "norms"
    quantized = import_config("llamafactory", factory + "quantization_bit: 4\n")       # not measured: named
    assert "fp32_parts" not in quantized.finetune
    reason = next(i["reason"] for i in quantized.ignored_keys if i["key"] == "upcast_layernorm")
    assert "not counted" in reason and "6 bytes per token" in reason


def test_the_rule_counts_each_linear_reading_a_norm():
    """q, k, v each cast the attention norm's fp32 output, gate and up the MLP norm's: fused modules cast once."""
    from zerocalc.step.fp32_stream import TERM, block_terms
    from zerocalc.step.activations import tokens
    t = tokens(1, T, 1, 1, False, "huggingface")
    split = Architecture(layers=2, hidden=H, heads=4, ffn=F, vocab=V, seq_len=T)
    fused = Architecture(layers=2, hidden=H, heads=4, ffn=F, vocab=V, seq_len=T, fused_qkv=True, fused_gate_up=True)
    assert block_terms(split, t, None)[TERM] == 16 * (3 + 2) * T * H          # 2 bytes x n per norm, trained
    assert block_terms(fused, t, None)[TERM] == 16 * (1 + 1) * T * H
    layernorm = Architecture(layers=2, hidden=H, heads=4, ffn=F, vocab=V, seq_len=T, norm="layernorm",
                             gated_mlp=False, fused_qkv=True)
    assert block_terms(layernorm, t, None) == {}                              # fp32 under autocast either way


def test_a_checkpointed_block_keeps_its_fp32_input():
    a = Architecture(layers=2, hidden=H, heads=4, ffn=F, vocab=V, seq_len=T)
    narrow = activations(a, 1, T, 16, "flash", "full", "huggingface")
    wide = activations(a, 1, T, 16, "flash", "full", "huggingface", stream_bits=32)
    assert narrow.per_layer == {"block input (checkpoint)": 2 * T * H}
    assert wide.per_layer == {"block input (checkpoint)": 4 * T * H}
    assert wide.recompute_working - narrow.recompute_working == 10 * T * H   # the rebuilt block saves the stream's


def _axolotl(attention):
    from pathlib import Path
    body = yaml.safe_load((Path(__file__).resolve().parent / "fixtures" / "launchers" /
                           "axolotl_llama3_fft_8b.yaml").read_text())
    body.pop("attn_implementation", None)
    if attention:
        body["attn_implementation"] = attention
    return import_axolotl(yaml.safe_dump(body))


@pytest.mark.parametrize("attention", [None, "sdpa", "eager"])
def test_axolotl_full_fine_tunes_under_sdpa_or_eager_keep_the_fp32_copies(attention):
    got = _axolotl(attention)
    assert got.finetune.get("fp32_parts") == "embed-head-norms"
    assert "_configure_embedding_dtypes" in got.sources["finetune.fp32_parts"]


def test_flash_attention_casts_them_back():
    assert "fp32_parts" not in _axolotl("flash_attention_2").finetune


def test_the_fp32_rows_train_at_16_bytes_a_parameter_under_pure_bf16():
    """The embeddings, head and norms keep fp32 weights, fp32 gradients and AdamW's fp32 moments (torch keeps the
    state in the parameter's dtype): 16 bytes a parameter where the bf16 rest keeps 8."""
    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.parallel.ranks import report_for
    flags = ["--model", "llama-3.2-1b", "--convention", "pure-bf16", "--gpu", "H100-SXM-80GB"]
    totals = []
    for value in ("none", "embed-head-norms"):
        s, _a, w, _ = _inputs(build_parser().parse_args(flags + ["--fp32-parts", value]))
        totals.append(report_for(s, w).ranks[0].peaks[0].phases["optimizer_step"]["model states"])
    norms = 2 * 16 * 2048 + 2048                   # Llama-3.2-1B: two norms in each of 16 blocks, the final norm
    embed = 128256 * 2048                          # tied: one matrix for embed_tokens and lm_head
    assert totals[1] - totals[0] == (16 - 8) * (embed + norms)


def test_the_field_refuses_what_was_not_measured():
    """embed-head-norms was measured on a full fine-tune, the fp32 parts beside 16-bit linears, not 4-bit ones."""
    from zerocalc.scenario import FieldError
    for bad in (dict(fp32_parts="yes"), dict(mode="lora", fp32_parts="embed-head-norms"),
                dict(mode="qlora", fp32_parts="norms")):
        with pytest.raises(FieldError) as err:
            FineTune(**bad)
        assert err.value.field == "fp32_parts"
    assert FineTune(mode="lora", fp32_parts="norms").fp32_parts == "norms"


def test_casting_the_fp32_parts_back_is_offered_as_a_fix():
    """A plan that fits once the launcher casts its fp32 copies back gets that fix (a recipe: no extra time), as
    the flag that applies it; applied, its peak is the plan's with fp32_parts none."""
    from zerocalc.answers.fixes import apply, fixes
    from zerocalc.cli.advice import flag_values
    from zerocalc.cli.main import _inputs, build_parser
    from zerocalc.parallel.ranks import layout_report
    flags = ["--model", "llama-3.2-1b", "--convention", "pure-bf16", "--gpu", "RTX-4090-24GB", "--seq-len", "2048",
             "--micro-batch", "2", "--fp32-parts", "embed-head-norms"]
    s, _a, w, _ = _inputs(build_parser().parse_args(flags))
    assert not layout_report(s, w).peaks[0].fits
    fix = next(f for f in fixes(s, w, 0) if f.workload == {"fp32_parts": "none"})
    assert flag_values(fix) == ["--fp32-parts", "none"] and fix.cost == 1
    s2, w2 = apply(fix, s, w)
    assert w2.finetune.fp32_parts == "none" and w2.finetune.mode == w.finetune.mode
    plain, _a, w_plain, _ = _inputs(build_parser().parse_args(flags[:-1] + ["none"]))
    assert fix.peak_bytes == layout_report(plain, w_plain).peaks[0].peak_bytes
