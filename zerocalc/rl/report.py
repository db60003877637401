"""An RL plan's answers as plain data (dicts, lists, ints; integers are bytes): every phase on every GPU class, the
worst one named against the capacity, each model's own training peak (today's report), the engine's memory and the
rollout answer (KV tokens, sequences at once, waves per step), and host memory."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Optional

from .. import __version__
from ..step.peak import NOT_ALLOCATED, OUTSIDE
from .batching import describe
from .engines import ENGINES, SLEEP
from .phases import RLPhases, rl_band
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


def update_flags(workload) -> list:
    """The flags of `python -m zerocalc` (beside the model's own) that reproduce this update's workload."""
    flags = ["--micro-batch", str(workload.micro_batch), "--seq-len", str(workload.seq_len)]
    flags += ["--score-head", str(workload.arch.score_head)] if workload.arch.score_head else []
    flags += ["--loss", workload.loss] if workload.loss != "auto" else []
    flags += ["--reduce-dtype", workload.reduce_dtype] if workload.reduce_dtype else []
    # an RL plan's models keep a percent reserve (rl/build.py), where the CLI's default is the allocator's model
    flags += ["--fragmentation-percent", str(workload.fragmentation_percent)] \
        if workload.fragmentation_percent is not None else []
    return flags + (["--grad-lifetime", workload.grad_lifetime] if workload.grad_lifetime != "auto" else [])


def pass_dict(view, scoring: bool) -> dict:
    m = view.model
    w = (view.scored if scoring else view.report).workload
    batching = (m.scoring_batching or m.batching) if scoring else m.batching
    out = {"micro_batch": w.micro_batch, "seq_len": w.seq_len, "tokens": w.micro_batch * w.seq_len,
           "batching": describe(batching, w.micro_batch, w.seq_len) if batching is not None else
           f"as given: {w.micro_batch} sequence(s) x {w.seq_len:,} tokens"}
    if scoring:
        out["loss_end"] = view.loss_end_formula()
        out["scoring_end"] = m.scoring_end or "the training loss's forward"
    else:
        out["loss"] = w.loss
        out["zerocalc_flags"] = update_flags(w)
    return out


def model_dict(view, plan: RLPlan) -> dict:
    """One model: `micro_batch` and `seq_len` as the plan states them (sequences per micro-batch of its update, each
    sequence's longest length); each pass's own tokens under `update_pass` / `scoring_pass`."""
    m, w = view.model, view.report.workload
    sequences = m.batching.sequences if m.batching is not None else w.micro_batch
    seq_len = plan.longest if m.batching is not None else w.seq_len
    out = {"role": view.role, "name": view.name, "trains": view.trains, "stage": m.stage,
           "params": view.report.scenario.params, "gpus": m.gpus, "workers": view.report.scenario.workers,
           "micro_batch": sequences, "seq_len": seq_len, "finetune": w.finetune.mode,
           "param_offload": m.param_offload, "optimizer_offload": m.optimizer_offload,
           "shares_policy": m.shares_policy, "convention": view.report.scenario.convention,
           "gpu_bytes_by_category": view.gpu_by_category, "idle_gpu_bytes": sum(view.idle().values()),
           "host_bytes": view.host_bytes, "streams_params": m.streams_params,
           "scoring_pass": pass_dict(view, True), "scenario": asdict(view.report.scenario)}
    if view.trains:
        p = view.peak
        out["update_pass"] = pass_dict(view, False)
        out["training_peak"] = {"stage": p.stage, "peak_bytes": p.peak_bytes, "peak_phase": p.peak_phase,
                                "phase_totals": p.phase_totals, "parts": p.phases[p.peak_phase],
                                "fits": p.fits, "capacity_bytes": p.capacity_bytes}
    return out


ENGINE_TENSORS = ("engine weights", "engine KV cache", "engine activations", "engine CUDA graphs")


def trainer_tensors(parts: dict, engine_inside: bool = False) -> int:
    """The training processes' live tensors in a phase: what their torch.cuda.max_memory_allocated() counts (verl
    logs it as perf/max_memory_allocated_gb), without the CUDA contexts and the allocator's reserve; without the
    engine when it runs in processes of its own (verl 0.9.1 vllm_async_server.py: distributed_executor_backend "mp";
    OpenRLHF's Ray actors), with its torch tensors when it runs inside the trainer (TRL's colocate mode:
    external_launcher; its weights, KV cache, activations and graph pools come from torch's caching allocator, the
    sleep-mode CuMem pool included)."""
    def counted(k: str) -> bool:
        if k.startswith("engine"):
            return engine_inside and k in ENGINE_TENSORS
        return not any(o in k for o in OUTSIDE) and not k.endswith(NOT_ALLOCATED)
    return sum(v for k, v in parts.items() if counted(k))


def phase_dict(p, engine_inside: bool = False) -> dict:
    return {"name": p.name, "gpu": p.gpu, "parts": p.parts, "total_bytes": p.total, "capacity_bytes": p.capacity,
            "fits": p.fits, "headroom_bytes": p.capacity - p.total, "utilisation": p.total / p.capacity,
            "trainer_allocated_bytes": trainer_tensors(p.parts, engine_inside), "about": p.about}


def _classes(result: RLPhases) -> list:
    classes = []
    for gpu in result.gpu_classes:
        worst = result.worst(gpu)
        classes.append({"gpu": gpu, "worst_phase": worst.name, "peak_bytes": worst.total,
                        "capacity_bytes": worst.capacity, "fits": worst.fits,
                        "headroom_bytes": worst.capacity - worst.total})
    return classes


def decided_by(band: dict) -> str:
    """Which assumption decides the verdict (the project's rule: a verdict is a promise; when unsure, the band)."""
    top = band["max"]
    lengths = f"{top.plan.prompt_length:,} + {top.plan.response_length:,} tokens"
    if "typical" not in band:
        return (f"every sequence at its longest ({lengths}): no typical lengths given (--typical-prompt-length, "
                "--typical-response-length), so the band is one point")
    low = band["typical"]
    usual = f"{low.plan.typical_length:,} tokens"
    if top.fits:
        return f"fits at both ends: typical sequences ({usual}) and every sequence at its longest ({lengths})"
    if not low.fits:
        return f"does not fit even with typical sequences ({usual}): the lengths alone do not decide it"
    return (f"the lengths decide it: fits while sequences stay typical ({usual}), not when a micro-batch's "
            f"sequences all reach their longest ({lengths})")


def verdict(result: RLPhases, band: Optional[dict] = None) -> dict:
    band = band or {result.end: result}
    refused = result.engine.refused if result.engine is not None else None
    out = {"fits": result.fits, "gpu_classes": _classes(result), "engine_refused": refused, "end": result.end,
           "band": {end: {"fits": r.fits, "length_tokens": r.plan.length(end), "gpu_classes": _classes(r)}
                    for end, r in band.items()}}
    if "max" in band:
        out["decided_by"] = decided_by(band)
    return out


def rl_report(plan: RLPlan, result: Optional[RLPhases] = None, answers: bool = True) -> dict:
    """The plan's report; `answers` adds the solvers (rl/solve.py: each builds and checks whole plans)."""
    band = rl_band(plan) if result is None else {result.end: result}
    result = band["max"] if result is None else result
    inside = plan.placement == "colocated" and not plan.rules.engine_process      # TRL's colocate mode
    out = {"zerocalc_version": __version__, "algorithm": plan.algorithm, "algorithm_source": plan.algo.source,
           "framework": plan.framework, "framework_source": plan.rules.source, "placement": plan.placement,
           "rollout_gpus": plan.rollout_gpus, "training_gpus": plan.trainer.gpus,
           "prompt_length": plan.prompt_length, "response_length": plan.response_length,
           "typical_response_length": plan.typical_response_length or plan.response_length,
           "typical_prompt_length": plan.typical_prompt_length or plan.prompt_length,
           "group_size": plan.group_size, "prompts_per_step": plan.prompts_per_step,
           "gpu": plan.trainer.workload.gpu_label, "capacity_bytes": plan.trainer.workload.capacity_bytes,
           "verdict": verdict(result, band),
           "phases": [phase_dict(p, inside) for p in result.phases],
           "models": [model_dict(v, plan) for v in result.views.values()]}
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
    if "typical" in band:
        out["typical_phases"] = [phase_dict(p, inside) for p in band["typical"].phases]
    if answers:
        out["solve"] = solve_dict(plan)
    return out
