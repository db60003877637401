"""Tasks for tests/test_worker.py, importable by name in a worker process (a test module's own functions would
import the whole test module there)."""

import os
import time


def pid() -> int:
    return os.getpid()


def sleep(seconds: float, tag=None):
    time.sleep(seconds)
    return tag


def stamp(seconds: float, tag):
    """(tag, when it started, when it ended), on the machine's monotonic clock (shared by the processes)."""
    start = time.monotonic()
    time.sleep(seconds)
    return tag, start, time.monotonic()


def fail(text: str):
    raise ValueError(text)


def die():
    os._exit(3)


def repeat(text: str, times: int) -> str:
    return text * times


def slow_paste(*args):
    """A paste reader that takes far longer than the deadline a test gives it (whatever the machine's speed)."""
    time.sleep(30)
