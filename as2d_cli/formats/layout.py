"""Where every stored file lives and what it is called: one owner for the names.

Everything a device produces is named by its identity's name (``DeviceIdentity.name``: a
known phone's name, ``local``, else its model), made safe for a path, and stamped in UTC:

* profiles — ``<calibrations>/<device>-<stamp>.profile.yaml`` with, beside it, the same stem
  and ``.samples.jsonl``, ``.gates.jsonl``, ``.monitor.jsonl``, ``.savings.png``; a synthetic
  profile of a model pair, ``<device>.<pair>.profile.yaml`` (the bundled pair's:
  ``<device>.profile.yaml``);
* deployments — ``<calibrations>/<device>/deployment.yaml`` (``-2``, ``-3``… when taken);
* results — ``<results>/<device>-<what>-<stamp>/``, ``what`` the split an evaluation ran
  (``test``), ``stream`` or ``energy``; reports — ``<out>/report-<stamp>/``.

A path that is taken is never reused: folders are made fresh and files get the next free
name (formats/common.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from as2d_cli.formats.common import fresh_folder, next_free, safe_name

PROFILE_SUFFIX = ".profile.yaml"
DEPLOYMENT = "deployment.yaml"


def stamp(at: float | None = None) -> str:
    """A UTC time as the names carry it: ``20261205-162025``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(at))


def device_part(name: str) -> str:
    """A device's name as a path component."""
    return safe_name(name, "device")


def pair_profile_name(device: str, pair: str) -> str:
    """``<device>.<pair>.profile.yaml``: a synthetic profile of ``device`` for the model pair
    named ``pair`` (shipped, or in calibrations/), beside ``<device>.profile.yaml``, the
    bundled pair's."""
    return f"{device_part(device)}.{safe_name(pair, 'pair')}{PROFILE_SUFFIX}"


def profile_stem(device: str, at: float | None = None) -> str:
    """``<device>-<stamp>``: a profile's name without its suffix (its companions share it)."""
    return f"{device_part(device)}-{stamp(at)}"


def profile_path(folder: Path, device: str, at: float | None = None) -> Path:
    """A new profile's path in ``folder``."""
    return folder / f"{profile_stem(device, at)}{PROFILE_SUFFIX}"


def companion(profile: Path, kind: str) -> Path:
    """A file stored beside a profile: ``kind`` is ``samples.jsonl``, ``gates.jsonl``,
    ``monitor.jsonl`` or ``savings.png``."""
    return profile.with_name(f"{profile.name.removesuffix(PROFILE_SUFFIX)}.{kind}")


def deployment_path(calibrations: Path, device: str) -> Path:
    """The next free deployment file for ``device`` (never an existing one)."""
    return next_free(Path(calibrations) / device_part(device) / DEPLOYMENT)


def results_stem(device: str, what: str, at: float | None = None) -> str:
    """``<device>-<what>-<stamp>``: a results folder's name."""
    return f"{device_part(device)}-{what}-{stamp(at)}"


def result_folder(results: Path, device: str, what: str, at: float | None = None) -> Path:
    """A fresh results folder (made now; never an existing one)."""
    return fresh_folder(Path(results) / results_stem(device, what, at))


def report_folder(out: Path, at: float | None = None) -> Path:
    """A fresh folder for a report over several runs."""
    return fresh_folder(Path(out) / f"report-{stamp(at)}")
