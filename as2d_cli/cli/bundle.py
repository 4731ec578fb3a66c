"""`as2d bundle build`: assemble the arm64 runtime bundle that phones run (docs/phones.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import typer

from as2d_cli.cli import options
from as2d_cli.cli.groups import subcommands
from as2d_cli.cli.paths import (
    file_in_option,
    file_or_folder_out_option,
    folder_in_option,
    folder_out_option,
)
from as2d_cli.errors import UserError


def build(
    arch: str = typer.Option("arm64", "--arch", help="Target architecture (arm64 only)."),
    refresh: bool = typer.Option(
        False, "--refresh", help="Fetch the Debian package lists even if fresh."
    ),
    cache: Path | None = options.path(
        None, "--cache", folder_out_option, "Cache directory (default ~/.cache/as2d/bundle)."
    ),
    out: Path | None = options.out_folder(
        None,
        "Also copy the archive here (its manifest goes beside it).",
        callback=file_or_folder_out_option,
    ),
    debian_mirror: str | None = typer.Option(
        None, "--debian-mirror", help="Debian mirror URL for the arm64 packages."
    ),
    as_json: bool = options.as_json("Print the result as one JSON object."),
    project: Path | None = options.path(
        None,
        "--project",
        folder_in_option,
        "Checkout whose runner and models go in (default: this one).",
    ),
    models: Path | None = options.models(
        "Also carry this model pair: a folder (`as2d models import`) or a shipped pair's name."
    ),
) -> None:
    """Build (or reuse from the cache) the arm64 bundle and print where it is."""
    from as2d_cli.bundle.build import build_bundle
    from as2d_cli.bundle.manifest import MANIFEST
    from as2d_cli.bundle.recipe import Recipe
    from as2d_cli.models.model_pair import load_pair

    recipe = Recipe(arch=arch, debian_mirror=debian_mirror or Recipe.debian_mirror)
    say = (lambda _m: None) if as_json else (lambda m: typer.echo(f"· {m}", err=True))
    pair = None if models is None else load_pair(models, check_hashes=False)
    result = build_bundle(
        recipe, project_root=project, cache=cache, refresh=refresh, progress=say, pair=pair
    )
    archive = result.archive
    if out is not None:
        archive = _copy_out(result.archive, out)
        shutil.copyfile(
            result.archive.with_name(MANIFEST),
            archive.with_name(archive.name + ".manifest.json"),
        )
    summary = {
        "archive": str(archive),
        "manifest_sha256": result.manifest_hash,
        "cache_hit": result.cache_hit,
        "archive_bytes": result.archive_bytes,
        "unpacked_bytes": result.unpacked_bytes,
        "files": result.manifest["totals"]["files"],
        "debian_packages": {p["name"]: p["version"] for p in result.manifest["debian_packages"]},
        "wheels": {w["name"]: w["version"] for w in result.manifest["wheels"]},
        "assets": len(result.manifest["project"]["assets"]),
        "seconds": round(result.seconds, 2),
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    state = "cache hit" if result.cache_hit else "built"
    typer.echo(f"{state}: {archive}")
    typer.echo(f"manifest sha256 {result.manifest_hash}")
    typer.echo(
        f"{summary['files']} files, {result.unpacked_bytes / 1e6:.1f} MB unpacked, "
        f"{result.archive_bytes / 1e6:.1f} MB packed, {summary['assets']} asset files, {result.seconds:.1f} s"
    )
    typer.echo("debian: " + ", ".join(f"{k} {v}" for k, v in summary["debian_packages"].items()))
    typer.echo("wheels: " + ", ".join(f"{k} {v}" for k, v in summary["wheels"].items()))


def deploy_cmd(
    phone: str = options.phone(..., "Phone name (k70, mi14, …) or adb serial."),
    archive: Path | None = options.path(
        None,
        "--archive",
        file_in_option,
        "Bundle archive (default: build or reuse this checkout's).",
    ),
    adb_port: int | None = options.adb_port(),
) -> None:
    """Push the bundle to a phone (skipped when it already holds it), check it starts, print how to run it."""
    from as2d_cli.bundle.deploy import ensure_deployed
    from device_agents.registry import resolve_phone

    device = resolve_phone(phone, adb_port)
    if device.kind != "adb":
        raise UserError(
            f"--phone {phone} is the local host; the bundle is for arm64 phones (the host runs the runner directly)"
        )
    d = ensure_deployed(device, archive)
    state = (
        f"pushed in {d.push_seconds:.1f} s"
        if d.pushed
        else "already there (same manifest hash), not pushed"
    )
    typer.echo(f"{device.serial}: bundle {d.manifest_hash[:16]} at {d.path} — {state}")
    typer.echo(
        f"preflight: {d.preflight.cpuinfo_processors} processors in /proc/cpuinfo, "
        f"{d.preflight.sysfs_cpus} cpus in sysfs, {d.preflight.machine}"
        + ("; glibc rseq disabled (seccomp)" if d.rseq_off else "")
    )
    run = f"{device.run_root()}/as2d-manual"
    typer.echo("start the runner by hand with:")
    typer.echo(
        f"  adb -s {device.serial} shell {_sh_quote(d.command(['-m', 'native.runner'], run))}"
    )


def remove_cmd(
    phone: str = options.phone(..., "Phone name (k70, mi14, …) or adb serial."),
    adb_port: int | None = options.adb_port("adb server port."),
) -> None:
    """Delete the bundle from a phone (everything under /data/local/tmp/as2d-bundle)."""
    from as2d_cli.bundle.deploy import bundle_area, remove
    from device_agents.registry import resolve_phone

    device = resolve_phone(phone, adb_port)
    if device.kind != "adb":
        raise UserError(f"--phone {phone} is the local host; there is no bundle to remove there")
    had = remove(device)
    typer.echo(
        f"{device.serial}: {'removed' if had else 'nothing to remove in'} {bundle_area(device)}"
    )


def register(app: typer.Typer) -> None:
    subcommands(
        app,
        "bundle",
        "The arm64 runtime bundle (CPython, numpy, onnxruntime, runner, models) for phones.",
        {"build": build, "deploy": deploy_cmd, "remove": remove_cmd},
    )


def _sh_quote(line: str) -> str:
    import shlex

    return shlex.quote(line)


def _copy_out(archive: Path, out: Path) -> Path:
    """Copy the archive to ``out`` (a file or a directory); never overwrite a different file."""
    dest = out / archive.name if out.is_dir() else out
    if dest.exists():
        if dest.read_bytes() == archive.read_bytes():
            return dest
        raise UserError(
            f"{dest} already exists and differs from the new bundle; choose another --out or remove it"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(archive, dest)
    return dest
