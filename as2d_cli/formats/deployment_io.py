"""Reading and writing ``as2d.deployment`` v3 (YAML); version 1 is read as ``align: paper``,
versions 1 and 2 as ``history: false``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import (
    check_version,
    environment,
    plain,
    sha256_file,
    validate_schema,
    write_atomic,
)
from as2d_cli.formats.deployment import (
    SCHEMA,
    UNRECORDED_ALIGN,
    UNRECORDED_HISTORY,
    VERSION,
    Deployment,
    ProfileRef,
)
from as2d_cli.formats.profile_io import iso_dates, read_yaml


def _v1_to_v2(doc: dict) -> dict:
    """Version 1 had no ``align``: its catalog was replayed under the paper's rules."""
    return {**doc, "version": 2, "config": {**doc.get("config", {}), "align": UNRECORDED_ALIGN}}


def _v2_to_v3(doc: dict) -> dict:
    """Version 2 had no ``history``: its catalog was replayed without history candidates."""
    config = {**doc.get("config", {}), "history": UNRECORDED_HISTORY}
    return {**doc, "version": 3, "config": config}


def deployment_from_doc(doc: Any, where: str) -> Deployment:
    doc = iso_dates(doc)
    if isinstance(doc, dict) and isinstance(doc.get("environment"), dict):
        iso_dates(doc["environment"])
    doc = check_version(
        doc,
        schema=SCHEMA,
        version=VERSION,
        where=where,
        upgrades={1: _v1_to_v2, 2: _v2_to_v3},
        remedy_old="select again with `as2d select-budget`",
    )
    validate_schema(doc, "deployment.schema.json", where)
    c, p = doc["config"], doc["profile"]
    return Deployment(
        source=c["source"],
        budget=c["budget"],
        threshold=None if c["threshold"] is None else float(c["threshold"]),
        batch=c["batch"],
        profile=ProfileRef(p["path"], p["sha256"], p.get("device", "")),
        selection=dict(doc["selection"]),
        environment=dict(doc["environment"]),
        align=c["align"],
        history=c["history"],
    )


def load_deployment(path: str | Path, *, profile: str | Path | None = None) -> Deployment:
    """Load and validate; with ``profile`` given, refuse a deployment chosen on a
    different profile (its sha256 must match the file's)."""
    path = Path(path)
    d = deployment_from_doc(read_yaml(path, "deployment"), str(path))
    if profile is not None:
        h = sha256_file(profile)
        if h != d.profile.sha256:
            raise FormatError(
                f"{path}: was selected with profile {d.profile.path} (sha256 {d.profile.sha256[:12]}…), "
                f"not {profile} (sha256 {h[:12]}…); select again with this profile or pass the matching one"
            )
    return d


def rules_for(d: Deployment, align: str | None, path: str | Path) -> str:
    """The alignment rules to run ``d`` with: its own; ``align``, when given, must be them
    (a deployment's budget was chosen under its rules)."""
    if align is not None and align != d.align:
        raise UserError(
            f"--align {align}: {path} was selected under the {d.align} rules; drop --align "
            f"(the deployment's rules are used) or pass a deployment selected with "
            f"`as2d select-budget --align {align}`"
        )
    return d.align


def make_deployment(
    source: str,
    budget: int,
    threshold: float | None,
    batch: int,
    profile_path: str | Path,
    device: str,
    selection: dict[str, Any],
    device_facts: dict[str, Any] | None = None,
    align: str = UNRECORDED_ALIGN,
    history: bool = UNRECORDED_HISTORY,
) -> Deployment:
    """A new deployment for ``profile_path`` (hashed now) with fresh environment metadata
    (``device_facts``, e.g. the profile's ``device`` section, go into the environment)."""
    return Deployment(
        source,
        budget,
        threshold,
        batch,
        ProfileRef(str(profile_path), sha256_file(profile_path), device),
        selection,
        environment(device_facts),
        align,
        history,
    )


def deployment_to_doc(d: Deployment) -> dict:
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "config": {
            "source": d.source,
            "budget": d.budget,
            "threshold": d.threshold,
            "batch": d.batch,
            "align": d.align,
            "history": d.history,
        },
        "profile": {"path": d.profile.path, "sha256": d.profile.sha256, "device": d.profile.device},
        "selection": dict(d.selection),
        "environment": dict(d.environment) or environment(),
    }


def write_deployment(path: str | Path, d: Deployment, *, force: bool = False) -> Path:
    doc = plain(deployment_to_doc(d))
    text = (
        f"# as2d.deployment v{VERSION} — the fixed configuration chosen before test evaluation.\n"
        "# Field reference: docs/formats.md.\n"
        + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
    )
    deployment_from_doc(yaml.safe_load(text), str(path))  # never write an invalid file
    return write_atomic(path, text.encode("utf-8"), force=force)
