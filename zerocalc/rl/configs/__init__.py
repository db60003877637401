"""The RL frameworks' configs read as data (verl's Hydra YAML or run-script overrides, TRL's GRPOConfig as YAML or
JSON, OpenRLHF's flags): one reader per format, each returning an ImportedRL (settings for rl/build.py, the
policy's flags for today's CLI, every ignored key with its reason)."""

from .common import ImportedRL
from .openrlhf import read_openrlhf
from .trl import read_trl
from .verl import read_verl

READERS = {"verl": read_verl, "trl": read_trl, "openrlhf": read_openrlhf}


def guess_format(data) -> str:
    """Which reader a file is for, from its words alone (the app's "guess"): OpenRLHF's launcher or its --flags,
    verl's actor_rollout_ref keys or launcher, otherwise a TRL GRPOConfig mapping."""
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else str(data)
    head = text[:200_000]
    if "openrlhf" in head or "--actor." in head or "--pretrain" in head or "--actor_num_gpus" in head:
        return "openrlhf"
    if "actor_rollout_ref" in head or "verl." in head:
        return "verl"
    return "trl"

__all__ = ["ImportedRL", "READERS", "guess_format", "read_verl", "read_trl", "read_openrlhf"]
