"""--measured FILE: a run of the plan, pasted as the page's Calibrate takes it, decides its stage's GPU term (issue 33:
the plan holds the measured runs, each tied to a stage, and every surface gives the verdict they make). The stage is
the checked one (--check-stage, else the CLI's default); the reading and the rule are the page's
(answers/calibrate: parse, measured_fit)."""

from __future__ import annotations

from pathlib import Path

from ..answers.calibrate.parse import parse
from ..answers.calibrate.verdict import measured_fit
from ..scenario import FieldError
from .advice import default_stage
from .types import UsageError

MAX_BYTES = 1_000_000           # as the page's paste box


def measured_for(args, workload, scenario) -> tuple:
    """({stage: the measurement's verdict} or None, {"measured": what the JSON says of it} or {})."""
    if not getattr(args, "measured", None):
        return None, {}
    if workload is None:
        raise UsageError("--measured: a measured run is compared with the peak estimate, which needs a model "
                         "(--model, --config or an architecture)")
    path = Path(args.measured)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--measured: cannot read {args.measured!r} ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"--measured: {len(data):,} bytes; allowed: at most {MAX_BYTES:,} bytes")
    try:
        m = parse(data.decode("utf-8", "replace"))
    except FieldError as exc:
        raise UsageError(f"--measured: {exc}") from None
    stage = default_stage(scenario) if args.check_stage is None else args.check_stage
    fit = measured_fit(m, workload.capacity_bytes, args.units)
    said = {"measured": {"stage": stage, "fits": fit["fits"], "bytes": fit["bytes"], "sentence": fit["sentence"],
                         "out_of_memory": m.out_of_memory}}
    return ({stage: {**fit, "stage": stage}} if fit["fits"] is not None else None), said


def measured_text(said: dict) -> str:
    if not said:
        return ""
    m = said["measured"]
    decides = "decides" if m["fits"] is not None else "does not decide"
    return f"\n\nMeasured run (--measured), at ZeRO-{m['stage']}: it {decides} the verdict. {m['sentence']}"
