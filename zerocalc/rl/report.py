"""An RL plan's answers as plain data (dicts, lists, ints; integers are bytes): every phase on every GPU class, the
worst one named against the capacity, each model's own training peak (today's report), the engine's memory and the
rollout answer (KV tokens, sequences at once, waves per step), and host memory."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Optional

from .. import __version__
from .engines import ENGINES, SLEEP
from .phases import RLPhases, rl_phases
from .plan import RLPlan
from .solve import solve_dict


def rollout_answer(plan: RLPlan, engine) -> dict:
    """How many sequences of the plan's lengths one engine holds at once, and in how many waves a step's rollouts
    run (a wave beyond the first: the engine queued or preempted sequences for lack of KV blocks)."""
    r = plan.rollout
    total = plan.prompts_per_step * plan.group_size
    per_engine = -(-total // plan.engine_replicas)
    at_max = engine.concurrent(plan.prompt_length + plan.response_length)
    at_typical = engine.concurrent(plan.typical_length)

    def waves(n):
        return -(-per_engine // n) if n else None

    return {"sequences_per_step": total, "engines": plan.engine_replicas, "sequences_per_engine": per_engine,
            "max_length_tokens": plan.prompt_length + plan.response_length,
            "typical_length_tokens": plan.typical_length,
            "concurrent_at_max_length": at_max, "concurrent_at_typical_length": at_typical,
            "max_num_seqs": engine.max_num_seqs,
            "limited_by": "max_num_seqs" if at_max == engine.max_num_seqs else "KV cache",
            "waves_at_max_length": waves(at_max), "waves_at_typical_length": waves(at_typical),
            "queues": at_max < per_engine}


def engine_dict(plan: RLPlan, engine) -> dict:
    e, r = ENGINES[plan.rollout.engine], plan.rollout
    rule = SLEEP[r.sleep_level]
    return {"engine": e.name, "release": e.release, "fraction_field": e.fraction_field, "fraction":
            r.gpu_memory_utilization, "fraction_of": e.fraction_of, "tp": r.tp, "capacity_bytes": engine.capacity_bytes,
            "budget_bytes": engine.budget_bytes, "weights_bytes": engine.weights_bytes,
            "activation_bytes": engine.activation_bytes, "non_torch_bytes": engine.non_torch_bytes,
            "cudagraph_bytes": engine.cudagraph_bytes, "context_bytes": engine.context_bytes,
            "available_kv_bytes": engine.available_kv_bytes, "block_size": engine.block_size,
            "bytes_per_block": engine.bytes_per_block, "bytes_per_token": engine.bytes_per_block // engine.block_size,
            "num_blocks": engine.num_blocks, "kv_bytes": engine.kv_bytes, "kv_tokens": engine.kv_tokens,
            "max_model_len": engine.max_model_len, "max_concurrency": engine.max_concurrency,
            "awake_bytes": engine.awake_bytes, "asleep_gpu_bytes": sum(engine.parts("asleep", r.sleep_level).values()),
            "asleep_host_bytes": engine.host_bytes(r.sleep_level), "sleep_level": r.sleep_level,
            "sleep": rule.about, "refused": engine.refused, "formulas": engine.formulas, "source": e.source,
            "checked": e.checked, "max_num_seqs": engine.max_num_seqs,
            "max_num_batched_tokens": engine.max_num_batched_tokens,
            "settings": {f.name: getattr(r, f.name) for f in fields(r)}}


def model_dict(view) -> dict:
    m, w = view.model, view.report.workload
    out = {"role": view.role, "name": view.name, "trains": view.trains, "stage": m.stage,
           "params": view.report.scenario.params, "gpus": m.gpus, "workers": view.report.scenario.workers,
           "micro_batch": w.micro_batch, "seq_len": w.seq_len, "finetune": w.finetune.mode,
           "param_offload": m.param_offload, "optimizer_offload": m.optimizer_offload,
           "shares_policy": m.shares_policy, "convention": view.report.scenario.convention,
           "gpu_bytes_by_category": view.gpu_by_category, "idle_gpu_bytes": sum(view.idle().values()),
           "host_bytes": view.host_bytes, "scenario": asdict(view.report.scenario)}
    if view.trains:
        p = view.peak
        out["training_peak"] = {"stage": p.stage, "peak_bytes": p.peak_bytes, "peak_phase": p.peak_phase,
                                "phase_totals": p.phase_totals, "parts": p.phases[p.peak_phase],
                                "fits": p.fits, "capacity_bytes": p.capacity_bytes}
    return out


def trainer_tensors(parts: dict) -> int:
    """The training processes' live tensors in a phase: what their torch.cuda.max_memory_allocated() counts (verl
    logs it as perf/max_memory_allocated_gb), without the engine, the CUDA contexts and the allocator's reserve."""
    return sum(v for k, v in parts.items() if not k.startswith(("engine", "CUDA context"))
               and "CUDA context" not in k and not k.endswith("allocator reserve"))


def phase_dict(p) -> dict:
    return {"name": p.name, "gpu": p.gpu, "parts": p.parts, "total_bytes": p.total, "capacity_bytes": p.capacity,
            "fits": p.fits, "headroom_bytes": p.capacity - p.total, "utilisation": p.total / p.capacity,
            "trainer_allocated_bytes": trainer_tensors(p.parts), "about": p.about}


def verdict(result: RLPhases) -> dict:
    classes = []
    for gpu in result.gpu_classes:
        worst = result.worst(gpu)
        classes.append({"gpu": gpu, "worst_phase": worst.name, "peak_bytes": worst.total,
                        "capacity_bytes": worst.capacity, "fits": worst.fits,
                        "headroom_bytes": worst.capacity - worst.total})
    refused = result.engine.refused if result.engine is not None else None
    return {"fits": result.fits, "gpu_classes": classes, "engine_refused": refused}


def rl_report(plan: RLPlan, result: Optional[RLPhases] = None, answers: bool = True) -> dict:
    """The plan's report; `answers` adds the solvers (rl/solve.py: each builds and checks whole plans)."""
    result = rl_phases(plan) if result is None else result
    out = {"zerocalc_version": __version__, "algorithm": plan.algorithm, "algorithm_source": plan.algo.source,
           "framework": plan.framework, "framework_source": plan.rules.source, "placement": plan.placement,
           "rollout_gpus": plan.rollout_gpus, "training_gpus": plan.trainer.gpus,
           "prompt_length": plan.prompt_length, "response_length": plan.response_length,
           "typical_response_length": plan.typical_response_length or plan.response_length,
           "group_size": plan.group_size, "prompts_per_step": plan.prompts_per_step,
           "gpu": plan.trainer.workload.gpu_label, "capacity_bytes": plan.trainer.workload.capacity_bytes,
           "verdict": verdict(result),
           "phases": [phase_dict(p) for p in result.phases],
           "models": [model_dict(v) for v in result.views.values()]}
    if result.engine is not None:
        out["engine"] = engine_dict(plan, result.engine)
        out["rollout"] = rollout_answer(plan, result.engine)
    host = sum(v.host_bytes for v in result.views.values())
    engine_host = result.engine.host_bytes(plan.rollout.sleep_level) if result.engine is not None and \
        plan.placement == "colocated" else 0
    out["host_memory"] = {"offloaded_states_bytes_per_gpu": host, "sleeping_engine_bytes_per_gpu": engine_host,
                          "per_gpu_bytes": host + engine_host,
                          "per_node_bytes": (host + engine_host) * min(plan.trainer.scenario.gpus_per_node,
                                                                       plan.trainer.gpus)}
    if answers:
        out["solve"] = solve_dict(plan)
    return out
