"""Report dict -> display tables (pandas) and sentences. Only unit conversion and formatting happen here."""

from __future__ import annotations

import pandas as pd

from zerocalc.units import in_unit

from .figures import PHASE_LABELS, STAGE_LABELS


def short(n: int) -> str:
    """6738415616 -> '6.74e9'; small numbers stay whole."""
    if abs(n) < 10_000:
        return f"{n:,}"
    mantissa, exponent = f"{n:.3g}".split("e")
    return f"{mantissa}e{int(exponent)}"


def stage_table(report: dict, unit: str) -> pd.DataFrame:
    rows = []
    for s in report["stages"]:
        rows.append({
            "stage": STAGE_LABELS[s["stage"]],
            f"parameters ({unit})": in_unit(s["per_worker_bytes"]["parameters"], unit),
            f"gradients ({unit})": in_unit(s["per_worker_bytes"]["gradients"], unit),
            f"optimizer ({unit})": in_unit(s["per_worker_bytes"]["optimizer"], unit),
            f"per worker ({unit})": in_unit(s["per_worker_total_bytes"], unit),
            f"on GPU ({unit})": in_unit(s["gpu_bytes_per_worker"], unit),
            f"cluster ({unit})": in_unit(s["cluster_total_bytes"], unit),
            f"redundant ({unit})": in_unit(s["cluster_redundant_bytes"], unit),
            "redundancy": f"{s['redundancy_factor']:.2f}x",
            f"comm/step ({unit})": in_unit(s["communication_bytes_per_step"], unit),
        })
    return pd.DataFrame(rows)


def ledger_table(report: dict, unit: str, stage: int) -> pd.DataFrame:
    """Bytes per parameter by entry, which stage shards it, and its cell at `stage` as a worked formula."""
    cells = {c["entry"]: c for c in report["ledger_cells"] if c["stage"] == stage}
    rows = []
    for entry in report["ledger"]:
        c = cells[entry["name"]]
        width = f"{c['bits'] / 8:g} B"
        per = f"⌈{short(c['elements'])} / {c['divisor']:,}⌉" if c["divisor"] > 1 else short(c["elements"])
        rows.append({
            "entry": entry["name"], "category": entry["category"], "dtype": entry["dtype"],
            "bytes/param": f"{entry['bytes_per_param']:g}", "sharded from": STAGE_LABELS[entry["sharded_from_stage"]],
            f"{STAGE_LABELS[stage]} per worker": f"{per} × {width} = {in_unit(c['bytes'], unit)} {unit}",
            "where": c["location"],
        })
    return pd.DataFrame(rows)


def verdicts(report: dict, unit: str) -> pd.DataFrame:
    rows = []
    for p in report["peak"]:
        rows.append({
            "stage": STAGE_LABELS[p["stage"]], "fits": "yes" if p["fits"] else "no",
            f"peak ({unit})": in_unit(p["peak_bytes"], unit), "phase": PHASE_LABELS[p["peak_phase"]],
            f"headroom ({unit})": in_unit(p["headroom_bytes"], unit), "used": f"{100 * p['utilisation']:.1f}%",
        })
    return pd.DataFrame(rows)


def fits_on_table(report: dict, unit: str) -> pd.DataFrame:
    rows = []
    for g in report["fits_on"]:
        row = {"GPU": g["name"], f"capacity ({unit})": in_unit(g["capacity_bytes"], unit)}
        for stage in range(4):
            row[STAGE_LABELS[stage]] = "fits" if g["fits"][str(stage)] else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def solver_sentences(report: dict) -> list:
    gpu, solve = report["gpu"]["name"], report["solve"]
    parallel = report["layout"]["world_size"] != report["layout"]["dp"]
    out = []
    for stage in range(4):
        mb = solve["max_micro_batch"][str(stage)]
        mw, gpus = solve["min_workers"][str(stage)], solve["min_gpus"][str(stage)]
        batch = f"largest micro-batch that fits on {gpu} at stage {stage}: {mb}" if mb else \
            f"not even a micro-batch of 1 fits on {gpu} at stage {stage}"
        if mw is None:
            workers = "no worker count up to 10,000,000 fits"
        else:
            workers = f"fewest workers: {mw:,}" + (f" ({gpus:,} GPUs with this tp x pp x cp)" if parallel else "")
        out.append(f"{batch}; {workers}.")
    lowest = solve["lowest_stage"]
    out.append(f"Lowest stage that fits: {lowest}." if lowest is not None else "No stage fits at these settings.")
    return out


def deepspeed_table(report: dict, unit: str) -> pd.DataFrame:
    ds = report["deepspeed_estimator"]
    rows = [{"estimator": "ZeRO-2", "options": f"offload_optimizer={r['offload_optimizer']}",
             f"per CPU ({unit})": in_unit(r["cpu_bytes"], unit), f"per GPU ({unit})": in_unit(r["gpu_bytes"], unit)}
            for r in ds["zero2"]]
    rows += [{"estimator": "ZeRO-3", "options": f"offload_param={r['offload_param']}, "
                                                  f"offload_optimizer={r['offload_optimizer']}, zero_init={int(r['zero_init'])}",
              f"per CPU ({unit})": in_unit(r["cpu_bytes"], unit), f"per GPU ({unit})": in_unit(r["gpu_bytes"], unit)}
             for r in ds["zero3"]]
    return pd.DataFrame(rows)


def activation_table(report: dict, unit: str) -> pd.DataFrame:
    terms = report["activation_terms"]
    rows = [{"where": "each layer", "term": k, unit: in_unit(v, unit)} for k, v in terms["per_layer"].items()]
    rows += [{"where": "embedding end", "term": k, unit: in_unit(v, unit)} for k, v in terms["embedding_end"].items()]
    rows += [{"where": "each pipeline stage", "term": k, unit: in_unit(v, unit)}
             for k, v in terms.get("every_stage", {}).items()]
    rows += [{"where": "output end", "term": k, unit: in_unit(v, unit)} for k, v in terms["output_end"].items()]
    return pd.DataFrame(rows)


def rank_table(report: dict, unit: str, stage: int) -> pd.DataFrame:
    """Every rank class: how many ranks, what they hold, and their peak at each ZeRO stage."""
    rows = []
    for r in report["ranks"]:
        row = {"rank class": r["name"], "ranks": f"{r['count']:,}", "layers": r["layers"],
               "parameters": f"{r['params']:,}",
               f"model states, {STAGE_LABELS[stage]} ({unit})": in_unit(r["stages"][stage]["per_worker_total_bytes"],
                                                                       unit),
               f"activations in flight ({unit})": in_unit(r["activation_bytes"], unit),
               "micro-batches in flight": r["in_flight_micro_batches"]["chunks"]}
        for p in r["peak"]:
            row[f"peak {STAGE_LABELS[p['stage']]} ({unit})"] = in_unit(p["peak_bytes"], unit) + \
                ("" if p["fits"] else " ✗")
        rows.append(row)
    return pd.DataFrame(rows)


OFFLOAD_LABELS = {("none", "none"): "none", ("cpu", "none"): "optimizer", ("cpu", "cpu"): "optimizer + params"}


def layouts_table(report: dict, unit: str) -> pd.DataFrame:
    """The layouts of the same GPUs that fit, cheapest first (zerocalc.layout_search)."""
    rows = []
    for p in report["solve"]["layouts"]:
        rows.append({
            "dp x tp x pp x cp": f"{p['dp']} x {p['tp']} x {p['pp']} x {p['cp']}"
                                 + (f" (ep {p['ep']})" if p["ep"] > 1 else ""), "stage": STAGE_LABELS[p["stage"]],
            "micro-batches": p["micro_batches"], "recompute": p["recompute"],
            "offload": OFFLOAD_LABELS[(p["offload_optimizer"], p["offload_params"])],
            "schedule": p["schedule"] + (f" (vpp {p['vpp']})" if p["vpp"] > 1 else ""),
            f"peak ({unit})": in_unit(p["peak_bytes"], unit), f"headroom ({unit})": in_unit(p["headroom_bytes"], unit),
            f"comm/step ({unit})": in_unit(p["communication_bytes"], unit), "bubble": f"{100 * p['bubble']:.0f}%",
            "time overhead": f"{100 * p['overhead']:.0f}%", "worst rank": p["worst_rank"],
        })
    return pd.DataFrame(rows)
