"""The RL view and its sidebar section: the page's plan as the policy of an RL post-training plan, every phase's
residents stacked against the capacity, the worst phase per GPU class, the engine's KV cache and the rollout
answer, the solvers. Every byte comes from zerocalc/rl (each model through today's report); this module draws.
"""

from __future__ import annotations

import html
import json

import pandas as pd
import streamlit as st

from zerocalc.rl.build import build_plan
from zerocalc.rl.report import rl_report
from zerocalc.scenario import FieldError
from zerocalc.units import UNIT_BYTES, format_bytes, percent_text

from ..drawing import figures
from ..server.compute import _key, _PerState
from ..drawing.panels import chart, table_with_csv
from ..sidebar.rl import values
from ..state.rl import RL_FIELD, RL_FIELDS, settings_of

# one colour per resident kind (Tableau 20, as the page's terms)
GROUPS = (("engine KV cache", "#E15759"), ("engine weights", "#4E79A7"), ("engine", "#A0CBE8"),
          ("weight-sync", "#F1CE63"), ("policy", "#59A14F"), ("reference", "#B07AA1"), ("reward model", "#FF9D9A"),
          ("critic", "#F28E2B"), ("CUDA context", "#79706E"))


def _rl_key(vals: dict) -> tuple:
    return tuple(vals[f.name] for f in RL_FIELDS)


@_PerState
def _report(key, rl_key, _args) -> dict:
    resolved, settings = _args
    plan = build_plan(resolved.scenario, resolved.workload, settings)
    return rl_report(plan)


def report_of(resolved, vals: dict):
    """(the RL report, None) or (None, the refusal naming its field)."""
    if resolved.workload is None:
        return None, "An RL plan needs an architecture: pick a model (a bare parameter count has no shape)."
    try:
        return _report(_key(resolved), _rl_key(vals), (resolved, settings_of(vals, resolved.state["stage"]))), None
    except FieldError as exc:
        label = RL_FIELD[exc.field].label if exc.field in RL_FIELD else exc.field
        return None, f"{label}: got {exc.value!r}; allowed: {exc.allowed}"


def _group(part: str) -> str:
    for name, _ in GROUPS:
        if part.startswith(name) or (name == "CUDA context" and "CUDA context" in part):
            return name
    return part.split(" ")[0]


def timeline(report: dict, unit: str):
    """Each phase a stacked bar of its residents (grouped by owner), the capacity a dashed line: one chart per step,
    as the page's other charts (figures._figure: a plain spec, margins that follow the labels on a phone)."""
    phases = report["phases"]
    labels = [f"{p['name']}<br>({p['gpu']})" for p in phases]
    scale = "GiB" if unit in ("binary", "GiB") else "GB"
    traces = []
    for name, colour in GROUPS:
        sums = [sum(v for k, v in p["parts"].items() if _group(k) == name) for p in phases]
        if not any(sums):
            continue
        detail = ["<br>".join(f"{k}: {format_bytes(v, unit)}" for k, v in p["parts"].items() if _group(k) == name)
                  for p in phases]
        traces.append(dict(type="bar", name=name, x=labels, y=[v / UNIT_BYTES[scale] for v in sums],
                           marker=dict(color=colour), customdata=sums, hovertext=detail,
                           hoverinfo="text+name"))
    return figures._figure(traces, scale, "Each phase's residents on one GPU", capacity=report["capacity_bytes"],
                           height=440, subtitle=f"dashed line: the capacity, {format_bytes(report['capacity_bytes'], unit)}")


def _phase_table(report: dict, unit: str) -> pd.DataFrame:
    return pd.DataFrame([{"phase": p["name"], "GPU": p["gpu"], "peak": format_bytes(p["total_bytes"], unit),
                          "capacity": format_bytes(p["capacity_bytes"], unit),
                          "used": percent_text(p["total_bytes"], p["capacity_bytes"]),
                          "fits": "yes" if p["fits"] else "NO", "largest resident":
                          max(p["parts"], key=p["parts"].get), "what runs": p["about"]} for p in report["phases"]])


def _engine_lines(report: dict, unit: str) -> list:
    e, r = report["engine"], report["rollout"]
    b = lambda n: format_bytes(n, unit)          # noqa: E731
    return [f"{e['engine']} {e['release']}: {e['fraction_field']} {e['fraction']} -> {b(e['budget_bytes'])}; "
            f"weights {b(e['weights_bytes'])}, activation peak {b(e['activation_bytes'])} (estimated), CUDA graphs "
            f"{b(e['cudagraph_bytes'])}, non-torch {b(e['non_torch_bytes'])}.",
            f"KV cache {b(e['kv_bytes'])}: {e['num_blocks']:,} blocks of {e['block_size']} tokens = "
            f"**{e['kv_tokens']:,} tokens** ({e['bytes_per_token']:,} bytes per token on one rank).",
            f"**{r['concurrent_at_max_length']:,} sequences at once** at {r['max_length_tokens']:,} tokens "
            f"({r['concurrent_at_typical_length']:,} at {r['typical_length_tokens']:,}), limited by {r['limited_by']}; "
            f"a step's {r['sequences_per_engine']:,} per engine run in {r['waves_at_max_length'] or '-'} wave(s) at "
            "the longest" + (": the engine queues or preempts." if r["queues"] else "."),
            f"Asleep (level {e['sleep_level']}): {b(e['asleep_gpu_bytes'])} on the GPU, {b(e['asleep_host_bytes'])} "
            "in host memory." + (f" It would refuse to start: {e['refused']}." if e["refused"] else "")]


def _solve_lines(report: dict) -> list:
    s = report["solve"]
    lines = [f"Longest response that fits: **{s['max_response_length']:,} tokens**." if s["max_response_length"]
             else "No response length fits."]
    if s["max_group_size"] is not None:
        lines.append(f"Largest group size whose rollouts run in one wave: {s['max_group_size']}.")
    if s["min_gpu_memory_utilization"] is not None:
        lines.append(f"Lowest gpu_memory_utilization holding one engine's share of a step at once: "
                     f"{s['min_gpu_memory_utilization']}.")
    if s.get("max_gpu_memory_utilization") is not None:
        lines.append(f"Highest gpu_memory_utilization at which every phase fits and the engine starts: "
                     f"{s['max_gpu_memory_utilization']}.")
    return lines


def verdict_html(report: dict, unit: str) -> str:
    """With the RL view open the page's answer is the RL plan's (issue 33: one plan, one verdict): the core's
    verdict (zerocalc/rl/report.py "verdict", the engine's start-up rule included), one card per GPU class at its
    worst phase, in the page's card style."""
    from ..drawing.panels import CARD_CSS

    v = report["verdict"]
    world = report["rollout_gpus"] + report["training_gpus"] if report["placement"] == "split" else \
        report["training_gpus"]
    answer = "the RL plan fits" if v["fits"] else "the RL plan does not fit"
    why = f" The engine would refuse to start: {v['engine_refused']}." if v["engine_refused"] else ""
    where = html.escape(f"{world:,} x {report['gpu']}")
    sentence = (f'<p class="zc-answer" data-testid="zc-answer"><strong>Does it fit on {where}?</strong> {html.escape(answer[:1].upper() + answer[1:])}'
                f' ({html.escape(report["algorithm"].upper())}, {html.escape(report["framework"])}, '
                f'{html.escape(report["placement"])}). Decided by {html.escape(v["decided_by"])}.{html.escape(why)}</p>')
    cards = []
    for c in v["gpu_classes"]:
        fits = c["fits"] and not v["engine_refused"]
        room = format_bytes(abs(c["headroom_bytes"]), unit)
        headroom = (f'<span class="zc-pos">{room} headroom</span>' if c["fits"] else
                    f'<span class="zc-neg">−{room} over</span>')
        cards.append(f'<div class="zc-card {"zc-fit" if fits else "zc-nofit"}" data-gpu="{html.escape(c["gpu"])}" '
                     f'data-fits="{str(fits).lower()}"><div class="zc-stage">{html.escape(c["gpu"])} · '
                     f'{"✓ fits" if fits else "✗ does not fit"}</div>'
                     f'<div class="zc-peak">{format_bytes(c["peak_bytes"], unit)} peak</div>'
                     f'<div class="zc-sub">{percent_text(c["peak_bytes"], c["capacity_bytes"], 0)} of '
                     f'{format_bytes(c["capacity_bytes"], unit)} · {headroom}</div>'
                     f'<div class="zc-states">worst phase: {html.escape(c["worst_phase"])}</div></div>')
    return CARD_CSS + sentence + f'<div class="zc-cards" data-testid="zc-verdict">{"".join(cards)}</div>'


def fixes(report: dict) -> None:
    """Under the RL plan's verdict: what would make it fit, from the core's RL solvers (zerocalc/rl/solve.py):
    the longest response, the largest group, the lowest gpu_memory_utilization and each placement that fits."""
    if report["verdict"]["fits"]:
        return
    st.markdown("**What would make the RL plan fit**")
    for line in _solve_lines(report):
        st.markdown(f"- {line}")
    fitting = [r for r in report["solve"]["placements"] if r.get("fits")]
    for r in fitting[:3]:
        st.markdown(f"- {r['placement']}: {r['rollout_gpus']} rollout GPUs and {r['training_gpus']} training GPUs "
                    "fit.")


def panel(resolved, unit: str) -> None:
    vals = values()
    report, problem = report_of(resolved, vals)
    if problem:
        st.info(problem + " Set the plan under \"RL\" in the sidebar.")
        return
    st.caption("The page's plan is the policy (its model, GPUs, stage, micro-batch and recompute), trained on "
               f"{report['prompt_length']:,} + {report['response_length']:,}-token sequences; set the rest of the "
               "RL plan under \"RL\" in the sidebar.")
    # the verdict (one card per GPU class) is the page's answer above, while this view is open (page.py)
    typical = report["verdict"]["band"].get("typical")
    if typical is not None:
        st.markdown("With typical sequences (" + f"{typical['length_tokens']:,} tokens): " + "; ".join(
            f"{c['gpu']}: {c['worst_phase']}, {format_bytes(c['peak_bytes'], unit)}"
            f" ({'fits' if c['fits'] else 'does not fit'})" for c in typical["gpu_classes"]))
    chart(timeline(report, unit), "fig_rl_timeline")
    table_with_csv(_phase_table(report, unit), "rl_phases", None)
    if "engine" in report:
        st.markdown("**The rollout engine**")
        for line in _engine_lines(report, unit):
            st.markdown(f"- {line}")
    st.markdown("**Planning answers**")
    for line in _solve_lines(report):
        st.markdown(f"- {line}")
    rows = [{"placement": r["placement"], "rollout GPUs": r["rollout_gpus"], "training GPUs": r["training_gpus"],
             "fits": ("yes" if r.get("fits") else "NO") if "refused" not in r else r["refused"],
             "sequences at once": r.get("sequences_at_once", 0)} for r in report["solve"]["placements"]]
    table_with_csv(pd.DataFrame(rows), "rl_placements", None)
    st.download_button("JSON: the RL plan's report", lambda: json.dumps(report, indent=2).encode("utf-8"),
                       file_name=f"zerocalc-{report['zerocalc_version']}-rl-report.json", mime="application/json",
                       key="json_rl_report", on_click="ignore")
