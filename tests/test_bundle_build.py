"""`as2d bundle build`: the manifest lists every component, a second build is a cache
hit, a rebuild from the same inputs is byte-identical, and the CLI reports it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from test_bundle_common import project_snapshot, shared_build

from as2d_cli.bundle import manifest as mf
from as2d_cli.bundle.build import BUILD_INFO, build_bundle, load_built, project_files
from as2d_cli.bundle.cache import sha256_file
from as2d_cli.bundle.elf import EM_AARCH64, read_elf
from as2d_cli.bundle.recipe import Recipe


def test_manifest_lists_every_component() -> None:
    result = shared_build()
    m = mf.load(result.archive.with_name(mf.MANIFEST))
    recipe = Recipe()
    assert m["arch"] == "arm64"
    assert sorted(p["name"] for p in m["debian_packages"]) == sorted(recipe.debian_packages)
    assert all(p["arch"] == "arm64" and p["version"] for p in m["debian_packages"])
    assert {f"{w['name']}=={w['version']}" for w in m["wheels"]} == set(recipe.wheels)
    by_path = {f["path"]: f for f in m["files"]}
    components = {f["component"] for f in m["files"]}
    assert {
        f"debian:{p}" for p in ("libc6", "python3.11-minimal", "libpython3.11-stdlib")
    } <= components
    assert {"wheel:numpy", "wheel:onnxruntime", "project"} <= components
    # Every project file (minus host-only parts) is inside with the checkout's hash.
    root = project_snapshot()
    expected = project_files(recipe, root)
    assert expected, "no project files found"
    for rel, digest in expected:
        assert by_path[f"app/{rel}"]["sha256"] == digest, rel
    assert not any(p.startswith(("app/as2d_cli/cli/", "app/as2d_cli/bundle/")) for p in by_path)
    assets = sorted(
        f"app/{p.relative_to(root).as_posix()}"
        for p in (root / "as2d_cli" / "assets").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert m["project"]["assets"] == assets
    # The runtime's pieces are where the launch line expects them.
    for rel in (
        "ld-linux-aarch64.so.1",
        "python3.11",
        "lib/libc.so.6",
        "lib/libstdc++.so.6",
        "python/lib/python3.11/os.py",
        "site/numpy/__init__.py",
        "site/onnxruntime/__init__.py",
    ):
        assert rel in by_path, rel
    assert by_path["python3.11"]["mode"] == 0o755
    assert not any("/tests/" in p or p.endswith(".pyc") for p in by_path)
    assert "site/onnxruntime/capi/libonnxruntime.so.1.32.0" not in by_path
    assert m["totals"] == {"files": len(m["files"]), "bytes": sum(f["size"] for f in m["files"])}


def test_archive_matches_manifest(tmp_path: Path) -> None:
    result = shared_build()
    m = result.manifest
    with tarfile.open(result.archive, "r:gz") as tar:
        members = tar.getmembers()
        files = {t.name: t for t in members if t.isfile()}
        assert all(t.isfile() or t.isdir() for t in members), "links in the archive"
        names = [t.name for t in members]
        assert names[:2] == [mf.MANIFEST, mf.MANIFEST_HASH] and names[2:] == sorted(names[2:])
        assert {t.mtime for t in members} == {1577836800} and {t.uid for t in members} == {0}
        assert set(files) == {f["path"] for f in m["files"]} | {mf.MANIFEST, mf.MANIFEST_HASH}
        assert tar.extractfile(mf.MANIFEST_HASH).read().decode().strip() == result.manifest_hash
    tar.close()
    from as2d_cli.bundle.pack import unpack

    unpack(result.archive, tmp_path / "b")
    assert mf.verify_tree(tmp_path / "b", m) == []
    # Every shipped ELF is arm64, and every library it needs is in the bundle.
    names = {p.name for p in (tmp_path / "b" / "lib").iterdir()} | {"ld-linux-aarch64.so.1"}
    names |= {p.name for p in (tmp_path / "b" / "site").rglob("*.so*")}
    for rel in (
        "python3.11",
        "site/onnxruntime/capi/onnxruntime_pybind11_state.cpython-311-aarch64-linux-gnu.so",
    ):
        info = read_elf(tmp_path / "b" / rel)
        assert info.machine == EM_AARCH64
        assert set(info.needed) <= names, set(info.needed) - names
    # Tampering is caught.
    (tmp_path / "b" / "python3.11").write_bytes(b"x")
    assert mf.verify_tree(tmp_path / "b", m) == ["python3.11"]


def test_second_build_is_cache_hit() -> None:
    first = shared_build()
    again = build_bundle(project_root=project_snapshot())
    assert (
        again.cache_hit
        and again.manifest_hash == first.manifest_hash
        and again.archive == first.archive
    )


@pytest.mark.slow  # a full second build (~15 s); benchmarks/bundle_build.py checks the same every run
def test_rebuild_is_reproducible() -> None:
    first = shared_build()
    digest = sha256_file(first.archive)
    # Throw the finished bundle away: rebuilding from the cached downloads gives the same bytes.
    saved = first.archive.parent.with_name(first.archive.parent.name + ".saved")
    shutil.rmtree(saved, ignore_errors=True)
    first.archive.parent.rename(saved)
    try:
        rebuilt = build_bundle(project_root=project_snapshot())
        assert not rebuilt.cache_hit
        assert rebuilt.manifest_hash == first.manifest_hash
        assert sha256_file(rebuilt.archive) == digest
        info = json.loads((rebuilt.archive.parent / BUILD_INFO).read_text())
        assert info["archive_sha256"] == digest and info["manifest_sha256"] == first.manifest_hash
    finally:
        shutil.rmtree(saved, ignore_errors=True)


def test_cli_build_json_and_out(tmp_path: Path) -> None:
    result = shared_build()
    env = {**os.environ}
    out = tmp_path / "phone-bundle.tar.gz"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "as2d_cli.cli.main",
            "bundle",
            "build",
            "--json",
            "--out",
            str(out),
            "--project",
            str(project_snapshot()),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["cache_hit"] is True
    assert summary["manifest_sha256"] == result.manifest_hash
    assert summary["wheels"] == dict(spec.split("==") for spec in Recipe().wheels)
    assert summary["wheels"]["numpy"] == "2.4.6" and summary["wheels"]["onnxruntime"] == "1.32.0"
    assert out.read_bytes() == result.archive.read_bytes()
    assert mf.load(Path(str(out) + ".manifest.json"))["files"] == result.manifest["files"]
    assert load_built(out) == (result.manifest, result.manifest_hash)  # a copy carries its manifest
    # A different file already there is never overwritten.
    other = tmp_path / "other.tar.gz"
    other.write_bytes(b"mine")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "as2d_cli.cli.main",
            "bundle",
            "build",
            "--out",
            str(other),
            "--project",
            str(project_snapshot()),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "already exists and differs" in proc.stderr and "Traceback" not in proc.stderr
    assert other.read_bytes() == b"mine"


def test_build_leaves_the_hosts_package_state_alone() -> None:
    """apt runs with private lists/status/sources: no foreign architecture is enabled and
    the host's dpkg status and apt lists are not touched."""
    if shutil.which("dpkg") is None:
        pytest.skip("not a Debian-family host")

    def state() -> tuple[str, float, float]:
        foreign = subprocess.run(
            ["dpkg", "--print-foreign-architectures"], capture_output=True, text=True
        ).stdout
        return (
            foreign,
            Path("/var/lib/dpkg/status").stat().st_mtime,
            Path("/var/lib/apt/lists").stat().st_mtime,
        )

    before = state()
    build_bundle(
        project_root=project_snapshot(), refresh=True
    )  # forces a private `apt-get update` too
    assert state() == before
