"""Lay out the bundle tree from unpacked packages, wheels and the project, then prune it.

Layout (every path relative to the bundle directory on the device)::

    ld-linux-aarch64.so.1   glibc's loader, invoked explicitly (Android has no /lib)
    python3.11              Debian's CPython (libpython linked in statically)
    lib/                    shared libraries, each stored once under its SONAME (no symlinks)
    python/lib/python3.11/  the standard library (PYTHONHOME=python)
    site/                   numpy and onnxruntime from their wheels (on PYTHONPATH)
    app/                    the project's runner packages and shipped models (on PYTHONPATH)
    licenses/               each Debian package's copyright file
    manifest.json, manifest.sha256

Libraries are kept only when a program, extension module or kept library of the bundle
needs them (DT_NEEDED closure), plus the few glibc loads by name at run time; the build
fails if any needed library is missing, so a bundle that loads here loads on the phone.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from as2d_cli.bundle.apt import DebPackage
from as2d_cli.bundle.elf import EM_AARCH64, is_elf, read_elf
from as2d_cli.bundle.recipe import Recipe, shipped_files
from as2d_cli.bundle.tools import require_tool
from as2d_cli.bundle.wheels import Wheel
from as2d_cli.errors import UserError

STDLIB = "python/lib/python3.11"
# glibc loads these by name (dlopen), so no DT_NEEDED points at them.
DLOPENED = ("libnss_files.so.2", "libnss_dns.so.2", "libgcc_s.so.1")

# Pruned paths (fnmatch patterns on bundle-relative posix paths); why: tests, docs,
# development tools, host-only or GUI modules, and the C-API library Python never loads.
PRUNE = (
    "*/__pycache__/*",
    "*.pyc",
    "*.pyi",
    "*/py.typed",
    f"{STDLIB}/test/*",
    f"{STDLIB}/idlelib/*",
    f"{STDLIB}/tkinter/*",
    f"{STDLIB}/turtledemo/*",
    f"{STDLIB}/turtle.py",
    f"{STDLIB}/ensurepip/*",
    f"{STDLIB}/lib2to3/*",
    f"{STDLIB}/pydoc_data/*",
    f"{STDLIB}/distutils/*",
    f"{STDLIB}/venv/*",
    f"{STDLIB}/sqlite3/*",
    f"{STDLIB}/curses/*",
    f"{STDLIB}/dbm/*",
    f"{STDLIB}/config-*",
    f"{STDLIB}/sitecustomize.py",
    f"{STDLIB}/EXTERNALLY-MANAGED",
    f"{STDLIB}/lib-dynload/_test*",
    f"{STDLIB}/lib-dynload/_ctypes_test*",
    f"{STDLIB}/lib-dynload/xxlimited*",
    f"{STDLIB}/lib-dynload/_xx*",
    # Modules whose libraries are deliberately not shipped (network, terminals, databases).
    f"{STDLIB}/lib-dynload/_ssl.*",
    f"{STDLIB}/lib-dynload/_hashlib.*",
    f"{STDLIB}/lib-dynload/_sqlite3.*",
    f"{STDLIB}/lib-dynload/readline.*",
    f"{STDLIB}/lib-dynload/_curses*",
    f"{STDLIB}/lib-dynload/_dbm.*",
    f"{STDLIB}/lib-dynload/_gdbm.*",
    f"{STDLIB}/lib-dynload/nis.*",
    f"{STDLIB}/lib-dynload/_crypt.*",
    f"{STDLIB}/lib-dynload/ossaudiodev.*",
    "site/*/tests/*",
    "site/numpy/f2py/*",
    "site/numpy/distutils/*",
    "site/numpy/_pyinstaller/*",
    "site/numpy/_core/include/*",
    "site/numpy/_core/lib/*",
    "site/numpy/random/_examples/*",
    "site/numpy/random/lib/*",
    "site/onnxruntime/transformers/*",
    "site/onnxruntime/quantization/*",
    "site/onnxruntime/tools/*",
    "site/onnxruntime/datasets/*",
    "site/onnxruntime/capi/libonnxruntime.so*",
    "site/*.dist-info/RECORD",
    "site/*.dist-info/INSTALLER",
    "site/*.dist-info/REQUESTED",
    "site/*/bin/*",
)


@dataclass
class Tree:
    """The assembled bundle directory and where each of its files came from."""

    root: Path
    origin: dict[str, str] = field(default_factory=dict)  # relative path -> component
    dropped: list[dict] = field(default_factory=list)  # pruned modules/libraries and why

    def add(self, rel: str, src: Path, component: str, mode: int | None = None) -> None:
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        os.chmod(dest, mode if mode is not None else (0o755 if os.access(src, os.X_OK) else 0o644))
        self.origin[rel] = component

    def remove(self, rel: str) -> None:
        (self.root / rel).unlink()
        del self.origin[rel]


def unpack_debs(debs: list[tuple[DebPackage, Path]], into: Path) -> dict[str, Path]:
    """``dpkg -x`` each package into its own directory (so every file's package is known)."""
    dpkg = require_tool("dpkg", "the bundle builder needs dpkg (a Debian-family host)")
    roots: dict[str, Path] = {}
    for pkg, path in debs:
        root = into / pkg.name
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        proc = subprocess.run([dpkg, "-x", str(path), str(root)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(
                f"dpkg -x {path.name} failed: {proc.stderr.strip()[-200:]}; delete {path} and build again"
            )
        roots[pkg.name] = root
    return roots


def assemble(
    recipe: Recipe,
    debs: dict[str, Path],
    wheels: list[tuple[Wheel, Path]],
    project_root: Path,
    out: Path,
) -> Tree:
    """Build the pruned bundle tree in ``out`` (which must not exist yet)."""
    out.mkdir(parents=True)
    tree = Tree(out)
    ma = recipe.multiarch
    for pkg, root in sorted(debs.items()):
        comp = f"debian:{pkg}"
        _add_debian(tree, recipe, root, comp, ma)
    for wheel, path in wheels:
        _add_wheel(tree, wheel, path)
    _add_project(tree, recipe, project_root)
    if recipe.loader not in tree.origin:
        raise UserError(
            f"no {recipe.loader} in the Debian packages; keep libc6 in the bundle recipe"
        )
    if "python3.11" not in tree.origin:
        raise UserError(
            "no python3.11 in the Debian packages; keep python3.11-minimal in the bundle recipe"
        )
    _prune(tree)
    _prune_libraries(tree)
    return tree


def _add_debian(tree: Tree, recipe: Recipe, root: Path, comp: str, ma: str) -> None:
    for libdir in (root / "lib" / ma, root / "usr" / "lib" / ma):
        if not libdir.is_dir():
            continue
        for entry in sorted(libdir.iterdir()):
            if not entry.name.startswith(("lib", "ld-")) or ".so" not in entry.name:
                continue
            real = entry.resolve()
            if not real.is_file() or not is_elf(real):
                continue  # dangling link into a package we do not ship, or a linker script
            info = read_elf(real)
            if info.machine != EM_AARCH64:
                raise UserError(
                    f"{entry.name} in {comp} is not an arm64 library; check the bundle recipe's arch"
                )
            # Store each library once, under the name the loader looks for.
            name = info.soname or entry.name
            if entry.name != name and (libdir / name).exists():
                continue
            rel = recipe.loader if name == recipe.loader else f"lib/{name}"
            tree.add(rel, real, comp, 0o755 if rel == recipe.loader else 0o644)
    python = root / "usr" / "bin" / "python3.11"
    if python.is_file():
        tree.add("python3.11", python, comp, 0o755)
    stdlib = root / "usr" / "lib" / "python3.11"
    if stdlib.is_dir():
        for path in sorted(stdlib.rglob("*")):
            if path.is_file() and not path.is_symlink():
                tree.add(f"{STDLIB}/{path.relative_to(stdlib).as_posix()}", path, comp, 0o644)
    copyright_file = root / "usr" / "share" / "doc" / comp.split(":", 1)[1] / "copyright"
    if copyright_file.is_file():
        tree.add(f"licenses/{comp.split(':', 1)[1]}.copyright", copyright_file, comp, 0o644)


def _add_wheel(tree: Tree, wheel: Wheel, path: Path) -> None:
    comp = f"wheel:{wheel.name}"
    with zipfile.ZipFile(path) as zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            if info.is_dir() or info.filename.startswith(("/", "..")) or "/../" in info.filename:
                continue
            rel = f"site/{info.filename}"
            dest = tree.root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.chmod(dest, 0o644)
            tree.origin[rel] = comp


def _add_project(tree: Tree, recipe: Recipe, project_root: Path) -> None:
    for pkg in recipe.project_packages:
        base = project_root / pkg
        if not (base / "__init__.py").is_file():
            raise UserError(
                f"project package {base} is missing; build the bundle from a checkout of the project"
            )
    for rel_src, path in shipped_files(
        project_root, recipe.project_packages, recipe.project_excludes
    ):
        comp = "assets" if rel_src.startswith("as2d_cli/assets/") else "project"
        tree.add(f"app/{rel_src}", path, comp, 0o644)


def _prune(tree: Tree) -> None:
    for rel in sorted(tree.origin):
        if any(fnmatch.fnmatch(rel, p) for p in PRUNE):
            if rel.startswith(f"{STDLIB}/lib-dynload/"):
                tree.dropped.append({"path": rel, "reason": "pruned module"})
            tree.remove(rel)


def _prune_libraries(tree: Tree) -> None:
    """Keep the DT_NEEDED closure of the bundle's non-library ELF files; fail on a gap."""
    libs = {rel.split("/", 1)[1]: rel for rel in tree.origin if rel.startswith("lib/")}
    provided = set(libs) | {
        _soname(tree, rel) for rel in tree.origin if rel.startswith("site/") and ".so" in rel
    }
    provided.add(next(r for r in tree.origin if r.startswith("ld-")))
    roots = [rel for rel in tree.origin if not rel.startswith("lib/") and _is_elf_rel(tree, rel)]
    missing: list[str] = []
    keep: set[str] = set(DLOPENED) & set(libs)
    todo = list(roots) + [libs[n] for n in keep]
    seen: set[str] = set()
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        for need in read_elf(tree.root / rel).needed:
            if need not in provided:
                missing.append(f"{rel} needs {need}")
            elif need in libs and need not in keep:
                keep.add(need)
                todo.append(libs[need])
    if missing:
        raise UserError(
            "the bundle is incomplete: "
            + "; ".join(sorted(missing)[:5])
            + "; add the Debian package that provides it to the bundle recipe"
        )
    for name, rel in sorted(libs.items()):
        if name not in keep:
            tree.dropped.append({"path": rel, "reason": "library nothing in the bundle loads"})
            tree.remove(rel)


def _soname(tree: Tree, rel: str) -> str:
    path = tree.root / rel
    if is_elf(path):
        return read_elf(path).soname or path.name
    return path.name


def _is_elf_rel(tree: Tree, rel: str) -> bool:
    return (
        rel.endswith(".so") or ".so." in rel or rel in ("python3.11",) or rel.startswith("ld-")
    ) and is_elf(tree.root / rel)
