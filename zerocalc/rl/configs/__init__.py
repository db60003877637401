"""The RL frameworks' configs read as data (verl's Hydra YAML or run-script overrides, TRL's GRPOConfig as YAML or
JSON, OpenRLHF's flags): one reader per format, each returning an ImportedRL (settings for rl/build.py, the
policy's flags for today's CLI, every ignored key with its reason)."""

from .common import ImportedRL
from .openrlhf import read_openrlhf
from .trl import read_trl
from .verl import read_verl

READERS = {"verl": read_verl, "trl": read_trl, "openrlhf": read_openrlhf}

__all__ = ["ImportedRL", "READERS", "read_verl", "read_trl", "read_openrlhf"]
