"""Back and Forward (issue 33: "Apply and imports push browser history, so Back undoes them"). Streamlit pushes
every link the page writes as a history entry and reruns with the entry's URL on popstate (its frontend's
onHistoryChange); the page then follows the address bar: here the URL is set as Back would set it."""

from tests.app_helpers import run_app
from ui.share import SYNCED


def back_to(at, query: dict):
    """What Back does: the address bar holds an earlier link and the script reruns, no widget changed."""
    for key in list(at.query_params):
        del at.query_params[key]
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception


def test_back_restores_the_earlier_plan_and_forward_the_later():
    first = {"model": "llama-3-8b", "workers": "16"}
    at = run_app(first)
    earlier = {k: v[0] for k, v in at.session_state[SYNCED].items()}
    at.number_input(key="workers").set_value(32).run()
    assert at.query_params["workers"] == "32"
    later = {k: v[0] for k, v in at.session_state[SYNCED].items()}
    back_to(at, earlier)
    assert at.session_state["_values"]["workers"] == 16 and at.number_input(key="workers").value == 16
    assert at.query_params["workers"] == "16"
    back_to(at, later)                                    # Forward
    assert at.session_state["_values"]["workers"] == 32


def test_back_restores_the_view_and_an_applied_fix_is_undone():
    at = run_app({"model": "llama-3-8b", "workers": "8", "seq_len": "8192", "micro_batch": "4", "stage": "2"})
    before = {k: v[0] for k, v in at.session_state[SYNCED].items()}
    apply = next(b for b in at.button if b.key and b.key.startswith("fix_apply_"))
    apply.click().run()
    assert {k: v[0] for k, v in at.session_state[SYNCED].items()} != before
    back_to(at, before)
    values = at.session_state["_values"]
    assert (values["seq_len"], values["micro_batch"], values["stage"]) == (8192, 4, 2)


def test_a_widget_change_is_never_undone_by_a_stale_address_bar():
    """The browser can rerun with the previous URL while the page's new link is on its way: a run that brings a
    widget's change keeps it."""
    at = run_app({"model": "llama-3-8b", "workers": "8"})
    stale = {k: v[0] for k, v in at.session_state[SYNCED].items()}
    at.number_input(key="workers").set_value(32)
    for key in list(at.query_params):
        del at.query_params[key]
    for key, value in stale.items():
        at.query_params[key] = value
    at.run()
    assert at.session_state["_values"]["workers"] == 32 and at.query_params["workers"] == "32"
