"""A run script's size is bounded before shlex reads it: shlex (Python 3.11 Lib/shlex.py read_token) grows each
word one character at a time, so one 999,000-character quoted word cost 18 s of CPU (issue 38's attack pass)."""

import time

import pytest

from zerocalc.frameworks.common import FrameworkConfigError
from zerocalc.rl.configs.common import MAX_SCRIPT_CHARS, script_tokens

WORD = 'python3 -m verl.trainer.main_ppo data.x="{}"'


def test_a_script_at_the_bound_is_read_quickly():
    started = time.process_time()
    words = script_tokens(WORD.format("a " * ((MAX_SCRIPT_CHARS - 60) // 2)), "verl run script")
    assert len(words) == 4 and time.process_time() - started < 2.0


def test_a_longer_script_is_refused_by_name_at_once():
    started = time.process_time()
    with pytest.raises(FrameworkConfigError) as refused:
        script_tokens(WORD.format("a" * 999_000), "verl run script")
    assert refused.value.field == "config" and f"{MAX_SCRIPT_CHARS:,}" in refused.value.allowed
    assert time.process_time() - started < 0.5
