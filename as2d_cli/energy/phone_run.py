"""The phone's side of an energy run as the host sees it: whether the phone is on the adb
server, its run directory (pushed files, pulled results) and the local record of it
(``phone_run.json``)."""

from __future__ import annotations

import json
import posixpath
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from as2d_cli.energy.perfetto_capture import remove_trace
from as2d_cli.energy.results import TRACE_NAME, stopped_line
from as2d_cli.errors import DeviceError, UserError
from as2d_cli.formats import registry
from as2d_cli.formats.common import write_atomic
from device_agents.base import Device

PHONE_RUN = "phone_run.json"  # the phone's identity and where its run lives (for --collect)


PHONE_RUN_SCHEMA, PHONE_RUN_VERSION = registry.name_version("as2d.energy-phone-run")


AWAY_GRACE_S = 600.0  # how long past the trace's end a phone that left may take to return


PULL_DEPTH = 4  # subdirectories of the phone's run directory pulled this deep


class PhoneAway(DeviceError):
    """The phone left and did not come back in time; its run stays on it for `collect`."""


class PhoneGone(Exception):
    """Internal: the phone is not on the adb server any more."""


def is_attached(port: int, serial: str) -> bool:
    import adbutils

    try:
        client = adbutils.AdbClient(host="127.0.0.1", port=port, socket_timeout=5)
        return any(d.serial == serial and d.state == "device" for d in client.list())
    except Exception:  # noqa: BLE001 - a server hiccup reads as "not there yet"
        return False


def wait_presence(port: int, serial: str, present: bool, timeout_s: float) -> bool:
    """Wait until `serial` is attached in state 'device' (present=True) or has left the
    adb server (present=False). The server's track-devices stream (adbutils) wakes us on
    every change; the device list is the truth checked after each wake-up. False on timeout.
    """
    import adbutils

    wake: queue.Queue[object] = queue.Queue()
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            client = adbutils.AdbClient(host="127.0.0.1", port=port, socket_timeout=2)
            try:
                for ev in client.track_devices():
                    wake.put(ev)
                    if stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - read timeouts and server restarts: re-subscribe
                time.sleep(0.2)

    threading.Thread(target=pump, name="as2d-track-devices", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if is_attached(port, serial) == present:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                wake.get(timeout=min(1.0, left))
            except queue.Empty:
                pass
    finally:
        stop.set()


@dataclass
class PhoneRun:
    """One run directory on the phone and the local run folder it is pulled into."""

    device: Device
    port: int
    run_dir: str
    trace: str
    out_dir: Path
    exclude: set[str]

    @property
    def raw(self) -> Path:
        return self.out_dir / "raw"

    def present(self) -> bool:
        return is_attached(self.port, self.device.serial)

    def _gone_or(self, exc: DeviceError) -> DeviceError:
        if not self.present():
            raise PhoneGone() from exc
        return exc

    def cat(self, name: str) -> str:
        try:
            return self.device.shell(["cat", f"{self.run_dir}/{name}"], deadline_s=15).stdout
        except DeviceError as exc:
            raise self._gone_or(exc) from None

    def holds_run(self) -> bool:
        try:
            return self.device.shell(["test", "-d", self.run_dir], deadline_s=15).exit_code == 0
        except DeviceError as exc:
            raise self._gone_or(exc) from None

    def launched(self) -> bool:
        """Whether the episode was ever started: its launch line makes episode.log first."""
        try:
            return (
                self.device.shell(
                    ["test", "-e", f"{self.run_dir}/episode.log"], deadline_s=15
                ).exit_code
                == 0
            )
        except DeviceError as exc:
            raise self._gone_or(exc) from None

    def pull_all(self) -> None:
        """Every file the episode wrote (episode.log included, subdirectories to a bounded
        depth) into raw/, and the trace beside it. An entry that cannot be pulled while the
        phone is here is listed in pull_skipped.txt; a phone that left raises PhoneGone."""
        self.raw.mkdir(parents=True, exist_ok=True)
        skipped: list[str] = []
        try:
            names = self.device.list_dir(self.run_dir, deadline_s=15)
        except DeviceError as exc:
            raise self._gone_or(exc) from None
        for name in names:
            if name in self.exclude or "/" in name or name in (".", ".."):
                continue
            self._pull_tree(f"{self.run_dir}/{name}", self.raw / name, name, skipped, 0)
        try:
            self.device.pull(self.trace, self.out_dir / TRACE_NAME)
        except DeviceError as exc:
            self._gone_or(exc)
            skipped.append(f"trace {self.trace}: {exc}")
        note = self.out_dir / "pull_skipped.txt"
        if skipped:
            note.write_text("\n".join(skipped) + "\n")
        elif note.exists():
            note.unlink()  # an earlier attempt's note; everything came this time

    def _pull_tree(
        self, remote: str, local: Path, shown: str, skipped: list[str], depth: int
    ) -> None:
        try:
            self.device.pull(remote, local)
            return
        except DeviceError as exc:
            first = self._gone_or(exc)
        try:
            entries = self.device.list_dir(remote, deadline_s=15)
        except DeviceError as exc:
            raise self._gone_or(exc) from None
        entries = [e for e in entries if "/" not in e and e not in (".", "..")]
        if not entries or depth >= PULL_DEPTH:  # unreadable, an empty directory, or too deep
            skipped.append(f"{shown}: {first}")
            return
        local.mkdir(parents=True, exist_ok=True)
        for e in entries:
            self._pull_tree(f"{remote}/{e}", local / e, f"{shown}/{e}", skipped, depth + 1)

    def remove(self) -> None:
        """Delete the run directory and the trace from the phone (after pull_all). The
        local record says ``collected`` first: a host killed while removing leaves a
        leftover on the phone, never a folder that waits for files the phone no longer has."""
        update_phone_run(self.out_dir, state="collected")
        try:
            self.device.shell(["rm", "-rf", self.run_dir], deadline_s=30)
        except DeviceError:
            pass  # the phone left after everything was pulled: a leftover, nothing lost
        remove_trace(self.device, self.trace)


def make_remote_dir(dev: Device) -> str:
    """A fresh per-run directory, as Device.run_dir makes it, that outlives this process:
    it is removed only once everything in it has been pulled."""
    path = posixpath.join(dev.run_root(), f"as2d-energy-{uuid.uuid4().hex[:8]}")
    dev.shell(["mkdir", "-p", path]).check(f"creating {path}")
    return path


def write_phone_run(out_dir: Path, doc: dict) -> None:
    write_atomic(out_dir / PHONE_RUN, (json.dumps(doc, indent=2) + "\n").encode(), force=True)


def update_phone_run(out_dir: Path, **changes: object) -> None:
    path = out_dir / PHONE_RUN
    if path.exists():
        doc = json.loads(path.read_text())
        doc.update(changes)
        write_phone_run(out_dir, doc)


def never_on_phone_line(out_dir: Path, missing: str) -> str:
    return (
        f"{out_dir} has no {missing}: `as2d energy` was stopped before it started the run on "
        "the phone, so nothing was measured; measure again and delete this folder"
    )


def load_phone_run(out_dir: Path) -> dict:
    path = out_dir / PHONE_RUN
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        if (out_dir / "plan.json").exists() and not (out_dir / TRACE_NAME).exists():
            raise UserError(never_on_phone_line(out_dir, PHONE_RUN)) from None
        raise UserError(
            f"{out_dir} has no {PHONE_RUN}; it is not a run folder `as2d energy` "
            "left on a phone — analyse it with --from-run, or rerun"
        ) from None
    except ValueError as exc:
        raise UserError(f"{path} is damaged ({exc}); rerun the measurement") from None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != PHONE_RUN_SCHEMA
        or doc.get("version") != PHONE_RUN_VERSION
    ):
        raise UserError(
            f"{path} is not an {PHONE_RUN_SCHEMA} version {PHONE_RUN_VERSION} record; use the as2d "
            "version that measured it"
        )
    for key in ("serial", "adb_port", "run_dir", "trace"):
        if key not in doc:
            raise UserError(f"{path} lacks {key!r}; rerun the measurement")
    return doc


def write_json(path: Path, doc: dict) -> None:
    write_atomic(path, (json.dumps(doc, indent=1) + "\n").encode(), force=True)


def raise_if_stopped(path: Path) -> None:
    line = stopped_line(path)
    if line is not None:
        raise DeviceError(line)


NOT_STARTED = "not-started"  # phone_run.json's state when the episode never ran


def not_started_line(out_dir: Path) -> str:
    return (
        f"{out_dir}: the episode never started on the phone (`as2d energy` was stopped "
        "before it launched it), so nothing was measured; measure again and delete this folder"
    )


def episode_launched(ph: PhoneRun, grace_s: float = 3.0) -> bool:
    """Whether the episode ever started; a launch the killed host had just sent gets
    ``grace_s`` to show up on the phone."""
    limit = time.monotonic() + grace_s
    try:
        while not ph.launched():
            if time.monotonic() >= limit:
                return False
            time.sleep(0.5)
    except PhoneGone:
        raise UserError(
            f"phone {ph.device.serial} left again; reattach it and run "
            f"`as2d energy --collect {ph.out_dir}`"
        ) from None
    return True
