"""Every module imports on its own (catches import cycles), and core never imports the CLI."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["as2d_cli", "device_agents", "native"]


def _modules() -> list[str]:
    names: list[str] = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        for info in pkgutil.walk_packages(mod.__path__, prefix=f"{pkg}."):
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_module_imports_alone(name: str) -> None:
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_core_never_imports_cli() -> None:
    offenders: list[str] = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "cli" in path.relative_to(ROOT).parts[1:2] and pkg == "as2d_cli":
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
