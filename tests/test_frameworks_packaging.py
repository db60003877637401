"""Packaging: pyproject.toml builds the zerocalc command from zerocalc and zerocalc.frameworks only, with no runtime
dependencies; the framework code imports only the standard library (the core's rule)."""

import ast
import sys
import tomllib
from pathlib import Path

import zerocalc

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    meta = project["project"]
    assert meta["name"] == "zerocalc" and meta["requires-python"] == ">=3.11" and meta["dependencies"] == []
    assert meta["scripts"] == {"zerocalc": "zerocalc.cli:main"}
    assert project["tool"]["setuptools"]["packages"] == ["zerocalc", "zerocalc.frameworks"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "zerocalc.__version__"}
    assert zerocalc.__version__


def test_framework_code_imports_only_the_standard_library():
    files = sorted((ROOT / "zerocalc" / "frameworks").glob("*.py")) + [ROOT / "zerocalc" / "cli_frameworks.py"]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in sys.stdlib_module_names or name.startswith("zerocalc"), (path, name)
