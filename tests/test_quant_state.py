"""bitsandbytes' quantization state under ZeRO-3 and FSDP (zerocalc/step/buffers.py SHARDS_QUANT_STATE, issue 32):
the packed 4-bit codes are the parameter that DeepSpeed ZeRO-3 and FSDP1 shard; the QuantState beside them (absmax,
the scales of absmax, the code tables) is an attribute of the parameter that every rank keeps whole. torchao's
NF4Tensor (torchtune's QLoRA under FSDP2) shards its scalers with the data.

Sources: the CPU recordings of tests/measure/quant_state_fsdp1.py (torch 2.13 FSDP1 on gloo, world 2, bitsandbytes
0.50.2 Linear4bit) and tests/measure/quant_state_zero3.py (DeepSpeed 0.19.8 ZeRO-3, CPU accelerator, 2 gloo
processes), the versions requirements-validation.txt pins;
AnswerDotAI/fsdp_qlora train.py load_and_quantize at 05ed9f2 ("FSDP only syncs parameters and buffers, so the
quant_state isn't copied"); torchao dtypes/nf4tensor.py fsdp_pre_all_gather (scalers, factor and data gathered).
"""

import pytest

from zerocalc.model.finetune import FineTune, is_quant_state
from zerocalc.model.inventory import param_count
from zerocalc.model.presets import MODEL_PRESETS
from zerocalc.parallel.ranks import layout_report
from zerocalc.scenario import Scenario
from zerocalc.states.zero import row_bytes
from zerocalc.step.workload import Workload

LLAMA = MODEL_PRESETS["llama-2-7b"][0]


def test_fsdp1_shards_the_packed_codes_and_leaves_the_quant_state_whole():
    pytest.importorskip("bitsandbytes")
    from tests.measure.quant_state_fsdp1 import IN_FEATURES, LAYERS, OUT_FEATURES, recorded
    got = recorded(world=2)
    values = IN_FEATURES * OUT_FEATURES
    assert got["packed"] == [values // 4] * LAYERS            # two 4-bit codes a byte, in bf16 words
    assert got["flat_shard"] == values // 4 * LAYERS // 2      # the flat parameter: half on each rank
    assert got["absmax"] == [values // 64] * LAYERS            # a block of 64 values: one absmax each, whole
    assert got["absmax_scales"] == [values // 64 // 256] * LAYERS


def test_zero3_partitions_the_packed_codes_and_leaves_the_quant_state_whole():
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-validation.txt (CI installs it)")
    from tests.measure.deepspeed_run import run_measurement
    from tests.measure.quant_state_zero3 import IN_FEATURES, OUT_FEATURES
    got = run_measurement("quant_state_zero3", port="29571")
    values = [IN_FEATURES * OUT_FEATURES, IN_FEATURES * IN_FEATURES]
    assert got["full"] == got["packed"] == [v // 4 for v in values]            # 4-bit codes in bf16 words
    assert got["partition"] == [v // 4 // 2 for v in values]                   # half on each of 2 ranks
    assert got["absmax"] == [v // 64 for v in values] and got["attached"] == [True, True]   # whole, still there
    assert got["absmax_scales"] == [v // 64 // 256 for v in values]


def _rows(convention, **work):
    scenario = Scenario.from_convention(convention, params=param_count(LLAMA), workers=2)
    w = Workload(LLAMA, seq_len=512, finetune=FineTune(mode="qlora", kbit_prepare=False), **work)
    rows = layout_report(scenario, w).ranks[0].rows
    return {r.entry.name.split(": ", 1)[1]: r for r in rows if "nf4" in r.entry.name}


@pytest.mark.parametrize("convention, work, whole", [
    ("deepspeed", {}, True),                                              # ZeRO-3
    ("pure-bf16", dict(comm_buffers="fsdp", fsdp_version=1), True),       # FSDP1 (fsdp_qlora, accelerate)
    ("fsdp2", {}, False),                                                 # torchtune's NF4 under FSDP2
])
def test_the_quant_state_is_whole_on_every_rank_where_the_framework_keeps_it(convention, work, whole):
    rows = _rows(convention, **work)
    assert rows["nf4 data (packed)"].divisor == 2
    for name, row in rows.items():
        if is_quant_state(name):
            assert row.divisor == (1 if whole else 2), name
            if whole:                                    # stage 3 keeps what stage 0 keeps
                assert row_bytes(row, 3) == row_bytes(row, 0), name


@pytest.mark.parametrize("convention, work, on_gpu", [
    ("deepspeed", {}, True),                                              # ZeRO-3 offload_param
    ("pure-bf16", dict(comm_buffers="fsdp", fsdp_version=1), True),       # FSDP1 CPUOffload(offload_params=True)
    ("fsdp2", {}, False),                                                 # FSDP2's CPUOffloadPolicy moves NF4's scalers
])
def test_parameter_offload_leaves_the_quant_state_it_does_not_manage_on_the_gpu(convention, work, on_gpu):
    """FSDP1 offloads each unit's flat parameter alone (torch 2.13 distributed/fsdp/_init_utils.py
    _init_param_handle_from_params: handle.flat_param_to(cpu)), after _move_states_to_device moved the module to
    device_id; bitsandbytes' Params4bit.to carries its QuantState to that device (bitsandbytes 0.50.2 nn/modules.py
    Params4bit.to: self.quant_state.to(device)) and nothing brings it back. Answer.AI's Llama-2-70B QLoRA with CPU
    offload on 2 x RTX 3090 reserved 14.92 GiB (fsdp_qlora benchmarks_03_2024.md): zerocalc read 13.37 GiB with the
    state offloaded, 14.39 GiB (-3.6 %) with it on the GPU (validation ledger AA-14)."""
    scenario = Scenario.from_convention(convention, params=param_count(LLAMA), workers=2, offload_params="cpu",
                                        offload_optimizer="cpu")
    w = Workload(LLAMA, seq_len=512, finetune=FineTune(mode="qlora", kbit_prepare=False), **work)
    view = layout_report(scenario, w).ranks[0]
    quantized = [(i, r.entry.name.split(": ", 1)[1]) for i, r in enumerate(view.rows) if "nf4" in r.entry.name]
    state = [i for i, name in quantized if is_quant_state(name)]
    packed = [i for i, r in enumerate(view.rows) if r.entry.name.endswith("nf4 data (packed)")]
    assert state and packed
    stage3 = view.stages[3]
    assert all(stage3.entry_location[i] == "cpu" for i in packed)      # the parameter goes where offload says
    assert all(stage3.entry_location[i] == ("gpu" if on_gpu else "cpu") for i in state)
    on_device = sum(stage3.per_worker_by_entry[i] for i in state if stage3.entry_location[i] == "gpu")
    assert stage3.gpu_bytes >= on_device > 0 if on_gpu else on_device == 0


def test_torchaos_nf4_tensor_takes_no_more_than_bitsandbytes_double_quantized_layout():
    # torchtune's QLoRA base is torchao's NF4Tensor (quantize_base=True; zerocalc/frameworks/torchtune/reader.py
    # counts it as bitsandbytes' NF4 with double quantization): packed 4-bit data, an int8 scaler per 64 values,
    # a factor per 256 scalers in the weight's dtype, a scalar mean and the 16-value table. Measured here on the
    # CPU at torchao's version in requirements-validation.txt: zerocalc's layout (fp32 second-level scales, the
    # 256-entry code table) holds at most 0.03 % more, never less.
    torch = pytest.importorskip("torch", reason="pip install -r requirements-validation.txt")
    nf4 = pytest.importorskip("torchao.quantization.quantize_.workflows.nf4.nf4_tensor",
                              reason="pip install -r requirements-validation.txt")
    from zerocalc.model.finetune import quantized_storage
    from zerocalc.tables import DTYPE_BITS

    rows, cols = LLAMA.ffn, LLAMA.hidden                      # Llama-2-7B's gate / up projection
    tensor = nf4.to_nf4(torch.zeros(rows, cols, dtype=torch.bfloat16).normal_())
    names, _ = tensor.__tensor_flatten__()
    measured = sum(getattr(tensor, n).untyped_storage().nbytes() for n in names)
    counted = sum(n * DTYPE_BITS[dtype] // 8 for dtype, n in
                  quantized_storage(rows * cols, rows, FineTune(mode="qlora", quant_type="nf4")).values())
    assert measured <= counted <= measured * 1.0003
