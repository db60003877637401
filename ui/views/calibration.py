"""Calibrate: paste what a real run printed and see it against the estimate (zerocalc.answers.calibrate): measured vs
estimated per quantity (allocated, reserved, nvidia-smi's used), the residual, and the assumption that would absorb
it, with a button that sets it. The probe script users run in their loop (tools/zerocalc_probe.py) downloads here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

from zerocalc.scenario import FieldError

from ..drawing import plain, tables
from ..server import worker
from ..drawing.panels import PROBE as PROBE_SECTION, lazy
from ..drawing.tables import SYSTEM
from ..drawing.figures import STAGE_LABELS
from ..state.fields import CUSTOM, FIELD
from ..sidebar.widgets import set_fields

PROBE = Path(__file__).resolve().parents[2] / "tools" / "zerocalc_probe.py"
PROBE_USAGE = """Copy `zerocalc_probe.py` next to your training script, then:

```python
from zerocalc_probe import Probe
probe = Probe()
for step, batch in enumerate(loader):
    with probe.phase("forward"):
        loss = model(**batch).loss
    with probe.phase("backward"):
        loss.backward()
    with probe.phase("optimizer_step"):
        optimizer.step(); optimizer.zero_grad(set_to_none=True)
    if step == 3:
        probe.report()          # prints one line: paste it here
        break
```
`python zerocalc_probe.py --fake` prints a line from made-up numbers, to try the paste."""


# Short button labels (the field's name is in the sentence and the help; a long name was cut off in the column)
SET_LABELS = {"fragmentation_percent": "Set the reserve", "cuda_context_bytes": "Set the context",
              "gpu_memory": "Set the capacity", "measured_extra_bytes": "Set the extra",
              "nccl_percent": "Set the NCCL share"}
MEASURED = "calib_measured"      # session key: the last paste read, for the plan it was pasted on
PARSED = "calib_parsed"          # session key: (the last reading's key, its outcome): a paste is parsed once
# Fields that change an assumption or the display, not the job: a measurement still describes the plan after them
# (the Set buttons change some of them; the capacity is compared afresh).
NOT_PLAN = frozenset(("cuda_context_bytes", "nccl_percent", "nccl_buffsize", "nccl_nvls", "workspace_bytes", "fragmentation_percent", "measured_extra_bytes",
                      "allocator", "allocator_units", "gpu", "gpu_memory", "units", "breakdown", "stage",
                      "buffer_factor"))
KEPT = ("allocated_peak_bytes", "reserved_peak_bytes", "nvidia_smi_used_bytes", "nvidia_smi_total_bytes",
        "usable_total_bytes", "failed_request_bytes", "tolerance_bytes")


def plan_key(state: dict) -> tuple:
    return tuple((k, v) for k, v in state.items() if k not in NOT_PLAN)


def remember(state: dict, stage: int, measurement: dict, text: str, attach: bool = False) -> None:
    """Keep a new paste's figures for the verdict, with the plan it was pasted on (the verdict was drawn above
    this view, so a change reruns). The same paste stays with its plan when the plan changes, unless `attach`."""
    kept = {"plan": plan_key(state), "stage": stage, "measurement": {k: measurement.get(k) for k in KEPT},
            "text": hash(text)}
    old = st.session_state.get(MEASURED)
    if old is not None and old["text"] == kept["text"] and old["plan"] != kept["plan"] and not attach:
        st.caption("This paste was taken on another plan: the table compares it with this one, the verdict does "
                   "not follow it.")
        st.button("It is from this plan", key="calib_attach", on_click=_attach)
        return
    if old != kept:
        st.session_state[MEASURED] = kept
        st.rerun()


def _check_stage() -> None:
    set_fields({"stage": st.session_state["calib_stage"]})


def _attach() -> None:
    st.session_state["calib_attach_now"] = True


def measured_verdict(resolved):
    """(the verdict a measurement pasted on this plan gives its stage, or None; a note when it was pasted on
    another plan, or "")."""
    kept = st.session_state.get(MEASURED)
    if kept is None or resolved.workload is None:
        return None, ""
    if kept["plan"] != plan_key(resolved.state):
        return None, ("A measurement pasted in Calibrate was for another plan: the verdict is the estimate's until "
                      "the plan is set back or a new measurement is pasted.")
    from zerocalc.answers.calibrate.measurement import Measurement
    from zerocalc.answers.calibrate.verdict import measured_fit
    m = Measurement(**{k: v for k, v in kept["measurement"].items() if v is not None})
    verdict = measured_fit(m, resolved.workload.capacity_bytes, SYSTEM[resolved.state["units"]])
    if verdict["fits"] is None:
        return None, verdict["sentence"]
    return {**verdict, "stage": kept["stage"], "out_of_memory": m.out_of_memory}, (
        f"{STAGE_LABELS[kept['stage']]}'s card follows the measurement pasted in Calibrate; clear the paste there "
        "to see the estimate's verdict alone.")


def _apply(field: str, value: int) -> None:
    if field == "gpu_memory":
        set_fields({"gpu": CUSTOM, "gpu_memory": value})
        return
    f = FIELD[field]
    set_fields({field: max(int(f.lo), min(int(f.hi), value))})


def _parse(text: str, gb: str, resolved, stage: int, unit: str):
    """("ok", the calibration) or ("refused", the message): read in a worker process with the paste's deadline.
    A refusal is kept like an answer (the same paste gives the same); a timeout or a failure is not."""
    from zerocalc.answers.calibrate.compare import calibration_dict
    try:           # sentences in the page's unit
        return "ok", worker.call("paste", calibration_dict, text, gb, resolved.scenario, resolved.workload, stage,
                                 tables.SYSTEM[unit])
    except FieldError as exc:          # CalibrationError names the formats understood; it quotes the paste
        return "refused", f"Could not read the pasted text: {exc}"


def _read(text: str, gb: str, resolved, stage: int, unit: str):
    """The paste's calibration, or None after saying why not. Parsed once per (paste, "GB", stage, unit, plan): the
    run that reads a new paste reruns the page (remember), and the rerun, like every later one, reuses the first
    reading instead of parsing the paste again."""
    from ..server.compute import state_key
    key = (hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), gb, stage, unit,
           state_key(resolved.state))
    kept = st.session_state.get(PARSED)
    if kept is None or kept[0] != key:
        try:
            kept = (key, _parse(text, gb, resolved, stage, unit))
        except Exception as exc:  # noqa: BLE001 - any failure is a message on this page, its trace in the log
            plain.alert("error", worker.failure_text(exc, "the pasted text", "Measured output"))
            return None
        st.session_state[PARSED] = kept
    status, value = kept[1]
    if status == "refused":
        plain.alert("error", value)
        return None
    return value


def panel(resolved, unit: str) -> None:
    from zerocalc.answers.calibrate.measurement import FORMAT_HELP      # imported when the view first opens
    st.markdown("Paste what a real run printed: `torch.cuda.max_memory_allocated()` / `max_memory_reserved()`, "
                "the JSON of `torch.cuda.memory_stats()`, `torch.cuda.memory_summary()`, `nvidia-smi "
                "--query-gpu=memory.used,memory.total --format=csv` lines, DeepSpeed's `see_memory_usage` lines, "
                "a CUDA out-of-memory message, or the probe's line. Several pasted together are merged.")
    if box := lazy("The probe: per-phase peaks from your own training loop", PROBE_SECTION):   # code: when open
        with box:
            st.markdown(PROBE_USAGE)
            if PROBE.exists():
                st.download_button("Download zerocalc_probe.py", PROBE.read_bytes, file_name="zerocalc_probe.py",
                                   mime="text/x-python", key="probe_download", on_click="ignore")
            st.caption("Source: tools/zerocalc_probe.py in the zerocalc repository (torch only; not imported by "
                       "the core).")
    if resolved.workload is None:
        st.info("Calibration compares a run with the peak estimate, which needs an architecture: pick a model.")
        return
    text = st.text_area("Measured output", key="calib_text", height=150,
                        placeholder="max_memory_allocated: 61290913792\nmax_memory_reserved: 66 GiB",
                        help="Read as text, never executed. At most 1,000,000 characters.")
    left, right = st.columns(2)
    st.session_state["calib_stage"] = resolved.state["stage"]       # one stage: the one being checked (issue 33)
    stage = left.radio("Compare with (the ZeRO stage to check)", range(4), key="calib_stage", horizontal=True,
                       format_func=STAGE_LABELS.__getitem__, on_change=_check_stage,
                       help="The ZeRO stage the run used: choosing one here checks it in the sidebar too, so the "
                            "verdict that follows the paste is the checked stage's.")
    gb = right.radio("\"GB\" in plain labelled numbers means", ("decimal", "binary"), key="calib_gb",
                     horizontal=True, format_func={"decimal": "10^9 bytes", "binary": "2^30 bytes (GiB)"}.get,
                     help="Many scripts divide by 1024**3 and print GB; the other formats say what they mean.")
    if not text or not text.strip():
        st.session_state.pop(MEASURED, None)
        st.caption("Formats understood: " + "; ".join(f"**{k}**: {v}" for k, v in FORMAT_HELP.items()) + ".")
        return
    calibration = _read(text, gb, resolved, stage, unit)
    if calibration is None:
        st.session_state.pop(MEASURED, None)
        return
    m = calibration["measurement"]             # a GPU name, labels and notes come from the paste: plain text
    remember(resolved.state, stage, m, text, attach=st.session_state.pop("calib_attach_now", False))
    plain.alert("success", f"Read as {m['source_format']}" + (f" ({m['gpu_name']})" if m.get("gpu_name") else "")
                + f"; compared with {STAGE_LABELS[stage]} of this view.")
    from ..drawing.panels import table_with_csv
    table_with_csv(tables.residual_table(calibration, unit), "calibration", None)
    if calibration["phases"]:
        st.markdown("**Per phase** (the probe's phases against the estimate's):")
        table_with_csv(tables.phase_table(calibration, unit), "calibration-phases", None)
    for sentence in calibration["sentences"]:          # some name the paste's own phases: plain text
        plain.alert("info", sentence)
    for i, s in enumerate(calibration["suggestions"]):
        cols = st.columns([3, 1])
        cols[0].markdown(f"- {s['sentence']}")
        cols[1].button(SET_LABELS.get(s["field"], "Set"), key=f"calib_apply_{i}", on_click=_apply,
                       args=(s["field"], s["suggested"]), help=f"Sets {s['field']} to {s['suggested']:,} in the view.")
    if m["notes"]:
        with st.expander(f"How it was read ({len(m['notes'])} notes)"):
            plain.alert("info", "Notes:", m["notes"])
