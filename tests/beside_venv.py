"""A release installed beside the venv, not in it (`pip install --no-deps --target DIR PACKAGE==VERSION`), for a
measurement script run in a subprocess with DIR first on its path: an older bitsandbytes, torchtune 0.6.1. .ci/run
installs each into the folder its environment variable names; with CI=true a missing one fails the test, elsewhere it
skips with the command that installs it."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(folder: str, package: str, spec: str, variable: str) -> dict:
    """os.environ with PYTHONPATH = folder, the repository (what `python -m tests.measure.X` needs)."""
    if not os.path.isdir(os.path.join(folder, package)):
        if os.environ.get("CI"):
            pytest.fail(f"{spec} is not at {folder} (.ci/run installs it there)")
        pytest.skip(f"no {spec} at {folder}: pip install --no-deps --target {folder} {spec} ({variable})")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([folder, str(ROOT)])}
