"""The host while the phone measures: the core monitor whenever it reaches the phone, the
wait for the episode's end and the trace's, and what a failure midway still pulls."""

from __future__ import annotations

import time
from collections.abc import Callable

from as2d_cli.energy.capture_config import CaptureSpec
from as2d_cli.energy.episode_script import STOP_HOST, TRACE_ENDED, parse_uptime_ns
from as2d_cli.energy.perfetto_capture import wait_trace_end
from as2d_cli.energy.phone_run import PhoneAway, PhoneGone, PhoneRun, wait_presence, write_json
from as2d_cli.energy.results import MONITOR_NAME, TRACE_NAME
from as2d_cli.errors import As2dError, DeviceError, UserError
from as2d_cli.reporting import Say
from device_agents.monitor import CoreMonitor, FailureRecord


class PhoneMonitor:
    """The 1 Hz monitor over an energy run: it samples the phone whenever it reaches it
    (a phone away on purpose, unplugged, does not trip it); a core going offline writes
    ``stop.host`` into the run directory with the boot-clock boundary after which a request
    ran without that core, so the episode skips the rest. Its record goes to monitor.json
    when it stops (once the episode is done, or when the run ends otherwise)."""

    def __init__(self, ph: PhoneRun, interval_s: float) -> None:
        self.ph = ph
        self.monitor = CoreMonitor(ph.device, interval_s, on_trip=self._stop_episode, away_ok=True)
        self.started = False
        self.stopped = False

    def start(self) -> None:
        self.monitor.start()
        self.started = True

    def stop(self) -> None:
        if not self.started or self.stopped:
            return
        self.stopped = True
        self.monitor.stop()
        write_json(self.ph.out_dir / MONITOR_NAME, self.monitor.record())

    def _stop_episode(self, failure: FailureRecord) -> None:
        if failure.kind != "core_offline":
            return
        import shlex

        dev, rd = self.ph.device, self.ph.run_dir
        try:
            if self.ph.cat("state").strip() == "done":
                return  # every request has ended: nothing left to stop
        except (As2dError, PhoneGone):
            pass
        gone = ",".join(map(str, failure.detail.get("offline", [])))
        at = time.strftime("%H:%M:%S", time.localtime(failure.wall_time))
        why = f"CPU{gone} went offline on {dev.serial} (the host's monitor, at {at})"
        last_good = failure.detail.get("last_good_wall_time") or failure.wall_time
        head = ""
        try:
            # The phone's boot clock now, and the two samples on it. The host's time is
            # taken after the round trip: both stamps come out earlier, never later, than
            # the samples — an earlier boundary marks more requests, never fewer.
            up = parse_uptime_ns(dev.shell(["cat", "/proc/uptime"], deadline_s=10).stdout, "up")
            now = time.time()
            good = up - int((now - float(last_good)) * 1e9)
            trip = up - int((now - failure.wall_time) * 1e9)
            head = f"boundary_boot_ns={max(0, good)} trip_boot_ns={max(0, trip)} "
        except (As2dError, ValueError):
            pass  # no boundary: the request that was running is marked by the episode
        try:
            dev.shell(
                f"echo {shlex.quote(head + why)} > {shlex.quote(f'{rd}/{STOP_HOST}')}",
                deadline_s=10,
            )
        except As2dError:
            pass  # away: the episode's own checks around each request still apply


def away_error(ph: PhoneRun, waited_s: float) -> PhoneAway:
    return PhoneAway(
        f"phone {ph.device.serial} did not come back within {waited_s:.0f} s; its "
        f"run stays on the phone in {ph.run_dir} — reattach it and run "
        f"`as2d energy --collect {ph.out_dir}`"
    )


def salvaged(ph: PhoneRun, exc: As2dError, say: Say) -> As2dError:
    """After a failure midway: pull what the phone wrote, then remove its run directory.
    Returns the one-line error to raise (naming the local run folder)."""
    try:
        if ph.present() and ph.holds_run():
            say("Pulling what the phone wrote before giving up.")
            ph.pull_all()
            ph.remove()
    except PhoneGone:
        return PhoneAway(
            f"{exc}; phone {ph.device.serial} left before its records were "
            f"pulled — they stay on it in {ph.run_dir}: reattach it and run "
            f"`as2d energy --collect {ph.out_dir}`"
        )
    except As2dError:
        pass  # pulling is best effort here; the original error is the one to report
    if not ph.present():
        return PhoneAway(
            f"{exc}; phone {ph.device.serial} is gone — its run stays on it in "
            f"{ph.run_dir}: reattach it and run `as2d energy --collect {ph.out_dir}`"
        )
    msg = str(exc)
    if str(ph.out_dir) not in msg:
        msg = f"{msg} (what the phone wrote is in {ph.out_dir})"
    return UserError(msg) if isinstance(exc, UserError) else DeviceError(msg)


def finish_on_phone(
    ph: PhoneRun,
    spec: CaptureSpec,
    episode_s: float,
    away_s: float,
    say: Say,
    on_done: Callable[[], None] | None = None,
) -> None:
    """Wait for the episode and the bounded trace to end, pull everything, then remove the
    phone's copy. A phone that leaves meanwhile is waited for up to `away_s`, then PhoneAway.
    ``on_done`` is called once the episode is done (the monitor stops there)."""
    dev = ph.device
    for _ in range(3):
        try:
            _wait_episode_done(ph, episode_s)
            if on_done is not None:
                on_done()
            rc = ph.cat("perfetto.rc").strip()
            if rc != "0":
                err = ph.cat("perfetto.err").strip().splitlines()
                raise DeviceError(
                    f"perfetto failed on {dev.serial} (exit {rc or 'unknown'}: "
                    f"{err[-1] if err else 'no output'}); check that traced runs "
                    f"(setprop persist.traced.enable 1) — the phone's records are "
                    f"in {ph.raw}"
                )
            if not ph.cat(TRACE_ENDED).strip():  # the episode did not end it: its bound will
                started = parse_uptime_ns(ph.cat("t_trace_started"), "t_trace_started")
                try:
                    wait_trace_end(
                        dev, started, spec.duration_ms, deadline_s=spec.duration_ms / 1000 + 60
                    )
                except DeviceError as exc:
                    raise ph._gone_or(exc) from None
            ph.pull_all()
            if not (ph.out_dir / TRACE_NAME).exists():
                raise DeviceError(
                    f"the phone has no trace at {ph.trace} although perfetto "
                    "started (see pull_skipped.txt)"
                )
            ph.remove()
            return
        except PhoneGone:
            pass
        say(
            f"Phone {dev.serial} is not reachable; waiting up to {away_s:.0f} s for it to "
            "come back (reattach it)."
        )
        if not wait_presence(ph.port, dev.serial, True, away_s):
            raise away_error(ph, away_s)
        say("Phone is back.")
    raise away_error(ph, away_s)


def _wait_episode_done(ph: PhoneRun, budget_s: float) -> None:
    limit = time.monotonic() + budget_s
    last = ""
    while time.monotonic() < limit:
        last = ph.cat("state").strip()
        if last == "done":
            return
        time.sleep(0.5)
    raise DeviceError(
        f"the episode on {ph.device.serial} did not finish within {budget_s:.0f} s "
        f"(state: {last or 'not started'}); see episode.log"
    )
