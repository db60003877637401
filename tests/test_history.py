"""Back and Forward (issue 33: "Apply and imports push browser history, so Back undoes them"). Streamlit 1.67 pushes
every link the page writes as a history entry and, on popstate, reruns with the entry's URL and the run marked as
history navigation (ClientState.is_history_navigation; its frontend's App.tsx onHistoryChange). AppTest cannot send
that mark, so these runs set it as the browser would (ui.history.navigated); tests/e2e/test_history_browser.py
presses Back in Chromium."""

import pytest

from tests.app_helpers import run_app
from ui import history
from ui.history import WRITTEN


def link(at) -> dict:
    return {k: at.query_params[k] for k in at.query_params}


def back_to(at, query: dict, monkeypatch):
    """What Back does: the address bar holds an earlier link and the browser reruns, marking the run."""
    for key in list(at.query_params):
        del at.query_params[key]
    for key, value in query.items():
        at.query_params[key] = value
    monkeypatch.setattr(history, "navigated", lambda: True)
    try:
        at.run()
    finally:
        monkeypatch.setattr(history, "navigated", lambda: False)
    assert not at.exception, at.exception


def test_back_restores_the_earlier_plan_and_forward_the_later(monkeypatch):
    at = run_app({"model": "llama-3-8b", "workers": "16"})
    earlier = link(at)
    at.number_input(key="workers").set_value(32).run()
    assert at.query_params["workers"] == "32"
    later = link(at)
    back_to(at, earlier, monkeypatch)
    assert at.session_state["_values"]["workers"] == 16 and at.number_input(key="workers").value == 16
    assert at.query_params["workers"] == "16"
    back_to(at, later, monkeypatch)                                    # Forward
    assert at.session_state["_values"]["workers"] == 32 and at.number_input(key="workers").value == 32


def test_an_applied_fix_is_undone_by_back_and_redone_by_forward(monkeypatch):
    at = run_app({"model": "llama-3-8b", "workers": "8", "seq_len": "8192", "micro_batch": "4", "stage": "2"})
    before = link(at)
    at.button(key="fix_apply").click().run()                 # the fixes' picker starts on the first change
    after = link(at)
    assert after != before
    back_to(at, before, monkeypatch)
    values = at.session_state["_values"]
    assert (values["seq_len"], values["micro_batch"], values["stage"]) == (8192, 4, 2)
    assert link(at) == before
    back_to(at, after, monkeypatch)
    assert link(at) == after


@pytest.mark.parametrize("navigated", [False, True])
def test_only_a_run_the_browser_marks_follows_the_address_bar(navigated, monkeypatch):
    """The race that broke the last attempt: the browser reruns with the previous URL while the page's new link is
    on its way. Unmarked, the session's state stands (the widget's change kept); marked, the link is followed."""
    at = run_app({"model": "llama-3-8b", "workers": "8"})
    stale = link(at)
    at.number_input(key="workers").set_value(32).run()
    for key in list(at.query_params):
        del at.query_params[key]
    for key, value in stale.items():
        at.query_params[key] = value
    monkeypatch.setattr(history, "navigated", lambda: navigated)
    at.run()
    assert not at.exception, at.exception
    assert at.session_state["_values"]["workers"] == (8 if navigated else 32)


def test_what_the_link_does_not_carry_comes_back_with_its_entry(monkeypatch):
    """An import's message belongs to the entry it was written with: Back to the entry before it shows none,
    Forward shows it again."""
    at = run_app({"model": "llama-3-8b"})
    before = link(at)
    at.session_state["import_message"] = ("success", "Loaded x.json", ())
    at.number_input(key="workers").set_value(4).run()
    after = link(at)
    assert at.session_state[WRITTEN]
    back_to(at, before, monkeypatch)
    assert "import_message" not in at.session_state
    back_to(at, after, monkeypatch)
    assert at.session_state["import_message"] == ("success", "Loaded x.json", ())


def test_the_ctx_flag_is_read_outside_a_run():
    assert history.navigated() is False                  # no script-run context: never a history navigation


def test_the_streamlit_in_use_sends_and_keeps_the_mark():
    """The mark ui/history.py reads: Streamlit 1.67's frontend sends it on popstate (App.tsx onHistoryChange ->
    rerunScript.isHistoryNavigation) and the server keeps it in the script-run context. An upgrade that drops either
    would silently turn Back into a no-op; this fails first (tests/e2e/test_history_browser.py presses Back)."""
    import dataclasses
    from pathlib import Path

    import streamlit
    from streamlit.runtime.scriptrunner_utils.script_run_context import ScriptRunContext

    assert "is_history_navigation" in {f.name for f in dataclasses.fields(ScriptRunContext)}
    bundle = Path(streamlit.__file__).parent / "static" / "static" / "js"
    js = "".join(p.read_text(errors="ignore") for p in bundle.glob("index.*.js"))
    assert "popstate" in js and "isHistoryNavigation" in js
