"""Advice always: when no single change makes a stage fit (answers/fixes.py), pairs and triples of the same kinds
of change, the cheapest that fit first; when none fits, the one that comes closest, said as such.

The changes joined (moves), each one of fixes.py's kinds, none required to fit alone:
- costly, each needing a whole report: a higher recompute level, each recipe (compile, a chunked loss, the
  optimizer step in backward, activation offloading), the micro-batch at 1 with the global batch held, optimizer
  (and parameter) offload, 2x and 4x the data-parallel workers, half the sequence;
- free, read off a report already built: a higher ZeRO stage (every stage's peak is in each report), a bigger
  catalogued GPU (step/peak.py peak_on_gpu: only the library workspaces move with the card).
Every combination of at most two costly moves is evaluated (one report each), with any higher stage and any
bigger GPU on top; three costly moves (MAX_TRIPLES groups) only where that finds nothing. A combination that holds
one already listed is left out. A combination costs the sum of its moves' COSTS ranks; ties go to the
most headroom. Each listed peak is the whole report's (or peak_on_gpu's, exact), so a change applied gives the
verdict it promised (tests/test_combined_fixes.py checks it over random scenarios). Under the allocator's model
(a replay per report) the combinations are ranked with the reserve at 5 % and each one listed is re-checked with
the model's own report (one that fits only under the model is not found).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from typing import List, Optional

from ..gpus import GPU_CATALOG
from ..parallel.ranks import layout_report, worst_peak_at
from ..scenario import FieldError
from ..step.allocator import DEFAULT_PERCENT, replays
from ..step.peak import peak_on_gpu
from ..step.host import host_rows
from .fixes import COSTS, RECOMPUTE_ORDER, Fix, _recipe_changes, apply, fixes, held_settings

LISTED = 6             # combinations returned
BIGGER_GPUS = 3        # the smallest catalogued cards above the capacity a combination may move to
MAX_TRIPLES = 120      # groups of three costly changes tried when nothing smaller fits


def _move(kind: str, stage: int, scenario: dict = None, workload: dict = None, layout: dict = None) -> Fix:
    cost, note = COSTS[kind]
    return Fix(kind, stage, scenario or {}, workload or {}, layout or {}, 0, 0, (), cost, note)


def _costly_moves(scenario, workload, stage: int) -> List[Fix]:
    moves = []
    for level in RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(workload.recompute) + 1:]:
        if level == "selective" and workload.attention != "eager":
            continue                                     # flash attention never holds the scores
        if level == "op" and workload.finetune.mode != "full":
            continue
        moves.append(_move(f"recompute_{level}", stage, workload={"recompute": level}))
    for kind, change in _recipe_changes(workload):
        moves.append(_move(kind, stage, workload=change))
    if not workload.activation_offload and workload.finetune.mode == "full":
        moves.append(_move("activation_offload", stage, workload={"activation_offload": True}))  # with full
    if workload.micro_batch > 1:
        b, m = workload.micro_batch, workload.layout.micro_batches
        moves.append(_move("micro_batch", stage, workload={"micro_batch": 1}, layout={"micro_batches": b * m}))
    if scenario.offload_optimizer == "none":
        moves.append(_move("offload", stage, scenario={"offload_optimizer": "cpu"}))
        moves.append(_move("offload", stage, scenario={"offload_optimizer": "cpu", "offload_params": "cpu"}))
    for times in (2, 4):
        moves.append(_move("workers", stage, scenario={"workers": scenario.workers * times, "shard_group": None}))
    if workload.seq_len >= 2:
        moves.append(_move("seq_len", stage, workload={"seq_len": workload.seq_len // 2}))
    return list({(m.kind, repr(m.scenario), repr(m.workload), repr(m.layout)): m for m in moves}.values())


def _family(move: Fix) -> str:
    """Moves of one family do not join: two recompute levels, two offloads, two worker counts."""
    if move.kind.startswith("recompute"):
        return "recompute"
    if move.kind in ("recipe", "activation_offload"):
        return next(iter(move.workload))
    return move.kind


def _joined(parts, scenario, workload) -> Optional[tuple]:
    """(scenario, workload) with every part applied, or None when the core refuses the combination."""
    merged = _move("combined", max(p.stage for p in parts))
    for p in parts:
        merged = merged._replace(scenario={**merged.scenario, **p.scenario}, workload={**merged.workload, **p.workload},
                                 layout={**merged.layout, **p.layout})
    try:
        return apply(merged, scenario, workload), merged
    except FieldError:
        return None


def _combine(parts, at: int, peak: int, capacity: int, scenario, workload, before: dict) -> Fix:
    merged = _move("combined", at)
    for p in parts:
        merged = merged._replace(scenario={**merged.scenario, **p.scenario}, workload={**merged.workload, **p.workload},
                                 layout={**merged.layout, **p.layout})
    s, w = apply(merged, scenario, workload)
    after = held_settings(s, w, at)
    return merged._replace(peak_bytes=peak, capacity_bytes=capacity, parts=tuple(parts),
                           held=tuple(n for n in before if before[n] == after[n]),
                           cost=sum(p.cost for p in parts), cost_note="; ".join(p.cost_note for p in parts))


def combined_fixes(scenario, workload, stage: int, single: List[Fix] = ()) -> List[Fix]:
    """The cheapest combinations that make `stage` fit (LISTED of them), or, when none does, the single closest
    one (its fits is False). [] when the stage fits as it is. With `single` (the single changes that fit), only
    combinations cheaper than the cheapest of them and holding none of them."""
    if worst_peak_at(scenario, workload, stage)[1].fits:          # that stage alone (the report's peak there)
        return []
    if single:
        cheapest = min(f.cost for f in single)
        singles = [{_key(f._replace(held=(), peak_bytes=0, capacity_bytes=0))} for f in single]
        return _combined(scenario, workload, stage, lambda f: f.cost < cheapest and
                         not any(k <= {_key(p) for p in f.parts} for k in singles))
    return _combined(scenario, workload, stage)


def _combined(scenario, workload, stage: int, wanted=None) -> List[Fix]:
    """combined_fixes' search; with `wanted`, only the combinations it accepts are re-checked and listed (a
    combination it refuses refuses every superset: a superset costs more and holds the same parts), and none is
    listed as the closest."""
    before = held_settings(scenario, workload, stage)
    ranked = workload       # under the allocator's model the search ranks at 5 % and re-checks what it lists
    if replays(workload):
        ranked = replace(workload, fragmentation_percent=DEFAULT_PERCENT)
    costly = _costly_moves(scenario, workload, stage)
    capacity = workload.capacity_bytes
    bigger = sorted((gpu.usable_bytes, key) for key, gpu in GPU_CATALOG.items() if gpu.usable_bytes > capacity)
    found, closest = [], None
    pairs = [(m,) for m in costly] + [pair for pair in combinations(costly, 2) if _distinct(pair)]
    for groups in ([()] + pairs, [t for t in combinations(costly, 3) if _distinct(t)][:MAX_TRIPLES]):
        closest = _search(groups, scenario, ranked, stage, bigger, before, found, closest)
        if found:                         # three costly changes only where two and the free ones were not enough
            break
    # Re-checked in order, cheapest first, until LISTED undominated ones fit: a bigger GPU may be what the model
    # needs, so the dominated are left out only among those that fit after the re-check; a combination sorts
    # after every subset of it (its cost is theirs and more), so each one's subsets were checked before it.
    listed, kept, missed = [], [], []
    for fix in sorted(found, key=lambda f: f.order):
        if wanted is not None and not wanted(fix):
            continue                      # not asked for: no re-check (a replay per rank class) spent on it
        checked = _exact(fix, scenario, workload, ranked)
        keys = {_key(p) for p in checked.parts}
        if not checked.fits:
            missed.append(checked)
        elif not any(k <= keys for k in kept):
            listed.append(checked)
            kept.append(keys)
            if len(listed) == LISTED:
                break
    if listed or wanted is not None:
        return sorted(listed, key=lambda f: f.order)
    near = missed + ([_exact(closest, scenario, workload, ranked)] if closest is not None else [])
    return [min(near, key=lambda f: f.peak_bytes / f.capacity_bytes)] if near else []   # the closest, said so


def _exact(fix: Fix, scenario, workload, ranked) -> Fix:
    """A combination as the workload's own report gives it: ranked at 5 % under the allocator's model (a replay
    per report), and a bigger GPU by peak_on_gpu, which keeps the first card's replayed reserve (the card's
    library workspaces move the replay by a few MiB); re-checked with the model before it is shown."""
    if ranked is workload and (not any(p.kind == "gpu" for p in fix.parts) or
                               workload.fragmentation_percent is not None):
        return fix
    s, w = apply(fix, scenario, workload)
    return fix._replace(peak_bytes=worst_peak_at(s, w, fix.stage)[1].peak_bytes)       # its stage alone


def _distinct(group) -> bool:
    return len({_family(m) for m in group}) == len(group)


def _key(part: Fix) -> tuple:
    return part.kind, part.stage, repr(part.scenario), repr(part.workload), repr(part.layout)


def _search(groups, scenario, workload, stage: int, bigger, before: dict, found: list, closest):
    """Evaluate each group of costly moves with every higher stage and bigger GPU on top; fitting ones go to
    `found`; returns the closest non-fitting one so far."""
    for group in groups:
        joined = _joined(group, scenario, workload) if group else ((scenario, workload), None)
        if joined is None:
            continue
        (s, w), _ = joined
        try:
            report = layout_report(s, w)
        except FieldError:
            continue
        params_off = any(m.scenario.get("offload_params", "none") != "none" for m in group)
        hosts = host_rows(report)                        # a join whose offload the node's RAM cannot hold: no fix
        for at in range(stage, 4):
            if (params_off and at < 3) or hosts[at]["fits_host"] is False:
                continue                                 # parameters are offloaded at ZeRO-3 only
            stage_part = () if at == stage else (_move("stage_3" if at == 3 else "stage", at),)
            peak = report.peaks[at]
            options = [((), peak.peak_bytes, w.capacity_bytes)]
            options += [((_move("gpu", at, workload={"gpu": key, "gpu_memory": None}),),
                         peak_on_gpu(peak, s, w, key), usable) for usable, key in bigger[:BIGGER_GPUS]]
            for gpu_part, nbytes, cap in options:
                parts = group + stage_part + gpu_part
                if len(parts) < 2:
                    continue                             # one change alone is fixes.py's
                fix = _combine(parts, at, nbytes, cap, scenario, workload, before)
                if nbytes <= cap:
                    found.append(fix)
                elif closest is None or nbytes * closest.capacity_bytes < closest.peak_bytes * cap:
                    closest = fix
    return closest


def advice(scenario, workload, stage: int, layouts: bool = False) -> List[Fix]:
    """What would make `stage` fit: the single changes (fixes.fixes) with any combination cheaper than all of
    them, else combinations alone (each Fix's fits says whether it does; a lone non-fitting one is the closest any
    combination came)."""
    single = fixes(scenario, workload, stage, layouts)
    if not single:
        return combined_fixes(scenario, workload, stage)
    cheaper = combined_fixes(scenario, workload, stage, single)       # joined changes cheaper than any single one
    return sorted(single + cheaper, key=lambda f: f.order)
