"""An RL step as a sequence of phases, each phase's residents on each class of GPU, and the worst phase named.

The phases, in the order a step runs them (verl ray_trainer.py fit; TRL GRPOTrainer _generate_and_score_completions
then training_step; OpenRLHF PPOTrainer):
- weight sync: the policy's weights copied into the engine (the engine's weights woken, its KV cache not yet);
- rollout: the engine generates with its whole KV cache;
- scoring: the policy's old log-probabilities, the reference's, the reward model's scores, the critic's values,
  each a forward-only pass while the engine sleeps;
- updates: the critic's (PPO), then the policy's (or the reward model's) training step, today's report.
Colocated, every phase runs on every GPU. Split, the engines have GPUs of their own: the rollout GPUs see the weight
sync (receiving) and the rollout, with the engine awake throughout; the training GPUs see the rest.

Each pass's tokens follow the plan's lengths at one end of the band (plan.ENDS): "max", every sequence at its
longest (the promise), or "typical"; rl_band gives both, and the verdict says which end decides it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, NamedTuple, Optional

from .models import ModelView, model_view
from .plan import ROLE_NAMES, RLPlan
from .rollout import EngineMemory, engine_memory

SCORING = {"policy": "policy log-probs", "reference": "reference log-probs", "reward": "reward scores",
           "critic": "critic values"}
UPDATE = {"critic": "critic update", "policy": "policy update", "reward": "reward model update"}
GPU_CLASSES = {"colocated": ("every GPU",), "split": ("rollout GPU", "training GPU")}


class Phase(NamedTuple):
    name: str
    gpu: str                   # the GPU class it runs on
    parts: Dict[str, int]      # resident -> bytes on one GPU of that class
    capacity: int
    about: str

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


class RLPhases(NamedTuple):
    plan: RLPlan
    views: Dict[str, ModelView]
    engine: Optional[EngineMemory]
    phases: List[Phase]
    end: str = "max"

    def worst(self, gpu: str) -> Phase:
        return max((p for p in self.phases if p.gpu == gpu), key=lambda p: p.total)

    @property
    def gpu_classes(self):
        return tuple(g for g in GPU_CLASSES[self.plan.placement] if any(p.gpu == g for p in self.phases))

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.phases) and (self.engine is None or self.engine.refused is None)


def _processes(plan: RLPlan, views) -> list:
    """The framework's processes holding at least one of the plan's models: (roles, CUDA context bytes)."""
    out = []
    for group in plan.rules.processes:
        present = [r for r in group if r in views]
        if present:
            out.append((tuple(present), views[present[0]].context_bytes))
    return out


def _contexts(processes, active: Optional[str] = None) -> Dict[str, int]:
    """One CUDA context per process on the GPU, except the active model's (its report counts its own)."""
    return {f"CUDA context ({'+'.join(ROLE_NAMES[r] for r in roles)} process)": ctx
            for roles, ctx in processes if active not in roles and ctx}


def _idle(views, skip=(), loaded=()) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for role, view in views.items():
        if role not in skip:
            out.update(view.idle(loaded=role in loaded))
    return out


def _sync_parts(plan: RLPlan, policy: ModelView) -> Dict[str, int]:
    """The buffers that exist only while the weights are copied (Framework.sync)."""
    rules, dtype, stage = plan.rules, plan.rollout.dtype, policy.model.stage
    if rules.sync == "bucket":
        # FSDP1's sharded state dict exports each full tensor in its stored dtype (fp32 under verl's model_dtype)
        staged = policy.model.scenario.param_dtype if plan.fsdp_version == 1 else dtype
        return {"weight-sync bucket": rules.sync_bucket_bytes,
                "weight-sync tensor being staged": policy.largest_tensor_bytes(staged)}
    if stage < 3:
        return {}
    if rules.sync == "module":
        return {"weight-sync gathered module": policy.largest_module_bytes(dtype)}
    return {"weight-sync gathered tensor": policy.largest_tensor_bytes(dtype)}


def _engine(plan: RLPlan, views, processes) -> EngineMemory:
    rollout = plan.rollout
    if rollout.context_bytes is None and plan.placement == "colocated" and not plan.rules.engine_process:
        rollout = replace(rollout, context_bytes=0)          # the engine lives in the trainer's process
    policy = views["policy"]
    capacity = plan.trainer.workload.capacity_bytes
    before = 0
    if plan.placement == "colocated":
        before = sum(_idle(views).values()) + sum(_contexts(processes).values())
    w = plan.trainer.workload
    return engine_memory(rollout, policy.report.workload.arch, capacity, plan.max_model_len, before,
                         w.gpu if w.gpu_memory is None else "")


def rl_phases(plan: RLPlan, end: str = "max") -> RLPhases:
    algo = plan.algo
    plan.length(end)                      # refuses an unknown end by name
    views = {role: model_view(role, m, role in algo.trains, plan, end) for role, m in plan.models()}
    processes = _processes(plan, views)
    capacity = plan.trainer.workload.capacity_bytes
    engine = _engine(plan, views, processes) if algo.rollout else None
    level = plan.rollout.sleep_level
    colocated = plan.placement == "colocated"
    train_gpu = "every GPU" if colocated else "training GPU"
    asleep = engine.parts("asleep", level) if engine is not None and colocated else {}
    phases: List[Phase] = []

    def add(name, gpu, parts, about):
        phases.append(Phase(name, gpu, {k: v for k, v in parts.items() if v}, capacity, about))

    if engine is not None:
        policy = views["policy"]
        sync = _sync_parts(plan, policy)
        if colocated:
            woken = engine.parts("weights" if level else "asleep", level)
            loads = ("policy",) if plan.rules.sync_loads_params or plan.fsdp_version == 1 else ()
            add("weight sync", train_gpu, {**woken, **_idle(views, loaded=loads), **sync,
                                           **_contexts(processes)},
                f"the policy's weights copied into the woken engine ({plan.rules.name}: {plan.rules.sync} path)")
            add("rollout", train_gpu, {**engine.parts("awake"), **_idle(views), **_contexts(processes)},
                "the engine generates with its whole KV cache; the models keep what their offload flags leave")
        else:
            receive = {"engine receive buffer (one tensor)": policy.largest_tensor_bytes(plan.rollout.dtype)}
            add("weight sync", "rollout GPU", {**engine.parts("asleep", 0), **receive},
                "the engine receives the new weights while awake (split engines do not sleep)")
            add("rollout", "rollout GPU", engine.parts("awake"), "the engine generates with its whole KV cache")
            loads = ("policy",) if plan.rules.sync_loads_params or plan.fsdp_version == 1 else ()
            add("weight sync", "training GPU", {**_idle(views, loaded=loads), **sync, **_contexts(processes)},
                "the policy's weights sent to the rollout GPUs")
    for role in ("policy", "reference", "reward", "critic"):
        if role not in views or (role in algo.trains and not algo.rollout):     # DPO's policy: its update only
            continue
        view = views[role]
        loaded = ("policy",) if view.model.shares_policy else ()
        add(SCORING[role], train_gpu, {**asleep, **_idle(views, skip=(role,), loaded=loaded), **view.scoring(),
                                       **_contexts(processes)},
            f"the {view.name}'s forward over one micro-batch ({_tokens(view.scored.workload)}), no gradients")
    for role in algo.trains:
        view = views[role]
        add(UPDATE[role], train_gpu, {**asleep, **_idle(views, skip=(role,)), **view.update(),
                                      **_contexts(processes, active=role)},
            f"the {view.name}'s training step at ZeRO stage {view.model.stage}: today's report "
            f"({view.peak.peak_phase} phase, {view.peak.peak_bytes:,} bytes)")
    return RLPhases(plan, views, engine, phases, end)


def _tokens(w) -> str:
    return f"{w.micro_batch} x {w.seq_len:,} tokens" if w.micro_batch > 1 else f"{w.seq_len:,} tokens"


def rl_band(plan: RLPlan) -> Dict[str, RLPhases]:
    """The plan at both ends of its band; one end when the typical lengths are the longest."""
    band = {"max": rl_phases(plan)}
    if plan.has_band:
        band["typical"] = rl_phases(plan, "typical")
    return band
