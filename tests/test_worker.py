"""The app's worker process (ui/server/worker.py): a costly answer computed there equals the one computed here, a
refusal comes back as the FieldError it was (with its field and allowed text), and the page uses it for large
searches."""

import logging
import os
import pickle
import threading
import time

import pytest

from tests import worker_tasks
from tests.app_helpers import alerts, run_app
from ui.server import worker
from ui.state.convert import from_query, resolve
from ui.server.worker import isolated, run
from zerocalc.frameworks import FrameworkConfigError, import_config
from zerocalc.output.report import full_report
from zerocalc.scenario import FieldError


def test_an_answer_from_the_worker_equals_the_one_computed_here():
    r = resolve(from_query({"model": "qwen3-0.6b", "workers": "256"})[0])
    args = (r.scenario, r.workload, 1.5, True, True)
    assert isolated(full_report, *args) == full_report(*args) == run(True, full_report, *args)


def test_a_refusal_comes_back_as_it_was_raised():
    with pytest.raises(FrameworkConfigError) as caught:
        isolated(import_config, "deepspeed", '{"zero_optimization": {"stage": 7}}', None)
    assert caught.value.field == "zero_optimization.stage" and caught.value.allowed == "0, 1, 2 or 3"
    for error in (caught.value, FieldError("f", "x" * 500, "a")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and again.__dict__ == error.__dict__


def test_the_page_searches_a_large_world_through_the_worker(monkeypatch):
    calls = []
    import ui.server.worker
    real = ui.server.worker.call
    monkeypatch.setattr(ui.server.worker, "call", lambda kind, fn, *a: calls.append(fn.__name__) or real(kind, fn, *a))
    at = run_app({"model": "qwen3-0.6b", "workers": "512"}, tab="Layouts and ranks")
    at.session_state["show_layouts"] = True
    at.run()
    assert not at.exception and "full_report" in calls
    assert not alerts(at, "error")
    r = resolve(from_query({"model": "qwen3-0.6b", "workers": "512"})[0])
    want = full_report(r.scenario, r.workload, 1.5, layouts=True)["solve"]["layouts_count"]
    assert f"{want:,} fit" in " ".join(c.value for c in at.caption)


# --- the scheduler: deadlines, replacement, fairness (issue 38) ---------------------------------------------------

def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_task_past_its_deadline_is_killed_and_the_worker_replaced(monkeypatch):
    worker.call("paste", worker_tasks.pid)                     # the pool is up
    monkeypatch.setitem(worker.DEADLINES, "paste", 0.5)
    started = time.monotonic()
    with pytest.raises(worker.WorkerTimeout) as caught:
        worker.call("paste", worker_tasks.sleep, 30)
    assert time.monotonic() - started < 10 and not caught.value.queued
    assert "longer than 0.5 s and was stopped" in worker.failure_text(caught.value, "x")
    monkeypatch.setitem(worker.DEADLINES, "paste", 10.0)
    assert worker.call("paste", worker_tasks.sleep, 0, "next") == "next"          # a fresh process answers


def test_the_killed_process_is_gone(monkeypatch):
    monkeypatch.setitem(worker.DEADLINES, "answer", 0.5)
    before = set(worker.pids())
    with pytest.raises(worker.WorkerTimeout):
        worker.call("answer", worker_tasks.sleep, 30)
    killed = before - set(worker.pids()) - {None}
    assert len(killed) == 1 and all(_gone(pid) for pid in killed)


def test_a_worker_that_dies_during_a_task_is_replaced():
    with pytest.raises(worker.WorkerError, match="stopped during the task"):
        worker.call("answer", worker_tasks.die)
    assert worker.call("answer", worker_tasks.sleep, 0, 7) == 7


def test_an_exception_comes_back_as_raised_with_the_workers_trace():
    with pytest.raises(ValueError, match="bad input") as caught:
        worker.call("paste", worker_tasks.fail, "bad input")
    assert any("In the worker process" in n and "worker_tasks.py" in n for n in caught.value.__notes__)


def _by_thread_name(monkeypatch):
    """Sessions named by the calling thread's name up to its first "-" (several threads, one session)."""
    monkeypatch.setattr(worker, "session_key", lambda: threading.current_thread().name.split("-")[0])


def test_a_session_with_a_queue_does_not_delay_another_sessions_task(monkeypatch):
    """Session A queues 3 slow tasks, then session B asks one: B starts before A's queue drains (a single FIFO
    would run it after A's last), and A's tasks run one at a time (its share), not on every worker at once."""
    worker.call("answer", worker_tasks.pid)
    while None in worker.pids():                 # a worker replaced by an earlier test is ready
        time.sleep(0.05)
    _by_thread_name(monkeypatch)
    results = {}

    def ask(tag):
        results[tag] = worker.call("answer", worker_tasks.stamp, 0.3, tag)

    threads = [threading.Thread(target=ask, args=(f"A{i}",), name=f"A-{i}") for i in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.02)                        # A's tasks queue in order
    time.sleep(0.1)
    b = threading.Thread(target=ask, args=("B",), name="B-0")
    b.start()
    for t in threads + [b]:
        t.join(30)
    spans = {tag: (start, end) for tag, start, end in results.values()}
    assert len(spans) == 4
    assert spans["B"][0] < spans["A2"][0]
    a = sorted(spans[f"A{i}"] for i in range(3))
    assert all(earlier[1] <= later[0] for earlier, later in zip(a, a[1:]))


def test_a_task_that_waited_too_long_for_a_worker_is_dropped(monkeypatch):
    worker.call("answer", worker_tasks.pid)
    while None in worker.pids():
        time.sleep(0.05)
    monkeypatch.setattr(worker, "QUEUE_S", 0.3)
    monkeypatch.setattr(worker, "MOST", 0)                   # no more workers than now
    _by_thread_name(monkeypatch)
    blockers = [threading.Thread(target=worker.call, args=("answer", worker_tasks.sleep, 1.5), name=f"X{i}-0")
                for i in range(len(worker.pids()))]                # every worker busy, each with another session
    for t in blockers:
        t.start()
    deadline = time.monotonic() + 10
    while len(worker._pool().running) < len(blockers) and time.monotonic() < deadline:
        time.sleep(0.02)                                     # every blocker taken (not a fixed sleep: CI is slow)
    with pytest.raises(worker.WorkerTimeout) as caught:
        worker.call("answer", worker_tasks.sleep, 0)
    assert caught.value.queued and "busy with other visitors' work" in worker.timeout_text(caught.value)
    for t in blockers:
        t.join(30)


def test_a_paste_past_its_deadline_is_a_message_on_the_page(monkeypatch):
    import zerocalc.answers.calibrate.compare as compare
    monkeypatch.setitem(worker.DEADLINES, "paste", 0.5)       # a reader that sleeps 30 s: past it on any machine
    monkeypatch.setattr(compare, "calibration_dict", worker_tasks.slow_paste)   # (0 s raced a fast worker's answer)
    at = run_app({"model": "llama-3-8b"}, tab="Calibrate")
    at.text_area(key="calib_text").set_value("max_memory_allocated: 61290913792").run()
    assert not at.exception
    assert any("Could not read the pasted text (Measured output): this took longer than 0.5 s and was stopped" in a
               for a in alerts(at, "error"))


def test_a_paste_is_parsed_once_in_a_worker(monkeypatch):
    calls = []
    real = worker.call
    monkeypatch.setattr(worker, "call", lambda kind, fn, *a: calls.append((kind, fn.__name__)) or real(kind, fn, *a))
    at = run_app({"model": "llama-3-8b"}, tab="Calibrate")
    at.text_area(key="calib_text").set_value("max_memory_allocated: 61290913792").run()
    assert not at.exception and alerts(at, "success")
    at.run()                                        # another rerun: the reading is kept
    assert calls == [("paste", "calibration_dict")]


def test_an_unexpected_error_in_an_upload_is_a_message_and_a_logged_trace(monkeypatch, caplog):
    import ui.imports.configs
    from tests.test_app_imports import uploader
    monkeypatch.setattr(ui.imports.configs, "read_config", worker_tasks.fail)
    at = run_app(sections=["sec_load"])
    uploader(at, "Hugging Face config.json").upload("config.json", b"boom", "application/json")
    with caplog.at_level(logging.ERROR, logger="zerocalc.worker"):
        at.run()
    assert not at.exception
    text = " ".join(alerts(at, "error"))
    assert "Could not read config.json (Hugging Face config.json): internal error, logged on the server." in text
    assert "ValueError" not in text and "Traceback" not in text
    assert any(r.exc_info and r.exc_info[0] is ValueError for r in caplog.records)


def test_a_task_asking_for_gigabytes_gets_memory_error_not_the_hosts_ram():
    """The worker's address space is capped (RLIMIT_AS): text times 10^9 fails there, and the page says so."""
    with pytest.raises((MemoryError, worker.WorkerError)) as caught:
        worker.call("import", worker_tasks.repeat, "x", 10**9)
    assert "more memory than one visitor's task may take" in worker.failure_text(caught.value, "run.sh")
    assert worker.call("import", worker_tasks.repeat, "x", 3) == "xxx"


def test_a_link_the_reader_chokes_on_opens_the_default_page_with_a_message(monkeypatch):
    import ui.share
    real = ui.share.split_query
    monkeypatch.setattr(ui.share, "split_query", lambda q: real(q) if not q else worker_tasks.fail("boom"))
    at = run_app({"model": "llama-3-8b"})
    assert not at.exception
    assert "Could not read the link (its parameters): internal error, logged on the server. Opened the default " \
           "page." in " ".join(alerts(at, "warning") + [w.value for w in at.warning])


def test_compare_costs_each_pair_once_and_at_most_its_budget(monkeypatch):
    """Compare's differences (ui/views/compare.py): computed once per pair of plans, in a worker; beyond COSTED_FIELDS
    the fields are listed, not costed."""
    from ui.views import compare
    from ui.server import tasks
    a = resolve(from_query({"model": "llama-3-8b", "workers": "24", "micro_batch": "3", "seq_len": "3000",
                            "stage": "1"})[0]).state
    b = resolve(from_query({"model": "llama-3-8b"})[0]).state
    calls = []
    real = worker.call
    monkeypatch.setattr(worker, "call", lambda kind, fn, *args: calls.append(fn.__name__) or real(kind, fn, *args))
    monkeypatch.setattr(compare, "COSTED_FIELDS", 2)
    rows = compare.differences_of(a, b)
    assert compare.differences_of(dict(a), dict(b)) is rows and calls == ["differences"]
    assert {r["name"] for r in rows} == {"workers", "micro_batch", "seq_len", "stage"}
    assert [r["costed"] for r in rows] == [True, True, False, False]
    assert all(r["effect"] is not None for r in rows[:2]) and all(r["effect"] is None for r in rows[2:])
    assert rows[:2] == tasks.differences(a, b)[:2]
