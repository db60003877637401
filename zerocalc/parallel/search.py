"""Every layout of the same GPUs that fits, cheapest first: for a GPU count (the view's world size) and GPUs per
node, every tp dividing the heads, KV heads, FFN width and the GPUs of a node (tensor parallelism stays inside a
node), every pp dividing the layers (or that the view's named stage split splits them: the counts given
carried where pp x vpp matches), every cp the sequence allows (2 x cp dividing it; flash attention), dp the
rest; for each ZeRO stage, the cheapest recompute and offload setting that fits. Sequence parallelism is on
whenever tp > 1 (same traffic, less memory). The global batch (dp x micro-batch x micro-batches: the sequences of
one optimizer step) is held, so every plan does the same work per step: a plan's micro-batches are the global
batch / (its dp x the micro-batch), and a dp that does not divide it is skipped. The micro-batch, the schedule and
every other input are held as given.

Ranking (cheapest first): no offload before optimizer offload before optimizer + parameter offload (every step
moves state over PCIe), then the least time overhead (recomputed forward FLOPs and the pipeline bubble, as a share
of the ideal step: costs.time_overhead), then the least communication per rank per step, then the most headroom.
Each plan, set back as the input, is evaluated by the same report. With dp x cp = 1 the ZeRO stages shard nothing,
so only stage 0 is listed. Every proposal is a legal layout (tp, pp, cp and ep within Layout's limits).

Bounds, checked before the work starts (a shared page must not let one link tie up the server): at most
MAX_SEARCH_GPUS GPUs, MAX_SEARCH_LAYOUTS candidate layouts and MAX_SEARCH_WORK pipeline stages laid out over them;
beyond any, SearchBoundError names the bound. tests/test_budgets.py times the worst searches left inside them.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import List, NamedTuple, Tuple

from ..layout import LAYOUT_LIMITS, Layout, split_sizes
from ..scenario import FieldError
from ..step.allocator import DEFAULT_PERCENT, replays
from ..step.megatron_recompute import DEFAULT_MODULES
from .costs import bubble_fraction, time_overhead
from .fit import layout_fit, states_floor, step_shapes
from .ranks import check_plan, fitting_peak_at, unreplayed_report

OFFLOADS = (("none", "none"), ("cpu", "none"), ("cpu", "cpu"))     # (optimizer, parameters), cheapest first
SHOWN = 50                                                       # plans listed in the JSON; all are counted
SHOWN_MODELLED = 5     # under the allocator's model, the cheapest plans re-checked (a replay each) and listed
MAX_SEARCH_GPUS = 1_048_576       # 2^20: several times the largest clusters of 2026
MAX_SEARCH_LAYOUTS = 600          # candidate (tp, pp, cp, ep) layouts; 4,096 GPUs of Qwen3-235B give 520
# A candidate's reports cost about a fixed part plus one per pipeline stage they lay out (rank classes, in-flight
# micro-batches): 64 + pp units each, at most this many in all (4,096 GPUs of Qwen3-235B: 34,000; a 1,024-layer
# model on 2^20 GPUs, 119,436 units, took 1.0 s and is refused).
MAX_SEARCH_WORK = 100_000


class SearchBoundError(FieldError):
    """A layout search beyond its bounds (field "layout search"), refused before it starts."""


class Plan(NamedTuple):
    gpus: int
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    vpp: int
    schedule: str
    sequence_parallel: bool
    micro_batches: int
    stage: int
    recompute: str
    offload_optimizer: str
    offload_params: str
    peak_bytes: int
    capacity_bytes: int
    worst_rank: str
    communication_bytes: int
    recompute_flops: int
    bubble: float                # pipeline bubble as a share of the ideal step
    overhead: float              # recompute + bubble, as a share of the ideal step

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes

    @property
    def offload_level(self) -> int:
        return OFFLOADS.index((self.offload_optimizer, self.offload_params))

    def cost_key(self):
        return (self.offload_level, round(self.overhead, 4), self.communication_bytes, -self.headroom_bytes,
                self.tp * self.pp * self.cp, self.stage)


def _divisors(n: int) -> List[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def candidate_layouts(workload, gpus: int, gpus_per_node: int):
    """(tp, pp, cp, ep, sequence_parallel) the model and the GPU count allow (ep: for MoE models, every divisor
    of the experts that a pipeline stage's ranks can fold into; expert tensor parallel stays 1)."""
    a, seq = workload.arch, workload.seq_len
    top = {k: LAYOUT_LIMITS[k][1] for k in ("tp", "pp", "cp", "ep")}      # a proposal stays a legal layout
    for tp in _divisors(gpus):
        if tp > top["tp"] or a.heads % tp or (not a.mla and a.n_kv_heads % tp) or a.ffn % tp or gpus_per_node % tp or \
                (a.shared_expert_ffn and a.shared_expert_ffn % tp):
            continue
        for pp in _divisors(gpus // tp):
            if pp > top["pp"] or (split_for(workload, pp, 1) is None and
                                  split_for(workload, pp, workload.layout.vpp) is None):
                continue
            for cp in _divisors(gpus // (tp * pp)):
                if cp > top["cp"] or (cp > 1 and (workload.attention != "flash" or seq % (2 * cp))):
                    continue
                stage_ranks = gpus // pp
                for ep in (_divisors(a.experts) if a.experts else [1]):
                    if ep <= top["ep"] and stage_ranks % ep == 0:
                        yield tp, pp, cp, ep, tp > 1 and (seq // cp) % tp == 0


def _layout_for(workload, tp, pp, cp, ep, sp, micro_batches) -> Layout:
    given = workload.layout
    schedule, vpp = given.schedule, given.vpp
    split = split_for(workload, pp, vpp) if schedule == "interleaved" and pp >= 2 else None
    if schedule == "interleaved" and (split is None or (not split and workload.arch.layers % (pp * vpp))):
        schedule, vpp = "1f1b", 1
    if schedule != "interleaved":
        split = split_for(workload, pp, 1)
    return Layout(tp=tp, pp=pp, vpp=vpp, cp=cp, sequence_parallel=sp, micro_batches=micro_batches,
                  schedule=schedule, loss_parallel=given.loss_parallel, vocab_divisor=given.vocab_divisor, ep=ep,
                  **(split or {}))


SPLIT_RULE = ("stage_split", "first_stage_layers", "last_stage_layers", "embedding_weight", "head_weight")


def recompute_variant(workload, recompute: str) -> dict:
    """The Workload fields of a candidate that recomputes otherwise than the view: the view's one-block-in-N and
    activation offload belong to its own full recompute, and an own op policy to its op recompute."""
    if recompute == workload.recompute:
        return {}
    return {"recompute": recompute, "recompute_every": 1, "activation_offload": False,
            "op_policy": workload.op_policy if recompute == "op" else "torchtitan",
            "recompute_modules": DEFAULT_MODULES, "recompute_method": "uniform", "recompute_num_layers": 1}


def split_for(workload, pp: int, vpp: int):
    """The view's stage split carried to a candidate of pp x vpp stages: its counts when there are as many stages,
    its named rule when the rule splits the layers there; else the even split where pp divides the layers (as
    Megatron requires); else None: the candidate is not proposed."""
    given, layers = workload.layout, workload.arch.layers
    if given.stage_layers is not None and len(given.stage_layers) == pp * vpp:
        return {"stage_layers": given.stage_layers}
    if given.stage_layers is None and given.stage_split != "even":
        rule = {f: getattr(given, f) for f in SPLIT_RULE}
        try:
            split_sizes(layers, pp, vpp, **rule)
            return rule
        except FieldError:
            pass
    return {} if layers % pp == 0 else None


def _recomputes(workload):
    # Selective recompute only drops eager attention's s^2 scores: with flash it changes nothing. Op-level
    # checkpointing is modelled for full training only (Workload refuses it with adapters or frozen blocks).
    op = ("op",) if workload.finetune.mode == "full" else ()
    return ("none", "selective", *op, "full") if workload.attention == "eager" else ("none", *op, "full")


def bounded_candidates(workload, gpus: int, gpus_per_node: int) -> list:
    """candidate_layouts as a list, or SearchBoundError when the GPUs or the candidates exceed the bounds."""
    if gpus > MAX_SEARCH_GPUS:
        raise SearchBoundError("layout search", f"{gpus:,} GPUs", f"at most {MAX_SEARCH_GPUS:,} GPUs (the search's "
                               "bound on the world size): fewer workers, or a layout checked as given")
    found, work = [], 0
    for candidate in candidate_layouts(workload, gpus, gpus_per_node):
        found.append(candidate)
        work += 64 + candidate[1]
        if len(found) > MAX_SEARCH_LAYOUTS:
            raise SearchBoundError("layout search", f"more than {MAX_SEARCH_LAYOUTS:,} candidate layouts of "
                                   f"{gpus:,} GPUs", f"at most {MAX_SEARCH_LAYOUTS:,} (the search's bound): fewer "
                                   "GPUs or GPUs per node, or a model with fewer ways to split")
        if work > MAX_SEARCH_WORK:
            raise SearchBoundError("layout search", f"more than {MAX_SEARCH_WORK:,} pipeline stages to lay out over "
                                   f"the candidate layouts of {gpus:,} GPUs", f"at most {MAX_SEARCH_WORK:,} (the "
                                   "search's bound, 64 + pp per layout): fewer GPUs, or a model with fewer layers "
                                   "to split")
    return found


def search_layouts(scenario, workload, gpus: int = None, stage: int = None) -> Tuple[Plan, ...]:
    """Every fitting (layout, stage) with its cheapest recompute / offload setting, cheapest first;
    SearchBoundError beyond the bounds (checked first). Cached: the report's layouts and the fixes ask it of the
    same state. Under the allocator's model (fragmentation_percent None: a replay per report) the search runs with
    the reserve at DEFAULT_PERCENT and only the cheapest SHOWN_MODELLED plans found are re-checked with the model
    (checked; modelled_search gives them and the count): a plan listed fits with the model's own peak; one that
    fits only under the model and not at 5 % is not found. `stage`: the cheapest plan of that stage alone (the
    fixes: re-checked in order until one fits)."""
    gpus = gpus or workload.layout.world(scenario.workers)
    if replays(workload):
        smooth = _search(scenario, replace(workload, fragmentation_percent=DEFAULT_PERCENT), gpus)
        if stage is not None:
            return next((c for c in (checked(scenario, workload, p) for p in smooth if p.stage == stage) if c), None),
        return modelled_search(scenario, workload, gpus)[0]
    plans = _search(scenario, workload, gpus)
    return plans if stage is None else (next((p for p in plans if p.stage == stage), None),)


@lru_cache(maxsize=16)
def modelled_search(scenario, workload, gpus: int) -> Tuple[Tuple[Plan, ...], int, bool]:
    """(the cheapest SHOWN_MODELLED plans that fit with the allocator's model, how many fit, whether that count
    is the model's own): the plans found at 5 % are re-checked in their order until that many pass (a re-check
    that moves a plan to a costlier recompute or offload setting can reorder them: they are sorted again). When
    more remain, the count is the search's at 5 % (re-checking every plan costs a replay each: about 1,100 on
    Qwen3-235B over 4,096 GPUs, a minute of CPU)."""
    smooth = _search(scenario, replace(workload, fragmentation_percent=DEFAULT_PERCENT), gpus)
    passed = []
    for i, plan in enumerate(smooth):
        c = checked(scenario, workload, plan)
        if c:
            passed.append(c)
            if len(passed) == SHOWN_MODELLED and i + 1 < len(smooth):
                return tuple(sorted(passed, key=Plan.cost_key)), len(smooth), False
    return tuple(sorted(passed, key=Plan.cost_key)), len(passed), True


def checked(scenario, workload, plan: Plan):
    """The plan re-evaluated with the workload's own reserve: at its recompute / offload setting, else the next
    costlier one of the same layout that fits there (as _search orders them), with that report's peak, worst rank,
    communication and overhead; None where none fits."""
    layout = _layout_for(workload, plan.tp, plan.pp, plan.cp, plan.ep, plan.sequence_parallel, plan.micro_batches)
    base = replace(workload, layout=layout)
    options = [(r, off) for off in OFFLOADS for r in _recomputes(workload)]
    stage = plan.stage
    for recompute, offload in options[options.index((plan.recompute, (plan.offload_optimizer,
                                                                       plan.offload_params))):]:
        level = OFFLOADS.index(offload)
        if level and (stage == 0 or (level == 2 and stage != 3)):
            continue                 # an offload switch moves only partitioned state (as _search)
        s = replace(scenario, workers=plan.dp, shard_group=None, offload_optimizer=offload[0],
                    offload_params=offload[1])
        try:
            w = replace(base, **recompute_variant(base, recompute))
        except FieldError:
            continue
        found = fitting_peak_at(s, w, stage)                # this stage alone: one replay per rank class at most
        if found:
            worst, p = found
            report = unreplayed_report(s, w)                # what the reserve leaves
            return plan._replace(
                recompute=recompute, offload_optimizer=offload[0], offload_params=offload[1],
                peak_bytes=p.peak_bytes, capacity_bytes=p.capacity_bytes,
                worst_rank=report.ranks[worst].rank.name,
                communication_bytes=max(sum(v.communication[stage].values()) for v in report.ranks),
                recompute_flops=max(v.recompute_flops for v in report.ranks),
                overhead=max(time_overhead(w, v.rank, v.recompute_flops) for v in report.ranks))
    return None


@lru_cache(maxsize=16)
def _search(scenario, workload, gpus: int) -> Tuple[Plan, ...]:
    candidates = bounded_candidates(workload, gpus, scenario.gpus_per_node)
    global_batch = scenario.workers * workload.micro_batch * workload.layout.micro_batches
    plans = []
    options = [(r, off) for off in OFFLOADS for r in _recomputes(workload)]
    scenarios = {}           # (dp, offload) -> scenario: the same for every layout with that dp
    for tp, pp, cp, ep, sp in candidates:
        dp = gpus // (tp * pp * cp)
        if global_batch % (dp * workload.micro_batch):
            continue
        micro_batches = global_batch // (dp * workload.micro_batch)
        if micro_batches > LAYOUT_LIMITS["micro_batches"][1]:
            continue
        if micro_batches > 1 and workload.optimizer_in_backward:
            continue                     # the step in backward refuses accumulation (optimizer_in_backward.py)
        layout = _layout_for(workload, tp, pp, cp, ep, sp, micro_batches)
        try:
            base_w = replace(workload, layout=layout)
        except FieldError:           # the view's recompute cannot run there (Megatron's uniform N and its chunks)
            continue
        workloads = {workload.recompute: base_w}

        def variant(recompute, offload):
            # Each variant built once, when first asked for (replace() re-validates the dataclass).
            if (dp, offload) not in scenarios:
                scenarios[dp, offload] = replace(scenario, workers=dp, shard_group=None,
                                                 offload_optimizer=offload[0], offload_params=offload[1])
            if recompute not in workloads:
                workloads[recompute] = replace(base_w, **recompute_variant(base_w, recompute))
            return scenarios[dp, offload], workloads[recompute]

        fits, shapes = {}, {}        # per (recompute, offload); per recompute: the offload variants share a step

        def shapes_of(recompute):
            if recompute not in shapes:
                shapes[recompute] = step_shapes(*variant(recompute, OFFLOADS[0]))
            return shapes[recompute]

        def evaluate(recompute, offload):
            if (recompute, offload) not in fits:
                fits[recompute, offload] = layout_fit(*variant(recompute, offload), shapes_of(recompute))
            return fits[recompute, offload]

        check_plan(variant(*options[0])[0], base_w)    # experts and optimizer: the same for every variant
        wanted = {0, 1, 2, 3} if dp * cp > 1 else {0}      # with dp x cp = 1 ZeRO has nothing to shard
        if not workload.optimizer_in_backward:   # model states alone above the card, most offloaded: nothing fits
            floor = states_floor(variant(*options[-1])[0], base_w, shapes_of(options[0][0]))
            wanted = {s for s in wanted if floor[s] <= base_w.capacity_bytes}
        open_stages = {s for s in wanted if evaluate(*options[0]).ask(wanted).fits(s)} if wanted else set()
        rest = wanted - open_stages
        if rest:    # the most memory-saving setting decides what else can fit
            open_stages |= {s for s in rest if evaluate(*options[-1]).ask(rest).fits(s)}
        for recompute, offload in options:
            if not open_stages:
                break
            level = OFFLOADS.index(offload)
            # An offload switch moves only partitioned state: none at stage 0, parameters only at stage 3.
            useful = {s for s in open_stages if level == 0 or (s >= 1 and (level == 1 or s == 3))}
            if not useful:
                continue
            fit = evaluate(recompute, offload).ask(useful)
            overhead = flops = None
            for stage in sorted(useful):
                if not fit.fits(stage):
                    continue
                if overhead is None:          # the same for every stage of one plan
                    flops, overhead = fit.costs()
                plans.append(Plan(gpus, dp, tp, pp, cp, ep, layout.vpp, layout.schedule, sp, micro_batches, stage,
                                  recompute, offload[0], offload[1], fit.peak(stage), fit.workload.capacity_bytes,
                                  fit.ranks[fit.worst(stage)].rank.name, fit.communication(stage), flops,
                                  bubble_fraction(layout), overhead))
                open_stages.discard(stage)
    return tuple(sorted(plans, key=Plan.cost_key))


def plan_dict(plan: Plan) -> dict:
    return {**plan._asdict(), "headroom_bytes": plan.headroom_bytes}


def search_dict(scenario, workload) -> dict:
    """The search's JSON: the cheapest SHOWN plans and the count, or the bound that refused it
    (layouts_refused, a sentence)."""
    out = {"layouts_gpus": workload.layout.world(scenario.workers),
           "layouts_global_batch": scenario.workers * workload.micro_batch * workload.layout.micro_batches}
    try:
        plans = search_layouts(scenario, workload)
    except SearchBoundError as exc:
        return {"layouts": [], "layouts_count": 0, "layouts_refused": str(exc), **out}
    if replays(workload):           # the plans listed re-checked with the model; the count may be the search's at 5 %
        _plans, count, exact = modelled_search(scenario, workload, out["layouts_gpus"])
        return {"layouts": [plan_dict(p) for p in plans], "layouts_count": count,
                "layouts_count_at_percent": None if exact else DEFAULT_PERCENT, **out}
    return {"layouts": [plan_dict(p) for p in plans[:SHOWN]], "layouts_count": len(plans), **out}
