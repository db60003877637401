"""No uncaught error from a legal click: random legal states (every field drawn from its own range, as a link can
set it) are opened in AppTest, then every view is opened, the layout search asked for, and every button the page
draws is pressed, one after another; no run may raise. (A state the search once answered with cp 8192, beyond its
own limit of 4,096, blanked the page.) ZEROCALC_FUZZ_EXAMPLES raises the number of states."""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app_helpers import run_app
from tests.test_fuzz_inputs import valid_value
from ui.page import TABS
from ui.state.fields import FIELDS

EXAMPLES = int(os.environ.get("ZEROCALC_FUZZ_EXAMPLES", "0")) or 10
SKIP_BUTTONS = {"hub_fetch"}          # the Hub needs a server: tests/test_app_imports.py drives it
# The fields that shape a plan; the display-only ones change no work.
PLAN = [f for f in FIELDS if f.name not in ("units", "breakdown")]
legal_states = st.lists(st.sampled_from(PLAN), max_size=8, unique_by=lambda f: f.name).flatmap(
    lambda chosen: st.fixed_dictionaries({f.name: valid_value(f) for f in chosen}))
models = st.sampled_from(["llama-3-8b", "mixtral-8x7b", "deepseek-v2-lite", "gpt2", "qwen3-30b-a3b", "custom",
                          "params-only"])


PRESSED = []
PASTE = ("max_memory_allocated: 61290913792\nmax_memory_reserved: 66 GiB\n"
         "memory.used [MiB], memory.total [MiB]\n70000 MiB, 81559 MiB\n")


def press_everything(at):
    pressed = set()
    for _ in range(6):                                  # a press can draw new buttons (a fix applied, a pin)
        fresh = [b for b in at.button if b.key not in pressed and b.key not in SKIP_BUTTONS]
        if not fresh:
            return
        button = fresh[0]
        pressed.add(button.key)
        PRESSED.append(button.key)
        button.click().run()
        assert not at.exception, (button.key, at.exception)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(model=models, state=legal_states)
def test_every_view_and_every_button_of_a_random_legal_state(model, state):
    at = run_app({"model": model, **state})
    at.session_state["show_layouts"] = True             # the layout search, as its toggle asks for it
    at.run()
    assert not at.exception, at.exception
    press_everything(at)
    for tab in TABS:
        if tab == "Calibrate":               # a measurement, so that its Set buttons are drawn too
            at.session_state["calib_text"] = PASTE
        at.session_state["tab"] = tab
        at.run()
        assert not at.exception, (tab, at.exception)
        press_everything(at)
