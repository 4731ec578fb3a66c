"""The bundle manifest (schema ``as2d.bundle-manifest``, version 1): every component and
file of a bundle, validated on load. Its hash (SHA-256 of its canonical JSON) names the
bundle: two builds from the same inputs give the same hash, and a phone holding a bundle
with that hash is not pushed again."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from as2d_cli.bundle.cache import sha256_file, sha256_text
from as2d_cli.errors import FormatError
from as2d_cli.formats import registry
from as2d_cli.formats.common import check_version, json_schema

SCHEMA, VERSION = registry.name_version("as2d.bundle-manifest")
MANIFEST = "manifest.json"
MANIFEST_HASH = "manifest.sha256"


def _schema() -> dict:
    return json_schema("bundle-manifest.schema.json")


def canonical(manifest: dict) -> str:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def manifest_hash(manifest: dict) -> str:
    return sha256_text(canonical(manifest))


def describe_files(root: Path, origin: dict[str, str]) -> list[dict]:
    """One entry per file (path, size, SHA-256, mode, component), sorted by path."""
    files = []
    for rel in sorted(origin):
        path = root / rel
        files.append(
            {
                "path": rel,
                "size": path.stat().st_size,
                "sha256": sha256_file(path),
                "mode": 0o755 if path.stat().st_mode & 0o111 else 0o644,
                "component": origin[rel],
            }
        )
    return files


def validate(data: object, source: str) -> dict:
    """Check schema name, version and structure; raise FormatError naming ``source``."""
    data = check_version(
        data,
        schema=SCHEMA,
        version=VERSION,
        where=source,
        remedy_old="rebuild it with `as2d bundle build`",
    )
    try:
        jsonschema.validate(data, _schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise FormatError(
            f"{source}: invalid bundle manifest at {where}: {exc.message}; rebuild with `as2d bundle build`"
        ) from None
    return data


def load(path: Path) -> dict:
    """Read and validate a manifest file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FormatError(
            f"{path}: no bundle manifest there; build one with `as2d bundle build`"
        ) from None
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); rebuild with `as2d bundle build`"
        ) from None
    return validate(data, str(path))


def verify_tree(root: Path, manifest: dict) -> list[str]:
    """Paths whose content differs from the manifest, or that are missing (empty if intact)."""
    bad = []
    for entry in manifest["files"]:
        path = root / entry["path"]
        if (
            not path.is_file()
            or path.stat().st_size != entry["size"]
            or sha256_file(path) != entry["sha256"]
        ):
            bad.append(entry["path"])
    return bad
