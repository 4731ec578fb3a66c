"""PyPI's manylinux aarch64 wheels (numpy, onnxruntime) through `pip download`.

Only binary wheels for the bundle's platform and CPython version are accepted; their
declared dependencies are not fetched (onnxruntime imports and runs without
flatbuffers, packaging and protobuf). Downloaded wheels are kept in the cache and
remembered by pinned spec, so a second build does not ask the registry again.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from as2d_cli.bundle.cache import HashMemo
from as2d_cli.bundle.recipe import Recipe
from as2d_cli.bundle.tools import run_tool
from as2d_cli.errors import UserError

_PIP_HINT = "check that the Python package index is reachable (try `pip download numpy`) and that the pinned version exists"


@dataclass(frozen=True)
class Wheel:
    spec: str
    filename: str
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.spec.split("==")[0]

    @property
    def version(self) -> str:
        return self.spec.split("==")[1]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "filename": self.filename,
            "sha256": self.sha256,
            "size": self.size,
        }


def fetch_wheels(
    recipe: Recipe, into: Path, memo: HashMemo | None = None
) -> list[tuple[Wheel, Path]]:
    """Each pinned wheel of the recipe, from the cache or downloaded into it."""
    into.mkdir(parents=True, exist_ok=True)
    memo = memo or HashMemo()
    lock_path = into / "resolved.json"
    lock: dict[str, dict] = json.loads(lock_path.read_text()) if lock_path.is_file() else {}
    out: list[tuple[Wheel, Path]] = []
    for spec in recipe.wheels:
        entry = lock.get(spec)
        if (
            entry
            and (into / entry["filename"]).is_file()
            and memo.sha256(into / entry["filename"]) == entry["sha256"]
        ):
            path = into / entry["filename"]
        else:
            path = _download(recipe, spec, into)
            lock[spec] = {"filename": path.name, "sha256": memo.sha256(path)}
            lock_path.write_text(json.dumps(lock, indent=1, sort_keys=True))
        out.append((Wheel(spec, path.name, memo.sha256(path), path.stat().st_size), path))
    return out


def _download(recipe: Recipe, spec: str, into: Path) -> Path:
    with tempfile.TemporaryDirectory(dir=into) as tmp:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
            "-q",
            "--python-version",
            recipe.python_version,
            "--implementation",
            "cp",
            "--abi",
            "cp" + recipe.python_version.replace(".", ""),
            "-d",
            tmp,
        ]
        for plat in recipe.wheel_platforms:
            argv += ["--platform", plat]
        run_tool(
            [*argv, spec],
            what=f"pip download of {spec} for {recipe.arch}",
            hint=_PIP_HINT,
            timeout=600,
        )
        got = sorted(Path(tmp).glob("*.whl"))
        if len(got) != 1:
            raise UserError(
                f"pip download of {spec} gave {len(got)} wheels, expected one; {_PIP_HINT}"
            )
        dest = into / got[0].name
        shutil.move(str(got[0]), dest)
        return dest
