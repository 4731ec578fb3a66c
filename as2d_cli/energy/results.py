"""Versioned energy results: energy.json (schema as2d.energy-result v1), the Table-15-style
table (Markdown and CSV, :mod:`as2d_cli.energy.table`), the raw Perfetto trace and the
episode records side by side.

A run gets its own folder <results>/<device>-energy-<time>/; an existing folder is never written
into again (a second run on the same second gets a -2 suffix). From the moment it is made until
energy.json is in place, an ``INCOMPLETE`` note in it says it is not a result and what finishes
it; energy.json is written last, whole or not at all (fsynced, then linked into place), so a
folder without it — whatever killed the run — is never read as a result.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema

from as2d_cli import __version__
from as2d_cli.energy.analysis import EnergyAnalysis
from as2d_cli.energy.capture_config import CaptureSpec
from as2d_cli.energy.episode_records import Episode, format_episode
from as2d_cli.energy.table import render_table, window_includes
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats import registry
from as2d_cli.formats.common import (
    INCOMPLETE,
    check_version,
    git_commit,
    json_schema,
    utc_now,
    write_atomic,
)

SCHEMA, VERSION = registry.name_version("as2d.energy-result")
# Version history: 1 — first release (per-request rows, per-method pools, cross-check);
# 2 — the gauge's own figures: capture.gauge_period_s and capture.gauge_readings replace
# capture.poll_s_observed, and each request has gauge_readings_in_window; a gauge whose
# current sign was corrected says so (capture.current_sign_corrected, .current_sign_note);
# the cross-check counts the charging polls it left out (excluded_charging_samples);
# mean_power_w is energy / response time as in the paper (window_power_w: energy / window),
# methods count their formal, measured and failed requests and keep a method whose formal
# requests all failed (status), and window_includes says per method what its window holds;
# 3 — the gauge's error bound: each request's short_window, power_step_w and energy_bound_j,
# each method's energy_bound_j, energy_bound_percent and short_windows; capture.gauge_noise_w
# and each request's noise_bound_j (the bound's reading-noise part);
# 4 — the measuring conditions: status (complete or stopped) and conditions (the gate before
# the capture, the 1 Hz monitor's record, the cores the episode checked around every
# request, and why and where it stopped measuring); requests stopped or not run;
# 5 — energy from the gauge's readings placed at their update instants: each request's
# energy_from (readings or polls), capture.gauge_noise_percent (the noise under load),
# gauge_placement_s and gauge_on_grid; requests the trace does not cover kept and marked.
TRACE_NAME = "trace.perfetto-trace"
EPISODE_NAME = "episode.tsv"
GATE_NAME = "gate.json"  # the gate before the capture (as2d.gate/1)
MONITOR_NAME = "monitor.json"  # the host's 1 Hz monitor over the episode


def _upgrade_1(doc: dict) -> dict:
    """Version 1 → 2: a version-1 file did not record the gauge; its figures are null."""
    doc = dict(doc)
    capture = dict(doc.get("capture") or {})
    capture.pop("poll_s_observed", None)
    capture.setdefault("gauge_period_s", None)
    capture.setdefault("gauge_readings", None)
    capture.setdefault("current_sign_corrected", False)  # version 1 never corrected it
    capture.setdefault("current_sign_note", None)
    doc["capture"] = capture
    if isinstance(doc.get("cross_check"), dict):
        # version 1 integrated every poll; charging ones were not told apart
        doc["cross_check"] = {"excluded_charging_samples": None, **doc["cross_check"]}
    doc["requests"] = [
        _upgrade_1_request(r) if isinstance(r, dict) else r for r in doc.get("requests") or []
    ]
    doc["methods"] = [
        _upgrade_1_method(m) if isinstance(m, dict) else m for m in doc.get("methods") or []
    ]
    doc.setdefault("window_includes", None)  # version 1 did not say
    return doc


def _per_response(energy: Any, response: Any) -> float | None:
    ok = isinstance(energy, (int, float)) and isinstance(response, (int, float))
    return energy / response if ok and response > 0 else None


def _upgrade_1_request(r: dict) -> dict:
    # version 1's mean power was energy / window; the paper's is energy / response time
    r = dict(r)
    r.setdefault("gauge_readings_in_window", None)
    r["window_power_w"] = r.get("mean_power_w")
    r["mean_power_w"] = _per_response(r.get("energy_j"), r.get("response_s"))
    return r


def _upgrade_1_method(m: dict) -> dict:
    # version 1 listed only methods with measured formal requests, all of them pooled
    m = dict(m)
    m.setdefault("measured_requests", m.get("formal_requests"))
    m.setdefault("failed_requests", None)
    m.setdefault("status", "ok")
    m["window_power_w"] = m.get("mean_power_w")
    m["mean_power_w"] = _per_response(m.get("energy_j"), m.get("response_s"))
    return m


def _upgrade_2(doc: dict) -> dict:
    """Version 2 → 3: a version-2 file did not bound the gauge's error; those are null."""
    doc = dict(doc)
    doc["requests"] = [
        {
            "short_window": None,
            "power_step_w": None,
            "energy_bound_j": None,
            "noise_bound_j": None,
            **r,
        }
        if isinstance(r, dict)
        else r
        for r in doc.get("requests") or []
    ]
    doc["methods"] = [
        {"energy_bound_j": None, "energy_bound_percent": None, "short_windows": None, **m}
        if isinstance(m, dict)
        else m
        for m in doc.get("methods") or []
    ]
    return doc


def _upgrade_3(doc: dict) -> dict:
    """Version 3 → 4: a version-3 run was not gated or monitored; it ran to its end."""
    doc = dict(doc)
    doc.setdefault("status", "complete")
    doc.setdefault("conditions", None)
    return doc


def _upgrade_4(doc: dict) -> dict:
    """Version 4 → 5: a version-4 file integrated the polled curve; energy_from is null."""
    doc = dict(doc)
    doc["requests"] = [
        {"energy_from": None, **r} if isinstance(r, dict) else r for r in doc.get("requests") or []
    ]
    return doc


def _upgrade_5(doc: dict) -> dict:
    """Version 5 → 6: the version field is ``version``, as in every other stored file."""
    return dict(doc)


# Versions 1–5 kept their number under ``schema_version``; it is read as ``version``.
LEGACY_VERSION_KEY = "schema_version"

UPGRADES = {1: _upgrade_1, 2: _upgrade_2, 3: _upgrade_3, 4: _upgrade_4, 5: _upgrade_5}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def conditions_of(out_dir: Path, episode: Episode) -> dict[str, Any]:
    """What energy.json says about the measuring conditions: the gate record and the
    monitor record kept in the run folder (gate.json, monitor.json; null when the run has
    none), the cores the episode checked, and — when the conditions broke before the last
    request ended — who stopped it (the host's monitor or the episode's own check), why,
    at which request and the boundary on the boot clock."""
    from as2d_cli.energy.episode_records import NOT_RUN, STOPPED

    meta = episode.meta
    hit = [i for i, r in enumerate(episode.requests) if r.exit_code in (STOPPED, NOT_RUN)]
    stopped = None
    if hit:
        at = meta.get("stopped_at_request")
        boundary = meta.get("stop_boundary_boot_ns")
        stopped = {
            "by": meta.get("stopped_by") or "phone",
            "reason": meta.get("stop_reason") or "the device's conditions broke",
            "at_request": int(at) if at and at.isdigit() else hit[0],
            "boundary_boot_ns": int(boundary) if boundary and boundary.isdigit() else None,
        }
    return {
        "gate": _read_json(Path(out_dir) / GATE_NAME),
        "monitor": _read_json(Path(out_dir) / MONITOR_NAME),
        "cores_online": meta.get("cores_online"),
        "stopped": stopped,
    }


def stopped_line(path: Path) -> str | None:
    """The one line a stopped run ends with (None: it ran to its end), from energy.json."""
    doc = load_energy_result(path)
    stop = (doc.get("conditions") or {}).get("stopped")
    if doc.get("status") != "stopped" or not stop:
        return None
    reqs = doc["requests"]
    i = int(stop["at_request"])
    r = reqs[i] if 0 <= i < len(reqs) else None
    where = (
        f"{'before' if r is not None and r['status'].startswith('not run') else 'during'} "
        f"request {i + 1}/{len(reqs)}" + (f" ({r['method']} {r['phase']})" if r else "")
    )
    done = sum(1 for x in reqs if x["status"] == "ok")
    return (
        f"energy stopped: {stop['reason']} {where}; the {done} request(s) measured before "
        f"it are kept in {path} — let the phone idle and cool down, then run the same "
        "command again"
    )


def _schema() -> dict:
    return json_schema("energy-result.schema.json")


def _clean(x: Any) -> Any:
    """JSON-safe: NaN → null, dataclasses → dicts."""
    if is_dataclass(x) and not isinstance(x, type):
        return _clean(asdict(x))
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def new_run_dir(results_root: Path, phone_name: str, now: datetime | None = None) -> Path:
    """A fresh folder ``results/<device>-energy-<UTC time>/`` (the rule every result
    folder follows: formats/layout.py); never an existing one. It is
    marked incomplete (:func:`mark_incomplete`) until :func:`write_results` finishes it."""
    from as2d_cli.formats.layout import result_folder

    now = now or datetime.now(UTC)
    folder = result_folder(Path(results_root), phone_name, "energy", now.timestamp())
    mark_incomplete(folder)
    return folder


def mark_incomplete(out_dir: Path) -> None:
    """The INCOMPLETE note: this folder is no result until energy.json is in it, and what
    finishes it."""
    text = (
        f"{out_dir} is incomplete: `as2d energy` began it at {utc_now()} and has not written "
        "energy.json.\n"
        "If that command is no longer running it was interrupted or killed, it refused the "
        "measurement (refused.txt then says why), or the phone did not come back in time.\n"
        f"While phone_run.json says `on-phone`, `as2d energy --collect {out_dir}` fetches what "
        f"the phone kept and analyses it; once it says `collected`, `as2d energy --from-run "
        f"{out_dir}` analyses what was pulled. Either writes energy.json and removes this note. "
        "Otherwise measure again (a new folder) and delete this one.\n"
        "Nothing in this folder is a result until energy.json is there.\n"
    )
    write_atomic(Path(out_dir) / INCOMPLETE, text.encode("utf-8"), force=True)


def _write_files(
    out_dir: Path, analysis: EnergyAnalysis, episode: Episode, trace: Path, windows: dict
) -> dict[str, str]:
    """The trace, the episode's records and the table beside energy.json (each whole or
    absent; a re-analysis writes them again); their names by role."""
    if Path(trace).resolve() != (out_dir / TRACE_NAME).resolve():
        write_atomic(out_dir / TRACE_NAME, Path(trace).read_bytes(), force=True)
    write_atomic(out_dir / EPISODE_NAME, format_episode(episode).encode("utf-8"), force=True)
    md, csv_text = render_table(analysis, windows)
    write_atomic(out_dir / "table.md", md.encode("utf-8"), force=True)
    write_atomic(out_dir / "table.csv", csv_text.encode("utf-8"), force=True)
    files = {
        "trace": TRACE_NAME,
        "episode": EPISODE_NAME,
        "table_md": "table.md",
        "table_csv": "table.csv",
    }
    for key, name in (("gate", GATE_NAME), ("monitor", MONITOR_NAME)):
        if (out_dir / name).exists():
            files[key] = name
    return files


def _capture(analysis: EnergyAnalysis, spec: CaptureSpec, counters: list[str]) -> dict:
    """energy.json's ``capture``: how the trace was taken and what the gauge showed."""
    return {
        "poll_ms": spec.poll_ms,
        "duration_ms": spec.duration_ms,
        "counters": counters,
        "gauge_period_s": analysis.gauge.period_s if analysis.gauge else None,
        "gauge_readings": analysis.gauge.readings if analysis.gauge else None,
        "gauge_noise_w": analysis.noise_w,
        "gauge_noise_percent": analysis.noise_percent,
        "gauge_placement_s": analysis.placement_s,
        "gauge_on_grid": analysis.on_grid,
        "current_sign_corrected": analysis.sign_note is not None,
        "current_sign_note": analysis.sign_note,
        "trace_bytes": analysis.trace_bytes,
        "trace_lost_bytes": analysis.trace_lost_bytes,
    }


def write_results(
    out_dir: Path,
    analysis: EnergyAnalysis,
    episode: Episode,
    trace: Path,
    spec: CaptureSpec,
    phone: dict[str, Any],
    plan: dict[str, Any],
    counters: list[str],
    extra_files: dict[str, Path] | None = None,
    conditions: dict[str, Any] | None = None,
) -> Path:
    """Write everything into `out_dir` (fresh, from new_run_dir). Returns energy.json.
    ``conditions``: the gate, monitor and stop record (conditions_of); None: not recorded."""
    out_dir = Path(out_dir)
    if (out_dir / "energy.json").exists():
        raise UserError(
            f"{out_dir} already holds energy.json; results are never "
            "overwritten — use a new run folder"
        )
    windows = window_includes(plan)
    files = _write_files(out_dir, analysis, episode, trace, windows)
    for key, src in (extra_files or {}).items():
        dst = out_dir / Path(src).name
        if Path(src).resolve() != dst.resolve():
            write_atomic(dst, Path(src).read_bytes(), force=True)
        files[key] = dst.name
    doc = _clean(
        {
            "schema": SCHEMA,
            "version": VERSION,
            "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "toolkit": {"version": __version__, "git_commit": git_commit()},
            "status": "stopped" if (conditions or {}).get("stopped") else "complete",
            "conditions": conditions,
            "phone": phone,
            "capture": _capture(analysis, spec, counters),
            "plan": plan,
            "episode_meta": episode.meta,
            "files": files,
            "requests": [r.to_dict() for r in analysis.requests],
            "methods": [m.to_dict() for m in analysis.methods],
            "baseline": analysis.baseline,
            "window_includes": windows,
            "cross_check": analysis.cross_check.to_dict(),
        }
    )
    jsonschema.validate(doc, _schema())
    # The note goes first, then energy.json, last of all and whole: a kill in between
    # leaves a folder without energy.json, which nothing reads as a result either.
    (out_dir / INCOMPLETE).unlink(missing_ok=True)
    return write_atomic(out_dir / "energy.json", (json.dumps(doc, indent=2) + "\n").encode())


def load_energy_result(path: Path) -> dict[str, Any]:
    """Read and validate energy.json; other schemas and versions are refused clearly."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise FormatError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from exc
    if isinstance(doc, dict) and "version" not in doc and LEGACY_VERSION_KEY in doc:
        doc = {**doc, "version": doc[LEGACY_VERSION_KEY]}
        del doc[LEGACY_VERSION_KEY]
    doc = check_version(
        doc,
        schema=SCHEMA,
        version=VERSION,
        where=str(path),
        upgrades=UPGRADES,
        remedy_old="measure again with this toolkit",
    )
    try:
        jsonschema.validate(doc, _schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise FormatError(f"{path}: key {where}: {exc.message}") from None
    return doc
