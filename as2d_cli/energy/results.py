"""Versioned energy results: energy.json (schema as2d.energy-result v1), the Table-15-style
table (Markdown and CSV), the raw Perfetto trace and the episode records side by side.

A run gets its own folder <results>/<device>-energy-<time>/; an existing folder is never written
into again (a second run on the same second gets a -2 suffix). From the moment it is made until
energy.json is in place, an ``INCOMPLETE`` note in it says it is not a result and what finishes
it; energy.json is written last, whole or not at all (fsynced, then linked into place), so a
folder without it — whatever killed the run — is never read as a result.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from as2d_cli import __version__
from as2d_cli.energy.analysis import SHORT_WINDOW_PERIODS, EnergyAnalysis, MethodSummary
from as2d_cli.energy.capture_config import CaptureSpec
from as2d_cli.energy.episode_records import Episode, format_episode
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import (
    INCOMPLETE,
    check_version,
    fresh_folder,
    git_commit,
    utc_now,
    write_atomic,
)

SCHEMA = "as2d.energy-result"
VERSION = 5
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


UPGRADES = {1: _upgrade_1, 2: _upgrade_2, 3: _upgrade_3, 4: _upgrade_4}


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
    text = resources.files("as2d_cli.energy").joinpath("energy_result.schema.json").read_text()
    return json.loads(text)


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


def _window_readings(analysis: EnergyAnalysis) -> str:
    n = [
        r.gauge_readings_in_window
        for r in analysis.requests
        if r.phase == "formal" and r.gauge_readings_in_window is not None
    ]
    if not n:
        return ""
    span = f"{min(n)}" if min(n) == max(n) else f"{min(n)}–{max(n)}"
    return f"; formal request windows got {span} new reading(s) each"


NATIVE_WINDOW = (
    "the window runs from the request origin to the end of both workers: the whole prefill "
    "(audio encoding and prompt), decoding and any producer drain (the paper's starts after "
    "audio encoding, at the instruction suffix)"
)
OTHER_WINDOW = (
    "the window runs from the request origin to the end of both workers as the request "
    "command stamps them (else the episode's /proc/uptime stamps); what it includes is the "
    "command's"
)


def window_includes(plan: dict[str, Any]) -> dict[str, str]:
    """Per method, what its energy window includes, from the command that ran it: a
    bundle's native request (`native.energy_request`) includes audio encoding and the whole
    prefill."""
    cmds = dict(plan.get("method_cmds") or [])
    out: dict[str, str] = {}
    for m in plan.get("methods") or []:
        cmd = str(cmds.get(m, plan.get("request_cmd", "")))
        out[str(m)] = NATIVE_WINDOW if "native.energy_request" in cmd else OTHER_WINDOW
    return out


def _f(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _energy(e: float | None, bound: float | None) -> str:
    return _f(e, ".1f") if bound is None or e is None else f"{e:.1f} ± {bound:.1f}"


def bound_notes(analysis: EnergyAnalysis) -> list[str]:
    """What the ± on the energies means, and how many windows were short for the gauge."""
    g = analysis.gauge
    if g is None or g.period_s is None:
        return []
    d = g.period_s + analysis.poll_s
    placed = [r for r in analysis.requests if r.energy_from == "readings"]
    polled = [r for r in analysis.requests if r.energy_from == "polls" and r.status == "ok"]
    noise = analysis.noise_percent or 0.0
    out = [
        f"± bound: energy from the gauge's readings placed at their update instants (± "
        f"{analysis.placement_s or 0.0:.3g} s){' on one fixed update grid' if analysis.on_grid else ''}, "
        f"each the power at its instant; off by at most 3 × the reading noise under load "
        f"({noise:.2g} % per reading) carried through the time each reading stands for, plus "
        "that time × the departure of any reading that leaves its neighbours (a transient the "
        "gauge caught), plus the placement × the step at each edge; a method's pooled "
        "energy by the sum of those terms and the noise terms in quadrature (docs/energy.md)"
    ]
    if polled or not placed:
        out.append(
            f"{len(polled)} window(s) held no reading surely inside: their energy is the polled "
            f"curve's, which shows a load step up to {d:.3g} s late (period {g.period_s:.3g} s "
            f"+ poll {analysis.poll_s:.3g} s), bounded by {d:.3g} s × the step between its edges "
            "plus 3 × the noise × √(window × period)"
        )
    for m in analysis.methods:
        if m.energy_bound_percent is not None:
            out.append(f"{m.method}: pooled energy ± {m.energy_bound_percent:.1f} %")
    short = [r for r in analysis.requests if r.phase == "formal" and r.short_window]
    if short:
        out.append(
            f"{len(short)} formal window(s) shorter than {SHORT_WINDOW_PERIODS:g} × the gauge "
            f"period ({SHORT_WINDOW_PERIODS * g.period_s:.3g} s), marked (short): the gauge's "
            "late view of the load is a large share of such a window"
        )
    return out


def short_window_lines(analysis: EnergyAnalysis) -> list[str]:
    """One line per request window shorter than SHORT_WINDOW_PERIODS × the gauge period."""
    g = analysis.gauge
    if g is None or g.period_s is None:
        return []
    out = []
    for r in analysis.requests:
        if r.short_window and r.window_s is not None and r.energy_j:
            bound = r.energy_bound_j or 0.0
            out.append(
                f"request {r.method}/{r.phase} at boot {r.origin_boot_ns / 1e9:.3f} s: its "
                f"window ({r.window_s:.2f} s) is shorter than {SHORT_WINDOW_PERIODS:g} × the "
                f"gauge period ({g.period_s:.3g} s); its energy {r.energy_j:.1f} J may be off "
                f"by ± {bound:.1f} J ({100 * bound / r.energy_j:.0f} %)"
            )
    return out


def _method_rows(analysis: EnergyAnalysis, m: MethodSummary, md: list[str], w: Any) -> None:
    """One method's rows: each formal request (a failed one keeps its row), then its
    pooled row (Markdown lines appended to ``md``, CSV rows written to ``w``)."""
    formal = [r for r in analysis.requests if r.method == m.method and r.phase == "formal"]
    for k, r in enumerate(formal, 1):
        if r.status == "ok":
            md.append(
                f"| {m.method} | {k}{' (short)' if r.short_window else ''} | "
                f"{_energy(r.energy_j, r.energy_bound_j)} | "
                f"{_f(r.mean_power_w, '.2f')} | {_f(r.response_s, '.2f')} | "
                f"{r.body_tokens} | {_f(r.j_per_token, '.3f')} |"
            )
        else:
            word = r.status.split(":", 1)[0]  # failed, stopped or not run
            md.append(f"| {m.method} | {k} | {word} | — | — | — | — |")
        w.writerow(
            [
                m.method,
                k,
                r.status,
                repr(r.energy_j),
                repr(r.mean_power_w),
                repr(r.response_s),
                repr(r.window_s),
                r.body_tokens,
                repr(r.j_per_token),
                repr(r.energy_bound_j),
                "" if r.short_window is None else str(r.short_window).lower(),
            ]
        )
    if m.status != "ok" and not formal:
        md.append(f"| {m.method} | — | {m.status.split(':', 1)[0]} | — | — | — | — |")
    if m.status == "ok" and (m.formal_requests > 1 or not formal):
        label = f"pooled ({m.measured_requests} of {m.formal_requests})"
        md.append(
            f"| {m.method} | {label} | {_energy(m.energy_j, m.energy_bound_j)} | "
            f"{_f(m.mean_power_w, '.2f')} | {_f(m.response_s, '.2f')} | "
            f"{m.body_tokens} | {_f(m.j_per_token, '.3f')} |"
        )
    if m.formal_requests > 1 or not formal or m.status != "ok":
        w.writerow(
            [
                m.method,
                "pooled",
                m.status,
                repr(m.energy_j),
                repr(m.mean_power_w),
                repr(m.response_s),
                "",
                "" if m.body_tokens is None else m.body_tokens,
                repr(m.j_per_token),
                repr(m.energy_bound_j),
                "",
            ]
        )


def _table_notes(analysis: EnergyAnalysis, windows: dict[str, str] | None) -> list[str]:
    """The notes under the table: each method against the baseline, what mean power and
    each energy window mean, the cross-check, the gauge, the bounds, what failed."""
    notes = []
    for m in analysis.methods:
        if m.energy_vs_baseline_percent is not None:
            notes.append(
                f"{m.method} vs {analysis.baseline}: energy "
                f"{m.energy_vs_baseline_percent:+.1f} %, J/token "
                f"{m.j_per_token_vs_baseline_percent:+.1f} %"
            )
    notes.append(
        "mean power = energy / response time (to target EOS), as in the paper; energy "
        "covers the window, which ends when both workers have finished"
    )
    for text in dict.fromkeys((windows or {}).values()):
        which = [m for m, t in (windows or {}).items() if t == text]
        notes.append(f"{', '.join(which)}: {text}")
    c = analysis.cross_check
    if c.discrepancy_percent is not None:
        notes.append(
            f"cross-check over {c.interval_s:.1f} s: current integrates to "
            f"{c.integrated_mah:.2f} mAh vs charge-counter drop "
            f"{c.charge_drop_mah:.2f} mAh ({c.discrepancy_percent:.1f} % discrepancy)"
            + (
                f"; {c.excluded_charging_samples} poll(s) taken while charging left out"
                if c.excluded_charging_samples
                else ""
            )
        )
    else:
        notes.append(f"cross-check: {c.note}")
    if analysis.sign_note:
        notes.append(analysis.sign_note)
    if analysis.gauge is not None:
        notes.append(analysis.gauge.describe(analysis.poll_s) + _window_readings(analysis))
    notes += bound_notes(analysis)
    failed = [r for r in analysis.requests if r.phase == "formal" and r.status != "ok"]
    notes += [
        f"formal request {r.method} failed: {r.status}"
        if r.status.startswith("failed")
        else f"formal request {r.method} {r.status}"
        for r in failed
    ]
    notes += [f"{m.method}: {m.status}" for m in analysis.methods if m.status != "ok"]
    if analysis.trace_lost_bytes:
        notes.append(
            f"trace cut mid-packet: the last {analysis.trace_lost_bytes} of "
            f"{analysis.trace_bytes} bytes were lost; analysed up to the last whole "
            "packet"
        )
    return notes


def render_table(
    analysis: EnergyAnalysis, windows: dict[str, str] | None = None
) -> tuple[str, str]:
    """(Markdown, CSV) of the formal requests, one row each, as the paper's Table 15
    (mean power = energy / response time), and per method with more than one its pooled
    row; a failed request keeps its row, and a method whose requests all failed stays in
    the table with its failure. `windows`: per method, what its energy window includes."""
    head = [
        "Method",
        "Request",
        "Energy (J)",
        "Mean power (W)",
        "Response (s)",
        "Body tokens",
        "J/token",
    ]
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "method",
            "request",
            "status",
            "energy_j",
            "mean_power_w",
            "response_s",
            "window_s",
            "body_tokens",
            "j_per_token",
            "energy_bound_j",
            "short_window",
        ]
    )
    for m in analysis.methods:
        _method_rows(analysis, m, md, w)
    notes = _table_notes(analysis, windows)
    md_text = "\n".join(md) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return md_text, buf.getvalue()


def new_run_dir(results_root: Path, phone_name: str, now: datetime | None = None) -> Path:
    """A fresh folder ``results/<device>-energy-<UTC time>/`` (the rule every result
    folder follows: device_agents.identity.results_stem); never an existing one. It is
    marked incomplete (:func:`mark_incomplete`) until :func:`write_results` finishes it."""
    from device_agents.identity import results_stem

    now = now or datetime.now(UTC)
    folder = fresh_folder(Path(results_root) / results_stem(phone_name, "energy", now.timestamp()))
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
            "schema_version": VERSION,
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
    doc = check_version(
        doc,
        schema=SCHEMA,
        version=VERSION,
        where=str(path),
        key="schema_version",
        upgrades=UPGRADES,
        remedy_old="measure again with this toolkit",
    )
    try:
        jsonschema.validate(doc, _schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise FormatError(f"{path}: key {where}: {exc.message}") from None
    return doc
