"""The core's answers for one state, each computed once per distinct state (a fragment's rerun, a tab switch and a
second session asking the same reuse them) and only when a view asks for it: the full report, the assumption
ranges, what would make the checked stage fit, and the activation formulas. Cached results are shared and never
modified by the views."""

from __future__ import annotations

import threading
from collections import OrderedDict

from zerocalc.answers.combined import advice
from zerocalc.answers.ranges import ranges, ranges_dict
from zerocalc.answers.solve import max_seq_len
from zerocalc.answers.sweep import sweep
from zerocalc.output.report import full_report
from zerocalc.parallel.ranks import unreplayed_report
from zerocalc.step.formulas import formulas_for

from . import worker
from ..state.fields import DENSE_IDS, DISPLAY_FIELDS, FIELDS
from ..state.convert import canonical

LAYOUT_FIX_GPUS = 64          # beyond this world size, layouts join the fixes only once the search is asked for
# fixes_early's guess: a plan whose peak at DEFAULT_PERCENT (no allocator replay) reaches this share of the card may
# well not fit. It read 0.94-1.04 x the replayed peak on the matrix's four plans at twice their dp (2026-12-07).
SPECULATE_AT = 0.85


KEY_FIELDS = tuple(f.name for f in FIELDS if f.name not in DISPLAY_FIELDS)
MULTI_FIELDS = frozenset(f.name for f in FIELDS if f.kind == "multi")


def state_key(state: dict) -> tuple:
    """What the core's answers depend on, hashable: the canonical state's values less the display-only fields
    (a multi-choice field as a tuple), with a custom architecture's dense-layer list."""
    core = canonical(state)
    return tuple(tuple(core[n]) if n in MULTI_FIELDS else core[n] for n in KEY_FIELDS) + \
        (tuple(state.get(DENSE_IDS, ())),)


_LAST = threading.local()              # per script thread: (state dict, its key), computed once per resolved state


def _key(resolved) -> tuple:
    last = getattr(_LAST, "pair", None)
    if last is None or last[0] is not resolved.state:
        last = _LAST.pair = (resolved.state, state_key(resolved.state))
    return last[1]


class _PerState:
    """A function's results for the last 256 distinct arguments, shared by every session (the arguments are the
    state's key and a few flags; the last argument, the resolved state, rides along unhashed). A dict and a lock
    rather than st.cache_resource, whose argument hashing took longer than a cached answer needs."""

    def __init__(self, fn, size: int = 256):
        self.fn, self.size, self.lock, self.results = fn, size, threading.Lock(), OrderedDict()

    def __call__(self, *args):
        key = args[:-1]                             # the last argument rides along: the resolved state
        with self.lock:
            if key in self.results:
                self.results.move_to_end(key)
                return self.results[key]
        value = self.fn(*args)                  # outside the lock: a slow answer holds up no other state
        self.store(key, value)
        return value

    def cached(self, key: tuple):
        """(True, the result) for a key already answered, else (False, None)."""
        with self.lock:
            if key in self.results:
                self.results.move_to_end(key)
                return True, self.results[key]
        return False, None

    def store(self, key: tuple, value) -> None:
        with self.lock:
            self.results[key] = value
            if len(self.results) > self.size:
                self.results.popitem(last=False)


def _searches_many(r, layouts: bool) -> bool:
    """A layout search beyond LAYOUT_FIX_GPUS GPUs can take a second: it runs in the worker process."""
    return layouts and r.workload is not None and r.workload.layout.world(r.scenario.workers) > LAYOUT_FIX_GPUS


@_PerState
def _report(key: str, layouts: bool, answers: bool, _resolved) -> dict:
    r = _resolved
    return worker.run(_searches_many(r, layouts), full_report, r.scenario, r.workload, r.state["buffer_factor"],
                      layouts, answers)


@_PerState
def _ranges(key: str, _resolved):
    r = _resolved
    return None if r.workload is None else ranges_dict(ranges(r.scenario, r.workload))


@_PerState
def _formulas(key: str, _resolved) -> dict:
    r = _resolved
    return {} if r.workload is None else formulas_for(r.scenario, r.workload)


@_PerState
def _fixes(key: str, layouts: bool, resolved_and_report) -> list:
    r, report = resolved_and_report
    if r.workload is None:
        return []
    stage = r.state["stage"]
    if report["peak"][stage]["fits"]:
        return []
    world = report["layout"]["world_size"]
    search = layouts or world <= LAYOUT_FIX_GPUS
    return worker.run(_searches_many(r, search), advice, r.scenario, r.workload, stage, search)


@_PerState
def _sweep(key: str, field: str, _resolved) -> dict:
    r = _resolved
    return worker.run(_searches_many(r, True), sweep, r.scenario, r.workload, field, r.state["stage"])


@_PerState
def _longest(key: str, _resolved) -> dict:
    r = _resolved
    return {str(s): n for s, n in max_seq_len(r.scenario, r.workload).items()}


def report_of(resolved, layouts: bool = False, answers: bool = True) -> dict:
    """The full report; `answers=False` without what only the detail tabs read (zerocalc.output.report.ANSWER_KEYS)."""
    return _report(_key(resolved), layouts, answers or layouts, resolved)


def ranges_of(resolved):
    return _ranges(_key(resolved), resolved)


def formulas_of(resolved) -> dict:
    """Each activation term's formula with its values (zerocalc.step.formulas), for the Peak tab."""
    return _formulas(_key(resolved), resolved)


def fixes_of(resolved, report: dict, layouts: bool = False) -> list:
    """What would make the checked stage fit; `report` is this state's report (with or without the answers)."""
    return _fixes(_key(resolved), layouts, (resolved, report))


def fixes_early(resolved, layouts: bool = False) -> None:
    """Start the fixes' search in a worker before the report is built, where the plan's peak at DEFAULT_PERCENT
    (unreplayed_report, which replays nothing: a few ms) reaches SPECULATE_AT of the card: the search then runs on the
    second core while this process builds the report, not after it. fixes_later finds it running. A guess that
    was wrong (the replayed report fits) leaves a search nobody reads; below the share nothing starts. Not where the
    report itself goes to the worker (a large layout search): the session's tasks run one at a time."""
    r = resolved
    if r.workload is None or _searches_many(r, layouts):
        return
    key = (_key(r), layouts)
    if _fixes.cached(key)[0]:
        return
    stage = r.state["stage"]
    try:
        guess = unreplayed_report(r.scenario, r.workload).peaks[stage].peak_bytes
    except Exception:  # noqa: BLE001 - a plan the core refuses: the report says why, and nothing is searched
        return
    if guess >= SPECULATE_AT * r.workload.capacity_bytes:
        _search_task(key, r, stage, layouts or r.workload.layout.world(r.scenario.workers) <= LAYOUT_FIX_GPUS)


def _search_task(key: tuple, r, stage: int, search: bool):
    """The fixes' search for `key` in a worker: the one running, else one started now."""
    with _fixes.lock:              # a run stopped by the next one (a click meanwhile) left its search running
        task = _SEARCHING.get(key)
        if task is None:
            task = _SEARCHING[key] = worker.submit("answer", advice, r.scenario, r.workload, stage, search)
            while len(_SEARCHING) > 64:
                _SEARCHING.popitem(last=False)
    return task


def fixes_later(resolved, report: dict, layouts: bool = False):
    """fixes_of without waiting for it: a function that returns the fixes, at once from the cache, else from a
    worker process (started by fixes_early, or now). The search takes 0.2-0.8 s on a plan that does not fit
    (Gemma-3-27B, DeepSeek-V3): the page draws the verdict, the view and the sidebar meanwhile, and the fixes into
    the place kept for them."""
    key = (_key(resolved), layouts)
    hit, value = _fixes.cached(key)
    r, stage = resolved, resolved.state["stage"]
    if hit or r.workload is None or report["peak"][stage]["fits"]:
        return lambda: value if hit else []
    task = _search_task(key, r, stage, layouts or report["layout"]["world_size"] <= LAYOUT_FIX_GPUS)

    def wait() -> list:
        try:
            found = worker.result(task)
        finally:                   # answered or failed: the next run asks again from the cache or anew
            with _fixes.lock:
                if _SEARCHING.get(key) is task:
                    del _SEARCHING[key]
        _fixes.store(key, found)
        return found
    return wait


_SEARCHING = OrderedDict()          # state key -> its fixes' search in a worker, until a run reads its answer


def sweep_of(resolved, field: str) -> dict:
    """Every stage's peak along one input (zerocalc.answers.sweep) for this state; None without a workload."""
    return None if resolved.workload is None else _sweep(_key(resolved), field, resolved)


def longest_of(resolved) -> dict:
    """The longest sequence that fits per stage (zerocalc.answers.solve.max_seq_len), for the Peak view only: its
    search costs more than the report's other answers."""
    return None if resolved.workload is None else _longest(_key(resolved), resolved)
