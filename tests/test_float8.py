"""float8 linears (zerocalc/step/float8.py) against torchao 0.18.0's Float8Linear on the CPU (emulate=True):
what a converted linear saves for backward and the transients of its casts, measured with saved-tensor hooks and a
dispatch-mode allocation tracker (tests/measure/float8_saves.py)."""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -r requirements-validation.txt")
pytest.importorskip("torchao", reason="torchao not installed: pip install -r requirements-validation.txt")

from tests.measure import float8_saves as f8  # noqa: E402
from zerocalc.model.presets import MODEL_PRESETS  # noqa: E402
from zerocalc.parallel.ranks import layout_report  # noqa: E402
from zerocalc.scenario import FieldError, Scenario  # noqa: E402
from zerocalc.step.float8 import RECIPE_CASTS, linear_transients  # noqa: E402
from zerocalc.step.workload import Workload  # noqa: E402

SIZES = [(64, 128, 32), (256, 96, 200), (48, 80, 1000)]      # (in, out, tokens)


@pytest.mark.parametrize("recipe", list(RECIPE_CASTS))
@pytest.mark.parametrize("fan_in, out, tokens", SIZES)
def test_cast_transients_are_the_measured_ones(recipe, fan_in, out, tokens):
    m = f8.transients(fan_in, out, tokens, "bf16", recipe)
    want = linear_transients(recipe, tokens, fan_in, out, compiled=False)
    assert want == {"forward": m["forward_peak_intermediate"], "backward": m["backward_peak_intermediate"]}


@pytest.mark.parametrize("recipe", list(RECIPE_CASTS))
def test_a_float8_linear_saves_what_a_plain_linear_saves(recipe):
    plain = f8.saved_tensors(64, 176, 48, "bf16", None, block="mlp")
    converted = f8.saved_tensors(64, 176, 48, "bf16", recipe, block="mlp")
    assert converted["activation_bytes"] == plain["activation_bytes"] and not converted["float8_saved"]


def test_float8_adds_its_casts_to_the_peak_and_halves_the_gathered_linears():
    arch = MODEL_PRESETS["llama-3-8b"][0]
    scenario = Scenario.from_convention("fsdp2", params=8_030_261_248, workers=8)

    def phases(**changes):
        work = Workload(arch, micro_batch=1, seq_len=4096, recompute="op", comm_buffers="fsdp", fsdp_wrap="torchtitan",
                        **changes)
        return layout_report(scenario, work).peaks[3].phases

    bf16, f8_eager = phases(), phases(float8="tensorwise")
    assert f8_eager["forward"]["float8 casts (one linear)"] == linear_transients("tensorwise", 4096, 14336, 4096,
                                                                                 False)["forward"]
    assert "float8 casts (one linear)" not in bf16["forward"]
    # backward holds the [norm, head] unit and one block gathered: the block's seven linears at 1 byte, not 2
    gathered = phases(float8="tensorwise", float8_all_gather=True)["backward"]["gathered parameters"]
    linears = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336
    assert bf16["backward"]["gathered parameters"] - gathered == linears
    with pytest.raises(FieldError, match="float8_all_gather"):
        Workload(arch, float8="rowwise", float8_all_gather=True)


def test_fsdp_float8_all_gather_moves_one_byte_per_weight():
    # FSDP2 on 2 gloo ranks (the all-gather itself on uint8 views: gloo has no float8): the unit's gathered buffer
    # of a converted MLP's three linears is 1 byte per element with enable_fsdp_float8_all_gather, 2 without
    ranks = f8.fsdp_float8_all_gather()
    runs = {(r["case"]["recipe"], r["case"]["fp8_ag"]): r for r in ranks[0]["results"]}
    bf16 = runs[("tensorwise", False)]["all_gather_buffers"][0]["output"]
    fp8 = runs[("tensorwise", True)]["all_gather_buffers"][0]["output"]
    assert (bf16[1], fp8[1]) == ("bfloat16", "float8_e4m3fn")
    assert bf16[0] == fp8[0] and bf16[2] == 2 * fp8[2] == 2 * bf16[0][0]
    gathered = runs[("tensorwise", True)]["gathered"]["0.gate_proj.weight"]
    assert gathered["unsharded_type"] == "Float8TrainingTensor"            # a float8 tensor and its fp32 scale
