"""The import structure: every module imports, imports run downward only (a layer table
below), no import cycle anywhere in the project, between modules or between packages, and
core never imports the CLI.

Imports are read from the source (ast), function-level ones included: an import placed
inside a function to dodge a cycle is still a cycle. Imports under ``if TYPE_CHECKING:``
are annotations only and do not count."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["as2d_cli", "device_agents", "native"]

# Layers, bottom first: a module may import its own layer or lower ones. The longest
# matching prefix decides a module's layer.
LAYERS: dict[str, int] = {
    "as2d_cli.errors": 0,
    "as2d_cli": 1,  # the package root (its version) and the core libraries below
    "as2d_cli.formats": 1,
    "as2d_cli.engine": 1,
    "as2d_cli.stats": 1,
    "as2d_cli.corpus": 2,
    "as2d_cli.models": 2,
    "as2d_cli.synthetic": 2,
    "native": 3,  # the runner: what runs on a device
    "device_agents": 4,  # the host's view of devices
    "device_agents.emulator": 5,
    "as2d_cli.bundle": 5,  # the emulated phone; the phone runtime
    "as2d_cli.launch": 6,  # the host starting runners, here and on devices
    "as2d_cli.replay": 7,
    "as2d_cli.tracegen": 7,
    "as2d_cli.calibration": 7,
    "as2d_cli.evaluate": 7,
    "as2d_cli.energy": 7,
    "as2d_cli.execution": 7,  # where fanned-out work runs (local pool, Ray)
    "as2d_cli.stream": 7,
    "as2d_cli.cli": 9,
}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


MODULES = _modules()


def _imports(path: Path) -> list[str]:
    """Project modules ``path`` imports (``from a import b`` also names ``a.b``)."""
    tree = ast.parse(path.read_text())
    hidden = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    out: list[str] = []
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return [m for m in out if m.split(".")[0] in PACKAGES]


def _module_of(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for imported in _imports(path):
            target = _module_of(imported)
            if (
                target and target != mod and not mod.startswith(target + ".")
            ):  # a package's own root
                graph[mod].add(target)
    return graph


def test_every_module_imports() -> None:
    """One interpreter imports every module in turn (a broken import anywhere fails)."""
    names = sorted(MODULES)
    code = (
        "import importlib, sys\nbad = []\n"
        f"for n in {names!r}:\n"
        "    try:\n        importlib.import_module(n)\n"
        "    except Exception as e:\n        bad.append(f'{n}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_package_walk_finds_every_module() -> None:
    walked = set(PACKAGES)
    for pkg in PACKAGES:
        walked |= {
            i.name
            for i in pkgutil.walk_packages(importlib.import_module(pkg).__path__, prefix=f"{pkg}.")
        }
    assert walked == set(MODULES)


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
        for m, targets in graph.items()
        for t in sorted(targets)
        if _layer(t) > _layer(m)
    ]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _package_of(module: str) -> str:
    """The package a module belongs to: itself for a package's ``__init__``, else its parent."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Packages (each one folder's own modules, its subpackages apart) and the packages
    their modules import: a subpackage and its parent are two packages like any other."""
    packages: dict[str, set[str]] = {_package_of(m): set() for m in graph}
    for mod, targets in graph.items():
        for t in targets:
            if _package_of(t) != _package_of(mod):
                packages[_package_of(mod)].add(_package_of(t))
    return packages


def test_imports_run_downward_only() -> None:
    upward = _upward(_graph())
    assert not upward, "\n".join(upward)


def test_no_import_cycles() -> None:
    assert not _cycles(_graph())


def test_no_package_import_cycles() -> None:
    """No two packages import each other, even through modules that form no cycle."""
    assert not _cycles(_package_graph(_graph()))


def test_a_package_cycle_would_be_found() -> None:
    """Modules that form no cycle can still tie their packages into one: replay's report
    importing evaluate's inputs while evaluate's modules import replay's."""
    graph = {m: set(t) for m, t in _graph().items()}
    assert "as2d_cli.replay.driver" in graph["as2d_cli.evaluate.native_replay"]
    graph["as2d_cli.replay.report"].add("as2d_cli.evaluate.inputs")
    assert not _cycles(graph)
    assert ["as2d_cli.evaluate", "as2d_cli.replay"] in _cycles(_package_graph(graph))


def test_a_cycle_and_an_upward_import_would_be_found(tmp_path: Path) -> None:
    """The checks can fail: an import inside a function counts, one under TYPE_CHECKING
    does not; a lower module importing its importer is a cycle; the engine importing the
    CLI is upward."""
    (tmp_path / "m.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from as2d_cli.cli import main\ndef f():\n    from native import runner\n"
    )
    assert _imports(tmp_path / "m.py") == ["native", "native.runner"]
    graph = {m: set(t) for m, t in _graph().items()}
    assert "as2d_cli.engine.policies" in graph["as2d_cli.engine.methods"]
    graph["as2d_cli.engine.policies"].add("as2d_cli.engine.methods")
    graph["as2d_cli.engine.buffer"].add("as2d_cli.cli.main")
    assert ["as2d_cli.engine.methods", "as2d_cli.engine.policies"] in _cycles(graph)
    assert any(
        u.startswith("as2d_cli.engine.buffer (layer 1) imports as2d_cli.cli.main")
        for u in _upward(graph)
    )


def test_core_never_imports_cli() -> None:
    offenders: list[str] = []
    for mod, path in MODULES.items():
        if mod.startswith("as2d_cli.cli"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods: list[str] = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            for m in mods:
                if m.split(".")[0] in {"typer", "rich", "click"} or m.startswith("as2d_cli.cli"):
                    offenders.append(f"{path.relative_to(ROOT)} imports {m}")
    assert not offenders, offenders


def test_what_ships_to_a_phone_holds_everything_the_runner_imports() -> None:
    """The one list of what ships to a phone (bundle.recipe, for the arm64 bundle and the
    runner payload alike) holds every module the runner's modules import, transitively, and
    none of the host's launchers."""
    from as2d_cli.bundle.recipe import shipped_files

    shipped = {
        ".".join(Path(rel).with_suffix("").parts).removesuffix(".__init__")
        for rel, _ in shipped_files(ROOT)
        if rel.endswith(".py")
    }
    graph = _graph()
    todo = [m for m in MODULES if m.split(".")[0] == "native"]
    needed: set[str] = set()
    while todo:
        m = todo.pop()
        if m not in needed:
            needed.add(m)
            todo += graph[m]
    assert needed <= shipped, sorted(needed - shipped)
    assert not {m for m in shipped if m.startswith(("as2d_cli.launch", "as2d_cli.cli"))}
