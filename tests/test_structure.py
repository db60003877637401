"""The core's folders are its layers (DESIGN.md section 1): every import, lazy ones included, points to the same
layer or one below, peers of one layer do not import each other, no module imports itself back through others,
and the package stays standard library only at import time. Also: no Python file of the repository is over 450
lines, and pyproject.toml ships every package of the core."""

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "zerocalc"

# Bottom to top; packages on one line are peers of the same layer.
LAYERS = (
    ("zerocalc.tables", "zerocalc.gpus", "zerocalc.units", "zerocalc.scenario", "zerocalc.layout", "zerocalc.values",
     "zerocalc.versions"),         # library versions as rows (issue 31)
    ("zerocalc.defaults",),        # the defaults policy the CLI, the page and the importers apply
    ("zerocalc.model",),
    ("zerocalc.states",),
    ("zerocalc.step",),
    ("zerocalc.parallel",),
    ("zerocalc.answers", "zerocalc.frameworks"),
    ("zerocalc.rl",),              # RL plans: each model's report from the layers below, engines, phases, configs
    ("zerocalc.output",),
    ("zerocalc.cli",),
)
FACADE = ("zerocalc", "zerocalc.__main__")      # the package's public names and `python -m zerocalc`: the top
# Third-party libraries a reader of one format imports lazily, inside the function that needs them (DESIGN.md).
# (httpx2 is huggingface_hub's HTTP client: the Hub reader names its errors.)
LAZY_THIRD_PARTY = {"huggingface_hub": "zerocalc.model.hub", "httpx2": "zerocalc.model.hub",
                    "yaml": "zerocalc.frameworks.accelerate",
                    # the MCP SDK and what it runs on, for `python -m zerocalc mcp` alone (an optional extra)
                    "mcp": "zerocalc.cli.agent.server", "mcp_types": "zerocalc.cli.agent.server",
                    "anyio": "zerocalc.cli.agent.server", "uvicorn": "zerocalc.cli.agent.server"}
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _resolve(node: ast.ImportFrom, name: str) -> list:
    """The zerocalc modules an import statement loads (a name imported from a package may be a module)."""
    if node.level:
        base = _package(name).split(".")
        base = base[: len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    return found or ([target] if target in MODULES else [])


def imports_of(name: str):
    """(imported zerocalc module, line, at module level?) for every import in the module, lazy ones included;
    and the third-party top-level names it imports, with the same flag."""
    tree = ast.parse(MODULES[name].read_text())
    top_level = {id(n) for n in tree.body} | {id(c) for n in tree.body if isinstance(n, ast.If) for c in n.body}
    core, other = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            targets = _resolve(node, name)
            if targets:
                core += [(t, node.lineno, id(node) in top_level) for t in targets]
            elif not node.level:
                other.append((node.module.split(".")[0], node.lineno, id(node) in top_level))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "zerocalc":
                    core.append((alias.name, node.lineno, id(node) in top_level))
                else:
                    other.append((alias.name.split(".")[0], node.lineno, id(node) in top_level))
    return core, other


def layer_of(name: str):
    """(layer index, the peer group it belongs to) of a module."""
    for i, group in enumerate(LAYERS):
        for prefix in group:
            if name == prefix or name.startswith(prefix + "."):
                return i, prefix
    raise AssertionError(f"{name} is in no layer: add it to LAYERS (and DESIGN.md section 1)")


def test_every_module_is_in_a_layer():
    for name in MODULES:
        if name not in FACADE:
            layer_of(name)


def test_no_import_climbs_a_layer_or_crosses_to_a_peer():
    bad = []
    for name in MODULES:
        if name in FACADE:
            continue
        layer, group = layer_of(name)
        for target, line, _ in imports_of(name)[0]:
            if target in FACADE:
                if target == "zerocalc" and name.startswith("zerocalc."):
                    continue           # `from .. import __version__`: a constant, no code
                bad.append(f"{name}:{line} imports the facade {target}")
                continue
            t_layer, t_group = layer_of(target)
            if t_layer > layer:
                bad.append(f"{name}:{line} climbs to {target} (layer {t_layer} > {layer})")
            elif t_layer == layer and t_group != group and layer > 0:
                bad.append(f"{name}:{line} crosses to its peer {target}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {name: {t for t, _, _ in imports_of(name)[0] if t in MODULES and t != name} for name in MODULES}
    graph["zerocalc"] = set()          # every module's parent package runs first; the facade is the top
    state, cycle = {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycle, " ; ".join(" -> ".join(c) for c in cycle)


def test_the_core_imports_only_the_standard_library_at_import_time():
    for name in MODULES:
        for lib, line, top in imports_of(name)[1]:
            if lib in sys.stdlib_module_names or lib == "__future__":
                continue
            assert not top, f"{name}:{line} imports {lib} at import time"
            assert LAZY_THIRD_PARTY.get(lib) and name.startswith(LAZY_THIRD_PARTY[lib]), \
                f"{name}:{line} imports {lib}; only {LAZY_THIRD_PARTY} may, lazily"


def test_a_fresh_interpreter_imports_zerocalc_and_its_cli_without_third_party_modules():
    import subprocess
    code = ("import sys; before = set(sys.modules);"
            "import zerocalc, zerocalc.cli.main, zerocalc.frameworks, zerocalc.model.hub;"
            "new = {m.split('.')[0] for m in set(sys.modules) - before};"
            "bad = sorted(new - set(sys.stdlib_module_names) - {'zerocalc'}); assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path", sorted(p for p in ROOT.rglob("*.py") if not {".venv", ".git"} & set(p.parts)),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_python_file_is_over_450_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines; split it by job"


def test_pyproject_ships_every_package_and_no_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    meta = project["project"]
    assert meta["name"] == "zerocalc" and meta["requires-python"] == ">=3.11" and meta["dependencies"] == []
    assert meta["scripts"] == {"zerocalc": "zerocalc.cli.entry:main"}
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "zerocalc.__version__"}
    # setuptools' find takes every folder with an __init__.py whose name matches: so every folder of the core
    # holding Python files must have one
    assert project["tool"]["setuptools"]["packages"] == {"find": {"include": ["zerocalc*"]}}
    folders = {p.parent for p in CORE.rglob("*.py")} - {p for p in CORE.rglob("__pycache__")}
    assert all((folder / "__init__.py").exists() for folder in folders), sorted(map(str, folders))
