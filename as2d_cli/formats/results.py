"""Results (``as2d.results`` v1, JSON): what replay, selection and evaluation produce.

A document: ``schema``, ``version``, ``kind`` (replay, select-budget, eval…),
``environment`` (toolkit version, git commit, time, Python, platform, device facts),
``inputs`` (role → path and sha256 of every input file) and ``results`` (the payload).
Files are written atomically and never overwritten unless the caller passes ``force``;
:func:`next_free` picks a fresh name for callers that prefer that to refusing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats import registry
from as2d_cli.formats.common import (
    check_version,
    environment,
    next_free,
    sha256_file,
    validate_schema,
    write_atomic,
)

SCHEMA, VERSION = registry.name_version("as2d.results")
# Version history: 1 — first release.

__all__ = [
    "SCHEMA",
    "VERSION",
    "make_results",
    "write_results",
    "load_results",
    "input_ref",
    "next_free",
    "to_jsonable",
]


def to_jsonable(x: Any, where: str = "results") -> Any:
    """Plain JSON data; refuses NaN/inf (an impossible figure is an error, not a result)."""
    if is_dataclass(x) and not isinstance(x, type):
        return to_jsonable(asdict(x), where)
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v, f"{where}.{k}") for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(x)]
    if hasattr(x, "item") and callable(x.item) and not isinstance(x, (str, bytes)):
        x = x.item()  # numpy scalar
    if isinstance(x, float) and not math.isfinite(x):
        raise FormatError(
            f"{where}: value {x} is not a finite number; an impossible figure cannot be stored — check the inputs that produced it"
        )
    return x


def input_ref(path: str | Path) -> dict:
    return {"path": str(path), "sha256": sha256_file(path)}


def make_results(
    kind: str,
    results: Mapping[str, Any],
    *,
    inputs: Mapping[str, str | Path] | None = None,
    device: Mapping[str, Any] | None = None,
) -> dict:
    """A results document with fresh environment metadata and hashed inputs."""
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "kind": kind,
        "environment": environment(device),
        "inputs": {role: input_ref(p) for role, p in (inputs or {}).items()},
        "results": to_jsonable(results),
    }


def write_results(path: str | Path, doc: Mapping[str, Any], *, force: bool = False) -> Path:
    """Validate, then write atomically; never overwrites unless ``force``."""
    doc = to_jsonable(doc)
    validate_schema(doc, "results.schema.json", str(path))
    text = json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n"
    return write_atomic(path, text.encode("utf-8"), force=force)


def load_results(path: str | Path, kind: str | None = None) -> dict:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such results file; check the path") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}); the file is truncated or damaged"
        ) from None
    doc = check_version(
        doc,
        schema=SCHEMA,
        version=VERSION,
        where=str(path),
        remedy_old="rerun the command that produced it",
    )
    validate_schema(doc, "results.schema.json", str(path))
    if kind is not None and doc["kind"] != kind:
        raise FormatError(
            f"{path}: holds {doc['kind']!r} results, expected {kind!r}; pass a {kind} results file"
        )
    return doc
