"""Where `as2d eval --phone X` finds its profile and deployment: the newest profile
measured on X before a synthetic one, the toolkit's shipped files from the installed
package (so it works from any folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from as2d_cli.evaluate.inputs import SHIPPED_PROFILES, deployment_candidates, find_profile

DATA = Path(__file__).parent / "data"


def _measured(folder: Path, name: str, created: str, **device: str) -> Path:
    doc = yaml.safe_load((DATA / "example-profile.yaml").read_text())
    doc["synthetic"] = False
    doc["created"] = created
    doc["device"] = {
        "name": name,
        "serial": "as2demu0001",
        "connection": "127.0.0.1:5555",
        **device,
    }
    path = folder / f"{name}-{created.replace(':', '')}.profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_shipped_profile_and_deployment_come_from_the_package(tmp_path: Path) -> None:
    cal = tmp_path / "calibrations"  # empty, in a folder that is not the checkout
    got = find_profile("k70", cal)
    assert got == SHIPPED_PROFILES / "k70.profile.yaml" and got.is_file()
    assert find_profile("redmi-k70-pro", cal) == got  # an alias names the same phone
    # One deployment per alignment rules: the default's, and the paper's (version 1: paper).
    by_rules = {
        align: [p for p, _ in deployment_candidates(got, "k70", cal, align=align)]
        for align in ("suffix", "paper")
    }
    assert by_rules == {
        "suffix": [SHIPPED_PROFILES / "k70" / "deployment.yaml"],
        "paper": [SHIPPED_PROFILES / "k70" / "deployment-paper.yaml"],
    }
    assert len(deployment_candidates(got, "k70", cal)) == 2


def test_the_newest_measured_profile_wins_over_the_shipped_one(tmp_path: Path) -> None:
    cal = tmp_path / "calibrations"
    cal.mkdir()
    older = _measured(cal, "k70", "2026-12-01T10:00:00Z")
    newer = _measured(cal, "k70", "2026-12-02T10:00:00Z")
    os.utime(newer, (1, 1))  # the recorded time decides, not the file's
    mi14 = _measured(cal, "mi14", "2026-12-03T10:00:00Z")
    assert find_profile("k70", cal) == newer and older.exists()
    assert (
        find_profile("as2demu0001", cal) == mi14
    )  # by hardware serial: the newest of that phone's
    # A synthetic profile the user keeps in calibrations/ is used only when none was measured.
    shutil.copy(SHIPPED_PROFILES / "k70.profile.yaml", cal / "mi11pro.profile.yaml")
    assert find_profile("11pro", cal) == cal / "mi11pro.profile.yaml"
