"""Build a bundle: resolve inputs, reuse a cached build with the same inputs, else fetch,
assemble, describe and pack.

The cache key is the SHA-256 of every input: the recipe, each Debian package's and
wheel's SHA-256, and each project file's SHA-256. The same key gives the same archive
bytes and the same manifest hash (fixed mtimes, sorted entries, no timestamps inside).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import as2d_cli
from as2d_cli.bundle import manifest as mf
from as2d_cli.bundle.apt import DebPackage, PrivateApt
from as2d_cli.bundle.assemble import STDLIB, Tree, assemble, unpack_debs
from as2d_cli.bundle.cache import HashMemo, cache_root, sha256_text
from as2d_cli.bundle.pack import pack, read_member
from as2d_cli.bundle.recipe import Recipe, shipped_files
from as2d_cli.bundle.wheels import Wheel, fetch_wheels
from as2d_cli.errors import FormatError

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

ARCHIVE_NAME = "as2d-bundle-{arch}.tar.gz"
BUILD_INFO = "build.json"
KEEP_BUNDLES = 3  # finished bundles kept in the cache (newest first); each is ~100 MB
TRIM_AFTER_S = 3600.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    """A finished bundle in the cache."""

    archive: Path
    manifest: dict
    manifest_hash: str
    key: str
    cache_hit: bool
    archive_bytes: int
    unpacked_bytes: int
    seconds: float


def default_project_root() -> Path:
    return Path(as2d_cli.__file__).resolve().parent.parent


def project_files(
    recipe: Recipe, project_root: Path, memo: HashMemo | None = None
) -> list[tuple[str, str]]:
    """(relative path, SHA-256) of every project file the bundle will carry."""
    memo = memo or HashMemo()
    files = shipped_files(project_root, recipe.project_packages, recipe.project_excludes)
    return [(rel, memo.sha256(path)) for rel, path in files]


def snapshot_project(recipe: Recipe, src: Path, dest: Path) -> Path:
    """Copy the files the bundle carries from checkout ``src`` to ``dest``: a frozen input
    while others keep editing the checkout (same content gives the same cache key)."""
    for rel, _ in project_files(recipe, src):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
    for pkg in recipe.project_packages:
        (dest / pkg).mkdir(parents=True, exist_ok=True)
        (dest / pkg / "__init__.py").touch(exist_ok=True)
    return dest


PAIRS = "as2d_cli/assets/pairs"  # where a bundle carries an imported model pair (inside app/)


def pair_folder(pair: ModelPair) -> str:
    """The pair's folder relative to the bundle's ``app/`` (what the runner's ``load`` names)."""
    from as2d_cli.formats.common import safe_name

    return f"{PAIRS}/{safe_name(pair.name, 'pair')}"


def add_pair(project: Path, pair: ModelPair) -> str:
    """Copy an imported pair, as one self-contained folder, into the project snapshot
    ``project`` at :func:`pair_folder`; returns that relative path."""
    from as2d_cli.models.model_pair import portable_files

    pair.verify()  # every file against its SHA-256 first
    rel = pair_folder(pair)
    dest = project / rel
    if dest.exists():
        shutil.rmtree(dest)
    files, manifest = portable_files(pair)
    for name, src in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest / name)
    (dest / "models.json").write_text(
        json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    return rel


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builds sharing one cache (parallel test workers, two terminals)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_bundle(
    recipe: Recipe | None = None,
    *,
    project_root: Path | None = None,
    cache: Path | None = None,
    refresh: bool = False,
    progress: Progress | None = None,
    pair: ModelPair | None = None,
) -> BuildResult:
    """Return the bundle for ``recipe`` and the project at ``project_root``, building it if
    needed; ``pair``: an imported model pair the bundle carries as well (at
    :func:`pair_folder` inside ``app/``)."""
    start = time.monotonic()
    recipe = recipe or Recipe()
    project_root = project_root or default_project_root()
    root = cache_root(cache)
    say = progress or (lambda _msg: None)
    if pair is not None:
        import tempfile

        snap = Path(
            tempfile.mkdtemp(prefix="pair-", dir=root.parent if root.parent.exists() else None)
        )
        try:
            say(f"adding model pair {pair.directory}")
            snapshot_project(recipe, project_root, snap)
            add_pair(snap, pair)
            # the snapshot's pairs folder holds exactly the pair asked for: carry it
            keep = tuple(p for p in recipe.project_excludes if p != PAIRS)
            return build_bundle(
                dataclasses.replace(recipe, project_excludes=keep),
                project_root=snap,
                cache=cache,
                refresh=refresh,
                progress=progress,
            )
        finally:
            shutil.rmtree(snap, ignore_errors=True)
    with _locked(root / "build.lock"):
        memo = HashMemo(root / "hashes.json")
        try:
            return _build_locked(recipe, project_root, root, refresh, say, start, memo)
        finally:
            memo.save()


def _build_locked(
    recipe: Recipe,
    project_root: Path,
    root: Path,
    refresh: bool,
    say: Progress,
    start: float,
    memo: HashMemo,
) -> BuildResult:
    apt_dir = (
        root
        / "apt"
        / f"{recipe.arch}-{recipe.debian_suite}-{sha256_text(recipe.debian_mirror + recipe.debian_security_mirror)[:8]}"
    )
    apt = PrivateApt(recipe, apt_dir)
    say("checking the Debian package lists")
    if apt.update(force=refresh):
        say("fetched the Debian arm64 package lists")
    debs = apt.resolve(recipe.debian_packages)
    say("fetching wheels")
    wheels = fetch_wheels(
        recipe, root / "wheels" / f"cp{recipe.python_version.replace('.', '')}-{recipe.arch}", memo
    )
    files = project_files(recipe, project_root, memo)
    key = sha256_text(
        json.dumps(
            {
                "recipe": recipe.to_json(),
                "debs": [p.to_json() for p in debs],
                "wheels": [w.to_json() for w, _ in wheels],
                "project": files,
            },
            sort_keys=True,
        )
    )
    out_dir = root / "bundles" / key[:16]
    archive = out_dir / ARCHIVE_NAME.format(arch=recipe.arch)
    hit = _cached(out_dir, archive, memo)
    if hit is not None:
        os.utime(out_dir)  # most recently used: kept longest by _trim
        say("cache hit")
        return _result(archive, hit, key, True, start)

    say(f"downloading {len(debs)} Debian packages")
    deb_paths = apt.fetch(debs, root / "debs" / recipe.arch, memo)
    work = root / "work" / key[:16]
    if work.exists():
        shutil.rmtree(work)
    say("unpacking and assembling")
    roots = unpack_debs(list(zip(debs, deb_paths, strict=True)), work / "debs")
    tree = assemble(recipe, roots, wheels, project_root, work / "tree")
    manifest = _manifest(recipe, debs, wheels, tree)
    mf.validate(manifest, "the manifest being built")
    digest = mf.manifest_hash(manifest)
    (tree.root / mf.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    (tree.root / mf.MANIFEST_HASH).write_text(digest + "\n")
    say("packing")
    out_dir.mkdir(parents=True, exist_ok=True)
    pack(
        tree.root,
        [*tree.origin, mf.MANIFEST, mf.MANIFEST_HASH],
        archive,
        lead=(mf.MANIFEST, mf.MANIFEST_HASH),
    )
    shutil.copyfile(tree.root / mf.MANIFEST, out_dir / mf.MANIFEST)
    info = _build_info(digest, memo.sha256(archive), key)
    (out_dir / BUILD_INFO).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(work)
    _trim(root / "bundles", keep=out_dir)
    return _result(archive, manifest, key, False, start)


def _manifest(
    recipe: Recipe, debs: list[DebPackage], wheels: list[tuple[Wheel, Path]], tree: Tree
) -> dict[str, Any]:
    """The bundle's manifest (a JSON document): how to launch it, what went in, every file."""
    manifest: dict[str, Any] = {
        "schema": mf.SCHEMA,
        "version": mf.VERSION,
        "arch": recipe.arch,
        "recipe": recipe.to_json(),
        "launch": {
            "loader": recipe.loader,
            "library_path": "lib",
            "python": "python3.11",
            "pythonhome": "python",
            "pythonpath": ["app", "site"],
        },
        "debian_packages": [p.to_json() for p in debs],
        "wheels": [w.to_json() for w, _ in wheels],
        "project": {
            "packages": list(recipe.project_packages),
            "excludes": list(recipe.project_excludes),
            "files": sum(1 for c in tree.origin.values() if c in ("project", "assets")),
            "assets": sorted(r for r, c in tree.origin.items() if c == "assets"),
        },
        "files": mf.describe_files(tree.root, tree.origin),
        "dropped": sorted(tree.dropped, key=lambda d: d["path"]),
    }
    manifest["totals"] = {
        "files": len(manifest["files"]),
        "bytes": sum(f["size"] for f in manifest["files"]),
    }
    return manifest


def _build_info(digest: str, archive_sha256: str, key: str) -> dict[str, Any]:
    """build-info: the manifest's and the archive's hashes, the cache key, who built it."""
    return {
        "manifest_sha256": digest,
        "archive_sha256": archive_sha256,
        "key": key,
        "toolkit_version": as2d_cli.__version__,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "stdlib": STDLIB,
    }


def _trim(bundles: Path, keep: Path) -> None:
    """Drop finished bundles beyond the newest KEEP_BUNDLES that no build returned for an
    hour (another process may still be pushing a recent one); never ``keep``."""
    now = time.time()
    dirs = []
    for d in bundles.iterdir():
        try:
            if d.is_dir() and d != keep:
                dirs.append((d.stat().st_mtime, d))
        except FileNotFoundError:
            continue
    dirs.sort(reverse=True)
    for mtime, old in dirs[KEEP_BUNDLES - 1 :]:
        if now - mtime > TRIM_AFTER_S:
            shutil.rmtree(old, ignore_errors=True)


def _cached(out_dir: Path, archive: Path, memo: HashMemo) -> dict | None:
    """The cached manifest if the archive there is complete and unchanged, else None."""
    info_path = out_dir / BUILD_INFO
    if not (info_path.is_file() and archive.is_file()):
        return None
    try:
        info = json.loads(info_path.read_text())
        manifest = mf.load(out_dir / mf.MANIFEST)
    except (json.JSONDecodeError, FormatError):
        return None
    if memo.sha256(archive) != info.get("archive_sha256") or mf.manifest_hash(manifest) != info.get(
        "manifest_sha256"
    ):
        return None
    return manifest


def _result(archive: Path, manifest: dict, key: str, hit: bool, start: float) -> BuildResult:
    return BuildResult(
        archive=archive,
        manifest=manifest,
        manifest_hash=mf.manifest_hash(manifest),
        key=key,
        cache_hit=hit,
        archive_bytes=archive.stat().st_size,
        unpacked_bytes=manifest["totals"]["bytes"],
        seconds=time.monotonic() - start,
    )


def load_built(archive: Path) -> tuple[dict, str]:
    """The manifest and its hash, read from the archive itself (so any copy of it works)."""
    raw = read_member(archive, mf.MANIFEST)
    try:
        manifest = mf.validate(json.loads(raw), f"{archive}:{mf.MANIFEST}")
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"{archive}: its {mf.MANIFEST} is not valid JSON ({exc.msg}); rebuild with `as2d bundle build`"
        ) from None
    digest = mf.manifest_hash(manifest)
    if read_member(archive, mf.MANIFEST_HASH).decode().strip() != digest:
        raise FormatError(
            f"{archive}: {mf.MANIFEST_HASH} does not match its manifest; rebuild with `as2d bundle build`"
        )
    return manifest, digest
