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
        self.running = OrderedDict()        # key -> its answer being computed in a worker, until a run reads it

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

    def start(self, key: tuple, fn, *args):
        """fn(*args), the answer for `key`, in a worker process: the task already running for it (a run stopped by
        the next one, a click meanwhile, leaves its task running), else one submitted now."""
        with self.lock:
            task = self.running.get(key)
            if task is None:
                task = self.running[key] = worker.submit("answer", fn, *args)
                while len(self.running) > 64:
                    self.running.popitem(last=False)
        return task

    def started(self, key: tuple):
        """The task running for `key`, or None."""
        with self.lock:
            return self.running.get(key)

    def read(self, key: tuple, task):
        """A started task's answer (its error raised), stored as `key`'s; answered or failed, the task is forgotten
        (the next run asks the cache, or anew)."""
        try:
            value = worker.result(task)
        finally:
            with self.lock:
                if self.running.get(key) is task:
                    del self.running[key]
        self.store(key, value)
        return value


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
    return max_seq_len(_resolved.scenario, _resolved.workload)


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


def fixes_early(resolved, layouts: bool = False) -> bool:
    """Start the fixes' search in a worker before the report is built, where the plan's peak at DEFAULT_PERCENT
    (unreplayed_report, which replays nothing: a few ms) reaches SPECULATE_AT of the card: the search then runs on the
    second core while this process builds the report, not after it. fixes_later finds it running. A guess that
    was wrong (the replayed report fits) leaves a search nobody reads; below the share nothing starts. Not where the
    report itself goes to the worker (a large layout search): the session's tasks run one at a time. Whether a
    search for this state is running now."""
    r = resolved
    if r.workload is None or _searches_many(r, layouts):
        return False
    key = (_key(r), layouts)
    if _fixes.cached(key)[0]:
        return False
    stage = r.state["stage"]
    try:
        guess = unreplayed_report(r.scenario, r.workload).peaks[stage].peak_bytes
    except Exception:  # noqa: BLE001 - a plan the core refuses: the report says why, and nothing is searched
        return False
    if guess >= SPECULATE_AT * r.workload.capacity_bytes:
        search = layouts or r.workload.layout.world(r.scenario.workers) <= LAYOUT_FIX_GPUS
        _fixes.start(key, advice, r.scenario, r.workload, stage, search)
    return _fixes.started(key) is not None


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
    search = layouts or report["layout"]["world_size"] <= LAYOUT_FIX_GPUS
    task = _fixes.start(key, advice, r.scenario, r.workload, stage, search)
    return lambda: _fixes.read(key, task)


def sweep_of(resolved, field: str) -> dict:
    """Every stage's peak along one input (zerocalc.answers.sweep) for this state; None without a workload."""
    return None if resolved.workload is None else _sweep(_key(resolved), field, resolved)


def longest_early(resolved) -> None:
    """Start the longest-sequence search (the Peak view's costliest answer: 0.2-0.8 s, a replay per probe) in a
    worker before the report is built, so that it runs beside the report and its answers; the page asks this only
    where no fixes' search holds this session's worker (its tasks run one at a time)."""
    if resolved.workload is not None and not _longest.cached((_key(resolved),))[0]:
        _longest.start((_key(resolved),), max_seq_len, resolved.scenario, resolved.workload)


def longest_of(resolved) -> dict:
    """The longest sequence that fits per stage (zerocalc.answers.solve.max_seq_len), for the Peak view only: its
    search costs more than the report's other answers. Read from longest_early's worker where it started one (a
    worker that died meanwhile: computed here), else computed here."""
    if resolved.workload is None:
        return None
    key = (_key(resolved),)
    task = _longest.started(key)
    found = None
    if task is not None:
        try:
            found = _longest.read(key, task)
        except worker.WorkerError:
            pass
    if found is None:
        found = _longest(*key, resolved)
    return {str(s): n for s, n in found.items()}
