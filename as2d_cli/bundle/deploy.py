"""Put a bundle on a phone once, and build the command that starts it there.

The bundle lives in ``<run root>/as2d-bundle/<manifest hash[:16]>/`` (run root is
/data/local/tmp on a phone). It is unpacked into a ``.partial`` directory and renamed
only when complete, so ``manifest.sha256`` inside the final directory proves a whole,
matching bundle: a phone that already holds it is not pushed again. Pushing a different
bundle first removes the old one (phones have little free storage). Per-run files
(HOME, TMPDIR, inputs, outputs) live in the caller's per-run directory and go with it.
"""

from __future__ import annotations

import posixpath
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from as2d_cli.bundle.build import load_built
from as2d_cli.bundle.launch import (
    PREFLIGHT,
    SIGSYS_EXIT,
    Launch,
    Preflight,
    launch,
    parse_preflight,
)
from as2d_cli.bundle.manifest import MANIFEST_HASH
from as2d_cli.errors import DeviceError
from device_agents.base import Device

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

BUNDLE_AREA = "as2d-bundle"
SMOKE = ["-c", "import sys; print('as2d-bundle-ok', sys.version.split()[0])"]


@dataclass(frozen=True)
class DeployedBundle:
    """A complete bundle on a device, ready to start."""

    serial: str
    path: str
    manifest: dict
    manifest_hash: str
    pushed: bool
    push_seconds: float
    preflight: Preflight
    rseq_off: bool

    def carried(self, rel: str) -> str:
        """The path a program started from this bundle gives a file or folder the bundle
        carries at ``app/REL``: relative to the bundle, where every start begins, so it names
        the same file on a phone and for a host process standing in for one (the emulated
        phone)."""
        return posixpath.join("app", rel)

    def launch(self, args: Sequence[str], run_dir: str) -> Launch:
        """Start ``python3.11 ARGS`` with HOME and TMPDIR inside the per-run directory."""
        return launch(
            self.manifest,
            self.path,
            args,
            home=posixpath.join(run_dir, "home"),
            tmpdir=posixpath.join(run_dir, "tmp"),
            rseq_off=self.rseq_off,
        )

    def command(self, args: Sequence[str], run_dir: str) -> str:
        """One shell line: make the run's HOME and TMPDIR, then start the bundle."""
        home, tmp = posixpath.join(run_dir, "home"), posixpath.join(run_dir, "tmp")
        return f"mkdir -p {shlex.quote(home)} {shlex.quote(tmp)} && {self.launch(args, run_dir).shell()}"


def bundle_area(device: Device) -> str:
    return posixpath.join(device.run_root(), BUNDLE_AREA)


def deploy(device: Device, archive: Path, *, deadline_s: float = 900.0) -> DeployedBundle:
    """Make sure ``device`` holds the bundle ``archive`` (pushing it only if needed)."""
    manifest, digest = load_built(archive)
    preflight = parse_preflight(device.shell(PREFLIGHT, deadline_s=30).stdout, device.serial)
    area = bundle_area(device)
    target = posixpath.join(area, digest[:16])
    held = device.read_files([posixpath.join(target, MANIFEST_HASH)]).get(
        posixpath.join(target, MANIFEST_HASH)
    )
    pushed, seconds = False, 0.0
    if (held or "").strip() != digest:
        start = time.monotonic()
        remote = posixpath.join(area, "bundle.tar.gz")
        partial = target + ".partial"
        device.shell(["rm", "-rf", area], deadline_s=120).check(
            f"removing the old bundle in {area}"
        )
        device.shell(["mkdir", "-p", partial], deadline_s=30).check(f"creating {partial}")
        device.push(archive, remote, deadline_s=deadline_s)
        q = shlex.quote
        device.shell(
            f"tar -xzf {q(remote)} -C {q(partial)} && rm -f {q(remote)} && mv {q(partial)} {q(target)}",
            deadline_s=deadline_s,
        ).check(
            f"unpacking the bundle into {target} (needs toybox tar, Android 10 or newer, and ~{manifest['totals']['bytes'] // 2**20 + 60} MiB free)"
        )
        held = device.read_files([posixpath.join(target, MANIFEST_HASH)]).get(
            posixpath.join(target, MANIFEST_HASH)
        )
        if (held or "").strip() != digest:
            raise DeviceError(
                f"{device.serial}: the bundle in {target} is incomplete after unpacking; "
                "check free space under /data/local/tmp and retry"
            )
        pushed, seconds = True, time.monotonic() - start
    deployed = DeployedBundle(
        device.serial, target, manifest, digest, pushed, seconds, preflight, False
    )
    return _smoke(device, deployed, area)


def _smoke(device: Device, deployed: DeployedBundle, area: str) -> DeployedBundle:
    """Start Python once; a SIGSYS death means a seccomp filter refuses glibc's rseq."""
    for rseq_off in (False, True):
        candidate = DeployedBundle(**{**deployed.__dict__, "rseq_off": rseq_off})
        result = device.shell(
            candidate.command(SMOKE, posixpath.join(area, "smoke")), deadline_s=120
        )
        if result.exit_code == 0 and "as2d-bundle-ok" in result.stdout:
            return candidate
        if result.exit_code != SIGSYS_EXIT:
            break
    detail = (result.stderr or result.stdout).strip().splitlines()
    raise DeviceError(
        f"{device.serial}: the bundle's Python does not start (exit {result.exit_code}: "
        f"{detail[-1] if detail else 'no output'}); see docs/phones.md, 'Known risks'"
    )


def remove(device: Device) -> bool:
    """Delete every bundle the toolkit put on ``device``; True if there was one."""
    area = bundle_area(device)
    present = bool(device.list_dir(area))
    device.shell(["rm", "-rf", area], deadline_s=120).check(f"removing {area}")
    return present


def ensure_deployed(
    device: Device, archive: Path | None = None, pair: ModelPair | None = None
) -> DeployedBundle:
    """The bundle on ``device``: ``archive`` if given, else this checkout's (built or cached,
    carrying the imported model ``pair`` when given)."""
    if archive is None:
        from as2d_cli.bundle.build import build_bundle

        archive = build_bundle(pair=pair).archive
    return deploy(device, archive)
