"""The app's worker process (ui/worker.py): a costly answer computed there equals the one computed here, a refusal
comes back as the FieldError it was (with its field and allowed text), and the page uses it for large searches."""

import pickle

import pytest

from tests.app_helpers import alerts, run_app
from ui.state import from_query, resolve
from ui.worker import isolated, run
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
    import ui.worker
    real = ui.worker.isolated
    monkeypatch.setattr(ui.worker, "isolated", lambda fn, *a: calls.append(fn.__name__) or real(fn, *a))
    at = run_app({"model": "qwen3-0.6b", "workers": "512"}, tab="Layouts and ranks")
    at.session_state["show_layouts"] = True
    at.run()
    assert not at.exception and "full_report" in calls
    assert not alerts(at, "error")
    r = resolve(from_query({"model": "qwen3-0.6b", "workers": "512"})[0])
    want = full_report(r.scenario, r.workload, 1.5, layouts=True)["solve"]["layouts_count"]
    assert f"{want:,} fit" in " ".join(c.value for c in at.caption)
