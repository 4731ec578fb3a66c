"""A native evaluation's records in its results folder, appended as the work finishes, and
what resuming one (``as2d eval --native --append RUN_DIR``) checks against them.

* ``native.settings.json``: what the run measures — the windows picked (and how many were
  asked for), the repetitions and warm-up passes, the methods and their decode settings,
  the deployment, the profile (path and sha256), the model pair and the device's identity.
  Written once when the native part starts; an ``--append`` with other settings is refused.
* ``native.runs.jsonl``: one line per finished run (window × pass × method), the runner's
  result as it came (``res``).
* ``native.gates.jsonl``: the gate's record before each window's runs in each pass.
* ``native_monitor.jsonl``: the 1 Hz monitor's record of each window's runs in each pass
  (samples, failure) with the host's CPU busy and steal fractions over them (``cpu``).

Every line is flushed and fsynced as it is written; a line torn by a crash is dropped when
the run is resumed. ``session`` in each line counts the invocations (0: the first).

While the native part runs, the folder's manifest says it is incomplete and names the
command that resumes it (:func:`mark_native`); once its outputs are written every file is
recorded in it (``native.run_native_eval``). ``--append`` checks the folder against the
manifest first (``compare.verify_run``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from as2d_cli.engine.methods import DECOUPLED, DEFAULT_BATCH, MethodSpec
from as2d_cli.errors import UserError
from as2d_cli.formats.common import append_jsonl, mark_writing, read_manifest, write_atomic
from as2d_cli.formats.deployment import UNRECORDED_ALIGN, UNRECORDED_HISTORY

SETTINGS = "native.settings.json"
RUNS = "native.runs.jsonl"
GATES = "native.gates.jsonl"
MONITOR = "native_monitor.jsonl"
RESULTS = "native.json"
TABLE = "native.txt"
PER_RUN = "native_per_window.csv"
PLOT = "native_vs_replay.png"
# Every file the native part writes (the plot only when a run was measured).
NATIVE_FILES = (SETTINGS, RUNS, GATES, MONITOR, RESULTS, TABLE, PER_RUN, PLOT)
WRITER = "as2d eval --native"  # the writer a manifest names while the native part runs
# What must match for an --append: the measurement itself and where it runs.
COMPARED = (
    "window_count",
    "repeats",
    "warmup",
    "methods",
    "commands",
    "deployment",
    "profile",
    "pair",
    "device",
    "placement",
)


@dataclass
class EvalRun:
    """What the native evaluation needs of the replay part: its results folder, and the
    test windows, deployment and profile it evaluated."""

    folder: Path
    results: Path
    table: str
    profile_path: Path
    deployment_path: Path
    window_ids: list[str]
    datasets: dict[str, str]
    deployment: Any  # source, budget, threshold, batch

    @classmethod
    def of(cls, out: Any) -> EvalRun:
        """From ``evaluate.run.run_eval``'s output (an EvalRun passes through)."""
        if isinstance(out, cls):
            return out
        ev = out.evaluation
        return cls(
            out.folder,
            out.results,
            out.table,
            Path(out.profile_path),
            Path(out.deployment_path),
            list(ev.window_ids),
            {w: r.dataset for w, r in zip(ev.window_ids, ev.runs["target-only"].windows)},
            ev.deployment,
        )


def reopen_eval(
    folder: Path, *, native: bool, profile: Path | None = None, deployment: Path | None = None
) -> EvalRun:
    """The results folder of an interrupted ``as2d eval --native``, for ``--append``: its
    replay results stand as written, and the native part goes on with the windows,
    deployment and profile it recorded (a ``--profile`` or ``--deployment`` given must be
    those files)."""
    from as2d_cli.evaluate.compare import verify_run

    folder = Path(folder)
    if not native:
        raise UserError(f"--append {folder} resumes a native evaluation; add --native")
    if not (folder / "results.json").is_file():
        raise UserError(
            f"--append {folder}: not an `as2d eval` results folder (no results.json); give the folder "
            "an interrupted `as2d eval --native` named"
        )
    manifest = verify_run(folder, resumes=WRITER)  # the replay part as written, untouched
    if not (folder / SETTINGS).is_file():
        raise UserError(
            f"--append {folder}: no native evaluation was started there (no {SETTINGS}); run "
            "`as2d eval --native` without --append"
        )
    # native.json of a run whose finishing was cut short is written again
    finishing = manifest is not None and not manifest["complete"]
    if (folder / RESULTS).exists() and not finishing:
        raise UserError(
            f"--append {folder}: its native evaluation is complete ({RESULTS}); nothing to resume"
        )
    s = json.loads((folder / SETTINGS).read_text(encoding="utf-8"))
    from as2d_cli.formats.common import sha256_file

    for given, key, opt in (
        (profile, "profile", "--profile"),
        (deployment, "deployment", "--deployment"),
    ):
        if given is not None and sha256_file(given) != s[key]["sha256"]:
            raise UserError(
                f"--append {folder}: that run used the {key} {s[key]['path']}, not {given}; leave "
                f"{opt} out (the run's own is used) or start a new run without --append"
            )
    dep = recorded_deployment(s["deployment"])
    return EvalRun(
        folder,
        folder / "results.json",
        _text(folder / "table.txt"),
        Path(s["profile"]["path"]),
        Path(dep["path"]),
        list(s["windows"]),
        dict(s["datasets"]),
        SimpleNamespace(
            **{k: dep[k] for k in ("source", "budget", "threshold", "batch", "align", "history")}
        ),
    )


def recorded_deployment(dep: Mapping[str, Any]) -> dict[str, Any]:
    """``native.settings.json``'s deployment with the settings a run recorded before they
    were recorded read as they ran: the paper's alignment rules, no history candidates."""
    return {"align": UNRECORDED_ALIGN, "history": UNRECORDED_HISTORY, **dep}


class NativeRecord:
    """The record files of one native evaluation (see the module's docstring)."""

    def __init__(self, folder: Path, settings: dict[str, Any]) -> None:
        self.folder = folder
        self.settings = settings
        self.resumed = False  # opened by --append
        for name in (RUNS, GATES, MONITOR):
            _repair(folder / name)
        earlier = [r.get("session", 0) for name in (RUNS, GATES, MONITOR) for r in self._read(name)]
        self.session = 1 + max(earlier) if earlier else 0

    @staticmethod
    def check_fresh(folder: Path) -> None:
        """Refuse a folder that already holds a native evaluation (before anything is written)."""
        if (folder / SETTINGS).exists():
            raise UserError(
                f"{folder} already holds a native evaluation; resume it with --append {folder}"
            )

    @classmethod
    def start(cls, folder: Path, settings: dict[str, Any]) -> NativeRecord:
        cls.check_fresh(folder)
        write_atomic(folder / SETTINGS, (json.dumps(settings, indent=1) + "\n").encode())
        return cls(folder, settings)

    @classmethod
    def resume(cls, folder: Path, requested: dict[str, Any]) -> NativeRecord:
        """The recorded run, if ``requested`` (this command's settings) measures the same."""
        recorded = json.loads((folder / SETTINGS).read_text(encoding="utf-8"))
        if recorded.get("commands") is not None:  # as this version writes them
            recorded["commands"] = upgrade_commands(recorded["commands"])
        if isinstance(recorded.get("deployment"), dict):
            recorded["deployment"] = recorded_deployment(recorded["deployment"])
        differ = [k for k in COMPARED if recorded.get(k) != requested.get(k)]
        if "commands" in differ and ("deployment" in differ or "profile" in differ):
            differ.remove("commands")  # the decode settings follow from those
        diffs = [
            f"{k} {_show(k, recorded.get(k))} (this command: {_show(k, requested.get(k))})"
            for k in differ
        ]
        if diffs:
            raise UserError(
                f"--append {folder}: that run was made with {'; '.join(diffs)}; resume it with its own "
                "settings, or start a new run without --append"
            )
        record = cls(folder, recorded)
        record.resumed = True
        return record

    def path(self, name: str) -> Path:
        return self.folder / name

    def _read(self, name: str) -> list[dict]:
        p = self.folder / name
        if not p.exists():
            return []
        return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]

    def runs(self) -> list[dict]:
        return self._read(RUNS)

    def gates(self) -> list[dict]:
        return self._read(GATES)

    def monitor(self) -> list[dict]:
        return self._read(MONITOR)

    def done(self) -> dict[tuple[str, int, str], float]:
        """(window, pass, method) of every finished run, with its native TPS."""
        return {(r["window"], r["rep"], r["method"]): r["res"]["tps"] for r in self.runs()}

    def append(self, name: str, rec: dict[str, Any]) -> None:
        append_jsonl(self.folder / name, [{**rec, "session": self.session}])

    def kept(self) -> str:
        n = sum(1 for _ in self.runs())
        return f"{n} finished run{'s' if n != 1 else ''} kept in {self.folder}"


def mark_native(folder: Path, resume: str) -> None:
    """Before the native part writes into ``folder``: its manifest says incomplete, naming
    the native files as pending and ``resume`` as the command that resumes them; the replay
    part's entries stay as recorded. A folder written before manifests is left as it is."""
    manifest = read_manifest(folder)
    if manifest is None:
        return
    mark_writing(
        folder,
        writing=WRITER,
        pending=NATIVE_FILES,
        command=resume,
        in_place=True,
        files=manifest["files"],
    )


def _show(key: str, v: Any) -> str:
    """A setting as one short phrase for the refusal."""
    if v is None:
        return "none"
    if key == "device":
        return f"{v.get('name')} (serial {v.get('serial')})"
    if key == "pair":
        return (
            str(v.get("name"))
            + (f" {v['sha256'][:12]}" if v.get("sha256") else "")
            + "".join(f" {k} {v[k]}" for k in ("task", "language") if v.get(k))
        )
    if key == "deployment":
        return (
            f"{v['path']} ({v['source']}/budget {v['budget']}, threshold {v['threshold']}, batch {v['batch']}; "
            f"sha256 {v['sha256'][:12]})"
        )
    if key == "profile":
        return f"{v['path']} (sha256 {v['sha256'][:12]})"
    if key == "methods":
        return ",".join(v)
    if key == "commands":
        return ", ".join(
            m + "".join(f" {k} {x}" for k, x in c.items() if k != "method" and x is not None)
            for m, c in v.items()
        )
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return str(v)


def _upgraded(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A stored command or result with runner protocol version 1's name read: ``cap``
    (ASP's and w/o BC's cap, which MethodSpec's wire form calls ``budget``)."""
    out = dict(doc)
    cap = out.pop("cap", None)
    if cap is not None and out.get("method") in ("asp", "as2d-no-bc"):
        out["budget"] = cap
    return out


def upgrade_commands(commands: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``native.settings.json``'s decode settings per method in MethodSpec's wire form,
    whichever protocol version wrote them (version 1 left out the defaults)."""
    return {
        m: MethodSpec.from_wire(_upgraded({"method": m, **c})).to_wire()
        for m, c in commands.items()
    }


def run_spec(res: Mapping[str, Any]) -> MethodSpec:
    """The method settings a recorded run ran with, read from its result (their wire form,
    ``source`` the one that ran); a run recorded before the result carried its alignment
    rules ran the paper's."""
    doc = _upgraded(res)
    if doc.get("method") in DECOUPLED:
        doc["align"] = doc.get("align") or UNRECORDED_ALIGN
        doc["batch"] = doc.get("batch") or DEFAULT_BATCH
    return MethodSpec.from_wire(doc)


def _repair(path: Path) -> None:
    """Drop a last line torn by a crash (no newline, or not JSON), so appends stay lines."""
    if not path.exists():
        return
    data = path.read_bytes()
    keep = data if data.endswith(b"\n") or not data else data[: data.rfind(b"\n") + 1]
    lines = keep.splitlines(keepends=True)
    if lines:
        try:
            json.loads(lines[-1])
        except ValueError:
            keep = b"".join(lines[:-1])
    if keep != data:
        with open(path, "wb") as f:
            f.write(keep)
            f.flush()
            os.fsync(f.fileno())


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""
