"""The RL frameworks' configs for the CLI: read the file a flag names (the readers take text, never a path) and
hand back its settings and the policy's flags; explicit flags win over both."""

from __future__ import annotations

from ..frameworks.common import FrameworkConfigError
from .types import UsageError

FLAGS = {"verl_config": "verl", "trl_config": "trl", "openrlhf_args": "openrlhf"}
MAX_BYTES = 1_000_000


def _gpus(rest) -> int:
    for i, word in enumerate(rest):
        if word == "--gpus" and i + 1 < len(rest) and rest[i + 1].isdigit():
            return int(rest[i + 1])
        if word.startswith("--gpus=") and word[7:].isdigit():
            return int(word[7:])
    return 1


def imported_settings(args, rest=()):
    """The ImportedRL of the one config flag given, or None."""
    from ..rl.configs import READERS
    given = [f for f in FLAGS if getattr(args, f, None)]
    if not given:
        return None
    if len(given) > 1:
        raise UsageError(" and ".join(f"--{f.replace('_', '-')}" for f in given) + " each name a config: give one")
    flag = given[0]
    name = f"--{flag.replace('_', '-')}"
    path = getattr(args, flag)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read {path!r} ({exc.strerror})") from None
    try:
        if FLAGS[flag] == "trl":
            return READERS["trl"](data, processes=_gpus(rest))
        return READERS[FLAGS[flag]](data)
    except FrameworkConfigError as exc:
        raise UsageError(f"{name}: {exc.field}: got {exc.value!r}; allowed: {exc.allowed}") from None
