"""Report dict -> display tables (pandas) and sentences. Only unit conversion and formatting happen here."""

from __future__ import annotations

from zerocalc.output.vision import answer_words
from zerocalc.step.activations import recompute_name
from zerocalc.units import format_bytes, in_unit, percent_text

from .figures import PHASE_LABELS, STAGE_LABELS, TERM_COLORS, TERM_MEANING, group_names
from .plain import clean

SYSTEM = {"GB": "decimal", "GiB": "binary"}


def frame(rows):
    """A DataFrame of rows; pandas is imported on the first table, not with the page (it costs 0.2 s a process)."""
    import pandas as pd
    return pd.DataFrame(rows)


def short(n: int) -> str:
    """6738415616 -> '6.74e9'; small numbers stay whole."""
    if abs(n) < 10_000:
        return f"{n:,}"
    mantissa, exponent = f"{n:.3g}".split("e")
    return f"{mantissa}e{int(exponent)}"


def auto(nbytes: int, unit: str) -> str:
    """Bytes in the largest unit of the chosen system that keeps the number >= 1: never '0.00 GB'."""
    return format_bytes(nbytes, SYSTEM.get(unit, "decimal"))


def signed(nbytes: int, unit: str) -> str:
    """A difference with its sign (the minus sign a typographer uses)."""
    text = format_bytes(abs(nbytes), unit)
    return ("+" if nbytes > 0 else "−" if nbytes < 0 else "±") + text


def redundancy_share(stage_row: dict) -> str:
    """The share of the cluster's bytes that duplicates a copy held elsewhere (1 - 1 / factor)."""
    factor = stage_row["redundancy_factor"]
    return f"{100 * (1 - 1 / factor):.0f}%" if factor else "0%"


def stage_table(report: dict, unit: str, checked: int = None, imported: str = None) -> "pandas.DataFrame":
    rows = []
    for s in report["stages"]:
        mark = ""
        if s["stage"] == checked:
            # the uploaded file's name, marked as every surface shows it (plain.file_name did; a session from
            # before that is marked here): the cell and its CSV never carry a bidi override unmarked
            mark = "◀ checked" + (f" (from {clean(imported, 200)})" if imported else "")
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
            "redundant share": redundancy_share(s),
            f"comm/step ({unit})": in_unit(s["communication_bytes_per_step"], unit),
            "plan": mark,
        })
    return frame(rows)


def ledger_table(report: dict, unit: str, stage: int) -> "pandas.DataFrame":
    """Bytes per parameter by entry, which stage shards it, and its cell at `stage` as a worked formula; the last
    row is the total (the ledger's bytes per parameter and the stage's per-worker bytes, from the core)."""
    cells = [c for c in report["ledger_cells"] if c["stage"] == stage]
    sharded = {e["name"]: e for e in report["ledger"]}
    labels = group_names(report)                  # a fine-tuning view names its groups ("frozen (nf4)")
    rows = []
    for c in cells:
        group, _, base = c["entry"].rpartition(": ")
        entry = sharded.get(base, {})
        width = f"{c['bits'] / 8:g} B"
        per = f"⌈{short(c['elements'])} / {c['divisor']:,}⌉" if c["divisor"] > 1 else short(c["elements"])
        rows.append({
            "entry": f"{labels.get(group, group)}: {base}" if group else base, "category": c["category"],
            "dtype": c["dtype"],
            "bytes/param": f"{entry['bytes_per_param']:g}" if entry and c["entry"] == base else "",
            "sharded from": STAGE_LABELS[entry["sharded_from_stage"]] if entry else "",
            f"{STAGE_LABELS[stage]} per worker": f"{per} × {width} = {in_unit(c['bytes'], unit)} {unit}",
            "where": c["location"],
        })
    if any("kept_by" in e for e in report["ledger"]):    # a shaped optimizer: which tensors keep each state
        for row, c in zip(rows, cells):
            row["kept by"] = sharded.get(c["entry"].rpartition(": ")[2], {}).get("kept_by", "every tensor")
    total = report["stages"][stage]["per_worker_total_bytes"]
    rows.append({"entry": "total", "category": "", "dtype": "", "bytes/param": f"{report['bytes_per_param']:g}",
                 "sharded from": "", f"{STAGE_LABELS[stage]} per worker": f"{in_unit(total, unit)} {unit}",
                 "where": "", **({"kept by": ""} if rows and "kept by" in rows[0] else {})})    # no empty cell shown as None
    return frame(rows)


def verdicts(report: dict, unit: str, ranges: dict = None) -> "pandas.DataFrame":
    bands = {b["stage"]: b for b in (ranges or {}).get("stages", [])}
    rows = []
    for p in report["peak"]:
        row = {
            "stage": STAGE_LABELS[p["stage"]], "fits": "yes" if p["fits"] else "no",
            f"peak ({unit})": in_unit(p["peak_bytes"], unit), "phase": PHASE_LABELS[p["peak_phase"]],
            f"headroom ({unit})": in_unit(p["headroom_bytes"], unit),
            "used": percent_text(p["peak_bytes"], p["capacity_bytes"]),
        }
        band = bands.get(p["stage"])
        if band:
            row[f"low ({unit})"] = in_unit(band["low_bytes"], unit)
            row[f"high ({unit})"] = in_unit(band["high_bytes"], unit)
            row["with the assumptions' range"] = band["verdict"]
        rows.append(row)
    return frame(rows)


def peak_terms_table(report: dict, unit: str, stage: int) -> "pandas.DataFrame":
    """The checked stage's peak, term by term in each phase (the worst rank's), with the exact bytes of the phase
    that makes the peak, and each phase's total: the numbers the peak chart's hover shows."""
    p = report["peak"][stage]
    phases = list(p["phases"])
    names = list(dict.fromkeys(name for ph in phases for name in p["phases"][ph]))
    peak_col = f"bytes ({PHASE_LABELS[p['peak_phase']]}, the peak)"

    def row(term, values):
        out = {"peak term": term}
        out.update({f"{PHASE_LABELS[ph]} ({unit})": in_unit(values[ph], unit) for ph in phases})
        out[peak_col] = f"{values[p['peak_phase']]:,}"
        return out
    rows = [row(n, {ph: p["phases"][ph].get(n, 0) for ph in phases}) for n in names
            if any(p["phases"][ph].get(n, 0) for ph in phases)]         # a term that is zero everywhere says nothing
    rows.append(row("total: what nvidia-smi reads (the verdict's number)", p["phase_totals"]))
    figures = p.get("phase_figures", {})
    if figures:               # the core's three numbers (step/peak.py phase_figures): like with like for Calibrate
        rows.append(row("of which max_memory_reserved reads", {ph: figures[ph]["reserved_bytes"] for ph in phases}))
        rows.append(row("of which max_memory_allocated reads", {ph: figures[ph]["allocated_bytes"] for ph in phases}))
    return frame(rows)


def ranges_table(ranges: dict, unit: str) -> "pandas.DataFrame":
    """Each varied assumption: its low, point and high values and what it alone moves at each stage."""
    rows = []
    for a in ranges["assumptions"]:
        for field, v in a["fields"].items():
            row = {"assumption": a["label"], "field": field, "low": f"{v['low']:,}", "point": "model" if v["point"] is None else f"{v['point']:,}",
                   "high": f"{v['high']:,}"}
            for b in ranges["stages"]:
                swing = b["swing"][a["name"]]
                row[f"{STAGE_LABELS[b['stage']]} peak ({unit})"] = \
                    f"{in_unit(swing['low_bytes'], unit)} to {in_unit(swing['high_bytes'], unit)}"
            row["source"] = a["source"]
            rows.append(row)
    return frame(rows)


def capacity_sentence(report: dict) -> str:
    """The verdict's capacity, where it comes from, and nvidia-smi's total beside it."""
    g = report["gpu"]
    text = (f"The verdict is against {auto(g['capacity_bytes'], 'GiB')} ({auto(g['capacity_bytes'], 'GB')}) "
            f"that PyTorch can use on {g['name']}: {g['capacity_source']}.")
    if g["nvidia_smi_bytes"] is not None:
        text += (f" nvidia-smi shows {auto(g['nvidia_smi_bytes'], 'GiB')} ({g['nvidia_smi_source']}); the driver "
                 "keeps the difference.")
    return text


def validation_sentence(summary) -> str:
    """'Checked against N published GPU runs: median error x%, worst y% ...' from the ledger's summary."""
    if not summary:
        return "The validation ledger (docs/validation.md) is not in this copy of zerocalc."
    within, under = summary["within_10_percent"], summary.get("under", [])
    low = sum(err < -0.10 for _, err in under)
    return (f"**Checked against {summary['expressed']} published GPU runs** (of {summary['cases']} collected; the "
            f"others need features zerocalc lacks): median error {100 * summary['median_error']:+.1f}%, worst "
            f"{100 * summary['worst_error']:+.1f}% ({summary['worst_case']}), {100 * within:.0f}% within 10%, "
            f"for the figure shown (the point estimate). {len(under)} read low (the unsafe side), {low} by more "
            "than 10%. Every row, its source and its command: docs/validation.md (choose it below).")


def catalog_table(rows: list, unit: str) -> "pandas.DataFrame":
    """The GPU catalogue (zerocalc.gpus.catalog_rows): what PyTorch can use (the verdict's), nvidia-smi's, sources."""
    return frame([{"GPU": r["marketing_name"], "key": r["name"],
                   f"PyTorch can use ({unit})": in_unit(r["capacity_bytes"], unit) + (" (estimated)" if r["estimated"]
                                                                                        else ""),
                   f"nvidia-smi ({unit})": in_unit(r["nvidia_smi_bytes"], unit),
                   "PyTorch's figure": r["capacity_source"], "nvidia-smi's figure": r["nvidia_smi_source"]}
                  for r in rows])


def fits_on_table(report: dict, unit: str) -> "pandas.DataFrame":
    rows = []
    for g in report["fits_on"]:
        row = {"GPU": g["name"], f"PyTorch can use ({unit})": in_unit(g["capacity_bytes"], unit)
               + (" (estimated)" if g["estimated"] else ""),
               f"nvidia-smi ({unit})": in_unit(g["nvidia_smi_bytes"], unit)}
        for stage in range(4):
            row[STAGE_LABELS[stage]] = "fits" if g["fits"][str(stage)] else "—"
        rows.append(row)
    return frame(rows)


def _held(report: dict) -> dict:
    w, lay = report["workload"], report["layout"]
    mp = lay["world_size"] // lay["dp"]
    return {"micro_batch": f"micro-batch {w['micro_batch']:,}", "seq_len": f"sequence {w['seq_len']:,}",
            "recompute": recompute_name(w["recompute"]),
            "workers": f"{report['workers']:,} workers" + (f" ({lay['world_size']:,} GPUs)" if mp > 1 else ""),
            "gpu": report["gpu"]["name"]}


def solver_sentences(report: dict, longest: dict = None) -> list:
    """The solvers' answers, each naming what it holds fixed (the largest micro-batch holds the workers, the
    fewest workers hold the micro-batch); `longest` is zerocalc.answers.solve.max_seq_len's, where asked."""
    solve = report["solve"]
    longest = longest or solve.get("max_seq_len")
    parallel = report["layout"]["world_size"] != report["layout"]["dp"]
    held = _held(report)
    out = []
    for stage in range(4):
        mb = solve["max_micro_batch"][str(stage)]
        mw, gpus = solve["min_workers"][str(stage)], solve["min_gpus"][str(stage)]
        keep_mb = ", ".join(held[k] for k in ("seq_len", "recompute", "workers"))
        keep_mw = ", ".join(held[k] for k in ("micro_batch", "seq_len", "recompute"))
        batch = f"largest micro-batch that fits: {mb:,}" if mb else "not even a micro-batch of 1 fits"
        keep_seq = ", ".join(held[k] for k in ("micro_batch", "recompute", "workers"))
        seq = "" if longest is None else "; " + (
            f"longest sequence that fits: {longest[str(stage)]:,} tokens" if longest[str(stage)] else
            "not even the shortest sequence fits") + f" (at {keep_seq})"
        if mw is None:
            workers = "no worker count up to 10,000,000 fits"
        else:
            workers = f"fewest workers that fit: {mw:,}" + (f" ({gpus:,} GPUs with this tp x pp x cp)"
                                                            if parallel else "")
        out.append(f"**{STAGE_LABELS[stage]}** on {held['gpu']}: {batch} (at {keep_mb}){seq}; {workers} "
                   f"(at {keep_mw}).")
    lowest = solve["lowest_stage"]
    out.append(f"Lowest stage that fits as set: {STAGE_LABELS[lowest]}." if lowest is not None else
               "No stage fits as set.")
    return out + vision_sentences(report.get("vision"))


def vision_sentences(v) -> list:
    """A vision-language plan's answers (zerocalc/answers/vision.py): most images per sample and the largest pixel
    budget per image that fit, each stage, the text and everything else held."""
    if not v:
        return []
    return [f"**{STAGE_LABELS[stage]}**, {v['text_tokens']:,} text tokens per sample: {answer_words(v, stage)}."
            for stage in range(4)]


def deepspeed_table(report: dict, unit: str) -> "pandas.DataFrame":
    ds = report["deepspeed_estimator"]
    rows = [{"estimator": "ZeRO-2", "options": f"offload_optimizer={r['offload_optimizer']}",
             f"per CPU ({unit})": in_unit(r["cpu_bytes"], unit), f"per GPU ({unit})": in_unit(r["gpu_bytes"], unit)}
            for r in ds["zero2"]]
    rows += [{"estimator": "ZeRO-3", "options": f"offload_param={r['offload_param']}, "
                                                  f"offload_optimizer={r['offload_optimizer']}, zero_init={int(r['zero_init'])}",
              f"per CPU ({unit})": in_unit(r["cpu_bytes"], unit), f"per GPU ({unit})": in_unit(r["gpu_bytes"], unit)}
             for r in ds["zero3"]]
    return frame(rows)


def _dense_layers(report: dict) -> int:
    e = report.get("experts")
    return report["architecture"]["layers"] if not e else e["dense_layers"]


def per_layer_text(report: dict, unit: str) -> str:
    """The saved activations of one block of each kind the model has (an all-MoE model has no dense one)."""
    dense = format_bytes(report["activation_bytes_per_layer"], SYSTEM[unit])
    if not report.get("experts"):
        return f"{dense} per layer"
    moe = format_bytes(report["activation_bytes_per_moe_layer"], SYSTEM[unit])
    return f"{moe} per MoE layer" + (f", {dense} per dense layer" if _dense_layers(report) else "")


# Activation terms: what each saves, in bits (bytes = ceil(bits / 8)). T: this rank's tokens (b x s / cp; outside
# the tensor-parallel region / tp with sequence parallel), h: hidden, q = heads x head dim, kv = KV heads x head dim,
# f: FFN width, a: heads, V: vocabulary columns of the logits, w: activation width in bits. Per tensor-parallel rank
# heads, KV heads and the FFN are divided by tp. Checked against the core in tests/test_app_tables.py.
def activation_table(report: dict, unit: str, formulas: dict) -> "pandas.DataFrame":
    """Every saved-activation term: where, its size, and its formula in bits with the values plugged in
    (zerocalc.step.formulas: the same code that counts the bytes, run on symbols)."""
    terms = report["activation_terms"]
    groups = (("each dense layer" if terms.get("per_moe_layer") else "each layer", "per_layer"),
              ("each MoE layer", "per_moe_layer"), ("each local-attention layer (extra)", "per_sliding_layer"),
              ("each checkpointed block (one in N)", "checkpointed_block"),
              ("embedding end", "embedding_end"), ("each pipeline stage", "every_stage"),
              ("output end", "output_end"))
    if not _dense_layers(report):          # every block is a MoE block: no dense rows to list
        groups = groups[1:]
    rows = []
    for where, key in groups:
        parts = terms.get(key) or {}
        for k, v in parts.items():
            f = formulas.get(key, {}).get(k, {})
            rows.append({"where": where, "term": k, "size": auto(v, unit), "bytes": f"{v:,}",
                         "formula (bits)": f.get("formula", ""), "values (bits)": f.get("values", ""),
                         "what": f.get("note", "")})
    return frame(rows)


def rank_table(report: dict, unit: str, stage: int) -> "pandas.DataFrame":
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
    return frame(rows)


OFFLOAD_LABELS = {("none", "none"): "none", ("cpu", "none"): "optimizer", ("cpu", "cpu"): "optimizer + params"}


PLAN_FIELDS = {"dp": "workers", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "vpp": "vpp", "schedule": "schedule",
               "sequence_parallel": "sequence_parallel", "micro_batches": "micro_batches", "stage": "stage",
               "recompute": "recompute", "offload_optimizer": "offload_optimizer", "offload_params": "offload_params"}


def is_current(plan: dict, state: dict) -> bool:
    """Whether a searched layout is the plan as set (its layout, stage, recompute and offload)."""
    return all(plan[k] == state[f] for k, f in PLAN_FIELDS.items())


def _split_text(p: dict) -> str:
    return f"{p['dp']} x {p['tp']} x {p['pp']} x {p['cp']}" + (f" (ep {p['ep']})" if p["ep"] > 1 else "")


def _offload_text(p: dict) -> str:
    return OFFLOAD_LABELS.get((p["offload_optimizer"], p["offload_params"]), "other")


def layout_label(i: int, p: dict) -> str:
    """A searched layout in one line, for the Apply picker (dp x tp x pp x cp as the table's first column)."""
    return (f"{i + 1}. {_split_text(p)}" + (" with SP" if p["sequence_parallel"] else "")
            + f", {STAGE_LABELS[p['stage']]}, {recompute_name(p['recompute'])}, {_offload_text(p)}")


def layouts_table(report: dict, unit: str, state: dict = None) -> "pandas.DataFrame":
    """The layouts of the same GPUs that fit, cheapest first (zerocalc.parallel.search), the plan as set marked."""
    rows = []
    for p in report["solve"]["layouts"]:
        rows.append({
            "as set": "◀ this plan" if state is not None and is_current(p, state) else "",
            "dp x tp x pp x cp": _split_text(p),
            "sequence parallel": "yes" if p["sequence_parallel"] else "no", "stage": STAGE_LABELS[p["stage"]],
            "micro-batches": p["micro_batches"], "recompute": p["recompute"], "offload": _offload_text(p),
            "schedule": p["schedule"] + (f" (vpp {p['vpp']})" if p["vpp"] > 1 else ""),
            f"peak ({unit})": in_unit(p["peak_bytes"], unit), f"headroom ({unit})": in_unit(p["headroom_bytes"], unit),
            f"comm/step ({unit})": in_unit(p["communication_bytes"], unit), "bubble": f"{100 * p['bubble']:.0f}%",
            "time overhead": f"{100 * p['overhead']:.0f}%", "worst rank": p["worst_rank"],
        })
    return frame(rows)


def colour_table() -> "pandas.DataFrame":
    return frame([{"term": t, "colour": c, "what it is": TERM_MEANING.get(t, "")}
                         for t, c in TERM_COLORS.items()])


def residual_table(calibration: dict, unit: str) -> "pandas.DataFrame":
    rows = []
    for r in calibration["residuals"]:
        pct = r["residual_percent"]
        rows.append({"measured": r["quantity"], "measured size": auto(r["measured_bytes"], unit),
                     "estimated": auto(r["estimated_bytes"], unit),
                     "residual (measured - estimated)": signed(r["residual_bytes"], SYSTEM.get(unit, "decimal")),
                     "residual %": "" if pct is None else f"{pct:+.1f}%",
                     "within the printed rounding": "yes" if r["within_rounding"] else "no",
                     "estimate counts": r["estimate_covers"], "estimated phase": PHASE_LABELS.get(r["phase"],
                                                                                                   r["phase"])})
    return frame(rows)


def phase_table(calibration: dict, unit: str) -> "pandas.DataFrame":
    rows = []
    for p in calibration["phases"]:
        rows.append({"phase": PHASE_LABELS.get(p["phase"], p["phase"]),
                     "measured allocated": "" if p["measured_allocated_bytes"] is None else
                     auto(p["measured_allocated_bytes"], unit),
                     "estimated tensors": auto(p["estimated_tensor_bytes"], unit),
                     "measured reserved": "" if p["measured_reserved_bytes"] is None else
                     auto(p["measured_reserved_bytes"], unit),
                     "estimated reserved": auto(p["estimated_reserved_bytes"], unit)})
    return frame(rows)


def difference_table(rows: list, unit: str) -> "pandas.DataFrame":
    """Compare mode: each field that differs, both values and what it alone moves
    (zerocalc.answers.fixes.change_effect)."""
    out = []
    for r in rows:
        out.append({"field": r["field"], "plan A": r["a"], "plan B": r["b"],
                    "peak, changed alone": "not costed" if r.get("costed") is False else
                    "not valid alone" if r.get("effect") is None else
                    signed(r["effect"]["moved_peak_bytes"], unit),
                    "model states on the GPU per worker, changed alone": "" if r.get("effect") is None else
                    signed(r["effect"]["moved_state_bytes"], unit)})
    return frame(out)


def host_memory_sentence(report: dict, unit: str, stage: int) -> str:
    """The host RAM the checked stage needs per rank and per node (the core's host_memory), or "" when none."""
    rows = report.get("host_memory") or []
    row = next((r for r in rows if r["stage"] == stage), None)
    if row is None or not row["per_worker_bytes"]:
        return ""
    system = SYSTEM[unit]
    parts = []
    if row["offload_bytes_per_worker"]:
        parts.append(f"{format_bytes(row['offload_bytes_per_worker'], system)} of offloaded model states")
    if row["activation_offload_bytes_per_worker"]:
        parts.append(f"{format_bytes(row['activation_offload_bytes_per_worker'], system)} of offloaded activations "
                     "(pinned, each block rounded up to a power of two; two blocks stay on the GPU, as torchtune's "
                     "OffloadActivations keeps them)")
    return (f"Host memory for {STAGE_LABELS[stage]}: " + " + ".join(parts)
            + f" = {format_bytes(row['per_worker_bytes'], system)} per GPU, "
            f"{format_bytes(row['step_bytes_per_node'], system)} per node of {row['gpus_per_node']} GPUs in the step"
            f"; {format_bytes(row['loading_bytes_per_node'], system)} at start-up ({row['loading_why']}). The node "
            f"needs {format_bytes(row['per_node_bytes'], system)}.")
