"""A run folder analysed (after a run, or again with ``--from-run``) and a run the phone
kept collected later (``--collect``)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from as2d_cli.energy.analysis import analyse_episode
from as2d_cli.energy.capture_config import COUNTERS_OPTIONAL, COUNTERS_REQUIRED, CaptureSpec
from as2d_cli.energy.episode_records import format_episode
from as2d_cli.energy.episode_script import EpisodePlan, assemble_episode
from as2d_cli.energy.phone_run import (
    NOT_STARTED,
    PHONE_RUN,
    PhoneAway,
    PhoneGone,
    PhoneRun,
    episode_launched,
    is_attached,
    load_phone_run,
    never_on_phone_line,
    not_started_line,
    raise_if_stopped,
    update_phone_run,
)
from as2d_cli.energy.phone_wait import finish_on_phone, salvaged
from as2d_cli.energy.refusals import MeasurementRefused
from as2d_cli.energy.results import TRACE_NAME, conditions_of, stopped_line, write_results
from as2d_cli.energy.table import short_window_lines
from as2d_cli.energy.trace_reader import read_battery_series
from as2d_cli.errors import As2dError, DeviceError, UserError
from as2d_cli.formats.common import INCOMPLETE, write_atomic
from as2d_cli.reporting import Say
from device_agents.base import Device


def _read_text_files(folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        if p.is_file():
            out[p.name] = p.read_text(errors="replace")
    return out


def analyse_run_folder(
    out_dir: Path,
    plan: EpisodePlan,
    spec: CaptureSpec,
    baseline: str | None,
    phone_facts: dict,
    say: Say | None = None,
) -> Path:
    """Analyse a folder holding raw/ records and the trace; write results (or refused.txt)."""
    episode = assemble_episode(plan, _read_text_files(out_dir / "raw"))
    write_atomic(out_dir / "episode.tsv", format_episode(episode).encode("utf-8"), force=True)
    try:
        series = read_battery_series(out_dir / TRACE_NAME)
        if series.lost_bytes and say is not None:
            say(
                f"{out_dir / TRACE_NAME} was cut mid-packet: {series.lost_bytes} of "
                f"{series.trace_bytes} bytes after its last whole packet were lost; analysing "
                f"the {series.packets} whole packets"
            )
        analysis = analyse_episode(series, episode, baseline=baseline)
        if analysis.sign_note and say is not None:
            say(analysis.sign_note[0].upper() + analysis.sign_note[1:] + ".")
        if say is not None:
            for line in short_window_lines(analysis):
                say(line)
    except MeasurementRefused as exc:
        write_atomic(out_dir / "refused.txt", (str(exc) + "\n").encode("utf-8"), force=True)
        raise MeasurementRefused(f"{exc} (trace and records kept in {out_dir})") from None
    counters = list(series.counters_requested) or list(COUNTERS_REQUIRED + COUNTERS_OPTIONAL)
    return write_results(
        out_dir,
        analysis,
        episode,
        out_dir / TRACE_NAME,
        spec,
        phone_facts,
        asdict(plan),
        counters,
        conditions=conditions_of(out_dir, episode),
    )


def _load_plan(out_dir: Path) -> tuple[EpisodePlan, CaptureSpec, str]:
    try:
        doc = json.loads((out_dir / "plan.json").read_text())
        p = dict(doc["plan"])
        p["methods"] = tuple(p["methods"])
        p["method_cmds"] = tuple(tuple(x) for x in p.get("method_cmds", ()))
        plan = EpisodePlan(**p)
        spec = CaptureSpec(duration_ms=int(doc["duration_ms"]), poll_ms=int(doc["poll_ms"]))
        connection = doc.get("connection", "usb")
    except FileNotFoundError:
        if (out_dir / INCOMPLETE).exists():
            raise UserError(never_on_phone_line(out_dir, "plan.json")) from None
        raise UserError(
            f"{out_dir} has no plan.json; pass a folder written by `as2d energy`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{out_dir}/plan.json is damaged ({exc}); it was not written by this as2d version"
        ) from None
    return plan, spec, connection


def _keep_old_refusal(out_dir: Path) -> None:
    refused = out_dir / "refused.txt"
    if refused.exists():
        refused.rename(out_dir / f"refused-{int(time.time())}.txt")  # keep the old verdict


def _find_phone(port: int, rec: dict, out_dir: Path) -> Device:
    """The phone that holds the run: its adb serial, else any attached phone with the same
    hardware serial (a wireless adb serial changes with every connection)."""
    from device_agents.adb_phone import AdbPhone
    from device_agents.identity import find_attached

    serial = rec["serial"]
    hw = (rec.get("identity") or {}).get("serial")
    if not hw and is_attached(port, serial):
        return AdbPhone(serial, port)
    dev = find_attached(hw, port, prefer=serial) if hw else None
    if dev is not None:
        return dev
    raise UserError(
        f"phone {serial}{f' (serial {hw})' if hw and hw != serial else ''} is not "
        f"attached to the adb server on port {port}; reattach it (USB cable, or "
        f"`adb connect`) and run `as2d energy --collect {out_dir}` again"
    )


def collect(
    out_dir: Path,
    baseline: str | None = "target-only",
    say: Say = lambda _: None,
    adb_port: int | None = None,
    away_s: float = 60.0,
) -> Path:
    """Fetch a run the phone kept (the host gave up waiting, or was interrupted), then
    analyse it like a finished run. Writes energy.json only into a folder that has none."""
    out_dir = Path(out_dir)
    if (out_dir / "energy.json").exists():
        raise UserError(
            f"{out_dir} already has energy.json; results are never overwritten — read that file"
        )
    plan, spec, connection = _load_plan(out_dir)
    rec = load_phone_run(out_dir)
    if rec.get("state") == "collected":
        raise UserError(
            f"{out_dir}: the phone's files were already collected; analyse them "
            f"with `as2d energy --from-run {out_dir}`"
        )
    if rec.get("state") == NOT_STARTED:
        raise UserError(not_started_line(out_dir))
    port = int(adb_port or rec["adb_port"])
    dev = _find_phone(port, rec, out_dir)
    ph = PhoneRun(dev, port, rec["run_dir"], rec["trace"], out_dir, set(rec.get("exclude", [])))
    try:
        holds = ph.holds_run()
    except PhoneGone:
        raise UserError(
            f"phone {dev.serial} left again; reattach it and run `as2d energy --collect {out_dir}`"
        ) from None
    if not holds:
        raise UserError(
            f"phone {dev.serial} no longer holds {ph.run_dir} (removed, or the phone "
            "was reset); nothing to collect — rerun the measurement"
        )
    if not episode_launched(ph):
        # Killed before it launched the episode: nothing ran, nothing will come.
        try:
            dev.shell(["rm", "-rf", ph.run_dir], deadline_s=30)
        except DeviceError:
            pass  # a leftover on the phone; nothing was measured in it
        update_phone_run(out_dir, state=NOT_STARTED)
        raise UserError(not_started_line(out_dir))
    _keep_old_refusal(out_dir)
    say(f"Collecting {ph.run_dir} from {dev.serial} into {out_dir}.")
    episode_s = float(
        rec.get("episode_timeout_s") or plan.discharge_wait_s + spec.duration_ms / 1000 + 120
    )
    try:
        finish_on_phone(ph, spec, episode_s, away_s, say)
    except PhoneAway:
        raise
    except As2dError as exc:
        raise salvaged(ph, exc, say) from None
    facts = dict(rec.get("phone_facts") or {})
    facts.setdefault("serial", dev.serial)
    facts.setdefault("connection", connection)
    path = analyse_run_folder(out_dir, plan, spec, baseline, facts, say)
    raise_if_stopped(path)
    return path


def reanalyse(out_dir: Path, baseline: str | None = "target-only", say: Say | None = None) -> Path:
    """Analyse a run folder again (after a refusal was fixed, or after replugging late).
    Writes energy.json only if the folder has none yet: results are never overwritten."""
    out_dir = Path(out_dir)
    if (out_dir / "energy.json").exists():
        raise UserError(
            f"{out_dir} already has energy.json; results are never overwritten — "
            "read that file, or copy the folder to analyse it again"
        )
    plan, spec, connection = _load_plan(out_dir)
    rec: dict = {}
    if (out_dir / PHONE_RUN).exists():
        rec = load_phone_run(out_dir)
    if not (out_dir / "raw").is_dir() or not (out_dir / TRACE_NAME).exists():
        if rec.get("state") == NOT_STARTED:
            raise UserError(not_started_line(out_dir))
        if rec and rec.get("state") != "collected":
            raise UserError(
                f"{out_dir} lacks raw/ or {TRACE_NAME}: the phone still holds the "
                f"run — reattach it and run `as2d energy --collect {out_dir}`"
            )
        raise UserError(
            f"{out_dir} lacks raw/ or {TRACE_NAME}; the phone's files were never "
            "pulled — rerun the measurement"
        )
    if rec and rec.get("state") != "collected" and say is not None:
        say(
            f"The phone still holds this run in {rec['run_dir']}; what was pulled may be "
            f"partial — `as2d energy --collect {out_dir}` fetches all of it."
        )
    _keep_old_refusal(out_dir)
    facts = dict(rec.get("phone_facts") or {})
    facts.setdefault("connection", connection)
    path = analyse_run_folder(out_dir, plan, spec, baseline, facts, say)
    line = stopped_line(path)
    if line is not None and say is not None:
        say(line[0].upper() + line[1:] + ".")
    return path
