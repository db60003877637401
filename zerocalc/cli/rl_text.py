"""The RL plan's report (rl/report.py rl_report) as readable text: the verdict per GPU class first, the engine and
the rollout answer, every phase's peak, and the worst phase's residents."""

from __future__ import annotations

from ..units import format_bytes, percent_text


def _b(nbytes, units: str) -> str:
    return format_bytes(nbytes, units)


def _engine_lines(report: dict, units: str) -> list:
    e, r = report["engine"], report["rollout"]
    lines = [f"Rollout engine: {e['engine']} {e['release']}, {e['fraction_field']} {e['fraction']} of "
             f"{'the card' if e['fraction_of'] == 'total' else 'the free memory'} = {_b(e['budget_bytes'], units)}, "
             f"tp {e['tp']} ({r['engines']} engine{'s' if r['engines'] > 1 else ''})",
             f"  weights {_b(e['weights_bytes'], units)}, activation peak {_b(e['activation_bytes'], units)} "
             f"(estimated unless given), non-torch {_b(e['non_torch_bytes'], units)}, CUDA graphs "
             f"{_b(e['cudagraph_bytes'], units)}, its CUDA context {_b(e['context_bytes'], units)}",
             f"  KV cache: {_b(e['kv_bytes'], units)} = {e['num_blocks']:,} blocks of {e['block_size']} tokens x "
             f"{e['bytes_per_token']:,} bytes per token = {e['kv_tokens']:,} tokens; maximum concurrency at "
             f"{e['max_model_len']:,} tokens: {e['max_concurrency']:.2f}x"]
    if e["refused"]:
        lines.append(f"  the engine would refuse to start: {e['refused']}")
    queue = (f"{r['waves_at_max_length']} waves at the longest responses: the engine queues or preempts"
             if r["queues"] else "all at once")
    lines += [f"  one step: {r['sequences_per_step']:,} sequences, {r['sequences_per_engine']:,} per engine; "
              f"{r['concurrent_at_max_length']:,} at once at {r['max_length_tokens']:,} tokens (limited by "
              f"{r['limited_by']}), {r['concurrent_at_typical_length']:,} at {r['typical_length_tokens']:,}: {queue}",
              f"  asleep (level {e['sleep_level']}): {_b(e['asleep_gpu_bytes'], units)} on the GPU, "
              f"{_b(e['asleep_host_bytes'], units)} in host memory"]
    return lines


def _solve_lines(report: dict, units: str) -> list:
    s = report["solve"]
    lines = [f"Longest response that fits: {s['max_response_length']:,} tokens" if s["max_response_length"] else
             "Longest response that fits: none (the plan does not fit at 1 token)"]
    if s["max_group_size"] is not None:
        lines.append(f"Largest group size whose rollouts run in one wave at the longest length: {s['max_group_size']}"
                     if s["max_group_size"] else "No group size runs in one wave at the longest length")
    if "engine" in report:
        u = s["min_gpu_memory_utilization"]
        lines.append(f"Lowest {report['engine']['fraction_field']} holding one engine's share of a step at once: "
                     + (f"{u}" if u else "none up to 1.0"))
        top = s.get("max_gpu_memory_utilization")
        lines.append(f"Highest {report['engine']['fraction_field']} at which every phase fits and the engine starts: "
                     + (f"{top}" if top else "none (the plan does not fit at the lowest either)"))
    rows = s["placements"]
    if len(rows) > 1:
        lines.append("The same GPUs, colocated or split (rollout + training GPUs):")
        for r in rows:
            if "refused" in r:
                lines.append(f"  {r['placement']:9} {r['rollout_gpus']:>4} + {r['training_gpus']:<4} refused: "
                             f"{r['refused']}")
                continue
            worst = "; ".join(f"{g}: {w['phase']} {_b(w['peak_bytes'], units)}" for g, w in r["worst"].items())
            lines.append(f"  {r['placement']:9} {r['rollout_gpus']:>4} + {r['training_gpus']:<4} "
                         f"{'fits' if r['fits'] else 'NO  '}  {r['sequences_at_once']:>7,} sequences at once; {worst}")
    return lines


def rl_text(report: dict, units: str = "decimal") -> str:
    models = ", ".join(f"{m['name']} ({'trains' if m['trains'] else 'frozen'}, stage {m['stage']}"
                       + (", offloaded between phases" if m["param_offload"] else "")
                       + (", the policy's LoRA base" if m["shares_policy"] else "") + ")" for m in report["models"])
    lines = [f"RL plan: {report['algorithm']} with {report['framework']}, {report['placement']}"
             + (f" ({report['rollout_gpus']} rollout GPUs beside {report['training_gpus']} training GPUs)"
                if report["placement"] == "split" else f" on {report['training_gpus']} GPUs")
             + f"; {report['gpu']} ({_b(report['capacity_bytes'], units)} that PyTorch can use)",
             f"Models: {models}",
             f"Sequences: {report['prompt_length']:,} prompt + {report['response_length']:,} response tokens; "
             f"{report['prompts_per_step']:,} prompts x {report['group_size']} responses per step"]
    if report["typical_prompt_length"] + report["typical_response_length"] != \
            report["prompt_length"] + report["response_length"]:
        lines.append(f"Typical sequences: {report['typical_prompt_length']:,} prompt + "
                     f"{report['typical_response_length']:,} response tokens")
    for m in report["models"]:
        s = m["scoring_pass"]
        lines.append(f"  {m['name']}'s forward pass: {s['batching']}; loss end {s['loss_end']}")
        if m["trains"]:
            t, u = m["training_peak"], m["update_pass"]
            lines.append(f"  {m['name']} training step (today's report, stage {t['stage']}): "
                         f"{_b(t['peak_bytes'], units)} at {t['peak_phase']}; {u['batching']}; as "
                         f"`python -m zerocalc {' '.join(u['zerocalc_flags'])}`")
    if "engine" in report:
        lines += [""] + _engine_lines(report, units)
    lines += ["", f"{'phase':22}  {'GPU':12}  {'peak':>11}  {'capacity':>11}  {'headroom':>11}  {'used':>7}  fits"]
    for p in report["phases"]:
        lines.append(f"{p['name']:22}  {p['gpu']:12}  {_b(p['total_bytes'], units):>11}  "
                     f"{_b(p['capacity_bytes'], units):>11}  {_b(p['headroom_bytes'], units):>11}  "
                     f"{percent_text(p['total_bytes'], p['capacity_bytes']):>7}  {'yes' if p['fits'] else 'NO'}")
    v = report["verdict"]
    lines.append("")
    typical = v["band"].get("typical")
    if typical is not None:
        for c in typical["gpu_classes"]:
            lines.append(f"With typical sequences ({typical['length_tokens']:,} tokens) on {c['gpu']}: "
                         f"{c['worst_phase']}, {_b(c['peak_bytes'], units)}: {'fits' if c['fits'] else 'DOES NOT FIT'}")
    for c in v["gpu_classes"]:
        worst = next(p for p in report["phases"] if p["gpu"] == c["gpu"] and p["name"] == c["worst_phase"])
        lines.append(f"Worst phase on {c['gpu']}: {c['worst_phase']}, {_b(c['peak_bytes'], units)} of "
                     f"{_b(c['capacity_bytes'], units)}: {'fits' if c['fits'] else 'DOES NOT FIT'}"
                     + (" (every sequence at its longest)" if typical is not None else ""))
        for name, nbytes in sorted(worst["parts"].items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name:50} {_b(nbytes, units):>11}")
    lines.append(f"Decided by: {v['decided_by']}")
    host = report["host_memory"]
    if host["per_gpu_bytes"]:
        lines.append(f"Host memory: {_b(host['per_gpu_bytes'], units)} per GPU (offloaded states "
                     f"{_b(host['offloaded_states_bytes_per_gpu'], units)}, sleeping engine "
                     f"{_b(host['sleeping_engine_bytes_per_gpu'], units)}), {_b(host['per_node_bytes'], units)} "
                     "per node")
    if "solve" in report:
        lines += [""] + _solve_lines(report, units)
    if "imported" in report:
        imp = report["imported"]
        lines += ["", f"Imported {imp['format']} config (explicit flags win):"]
        lines += [f"  set: {k} = {val}" for k, val in imp["set"].items()]
        lines += [f"  ignored: {i['key']} ({i['reason']})" for i in imp["ignored_keys"]]
        lines += [f"  note: {n}" for n in imp["notes"]]
    return "\n".join(lines)
