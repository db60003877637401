"""A hosted page's bounded work per visitor: the worst input each surface can be given under the page's own
limits (tests/budget_cases.py) is answered, or refused with a FieldError naming the field and the bound, within
BUDGET_S seconds of one core, and never raises anything else (an uncaught error blanks the page)."""

import sys
import time

import pytest

from tests.budget_cases import BUDGET_S, cases
from zerocalc.scenario import FieldError

CASES = cases()


@pytest.mark.parametrize("surface, name, run", CASES, ids=[f"{s}: {n}" for s, n, _ in CASES])
def test_the_worst_input_of_each_surface_stays_within_its_budget(surface, name, run):
    for module in [m for n, m in sys.modules.items() if n.split(".")[0] == "zerocalc"]:
        for cached in vars(module).values():          # cold: nothing another case computed helps this one
            if callable(getattr(cached, "cache_clear", None)):
                cached.cache_clear()
    started = time.process_time()
    try:
        run()
    except FieldError as exc:            # a refusal is an answer: it names the field and the bound
        assert exc.field and exc.allowed and len(str(exc)) < 1_500, str(exc)[:300]
    spent = time.process_time() - started
    assert spent < BUDGET_S, f"{surface}, {name}: {spent:.2f} s of CPU (budget {BUDGET_S} s)"
