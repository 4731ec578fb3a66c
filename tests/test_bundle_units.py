"""Bundle pieces that need no download: manifest validation, preflight, ELF reading,
packing safety, launch quoting, and one-line errors when a registry is unreachable."""

from __future__ import annotations

import copy
import io
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from as2d_cli.bundle import manifest as mf
from as2d_cli.bundle.build import build_bundle
from as2d_cli.bundle.elf import read_elf
from as2d_cli.bundle.launch import PREFLIGHT, launch, parse_preflight
from as2d_cli.bundle.pack import pack, unpack
from as2d_cli.bundle.recipe import Recipe
from as2d_cli.bundle.wheels import fetch_wheels
from as2d_cli.errors import DeviceError, FormatError, UserError

SHA = "0" * 64


def _manifest() -> dict:
    return {
        "schema": mf.SCHEMA,
        "version": mf.VERSION,
        "arch": "arm64",
        "recipe": Recipe().to_json(),
        "launch": {
            "loader": "ld-linux-aarch64.so.1",
            "library_path": "lib",
            "python": "python3.11",
            "pythonhome": "python",
            "pythonpath": ["app", "site"],
        },
        "debian_packages": [
            {
                "name": "libc6",
                "version": "2.36",
                "arch": "arm64",
                "filename": "x.deb",
                "size": 1,
                "sha256": SHA,
            }
        ],
        "wheels": [
            {"name": "numpy", "version": "2.4.6", "filename": "n.whl", "sha256": SHA, "size": 1}
        ],
        "project": {"packages": ["native"], "excludes": [], "files": 1, "assets": []},
        "files": [
            {"path": "python3.11", "size": 1, "sha256": SHA, "mode": 0o755, "component": "debian:x"}
        ],
        "dropped": [],
        "totals": {"files": 1, "bytes": 1},
    }


def test_manifest_round_trip_and_refusals(tmp_path: Path) -> None:
    good = _manifest()
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(good))
    assert mf.load(path) == good
    assert mf.manifest_hash(good) == mf.manifest_hash(json.loads(json.dumps(good)))
    cases = {
        "newer than this toolkit reads": {"version": mf.VERSION + 1},
        "older than this toolkit reads": {"version": 0},
        "expected 'as2d.bundle-manifest'": {"schema": "as2d.profile"},
    }
    for message, change in cases.items():
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(FormatError, match=message):
            mf.load(path)
    broken = copy.deepcopy(good)
    broken["files"][0]["sha256"] = "nothex"
    path.write_text(json.dumps(broken))
    with pytest.raises(FormatError, match="files/0/sha256"):
        mf.load(path)
    del broken["wheels"]
    path.write_text(json.dumps(broken))
    with pytest.raises(FormatError, match="'wheels' is a required property"):
        mf.load(path)
    path.write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        mf.load(path)
    with pytest.raises(FormatError, match="no bundle manifest there"):
        mf.load(tmp_path / "missing.json")


def test_preflight_on_this_host_and_hidden_cpu_files() -> None:
    out = subprocess.run(["sh", "-c", PREFLIGHT], capture_output=True, text=True, check=True).stdout
    with pytest.raises(DeviceError, match="CPU architecture is x86_64"):
        parse_preflight(out, "host")  # this machine is x86-64: correct refusal
    pf = parse_preflight(out.replace("x86_64", "aarch64"), "host")
    assert pf.cpuinfo_processors >= 1 and pf.sysfs_cpus >= 1
    with pytest.raises(DeviceError, match=r"phone1: /proc/cpuinfo is hidden"):
        parse_preflight("@cpuinfo\n@sysfs\ncpu0\ncpu1\ncpufreq\n@arch\naarch64\n@end\n", "phone1")
    with pytest.raises(DeviceError, match=r"/sys/devices/system/cpu is hidden"):
        parse_preflight("@cpuinfo\nprocessor\t: 0\n@sysfs\n@arch\naarch64\n@end\n", "phone1")
    with pytest.raises(DeviceError, match="32-bit"):
        parse_preflight("@cpuinfo\nprocessor\t: 0\n@sysfs\ncpu0\n@arch\narmv8l\n@end\n", "phone1")
    with pytest.raises(DeviceError, match="unexpected answer"):
        parse_preflight(
            "@cpuinfo\nprocessor\t: 0\n", "phone1"
        )  # cut short: the phone left mid-answer
    # What a phone that hides /proc/cpuinfo really answers to the script.
    hidden = subprocess.run(
        ["sh", "-c", PREFLIGHT.replace("/proc/cpuinfo", "/nonexistent/cpuinfo")],
        capture_output=True,
        text=True,
    ).stdout
    with pytest.raises(DeviceError, match="hidden"):
        parse_preflight(hidden.replace("x86_64", "aarch64"), "phone1")


def test_elf_reader_agrees_with_readelf() -> None:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) not installed")
    lib = Path(
        subprocess.run(
            [sys.executable, "-c", "import _ctypes; print(_ctypes.__file__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    dyn = subprocess.run(
        [readelf, "-d", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    needed = tuple(
        line.split("[", 1)[1].rstrip("]") for line in dyn.splitlines() if "(NEEDED)" in line
    )
    assert read_elf(lib).needed == needed and needed
    assert read_elf(lib).machine == 62  # x86-64


def test_pack_is_deterministic_and_unpack_refuses_escapes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.txt").write_text("x")
    (src / "run").write_text("#!/bin/sh\n")
    (src / "run").chmod(0o755)
    pack(src, ["run", "a/b/f.txt"], tmp_path / "one.tar.gz")
    (src / "run").touch()  # a new mtime must not change the bytes
    pack(src, ["a/b/f.txt", "run"], tmp_path / "two.tar.gz")
    assert (tmp_path / "one.tar.gz").read_bytes() == (tmp_path / "two.tar.gz").read_bytes()
    unpack(tmp_path / "one.tar.gz", tmp_path / "out")
    assert (tmp_path / "out" / "a" / "b" / "f.txt").read_text() == "x"
    assert (tmp_path / "out" / "run").stat().st_mode & 0o111
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(FormatError, match="unsafe entry"):
        unpack(evil, tmp_path / "out2")
    assert not (tmp_path / "escape").exists()
    with pytest.raises(FormatError, match="not a readable bundle archive"):
        (tmp_path / "junk.tar.gz").write_bytes(b"junk")
        unpack(tmp_path / "junk.tar.gz", tmp_path / "out3")


def test_launch_line_quotes_paths_and_unsets_preload() -> None:
    m = _manifest()
    start = launch(
        m,
        "/data/local/tmp/as2d/it's here/",
        ["-m", "native.runner", "--x", "a b"],
        home="/data/local/tmp/as2d/home",
        tmpdir="/data/local/tmp/as2d/tmp",
    )
    words = shlex.split(start.shell())
    assert words[:3] == ["cd", "/data/local/tmp/as2d/it's here", "&&"]
    assert words[3:6] == ["env", "-u", "LD_PRELOAD"]
    assert "PYTHONHOME=/data/local/tmp/as2d/it's here/python" in words
    assert (
        "PYTHONPATH=/data/local/tmp/as2d/it's here/app:/data/local/tmp/as2d/it's here/site" in words
    )
    assert (
        words[-7:]
        == [
            "./ld-linux-aarch64.so.1",
            "--library-path",
            "./lib",
            "./python3.11",
            "-m",
            "native.runner",
            "--x",
            "a b",
        ][-7:]
    )
    assert "GLIBC_TUNABLES" not in start.env


def test_unreachable_debian_mirror_is_one_clear_error(tmp_path: Path) -> None:
    if shutil.which("apt-get") is None:
        pytest.skip("not a Debian-family host")
    recipe = Recipe(
        debian_mirror="http://127.0.0.1:9/debian",
        debian_security_mirror="http://127.0.0.1:9/debian-security",
    )
    with pytest.raises(UserError) as err:
        build_bundle(recipe, cache=tmp_path / "cache")
    msg = str(err.value)
    assert "apt-get update of the arm64 package lists failed" in msg and "--debian-mirror" in msg
    assert "\n" not in msg


def test_unreachable_package_index_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    with pytest.raises(UserError) as err:
        fetch_wheels(Recipe(wheels=("numpy==2.4.6",)), tmp_path / "wheels")
    msg = str(err.value)
    assert (
        msg.startswith("pip download of numpy==2.4.6 for arm64 failed")
        and "package index is reachable" in msg
    )


def test_recipe_refuses_unpinned_wheels_and_other_arches() -> None:
    with pytest.raises(UserError, match="must be pinned"):
        Recipe(wheels=("numpy",))
    with pytest.raises(UserError, match="unsupported bundle architecture 'x86_64'"):
        Recipe(arch="x86_64")


def test_cli_bad_arch_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", "bundle", "build", "--arch", "riscv64"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == "error: unsupported bundle architecture 'riscv64'; use one of arm64"
    )


def test_load_built_reads_the_manifest_from_the_archive_head(tmp_path: Path) -> None:
    from as2d_cli.bundle.build import load_built

    m = _manifest()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "python3.11").write_bytes(b"\0" * 10)
    (tmp_path / "t" / mf.MANIFEST).write_text(json.dumps(m))
    (tmp_path / "t" / mf.MANIFEST_HASH).write_text(mf.manifest_hash(m) + "\n")
    names = ["python3.11", mf.MANIFEST, mf.MANIFEST_HASH]
    pack(tmp_path / "t", names, tmp_path / "a.tar.gz", lead=(mf.MANIFEST, mf.MANIFEST_HASH))
    assert load_built(tmp_path / "a.tar.gz") == (m, mf.manifest_hash(m))
    (tmp_path / "t" / mf.MANIFEST_HASH).write_text("0" * 64 + "\n")
    pack(tmp_path / "t", names, tmp_path / "b.tar.gz", lead=(mf.MANIFEST, mf.MANIFEST_HASH))
    with pytest.raises(FormatError, match="does not match its manifest"):
        load_built(tmp_path / "b.tar.gz")
    with pytest.raises(FormatError, match="no such bundle archive"):
        load_built(tmp_path / "missing.tar.gz")
