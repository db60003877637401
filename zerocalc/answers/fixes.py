"""What would make it fit: when a ZeRO stage's peak exceeds the GPU, the cheapest changes that bring it under, each
with its resulting peak. Every candidate is evaluated as a whole scenario (ranks.layout_report of the changed
scenario and workload), so a listed change, applied, fits by construction, and its peak is the one shown.

The changes tried, each from the view as given (one setting changed, or one setting with the micro-batch):
- ZeRO stage: the lowest higher stage that fits;
- recompute: each level above the current one (selective only changes eager attention's scores), alone, and with
  the largest micro-batch that then fits;
- micro-batch: the largest that fits (solve.max_micro_batch at that stage), with the micro-batches per step raised
  so the global batch is held when it divides (gradient accumulation: the same sequences per optimizer step);
- offload: the optimizer state to the CPU (stages 1-3), then the parameters too (stage 3);
- more GPUs: the fewest data-parallel workers that fit (solve.min_workers; shard group = all of them);
- a bigger GPU: the catalogued GPU with the least memory that holds the peak;
- packing a padded batch with the lengths given (answers/pack_fix.py): one row of the typical padded micro-batch's
  tokens;
- a shorter sequence: the longest power of two below the current length that fits (it changes what is trained);
- a layout of the same GPUs (layouts=True): the cheapest plan layout_search.search_layouts finds for the stage.

Cost order, cheapest first (COSTS): a ZeRO stage 1 or 2 (no extra time), selective recompute, a smaller
micro-batch with more accumulation steps, ZeRO-3 (1.5x the data-parallel traffic), full recompute (about a third
more compute), full recompute with a smaller micro-batch, a model-parallel layout, offload (PCIe every step), more
GPUs, a bigger GPU, a shorter sequence; ties by the most headroom. Each sentence (sentence()) names the change,
its peak against the capacity, and the settings it holds fixed.

What one change moves, for compare views, is answers/effect.py (change_effect, re-exported here).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..gpus import GPU_CATALOG, fast_links
from ..layout import LAYOUT_LIMITS
from ..parallel.ranks import fitting_peak_at, unreplayed_report, worst_peak_at
from ..scenario import FieldError
from ..step.activations import recompute_name
from ..step.workload import recompute_resets
from ..step.losses import LOSS_NAMES
from ..step.host import host_rows
from ..step.peak import peak_on_gpu
from ..units import format_bytes, percent_text
from .recompute_fixes import change_text, compute_share, fewest_block_layers, module_changes
from .effect import change_effect, effect_dict  # noqa: F401 - the compare view's import
from .pack_fix import COST as PACK_COST, pack_change, pack_text
from .recipe_changes import recipe_changes as _recipe_changes, with_changes
from .solve import max_micro_batch, min_workers

# kind -> cost rank (lower is cheaper) and what the change costs besides memory
COSTS = {
    "stage": (0, "no extra time: ZeRO-1 and ZeRO-2 communicate what plain data parallelism does"),
    "recompute_selective": (1, "recomputes the attention scores only"),
    "recipe": (1, "a recipe change: no extra step time (compile takes minutes once; the loss, the fused "
                  "optimizer step and the loader's dtypes change no FLOPs)"),
    "activation_offload": (7, "the blocks' inputs copied to the CPU and back over PCIe every step"),
    "pack": PACK_COST,
    "micro_batch": (2, "the same sequences per step in more, smaller micro-batches (lower GPU efficiency)"),
    "stage_3": (3, "ZeRO-3 gathers the parameters in forward and backward: 1.5x the data-parallel traffic"),
    "recompute_op": (4, "op-level checkpointing re-runs every second matmul and the cheap ops in backward: about "
                        "a sixth more compute"),
    "recompute_full": (5, "full recompute runs the forward again in backward: about a third more compute"),
    "recompute_modules": (3, "Megatron's recompute modules re-run their part of the forward in backward"),
    "recompute_block": (4, "Megatron's block method re-runs the forward of the first N blocks of each chunk"),
    "recompute_micro_batch": (6, "recompute and smaller micro-batches"),
    "layout": (7, "tensor / pipeline / context parallel traffic and the pipeline bubble"),
    "offload": (8, "optimizer state (and parameters) over PCIe every step"),
    "workers": (9, "more GPUs"),
    "gpu": (10, "a GPU with more memory"),
    "seq_len": (11, "changes what is trained: shorter sequences"),
    "combined": (12, "the costs of each change it joins"),      # answers/combined.py: its cost is their sum
}
# The changes that alter the job itself (what is trained, the hardware, the global batch): listed after every
# change that keeps the job, and labelled with what they change (issue 33).
JOB_CHANGES = {"seq_len": "trains shorter sequences", "gpu": "another GPU",
               "workers": "more GPUs: a larger global batch unless accumulation steps are cut"}
STAGE_NAMES = ("ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3")
# the fp32_parts fix (recipe_changes.py), by what the plan keeps in fp32: how a launcher casts them back
FP32_CAST_BACK = {"embed-head-norms": "the embeddings, head and norms in the model's dtype (axolotl: flash attention "
                                      "casts them back)",
                  "norms": "the norms in the model's dtype (LLaMA-Factory: upcast_layernorm false; axolotl: "
                           "fp32_norms false)"}
RECOMPUTE_ORDER = ("none", "selective", "op", "full")


class Fix(NamedTuple):
    kind: str                 # a COSTS key
    stage: int                # the ZeRO stage the change is evaluated at (its own, for stage and layout fixes)
    scenario: Dict[str, object]   # Scenario fields changed
    workload: Dict[str, object]   # Workload fields changed
    layout: Dict[str, object]     # Layout fields changed
    peak_bytes: int
    capacity_bytes: int
    held: Tuple[str, ...]     # the settings held as given, named as held_settings() names them
    cost: int
    cost_note: str
    parts: Tuple["Fix", ...] = ()     # a combined change (answers/combined.py): the single changes it joins

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes

    @property
    def job_change(self) -> str:
        """What the fix changes of the job ("" when it keeps it): JOB_CHANGES of its kind or of a part's."""
        return "; ".join(dict.fromkeys(JOB_CHANGES[k] for k in (self.kind, *(p.kind for p in self.parts))
                                       if k in JOB_CHANGES))

    @property
    def order(self) -> tuple:
        """Fixes that keep the job first, then the cheapest, then the most headroom."""
        return bool(self.job_change), self.cost, len(self.parts), -self.headroom_bytes

    @property
    def utilisation(self) -> float:
        return self.peak_bytes / self.capacity_bytes


def apply(fix: Fix, scenario, workload):
    """(scenario, workload) with the fix's changes (the stage is fix.stage)."""
    s = replace(scenario, **fix.scenario) if fix.scenario else scenario
    # one block in N, offload and Megatron's method are forms of full recompute, a policy of op, modules of selective
    changes = {**recompute_resets(workload, fix.workload.get("recompute", workload.recompute)), **fix.workload}
    w = with_changes(workload, changes) if changes else workload
    if fix.layout:
        w = replace(w, layout=replace(w.layout, **fix.layout))
    return s, w


def held_settings(scenario, workload, stage: int) -> Dict[str, str]:
    """The settings a fix may change, as a reader names them with their values now (for "held" lists)."""
    lay = workload.layout
    mp = lay.model_parallel
    if scenario.offload_optimizer == "none" and scenario.offload_params == "none":
        offload = "no offload"
    else:
        offload = f"offload: optimizer {scenario.offload_optimizer}, parameters {scenario.offload_params}"
    layout = "no model parallelism" if lay.is_trivial and lay.ep == 1 else \
        f"tp {lay.tp} x pp {lay.pp} x cp {lay.cp}" + (f", ep {lay.ep}" if lay.ep > 1 else "")
    return {
        "stage": STAGE_NAMES[stage],
        "micro_batch": f"micro-batch {workload.micro_batch:,}",
        "micro_batches": f"{lay.micro_batches:,} micro-batch{'es' if lay.micro_batches != 1 else ''} per step",
        "seq_len": f"sequence {workload.seq_len:,}",
        "recompute": recompute_name(workload.recompute),
        "workers": f"{scenario.workers:,} data-parallel worker{'s' if scenario.workers != 1 else ''}"
                   + (f" ({scenario.workers * mp:,} GPUs)"
                                                                    if mp > 1 else ""),
        "gpu": workload.gpu_label,
        "offload": offload,
        "layout": layout,
    }



def _host_holds(scenario, workload, stage: int) -> bool:
    """Whether the node's host RAM, where the plan gives it, holds what an offload puts there (step/host.py): a fix
    the host cannot take is no fix (the verdict would read "does not fit (host RAM)"). Host RAM does not depend
    on the GPU's allocator reserve: the report at its percent (no replay) gives the same rows."""
    if not workload.host_memory_bytes:
        return True
    return host_rows(unreplayed_report(scenario, workload))[stage]["fits_host"] is not False


def _peak(scenario, workload, stage: int) -> Optional[int]:
    """The worst rank's peak at `stage` where it fits, else None, as where the core refuses the combination
    (every caller asks whether it fits; that stage alone, and no replay for a plan whose floor does not fit:
    ranks.fitting_peak_at)."""
    try:
        found = fitting_peak_at(scenario, workload, stage)
        return found[1].peak_bytes if found else None
    except FieldError:
        return None


def _divisors_down(n: int, at_most: int) -> List[int]:
    return [d for d in range(min(n, at_most), 0, -1) if n % d == 0]


def _micro_batch_change(scenario, workload, stage: int, largest: int) -> Optional[Tuple[dict, dict, int]]:
    """(workload changes, layout changes, peak) for the largest micro-batch <= `largest` that fits with the
    micro-batches per step raised to hold the global batch (a divisor of micro-batch x micro-batches), else the
    largest that fits with them held."""
    b, m = workload.micro_batch, workload.layout.micro_batches
    per_worker = b * m
    capacity = workload.capacity_bytes
    for new in _divisors_down(per_worker, largest):
        if new >= b:
            continue
        steps = per_worker // new
        if steps > LAYOUT_LIMITS["micro_batches"][1]:
            continue
        try:             # more micro-batches per step: refused with the optimizer step in backward
            w = replace(workload, micro_batch=new, layout=replace(workload.layout, micro_batches=steps))
        except FieldError:
            continue
        peak = _peak(scenario, w, stage)
        if peak is not None and peak <= capacity:
            return {"micro_batch": new}, ({"micro_batches": steps} if steps != m else {}), peak
    if 1 <= largest < b:
        peak = _peak(scenario, replace(workload, micro_batch=largest), stage)
        if peak is not None and peak <= capacity:
            return {"micro_batch": largest}, {}, peak
    return None


def _candidates(scenario, workload, stage: int, layouts: bool):
    """(kind, stage, scenario changes, workload changes, layout changes, peak) of every change that fits (a bigger
    GPU's capacity is its own: apply() and the report give it)."""
    capacity = workload.capacity_bytes
    for s in range(stage + 1, 4):            # a higher ZeRO stage (each asked alone: no replay of the stages below)
        found = fitting_peak_at(scenario, workload, s)
        if found:
            yield ("stage_3" if s == 3 else "stage"), s, {}, {}, {}, found[1].peak_bytes
            break
    levels = RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(workload.recompute) + 1:]
    block = workload.recompute == "full" and workload.recompute_method == "block"
    if workload.recompute_every > 1 or block:
        levels = ("full",)                                           # one block in N, or the first N -> every block
    for level in levels:                                             # recompute, alone and with a micro-batch
        if level == "selective" and workload.attention != "eager":
            continue                                                 # flash never holds the scores
        if level == "op" and workload.finetune.mode != "full":
            continue                                                 # modelled for full training only
        change = {"recompute": level, **({"recompute_every": 1} if workload.recompute_every > 1 else {}),
                  **({"recompute_method": "uniform", "recompute_num_layers": 1} if block else {}),
                  **recompute_resets(workload, level)}       # an own policy, offload, modules: other levels'
        w = replace(workload, **change)
        peak = _peak(scenario, w, stage)
        if peak is not None and peak <= capacity:
            yield f"recompute_{level}", stage, {}, change, {}, peak
            if level == "op" and workload.implementation != "megatron":
                continue                 # torchtitan's op-level policy: full recompute is what others can set
            break
        largest = max_micro_batch(scenario, w, (stage,))[stage]
        found = _micro_batch_change(scenario, w, stage, largest) if largest else None
        if found:
            wc, lc, peak = found
            yield "recompute_micro_batch", stage, {}, {**change, **wc}, lc, peak
            break
    megatron = workload.implementation == "megatron"                 # its recompute flags exist in Megatron only
    for change in module_changes(workload) if megatron else ():      # Megatron's modules, cheapest first
        peak = _peak(scenario, replace(workload, **change), stage)
        if peak is not None and peak <= capacity:
            yield "recompute_modules", stage, {}, change, {}, peak
            break
    block = fewest_block_layers(scenario, workload, stage, _peak) if megatron else None   # the block method
    if block:
        yield "recompute_block", stage, {}, block[0], {}, block[1]
    for kind, change in _recipe_changes(workload):                  # recipes, one at a time
        try:
            w = with_changes(workload, change)
        except FieldError:                                           # one the plan refuses (with MTP, ...)
            continue
        peak = _peak(scenario, w, stage)
        if peak is not None and peak <= capacity:
            yield kind, stage, {}, change, {}, peak
    packed = pack_change(scenario, workload, stage, _peak)          # a padded batch packed (answers/pack_fix.py)
    if packed:
        yield "pack", stage, {}, packed[0], {}, packed[1]
    largest = max_micro_batch(scenario, workload, (stage,))[stage]    # micro-batch
    found = _micro_batch_change(scenario, workload, stage, largest) if largest else None
    if found:
        wc, lc, peak = found
        yield "micro_batch", stage, {}, wc, lc, peak
    if stage >= 1:                                                   # offload
        options = [{"offload_optimizer": "cpu"}] + ([{"offload_optimizer": "cpu", "offload_params": "cpu"}]
                                                     if stage == 3 else [])
        for changes in options:
            changes = {k: v for k, v in changes.items() if getattr(scenario, k) == "none"}
            if not changes:
                continue
            peak = _peak(replace(scenario, **changes), workload, stage)
            if peak is not None and peak <= capacity and _host_holds(replace(scenario, **changes), workload, stage):
                yield "offload", stage, changes, {}, {}, peak
                break
    fewest = min_workers(scenario, workload, (stage,))[stage]        # more GPUs
    if fewest is not None and fewest > scenario.workers:
        changes = {"workers": fewest, "shard_group": None}
        peak = _peak(replace(scenario, **changes), workload, stage)
        if peak is not None and peak <= capacity:
            yield "workers", stage, changes, {}, {}, peak
    # a bigger GPU: the peak moves only by the card's library workspaces and NCCL buffers (step/peak.py peak_on_gpu)
    # (under the allocator's model the card's workspaces also move the replayed reserve a few MiB: the card
    # chosen is then re-checked with its own report, the next one taken where it does not fit)
    at_stage = worst_peak_at(scenario, workload, stage)[1]
    on = {key: peak_on_gpu(at_stage, scenario, workload, key) for key in GPU_CATALOG}
    bigger = sorted((gpu.usable_bytes, i, key) for i, (key, gpu) in enumerate(GPU_CATALOG.items())
                    if gpu.usable_bytes >= on[key] and gpu.usable_bytes > capacity)
    for usable, _i, key in bigger:
        change = {"gpu": key, "gpu_memory": None}
        peak = on[key] if workload.fragmentation_percent is not None else _peak(scenario, replace(workload,
                                                                                                  **change), stage)
        if peak is not None and peak <= usable:
            yield "gpu", stage, {}, change, {}, peak
            break
    length = 1                                                       # a shorter sequence (a power of two)
    while length * 2 < workload.seq_len:
        length *= 2
    while length >= 1 and length < workload.seq_len:
        try:
            w = replace(workload, seq_len=length)
        except FieldError:
            w = None
        peak = None if w is None else _peak(scenario, w, stage)
        if peak is not None and peak <= capacity:
            yield "seq_len", stage, {}, {"seq_len": length}, {}, peak
            break
        length //= 2
    if layouts:                                                      # a layout of the same GPUs
        from ..parallel.search import SPLIT_RULE, SearchBoundError, search_layouts, split_for
        try:
            plan = search_layouts(scenario, workload, stage=stage)[0]        # re-checked with the model
        except SearchBoundError:                                     # beyond the search's bounds: not offered
            plan = None
        if plan is not None:
            s_changes = {"workers": plan.dp, "shard_group": None, "offload_optimizer": plan.offload_optimizer,
                         "offload_params": plan.offload_params}
            s_changes = {k: v for k, v in s_changes.items() if getattr(scenario, k) != v}
            w_changes = {"recompute": plan.recompute} if plan.recompute != workload.recompute else {}
            lay = workload.layout
            l_all = {"tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "ep": plan.ep, "vpp": plan.vpp,
                     "schedule": plan.schedule, "sequence_parallel": plan.sequence_parallel,
                     "micro_batches": plan.micro_batches}
            split = split_for(workload, plan.pp, plan.vpp) or {}          # the stage split the plan was built with
            l_all.update({f: split.get(f, "even" if f == "stage_split" else None) for f in ("stage_layers",)
                          + SPLIT_RULE})
            l_changes = {k: v for k, v in l_all.items() if getattr(lay, k) != v}
            if l_changes:        # the same layout with other settings is one of the changes above
                yield "layout", stage, s_changes, w_changes, l_changes, plan.peak_bytes


def fixes(scenario, workload, stage: int, layouts: bool = False) -> List[Fix]:
    """The changes that make `stage` fit, cheapest first ([] when it already fits). `layouts` adds the cheapest
    layout of the same GPUs (layout_search: hundreds of whole reports for a large world)."""
    if stage not in range(4):
        raise FieldError("stage", stage, "one of 0, 1, 2, 3")
    if worst_peak_at(scenario, workload, stage)[1].fits:      # that stage alone (the report's peak there)
        return []
    before = held_settings(scenario, workload, stage)
    out = []
    for kind, at, s_changes, w_changes, l_changes, peak in _candidates(scenario, workload, stage, layouts):
        cost, note = COSTS[kind]
        group = l_changes.get("tp", workload.layout.tp) * l_changes.get("cp", workload.layout.cp)
        if kind == "layout" and not fast_links(w_changes.get("gpu", workload.gpu), group):
            cost, note = cost + 2, note + f"; {group} GPUs exchange activations over PCIe (no NVLink between " \
                "these cards): expect a slow step"
        fix = Fix(kind, at, s_changes, w_changes, l_changes, peak, 0, (), cost, note)
        s, w = apply(fix, scenario, workload)
        if kind in ("recompute_modules", "recompute_block"):        # its price in FLOPs, from the plan itself
            fix = fix._replace(cost_note=f"{note}: about {compute_share(s, w):.0%} more compute here")
        after = held_settings(s, w, at)
        held = tuple(n for n in before if before[n] == after[n])
        out.append(fix._replace(capacity_bytes=w.capacity_bytes, held=held))
    return sorted(out, key=lambda f: f.order)


def _change_text(fix: Fix, scenario, workload, stage_from: int) -> str:
    if fix.kind == "combined":
        return " + ".join(_change_text(part, scenario, workload, stage_from) for part in fix.parts)
    w, lay, s = fix.workload, fix.layout, fix.scenario
    if fix.kind in ("stage", "stage_3"):
        return f"{STAGE_NAMES[fix.stage]} instead of {STAGE_NAMES[stage_from]}"
    every = " of every block" if w.get("recompute_every") == 1 or w.get("recompute_method") == "uniform" \
        else ""                                                   # from one block in N, or the first N
    if fix.kind in ("recompute_selective", "recompute_op", "recompute_full"):
        return f"{recompute_name(w['recompute'])}{every}"
    if fix.kind in ("recompute_modules", "recompute_block"):
        return change_text(fix.kind, {**dict(recompute_num_layers=workload.recompute_num_layers), **w})
    if fix.kind in ("micro_batch", "recompute_micro_batch"):
        text = (f"{recompute_name(w['recompute'])}{every} with " if fix.kind == "recompute_micro_batch" else "") + \
            f"micro-batch {w['micro_batch']:,}"
        if "micro_batches" in lay:
            global_batch = scenario.workers * workload.micro_batch * workload.layout.micro_batches
            text += f" x {lay['micro_batches']:,} micro-batches per step (global batch of {global_batch:,} held)"
        return text
    if fix.kind in ("recipe", "activation_offload"):
        return {"compile": "torch.compile the blocks", "loss": f"{LOSS_NAMES['chunked']} (8 chunks)",
                "optimizer_in_backward": "the optimizer step in backward (torchtune optimizer_in_bwd)",
                "activation_offload": "activation offloading to the CPU",
                "fp32_parts": FP32_CAST_BACK.get(workload.finetune.fp32_parts, "")}[next(iter(w))]
    if fix.kind == "offload":
        parts = ["the optimizer state" if "offload_optimizer" in s else None,
                 "the parameters" if "offload_params" in s else None]
        return "offload " + " and ".join(p for p in parts if p) + " to the CPU"
    if fix.kind == "workers":
        mp = workload.layout.model_parallel
        return f"{s['workers']:,} data-parallel workers" + (f" ({s['workers'] * mp:,} GPUs)" if mp > 1 else "")
    if fix.kind == "gpu":
        return GPU_CATALOG[w["gpu"]].name
    if fix.kind == "seq_len":
        return f"sequence {w['seq_len']:,}"
    if fix.kind == "pack":
        return pack_text(w)
    if fix.kind == "layout":
        dp = s.get("workers", scenario.workers)
        full = {f: lay.get(f, getattr(workload.layout, f)) for f in ("tp", "pp", "cp", "ep")}
        text = f"layout dp {dp:,} x tp {full['tp']} x pp {full['pp']} x cp {full['cp']}"
        if full["ep"] > 1:
            text += f" (ep {full['ep']})"
        extras = []
        if lay.get("sequence_parallel"):
            extras.append("sequence parallel")
        if "micro_batches" in lay:
            extras.append(f"{lay['micro_batches']:,} micro-batches per step")
        if "recompute" in w:
            extras.append(recompute_name(w["recompute"]))
        if s.get("offload_optimizer", "none") != "none":
            extras.append("optimizer offload" + (" + parameter offload" if s.get("offload_params", "none") != "none"
                                                 else ""))
        return text + (f" ({', '.join(extras)})" if extras else "")
    raise FieldError("kind", fix.kind, "one of " + ", ".join(COSTS))


def sentence(fix: Fix, scenario, workload, unit: str = "GB", stage: int = None) -> str:
    """One line: the change, its peak against the capacity, and the settings held fixed (`stage`: the stage the
    fix was asked for, named by a stage change; fix.stage otherwise)."""
    stage = fix.stage if stage is None else stage
    held = held_settings(scenario, workload, fix.stage)
    kept = [held[n] for n in fix.held if n in held and (n != "micro_batches" or workload.layout.micro_batches > 1)]
    change = _change_text(fix, scenario, workload, stage)
    changes = f" Changes the job: {fix.job_change}." if fix.job_change else ""
    pcie = next((p for p in fix.cost_note.split("; ") if "over PCIe" in p), "") if fix.kind == "layout" else ""
    slow = f" {pcie[:1].upper()}{pcie[1:]}." if pcie else ""        # not offered as if it were NVLink (issue 33)
    return (f"{change[:1].upper()}{change[1:]}: "
            f"{STAGE_NAMES[fix.stage]} peak {format_bytes(fix.peak_bytes, unit)}, "
            f"{percent_text(fix.peak_bytes, fix.capacity_bytes)} of {format_bytes(fix.capacity_bytes, unit)}. "
            f"Held: {', '.join(kept)}.{slow}{changes}")


def fix_dict(fix: Fix, scenario, workload, unit: str = "GB", stage: int = None) -> dict:
    """Plain data for JSON and the UI: integers are bytes."""
    return {"kind": fix.kind, "stage": fix.stage, "scenario": dict(fix.scenario), "workload": dict(fix.workload),
            "layout": dict(fix.layout), "peak_bytes": fix.peak_bytes, "capacity_bytes": fix.capacity_bytes,
            "headroom_bytes": fix.headroom_bytes, "held": list(fix.held), "cost": fix.cost,
            "cost_note": fix.cost_note, "fits": fix.fits, "parts": [part.kind for part in fix.parts],
            "changes_job": fix.job_change,
            "sentence": sentence(fix, scenario, workload, unit, stage)}


def fixes_dict(scenario, workload, stage: int, layouts: bool = False, unit: str = "GB") -> List[dict]:
    return [fix_dict(f, scenario, workload, unit, stage) for f in fixes(scenario, workload, stage, layouts)]
