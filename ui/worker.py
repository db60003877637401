"""The costly answers run in a worker process, not in the server's.

Streamlit runs every session's script in a thread of one Python process, so a visitor who keeps the server
computing (a layout search of a large model on 2^20 GPUs, a 1 MB upload) would share the interpreter's lock with
everyone else's reruns. Each such call goes to one worker process instead: the session that asked waits for it,
the others go on at full speed (their reruns never queue behind it), and the costly calls queue behind each other.
Every input of these calls is already bounded (tests/test_budgets.py); TIMEOUT_S is the backstop.
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

TIMEOUT_S = 60
_POOL = None
_LOCK = threading.Lock()


def _pool() -> ProcessPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            # spawn: a fork of a threaded server could inherit a lock held by another thread
            _POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _POOL


def _reset(broken) -> None:
    global _POOL
    with _LOCK:
        if _POOL is broken:
            _POOL = None


def run(heavy: bool, fn, *args):
    """fn(*args) in the worker process when `heavy` (the caller's cheap test of what the call may cost), else
    here: a small call is not worth the round trip, nor the worker's start on a page's first run."""
    return isolated(fn, *args) if heavy else fn(*args)


def isolated(fn, *args):
    """fn(*args) in the worker process (fn importable by name, its arguments and result picklable: the core's
    inputs and plain-data answers are). Its exceptions come back as they were raised; a worker that died is
    replaced and the call tried once more."""
    for attempt in (0, 1):
        pool = _pool()
        try:
            return pool.submit(fn, *args).result(timeout=TIMEOUT_S)
        except BrokenProcessPool:
            _reset(pool)
            if attempt:
                raise
