"""What a visitor's input makes the server compute runs in worker processes, each task with a deadline.

Streamlit runs every session's script in a thread of one Python process: a paste parsed there, or a layout search of
a large model on 2^20 GPUs, holds the interpreter's lock and slows every other visitor's page. So every paste, every
upload and every costly answer goes to a worker process instead, through one scheduler:

- fair: each session (Streamlit's session id) has its own FIFO queue and runs one task at a time; a free worker
  takes the next task from the sessions in turn (round-robin), and the pool grows (up to MOST processes) so that a
  session whose turn comes finds a worker free: one visitor's queue never delays another's task;
- bounded: a task running past its kind's deadline (DEADLINES) is stopped by terminating its process, which is
  replaced, and the caller gets WorkerTimeout; a task that waited QUEUE_S for a free worker is dropped the same way;
- polite: the workers run at a lower priority (NICE) than the server, so the server's threads (every visitor's
  reruns) get the CPU first.

Workers are processes this module starts itself, each a fresh interpreter (not a fork: a fork of a threaded server
could inherit a lock another thread held; not multiprocessing's spawn: it re-runs __main__, which Streamlit makes
the app's script) with one pipe. POSIX only (the hosted server's platform); elsewhere the calls run in the server's
process, without deadlines. warm() starts them in the background on a page's first run, so the first paste does not
wait for a process to start. Every input of these calls is already bounded (tests/test_budgets.py: each worst case
under 2 s of one core); the deadlines are the backstop for a loaded host, or an input the bounds missed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import traceback
from collections import OrderedDict, deque

LOG = logging.getLogger("zerocalc.worker")

# Seconds a task may run: a few times the worst legal input's 2 s, and under the 30 s of Streamlit's websocket ping
# timeout and of the tests' AppTest timeouts (a visitor has given up on a page "Running..." longer than that).
DEADLINES = {"paste": 10.0, "import": 10.0, "answer": 20.0}
QUEUE_S = 20.0           # how long a task may wait for a free worker before it is dropped
# Worker processes: LEAST always (two: one stuck task leaves one free), up to MOST while several sessions' tasks
# run at once (each session runs one task at a time: MOST - 1 sessions busy still leave one worker for the next).
# A worker takes about 25 MB (RSS, the core imported) plus what its task holds; set ZEROCALC_WORKERS to change MOST.
LEAST = 2
MOST = max(LEAST, int(os.environ.get("ZEROCALC_WORKERS", "4") or 4))
IDLE_S = 120.0           # a worker beyond LEAST idle this long stops
# Address space a worker may map (RLIMIT_AS): a worker maps 25 MB idle and 99 MB at most over every worst input of
# tests/budget_cases.py (VmPeak, measured 2026-12-06); ZEROCALC_WORKER_MEMORY_MIB changes it.
MEMORY_BYTES = int(os.environ.get("ZEROCALC_WORKER_MEMORY_MIB", "512") or 512) * 2**20
NICE = 10                # the workers' niceness: the server's threads (every visitor's reruns) come first
POSIX = os.name == "posix"          # a pipe's descriptor passed to a fresh interpreter
START_S = 60.0           # a worker that is not ready this long after its start is replaced
# Modules a worker imports before it says it is ready (the first paste then pays no import on its deadline).
PRELOAD = ("zerocalc.output.report", "zerocalc.answers.combined", "zerocalc.answers.sweep",
           "zerocalc.answers.calibrate.compare", "zerocalc.answers.calibrate.parse", "zerocalc.frameworks",
           "zerocalc.cli.frameworks", "zerocalc.rl.configs", "zerocalc.model.hf_config", "ui.server.tasks")


class WorkerError(RuntimeError):
    """A worker process died during a task, or its answer could not be read back."""


class WorkerTimeout(WorkerError):
    """A task ran past its deadline (its process was terminated) or waited in the queue as long."""

    def __init__(self, kind: str, seconds: float, queued: bool = False):
        self.kind, self.seconds, self.queued = kind, seconds, queued
        super().__init__(f"waited {seconds:g} s for a free worker" if queued else
                         f"took longer than {seconds:g} s and was stopped")

    def __reduce__(self):
        return type(self), (self.kind, self.seconds, self.queued)


def timeout_text(exc: WorkerTimeout) -> str:
    """What a visitor reads on their page."""
    if exc.queued:
        return (f"the server was busy with other visitors' work for {exc.seconds:g} s, so this was not started; "
                "try again in a moment")
    return (f"this took longer than {exc.seconds:g} s and was stopped; the server may be busy, try again in a "
            "moment or with a smaller input")


def failure_text(exc: BaseException, what: str, field: str = "", verb: str = "read") -> str:
    """The page's sentence for an exception nobody expected (its trace goes to the server's log, never the page);
    a WorkerTimeout's own sentence. `what` names what was being read ("the pasted text"), `field` the input."""
    where = f" ({field})" if field else ""
    if isinstance(exc, WorkerTimeout):
        return f"Could not {verb} {what}{where}: {timeout_text(exc)}."
    if isinstance(exc, MemoryError) or isinstance(exc.__cause__, MemoryError) or "MemoryError" in str(exc):
        LOG.warning("%s%s asked for more than a worker's %s MiB", what, where, MEMORY_BYTES >> 20)
        return (f"Could not {verb} {what}{where}: it asked for more memory than one visitor's task may take "
                f"({MEMORY_BYTES >> 20:,} MiB); no real input needs that much.")
    LOG.error("could not %s %s%s", verb, what, where, exc_info=exc)
    return f"Could not {verb} {what}{where}: internal error, logged on the server."


# --- the worker process ----------------------------------------------------------------------------------------

def _spawn():
    """(a new worker process, our end of its pipe). Started by command line, not by multiprocessing's spawn: that
    would re-run the __main__ module in the child, and Streamlit (and AppTest) make the app's script __main__."""
    ours, theirs = multiprocessing.Pipe()
    code = f"import sys; sys.path[:] = {sys.path!r}; from ui.server.worker import serve; serve({theirs.fileno()})"
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
    theirs.close()
    return proc, ours


def serve(fd: int) -> None:
    """A worker's loop on its pipe: (fn, args) in, ("ok", value) or ("err", exception, its trace) out."""
    from multiprocessing.connection import Connection
    conn = Connection(fd)
    if hasattr(os, "nice"):
        try:
            os.nice(NICE)
        except OSError:
            pass
    try:                     # a file that asks for gigabytes (text times 10^9) gets MemoryError, not the host's RAM
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a module that fails to import fails its task, with its own trace
            pass
    try:
        conn.send(("ready", os.getpid()))
    except OSError:                                 # the server went away meanwhile
        return
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            out = ("ok", fn(*args))
        except Exception as exc:  # noqa: BLE001 - every error goes back to the caller, who decides
            out = ("err", exc, traceback.format_exc())
        try:
            conn.send(out)
        except OSError:                             # the server went away (or replaced this worker): stop
            return
        except Exception as exc:  # noqa: BLE001 - an answer or error the pipe cannot serialize (nothing was written)
            conn.send(("err", WorkerError(f"the answer could not be sent back ({type(exc).__name__}: {exc})"),
                       traceback.format_exc()))


# --- the scheduler ---------------------------------------------------------------------------------------------

class _Task:
    __slots__ = ("fn", "args", "kind", "seconds", "session", "started", "done", "value", "error", "release", "pool")

    def __init__(self, kind: str, fn, args: tuple, session: str):
        self.fn, self.args, self.kind, self.session = fn, args, kind, session
        self.seconds = DEADLINES[kind]
        self.started, self.done, self.value, self.error, self.release = None, threading.Event(), None, None, None
        self.pool = None

    def finish(self, value=None, error: BaseException = None, release: bool = True) -> None:
        self.value, self.error = value, error
        if release:
            self.release(self)                  # its session may start its next task
        self.done.set()


class _Pool:
    """The sessions' queues and the workers serving them. One FIFO per session and at most one task of a session
    running at a time (its share); a free worker takes the first task of the sessions in turn (the session just
    served goes to the back of the line). Between LEAST and MOST workers: when none is free or starting, another
    starts, so a session whose turn comes finds one; a worker idle for IDLE_S beyond the LEAST stops."""

    def __init__(self):
        self.cond, self.sessions, self.running = threading.Condition(), OrderedDict(), set()
        self.workers, self.free, self.starting, self.count = [], 0, 0, 0
        with self.cond:
            for _ in range(LEAST):
                self._add()

    def _add(self) -> None:
        self.starting += 1
        self.count += 1
        self.workers.append(_Worker(self, self.count))

    def _grow(self) -> None:
        if self.free + self.starting == 0 and len(self.workers) < MOST:
            self._add()

    def ready(self) -> None:
        with self.cond:
            self.starting -= 1

    def put(self, task: _Task) -> None:
        with self.cond:
            self.sessions.setdefault(task.session, deque()).append(task)
            self._grow()
            self.cond.notify_all()

    def _next(self):
        return next((s for s in self.sessions if s not in self.running), None)

    def take(self, worker):
        """The next task for `worker`, or None when it should stop (idle beyond the LEAST)."""
        with self.cond:
            self.free += 1
            try:
                while (session := self._next()) is None:
                    if not self.cond.wait(IDLE_S) and len(self.workers) > LEAST:
                        self.workers.remove(worker)
                        return None
                queue = self.sessions.pop(session)
                task = queue.popleft()
                if queue:
                    self.sessions[session] = queue            # back of the line
                self.running.add(session)
                task.started, task.release = time.monotonic(), self._release
            finally:
                self.free -= 1
            self._grow()
            return task

    def _release(self, task: _Task) -> None:
        with self.cond:
            self.running.discard(task.session)
            self.cond.notify_all()

    def cancel(self, task: _Task) -> bool:
        """Drop a task that has not started; False when a worker already took it."""
        with self.cond:
            if task.started is not None:
                return False
            queue = self.sessions[task.session]
            queue.remove(task)
            if not queue:
                del self.sessions[task.session]
            return True


class _Worker:
    """One worker process and the thread that feeds it tasks, replacing the process when it dies or overruns."""

    def __init__(self, pool: _Pool, index: int):
        self.pool, self.index, self.proc, self.conn = pool, index, None, None
        threading.Thread(target=self._loop, name=f"zerocalc-worker-{index}", daemon=True).start()

    @property
    def pid(self):
        return None if self.proc is None else self.proc.pid

    def _start(self) -> None:
        while True:
            proc, conn = _spawn()
            try:
                if conn.poll(START_S) and conn.recv()[0] == "ready":
                    self.proc, self.conn = proc, conn
                    return
            except (EOFError, OSError):
                pass
            LOG.error("worker process %s did not start; starting another", proc.pid)
            self._stop(proc, conn)
            time.sleep(1)

    @staticmethod
    def _stop(proc, conn) -> None:
        proc.terminate()
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        conn.close()

    def _fail(self, task: _Task, error: BaseException) -> None:
        """Stop this task's process, give the caller its error, then start a fresh process. The caller does not
        wait for the start; its session's next task does (a visitor who keeps a worker busy until it is killed
        pays for the restart, not the worker kept free for everyone else)."""
        self._stop(self.proc, self.conn)
        self.proc = self.conn = None
        with self.pool.cond:
            self.pool.starting += 1
        task.finish(error=error, release=False)
        self._start()
        self.pool.ready()
        task.release(task)             # its session's next task waits for the restart it caused, not another's

    def _loop(self) -> None:
        self._start()
        self.pool.ready()
        while True:
            task = self.pool.take(self)
            if task is None:                                 # idle beyond the pool's least: stop
                self._stop(self.proc, self.conn)
                self.proc = self.conn = None
                return
            try:
                self._run(task)
            except BaseException as exc:  # noqa: BLE001 - this thread must outlive any one task
                LOG.exception("worker thread %s", self.index)
                task.finish(error=WorkerError(f"the worker failed ({type(exc).__name__})"))

    def _run(self, task: _Task) -> None:
        if self.proc.poll() is not None:                     # died while idle (the host's OOM killer, say)
            LOG.warning("worker process %s had stopped (exit code %s); replaced", self.proc.pid, self.proc.returncode)
            self._stop(self.proc, self.conn)
            self._start()
        try:
            self.conn.send((task.fn, task.args))
        except (OSError, EOFError) as exc:
            return self._fail(task, WorkerError(f"the worker process could not take the task ({exc})"))
        except Exception as exc:  # noqa: BLE001 - the task's arguments cannot be serialized: the caller's error
            return task.finish(error=exc)
        if not self.conn.poll(task.seconds):
            LOG.warning("%s task %s ran past its %g s deadline: worker process %s terminated",
                        task.kind, getattr(task.fn, "__name__", task.fn), task.seconds, self.proc.pid)
            return self._fail(task, WorkerTimeout(task.kind, task.seconds))
        try:
            answer = self.conn.recv()
        except (EOFError, OSError):
            try:
                code = self.proc.wait(1)
            except subprocess.TimeoutExpired:
                code = None
            return self._fail(task, WorkerError(f"the worker process stopped during the task (exit code {code})"))
        except Exception as exc:  # noqa: BLE001 - an answer that cannot be read back here
            return self._fail(task, WorkerError(f"the answer could not be read ({type(exc).__name__}: {exc})"))
        if answer[0] == "ok":
            return task.finish(answer[1])
        error = answer[1]
        error.add_note("In the worker process:\n" + answer[2])
        task.finish(error=error)


_POOL = None
_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = _Pool()
        return _POOL


def warm() -> None:
    """Start the worker processes in the background if they are not running (returns at once)."""
    if POSIX:
        _pool()


def pids() -> list:
    """The worker processes' ids (None for one being started)."""
    pool = _pool()
    with pool.cond:
        return [w.pid for w in pool.workers]


def session_key() -> str:
    """This Streamlit session's id; outside Streamlit (benchmarks, the CLI), the calling thread's."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx
        ctx = get_script_run_ctx(suppress_warning=True)
        if ctx is not None:
            return ctx.session_id
    except Exception:  # noqa: BLE001 - no Streamlit runtime here
        pass
    return f"thread-{threading.get_ident()}"


def call(kind: str, fn, *args):
    """fn(*args) in a worker process, with the deadline of its kind (a DEADLINES key). fn must be importable by
    name and its arguments and result picklable (the core's inputs and plain-data answers are). Its exceptions come
    back as they were raised (the worker's trace in their notes); WorkerTimeout past the deadline, WorkerError when
    the process died meanwhile (it is replaced)."""
    return result(submit(kind, fn, *args))


def submit(kind: str, fn, *args) -> _Task:
    """Start fn(*args) as call() does and return at once: result(task) waits for its answer, so the page draws
    what it has meanwhile. Outside POSIX, fn runs here and now."""
    task = _Task(kind, fn, args, session_key())
    if not POSIX:
        try:
            task.finish(fn(*args), release=False)
        except Exception as exc:  # noqa: BLE001 - raised by result(), as a worker's would be
            task.finish(error=exc, release=False)
        return task
    task.pool = _pool()
    task.pool.put(task)
    return task


def result(task: _Task):
    """A submitted task's answer (its exception raised here): WorkerTimeout when it waited QUEUE_S for a worker."""
    if not task.done.wait(QUEUE_S) and task.pool.cancel(task):
        raise WorkerTimeout(task.kind, QUEUE_S, queued=True)
    if not task.done.wait(task.seconds + START_S + 10):     # started: its worker ends it by its deadline
        raise WorkerError("the worker did not answer")
    if task.error is not None:
        raise task.error
    return task.value


def run(heavy: bool, fn, *args, kind: str = "answer"):
    """fn(*args) in a worker process when `heavy` (the caller's cheap test of what the call may cost), else here:
    an answer the page asks on every rerun, bounded by the state's own limits, is not worth the round trip."""
    return call(kind, fn, *args) if heavy else fn(*args)


def isolated(fn, *args):
    """fn(*args) in a worker process with the costly answers' deadline."""
    return call("answer", fn, *args)
