"""The RL frameworks' configs for the CLI: read the file a flag names (the importers read text, never paths) and
hand back its settings and the policy's flags."""

from __future__ import annotations

from .types import UsageError


def imported_settings(args):
    for flag in ("verl_config", "trl_config", "openrlhf_args"):
        if getattr(args, flag, None):
            raise UsageError(f"--{flag.replace('_', '-')}: not read yet")
    return None
