"""Releases installed beside the venv, not in it (`pip install --no-deps --target DIR PACKAGE==VERSION`), for a
measurement script run in a subprocess with those folders first on its path: an older bitsandbytes, torchtune 0.6.1,
litgpt 0.5.13. .ci/run installs each into the folder its environment variable names; with CI=true a missing one
fails the test, elsewhere it skips with the command that installs it."""

import os
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Release(NamedTuple):
    package: str
    version: str
    variable: str          # the environment variable naming its folder
    default: str           # the folder without it

    @property
    def folder(self) -> str:
        return os.environ.get(self.variable, self.default)


def subprocess_env(*releases: Release) -> dict:
    """os.environ with PYTHONPATH = the releases' folders, then the repository (`python -m tests.measure.X`)."""
    for r in releases:
        if not os.path.isdir(os.path.join(r.folder, r.package)):
            spec = f"{r.package}=={r.version}"
            if os.environ.get("CI"):
                pytest.fail(f"{spec} is not at {r.folder} (.ci/run installs it there)")
            pytest.skip(f"no {spec} at {r.folder}: pip install --no-deps --target {r.folder} {spec} ({r.variable})")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([r.folder for r in releases] + [str(ROOT)])}
