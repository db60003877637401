"""Compare mode and calibration through AppTest: pin plan A, change anything, both plans side by side and in the
link; every calibration format pasted (the fixtures of tests/fixtures/calibration), garbage, and the suggestion
buttons."""

from pathlib import Path

import pytest

from tests.app_helpers import alerts, core_report, dataframe_with, figure, run_app, text_of, traces, warnings_shown
from ui.share import split_query
from zerocalc.answers.calibrate.parse import parse
from zerocalc.scenario import FieldError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "calibration"
CALIBRATION_FILES = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".txt", ".json", ".log"))


def test_pin_change_and_compare_two_plans_in_one_link():
    at = run_app({"model": "llama-3-8b", "workers": "8"}, tab="Compare")
    assert "Pin a plan" in " ".join(c.value for c in at.caption)
    at.button(key="pin_a").click().run()
    # the link carries the open view too (?view=compare)
    assert dict(at.query_params) == {"model": "llama-3-8b", "workers": "8", "a.model": "llama-3-8b",
                                     "view": "compare"} or \
        dict(at.query_params) == {"model": "llama-3-8b", "a.model": "llama-3-8b", "view": "compare"}
    at.number_input(key="workers").set_value(32).run()
    at.number_input(key="micro_batch").set_value(2).run()
    query = dict(at.query_params)
    assert query == {"model": "llama-3-8b", "workers": "32", "micro_batch": "2", "a.model": "llama-3-8b",
                     "view": "compare"}
    a, b = core_report({"model": "llama-3-8b"}), core_report({"model": "llama-3-8b", "workers": "32",
                                                              "micro_batch": "2"})
    states = figure(at, "fig_compare_states")
    params = traces(states)["parameters"]
    assert params["customdata"] == [r["stages"][s]["per_worker_bytes"]["parameters"] for s in range(4) for r in (a, b)]
    peak = figure(at, "fig_compare_peak")
    for i, (s, r) in enumerate((s, r) for s in range(4) for r in (a, b)):
        assert sum(t["customdata"][i] for t in peak["data"]) == r["peak"][s]["peak_bytes"]
    diff = dataframe_with(at, "plan A")
    assert diff["field"].tolist() == ["Data-parallel workers (dp)", "Micro-batch (sequences per GPU)"]
    assert diff["plan A"].tolist() == ["8 (default)", "1 (default)"] and diff["plan B"].tolist() == ["32", "2"]
    workers_alone = core_report({"model": "llama-3-8b", "workers": "32"})
    moved = workers_alone["stages"][3]["per_worker_total_bytes"] - a["stages"][3]["per_worker_total_bytes"]
    from zerocalc.units import format_bytes
    assert diff["model states on the GPU per worker, changed alone"].tolist()[0] == "−" + format_bytes(-moved, "GB")
    assert diff["peak, changed alone"].tolist()[1].startswith("+")                # a bigger micro-batch


def test_a_compare_link_restores_both_plans():
    # the link opens the view it was shared from: Compare, with both plans
    link = {"model": "llama-3-8b", "workers": "32", "a.model": "llama-3-8b", "a.workers": "16", "a.stage": "2",
            "view": "compare"}
    at = run_app(link)
    assert not warnings_shown(at)
    assert at.session_state["tab"] == "Compare"
    assert dict(at.query_params) == link
    assert at.session_state["plan_a"]["workers"] == 16 and at.session_state["plan_a"]["stage"] == 2
    text = text_of(at)
    assert "Plan A: ZeRO-2" in text and "Plan B (this view): ZeRO-3" in text
    diff = dataframe_with(at, "plan A")
    assert set(diff["field"]) == {"Data-parallel workers (dp)", "ZeRO stage to check"}
    at.button(key="swap_ab").click().run()
    assert at.number_input(key="workers").value == 16 and at.session_state["plan_a"]["workers"] == 32
    at.button(key="unpin_a").click().run()
    assert not any(k.startswith("a.") for k in dict(at.query_params))


def test_a_link_with_a_pinned_plan_says_so_on_every_view():
    at = run_app({"model": "llama-3-8b", "a.model": "gpt2", "view": "peak-and-step"})
    assert at.session_state["tab"] == "Peak and step"
    assert any("Plan A is pinned" in c.value for c in at.caption)
    at.session_state["tab"] = "Overview"
    at.run()
    assert "view" not in dict(at.query_params) and dict(at.query_params)["a.model"] == "gpt2"
    assert any("Plan A is pinned" in c.value for c in at.caption)
    plain = run_app({"model": "llama-3-8b", "view": "calibrate"})
    assert plain.session_state["tab"] == "Calibrate" and not any("Plan A is pinned" in c.value for c in plain.caption)


def test_a_bad_view_in_the_link_is_named_and_opens_the_overview():
    at = run_app({"model": "gpt2", "view": "<b>nope</b>"})
    shown = warnings_shown(at)
    assert "view='<b>nope</b>' is not a view" in shown and "compare" in shown
    assert at.session_state["tab"] == "Overview" and "view" not in dict(at.query_params)


def test_bad_plan_a_parameters_are_named_and_fall_back():
    at = run_app({"a.model": "gpt2", "a.workers": "lots", "a.bogus": "1"})
    shown = warnings_shown(at)
    assert "Plan A: Link parameter workers='lots' is not allowed" in shown and "'a.bogus'" in shown
    view, plan, warnings = split_query({"a.model": ["gpt2"], "workers": ["4"]})
    assert view == {"workers": ["4"]} and plan == {"model": ["gpt2"]} and warnings == []


# --- calibration ------------------------------------------------------------------------------------------------

def paste(at, text):
    at.text_area(key="calib_text").set_value(text).run()
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def calibrate_page():
    return run_app({"model": "llama-3-8b", "workers": "8", "micro_batch": "2", "seq_len": "4096", "stage": "3"},
                   tab="Calibrate")


@pytest.mark.parametrize("path", CALIBRATION_FILES, ids=lambda p: p.name)
def test_each_pasted_format_is_read_and_compared(calibrate_page, path):
    at = calibrate_page
    text = path.read_text()
    paste(at, text)
    try:
        measurement = parse(text)
    except FieldError as exc:        # every value [N/A]: a clear refusal, not a number
        assert "Could not read the pasted text" in " ".join(alerts(at, "error")), path.name
        assert exc.field == "calibration"
        return
    success = " ".join(alerts(at, "success"))
    assert f"Read as {measurement.source_format}" in success, (path.name, success, alerts(at, "error"))
    residuals = dataframe_with(at, "residual (measured - estimated)")
    assert len(residuals) >= 1
    names = set(residuals["measured"])
    assert names <= {"allocated", "reserved", "nvidia-smi used"}
    if measurement.allocated_peak_bytes is not None:
        assert "allocated" in names


def test_garbage_gets_a_clear_message(calibrate_page):
    at = calibrate_page
    for garbage in ("hello world", "{\"x\": [1, 2", "max_memory_allocated: lots", "\x00\x01", "9" * 500):
        paste(at, garbage)
        error = " ".join(alerts(at, "error"))
        assert "Could not read the pasted text" in error and "calibration" in error, (garbage, error)
    paste(at, "")
    assert not alerts(at, "error") and "Formats understood" in " ".join(c.value for c in at.caption)


def test_a_suggestion_sets_the_assumption_it_names():
    at = run_app({"model": "llama-3-8b", "micro_batch": "2", "seq_len": "4096"}, tab="Calibrate")
    paste(at, (FIXTURES / "probe_two_ranks.txt").read_text())
    buttons = [b for b in at.button if b.key and b.key.startswith("calib_apply_")]
    labels = [b.proto.label for b in buttons]
    assert "Set the reserve" in labels and "Set the context" in labels       # short enough for the column
    for label in ("Set the reserve", "Set the context"):
        at.button(key=buttons[labels.index(label)].key).click().run()
    assert dict(at.query_params)["fragmentation_percent"] == "7"
    # the probe's nvidia-smi beyond reserved, 1,594,834,944 bytes, less the estimate's NCCL buffers (704 MiB on the
    # 8-GPU data-parallel group, step/nccl.py), which stay their own row
    assert dict(at.query_params)["cuda_context_bytes"] == str(1_594_834_944 - 704 * 2**20)
    assert at.session_state["calib_stage"] == 3
    assert "zerocalc_probe.py" in " ".join(b.proto.label for b in at.get("download_button"))


def test_an_out_of_memory_pasted_on_the_plan_turns_its_card_red_and_the_sets_keep_it_red():
    # Issue 22: the plan's own OOM (allocated about the estimate's tensors, a failed request) left the cards green.
    from tests.app_helpers import answer_text, verdict_cards
    from tests.test_calibrate_verdict import oom

    query = {"model": "llama-3-8b", "workers": "8", "seq_len": "4096", "stage": "1"}     # 77.3 of 79.11 GiB
    report = core_report(query)
    peak = report["peak"][1]
    assert peak["fits"]                                    # green from the estimate alone
    parts = peak["phases"][peak["peak_phase"]]
    tensors = sum(v for k, v in parts.items() if k not in ("allocator reserve", "CUDA context", "NCCL buffers"))
    at = run_app(query, tab="Calibrate")
    paste(at, oom(allocated=tensors / 2**30 - 0.5, request=2.0, unallocated=1.5))
    card = next(c for c in verdict_cards(at) if c[0] == 1)
    assert card[1] is False and "does not fit (measured)" in card[2] and "needed at least" in card[2]
    assert "ran out of memory" in answer_text(at)
    for _ in range(4):                                     # every Set button, one after the other
        buttons = [b for b in at.button if b.key and b.key.startswith("calib_apply_")]
        if not buttons:
            break
        at.button(key=buttons[0].key).click().run()
        assert not at.exception, at.exception
    assert not next(c for c in verdict_cards(at) if c[0] == 1)[1]
    after = core_report(dict(at.query_params))
    assert not after["peak"][1]["fits"]                    # the estimate itself now says it fails
    assert "measured_extra_bytes" in dict(at.query_params)
    at.number_input(key="micro_batch").set_value(2).run()   # another plan: the estimate decides again
    assert any("for another plan" in c.value for c in at.caption)
    assert any("taken on another plan" in c.value for c in at.caption)
    at.button(key="calib_attach").click().run()            # unless the user says the paste is from this one
    assert not any("for another plan" in c.value for c in at.caption)


def test_calibrate_compares_with_the_checked_stage_and_follows_it():
    """Issue 33: after a paste compared at ZeRO-2, checking ZeRO-3 and pasting a ZeRO-3 run's out-of-memory left the
    ZeRO-3 card green, because "Compare with" kept its own stage. Now it is the checked stage, both ways."""
    from tests.app_helpers import verdict_cards
    from tests.test_calibrate_verdict import oom

    query = {"model": "llama-3-8b", "workers": "8", "seq_len": "4096", "stage": "2"}
    at = run_app(query, tab="Calibrate")
    assert at.radio(key="calib_stage").value == 2
    at.radio(key="calib_stage").set_value(3).run()                       # choosing it here checks it
    assert at.button_group(key="stage").value == 3 and "stage" not in dict(at.query_params)     # 3: the default
    at.button_group(key="stage").set_value(1).run()                      # and checking it there moves it here
    assert at.radio(key="calib_stage").value == 1
    at.button_group(key="stage").set_value(3).run()
    report = core_report({**query, "stage": "3"})
    peak = report["peak"][3]
    parts = peak["phases"][peak["peak_phase"]]
    tensors = sum(v for k, v in parts.items() if k not in ("allocator reserve", "CUDA context", "NCCL buffers"))
    paste(at, oom(allocated=tensors / 2**30, request=4.0, unallocated=1.0))
    card = next(c for c in verdict_cards(at) if c[0] == 3)
    assert card[1] is False and "(measured)" in card[2]
