"""One verdict per ZeRO stage over every constraint the plan states (issue 33: the page's cards read green while the
host RAM or a pasted out-of-memory said the job fails). The CLI's text and JSON, the page's headline and cards and
Compare all read these rows; none keeps its own rule.

The constraints, each a named term:
- GPU memory: the stage's peak against the capacity PyTorch can use, at the phase and rank that peak;
- a measured run of this plan at this stage (Calibrate): measured beats estimated for the GPU's memory;
- host RAM per node, where the plan gives it: the offloaded states and pinned activations of the node's GPUs;
- the assumptions' band (answers/ranges.py): a peak over the capacity whose low end fits reads "fits at the low
  end only", which is not a fit (a verdict is a promise), with the assumption that decides it named.
"""

from __future__ import annotations

from typing import Dict, List, Optional

FITS, LOW_ONLY, NO_FIT = "fits", "fits at the low end only", "does not fit"


def _gpu_term(p: dict, step: Optional[str] = None) -> str:
    phase = p["peak_phase"].replace("_", " ")
    return f"GPU memory in the {phase} phase ({p['rank']})" + (f" at {step}" if step else "")


def stage_verdicts(peaks: List[dict], host_rows: List[dict] = (), bands: List[dict] = (),
                   measured: Optional[Dict[int, dict]] = None, step: Optional[str] = None) -> List[dict]:
    """Per stage: fits (bool), answer (FITS / LOW_ONLY / NO_FIT), deciding (the term that decides it), failing (every
    term that says no), measured (a measurement decided the GPU's memory). `peaks` and `host_rows` are the report's
    "peak" and "host_memory" rows, `bands` ranges_dict's "stages", `measured` {stage: {"fits": bool, ...}}."""
    hosts = {r["stage"]: r for r in host_rows or ()}
    by_band = {b["stage"]: b for b in bands or ()}
    out = []
    for p in peaks:
        stage = p["stage"]
        m = (measured or {}).get(stage)
        gpu = "the measured run (Calibrate)" if m is not None else _gpu_term(p, step)
        failing = [] if (m["fits"] if m is not None else p["fits"]) else [gpu]
        host = hosts.get(stage)
        if host is not None and host.get("fits_host") is False:
            failing.append("host RAM per node")
        band = by_band.get(stage)
        low_fits = band is not None and band["low_bytes"] <= band["capacity_bytes"]
        if not failing:
            answer, deciding = FITS, gpu
        elif failing == [gpu] and m is None and low_fits:
            drivers = band.get("drivers") or []
            answer = LOW_ONLY
            deciding = gpu + (f"; the assumption that decides it: {drivers[0]}" if drivers else "")
        else:
            answer, deciding = NO_FIT, failing[0]
        out.append({"stage": stage, "fits": answer == FITS, "answer": answer, "deciding": deciding,
                    "failing": failing, "measured": m is not None})
    return out


def headline(verdicts: List[dict]) -> str:
    """'every ZeRO stage fits', 'no ZeRO stage fits' or which do and which do not."""
    fit = [v["stage"] for v in verdicts if v["fits"]]
    nofit = [v["stage"] for v in verdicts if not v["fits"]]
    def names(stages) -> str:
        said = [f"ZeRO-{s}" for s in stages]
        return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    if not nofit:
        return "every ZeRO stage fits"
    if not fit:
        return "no ZeRO stage fits"
    return (f"{names(fit)} fit{'s' if len(fit) == 1 else ''}; "
            f"{names(nofit)} do{'es' if len(nofit) == 1 else ''} not")
