"""The unattended on-device episode: a generated POSIX sh script, and the host-side
assembly of its raw records into an Episode.

The script is straight-line on purpose (no loops, no command substitution): it runs under
Android's mksh and under the emulated phone's small shell alike, and it has no state to get
wrong while nobody is watching. It

1. waits (bounded) until the battery reports Discharging — USB is out;
2. starts Perfetto in the background with the pushed binary config (bounded duration);
3. runs one warm-up and the formal requests of each method in the configured order,
   stamping each request's origin and end on the boot-time clock (/proc/uptime);
4. records the battery status (power_supply and `dumpsys battery`) right before Perfetto
   starts and again after the tail, so a charger at either end is refused;
5. writes every raw record into the run directory and marks the episode done.

The episode stops measuring when its conditions break. Before and after every request it
checks that the cores online are the ones the gate saw (``cores_online``, e.g. ``0-7``);
the host's 1 Hz monitor, while it reaches the phone, writes ``stop.host`` when a core goes
offline. Once either happened, every later request is skipped (``reqNNN.skipped``), the
request that saw it is marked ``reqNNN.stopped``, and the episode runs on to its tail and
end records, so what was measured before stays whole.

A request command may report its own boot-clock stamps and token count on one stdout line
``AS2D_REQUEST body_tokens=N [origin_boot_ns=… target_eos_boot_ns=… end_boot_ns=…]``
(the native runner does); otherwise the script's /proc/uptime stamps bound the request and
target EOS is taken as its end.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from as2d_cli.energy.episode_records import (
    NO_TOKENS,
    NOT_RUN,
    RECORDS_MISSING,
    STOPPED,
    Episode,
    RequestRecord,
)
from as2d_cli.errors import FormatError, UserError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
_REQ_LINE = re.compile(r"^AS2D_REQUEST\s+(.*)$", re.M)
STATUS_FILE = "/sys/class/power_supply/battery/status"
ONLINE_FILE = "/sys/devices/system/cpu/online"
STOP_HOST = "stop.host"  # the host monitor saw a core go offline: "boundary_boot_ns=N message"
STOP_CORES = "stop.cores"  # the episode's own check saw other cores online: the online list
_CPU_LIST = re.compile(r"^[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*$")


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    method: str
    phase: str  # warmup | formal

    @property
    def stem(self) -> str:
        return f"req{self.index:03d}"


@dataclass(frozen=True)
class EpisodePlan:
    """Warm-up then formal requests per method, methods in the given order (paper: As²d's
    formal request followed by Target-only's)."""

    methods: tuple[str, ...]
    request_cmd: str  # shell template; {method} {phase} {index} {run_dir} are substituted (quoted)
    formal_repeats: int = 1
    method_cmds: tuple[tuple[str, str], ...] = ()  # per-method overrides of request_cmd
    warmups: int = 1
    settle_s: float = 3.0  # baseline before the first request
    gap_s: float = 0.0  # between requests: back to back, so the gauge lag meets only the warm-up
    tail_s: float = 3.0  # after the last request
    request_budget_s: float = 120.0  # longest a request may take (sizes the trace)
    discharge_wait_s: int = 300  # how long the phone waits for USB to be pulled
    # The cores online the gate saw (/sys/devices/system/cpu/online, e.g. "0-7"): checked
    # before and after every request; None: no check (the phone has no such file).
    cores_online: str | None = None
    # The gauge's update period probed before the capture (gauge_probe), and the load each
    # method's last warm-up holds at least (one period + one poll): its command gets it as
    # {min_s} / {min_ms} (0 for every other request).
    gauge_period_s: float | None = None
    lead_s: float = 0.0

    def validate(self) -> None:
        if not self.methods:
            raise UserError("no methods to measure; pass --methods, e.g. as2d,target-only")
        for m in self.methods:
            if not _NAME.match(m):
                raise UserError(f"method name {m!r} must be letters, digits, '._+-' (≤ 64)")
        if len(set(self.methods)) != len(self.methods):
            raise UserError(f"methods {self.methods} repeat a name; list each method once")
        if self.formal_repeats < 1 or self.warmups < 0:
            raise UserError("need ≥ 1 formal request and ≥ 0 warm-ups per method")
        for m, _ in self.method_cmds:
            if m not in self.methods:
                raise UserError(
                    f"a request command is given for {m!r}, which is not among "
                    f"the methods {', '.join(self.methods)}"
                )
        for m in self.methods:
            cmd = self.command_for(m)
            if not cmd.strip():
                raise UserError(f"empty request command for {m}; pass --request-cmd")
            try:
                cmd.format(method="m", phase="p", index=0, run_dir="/r", min_s="0", min_ms=0)
            except (KeyError, IndexError, ValueError) as exc:
                raise UserError(
                    f"request command template {cmd!r} is invalid ({exc}); only "
                    "{method}, {phase}, {index}, {run_dir}, {min_s}, {min_ms} are "
                    "substituted — write literal braces as {{ }}"
                ) from None
        for v, what in ((self.settle_s, "settle"), (self.gap_s, "gap"), (self.tail_s, "tail")):
            if v < 0:
                raise UserError(f"{what} time must be ≥ 0 s")
        if self.request_budget_s <= 0 or self.discharge_wait_s < 0:
            raise UserError("request budget must be > 0 s and the discharge wait ≥ 0 s")
        if not 0 <= self.lead_s <= self.request_budget_s:
            raise UserError("the warm-up lead must lie between 0 s and the request budget")
        if self.cores_online is not None and not _CPU_LIST.match(self.cores_online):
            raise UserError(
                f"cores online {self.cores_online!r} is not a CPU list like 0-7; the phone's "
                f"{ONLINE_FILE} reads oddly — check it with `as2d devices gate --show`"
            )

    def command_for(self, method: str) -> str:
        return dict(self.method_cmds).get(method, self.request_cmd)

    def min_s_for(self, pr: PlannedRequest) -> float:
        """The load `pr` holds at least: lead_s for its method's last warm-up, else 0."""
        if pr.phase != "warmup" or self.lead_s <= 0:
            return 0.0
        last = [r.index for r in self.requests() if r.method == pr.method and r.phase == "warmup"]
        return self.lead_s if pr.index == last[-1] else 0.0

    def requests(self) -> list[PlannedRequest]:
        out: list[PlannedRequest] = []
        for m in self.methods:
            for phase, n in (("warmup", self.warmups), ("formal", self.formal_repeats)):
                for _ in range(n):
                    out.append(PlannedRequest(len(out), m, phase))
        return out

    def trace_duration_ms(self) -> int:
        """Bound of the capture: settle + every request's budget + gaps + tail."""
        n = len(self.requests())
        s = self.settle_s + n * self.request_budget_s + max(0, n - 1) * self.gap_s + self.tail_s
        return int(s * 1000) + 1000


def lead_s(period_s: float, poll_s: float) -> float:
    """How long the phone must already carry a method's load before its first formal
    request: one gauge period (the next update) plus one poll (the poll that carries it),
    rounded up to 10 ms."""
    return math.ceil((period_s + poll_s) * 100 - 1e-9) / 100


def _sec(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") or "0"


def render_script(
    plan: EpisodePlan, run_dir: str, config_path: str, trace_path: str, toolkit_version: str
) -> str:
    """The episode script for one run (all paths are on the device)."""
    plan.validate()
    q = shlex.quote
    r = run_dir.rstrip("/")
    lines = [
        "# as2d energy episode — generated by as2d " + toolkit_version + "; runs unattended.",
        "# Records go to " + r + " (boot-time clock from /proc/uptime).",
        f"echo waiting-for-discharge > {q(r + '/state')}",
    ]
    # A bounded wait without loops: each line checks once and sleeps 1 s only if still
    # charging, so once the cable is out the remaining lines pass instantly.
    lines += [f"grep -q Discharging {STATUS_FILE} || sleep 1"] * plan.discharge_wait_s
    lines += _battery_status_lines(r, "start")
    lines += [
        f"cat /proc/uptime > {q(r + '/t_discharging')}",
        f"cat {q(config_path)} | perfetto --background-wait -c - -o {q(trace_path)} "
        f"> {q(r + '/perfetto.out')} 2> {q(r + '/perfetto.err')}",
        f"echo $? > {q(r + '/perfetto.rc')}",
        f"cat /proc/uptime > {q(r + '/t_trace_started')}",
        f"echo running > {q(r + '/state')}",
        f"sleep {_sec(plan.settle_s)}",
    ]
    reqs = plan.requests()
    stops = (q(f"{r}/{STOP_HOST}"), q(f"{r}/{STOP_CORES}"))
    online = None if plan.cores_online is None else q(f"^{plan.cores_online}$")
    for k, pr in enumerate(reqs):
        lead = plan.min_s_for(pr)
        cmd = plan.command_for(pr.method).format(
            method=q(pr.method),
            phase=q(pr.phase),
            index=pr.index,
            run_dir=q(r),
            min_s=_sec(lead),
            min_ms=int(round(lead * 1000)),
        )
        base = f"{r}/{pr.stem}"
        skipped, stopped = q(base + ".skipped"), q(base + ".stopped")
        lines.append(f"# request {pr.index}: {pr.method} {pr.phase}")
        if online is not None:  # the cores the gate saw, still online before it starts
            lines.append(f"grep -q {online} {ONLINE_FILE} || cat {ONLINE_FILE} > {stops[1]}")
        lines += [f"test -e {stop} && echo skipped > {skipped}" for stop in stops]
        guard = f"test -e {skipped} ||"
        lines += [
            f"{guard} cat /proc/uptime > {q(base + '.origin')}",
            # sh -c: the guard skips the whole command, whatever lists it holds
            f"{guard} sh -c {q(cmd)} > {q(base + '.out')} 2> {q(base + '.err')}",
            f"echo $? > {q(base + '.rc')}",
            f"{guard} cat /proc/uptime > {q(base + '.end')}",
        ]
        if online is not None:  # ... and after it ends: else it ran (partly) without them
            lines += [
                f"{guard} grep -q {online} {ONLINE_FILE} || cat {ONLINE_FILE} > {stopped}",
                f"test -e {stopped} && cat {stopped} > {stops[1]}",
            ]
        # the host's monitor tripped while it ran (its boundary, if stamped, is finer)
        lines.append(f"test -e {stops[0]} && test ! -e {skipped} && echo host >> {stopped}")
        if k + 1 < len(reqs) and plan.gap_s > 0:
            lines.append(f"test -e {stops[0]} || test -e {stops[1]} || sleep {_sec(plan.gap_s)}")
    lines.append(f"sleep {_sec(plan.tail_s)}")
    lines += _battery_status_lines(r, "end")
    lines += _end_trace_lines(r)
    lines += [
        f"cat /proc/uptime > {q(r + '/t_episode_done')}",
        f"echo done > {q(r + '/state')}",
    ]
    return "\n".join(lines) + "\n"


TRACE_ENDED = "t_trace_ended"  # the episode ended the trace itself (boot clock)
_TRACE_STOP = "t_trace_stop_sent"  # perfetto took the episode's SIGTERM


def _end_trace_lines(r: str, wait_s: float = 10.0) -> list[str]:
    """End the trace once the tail is recorded, rather than at its bound (sized for every
    request's whole budget): SIGTERM to the pid `perfetto --background-wait` printed makes
    perfetto stop and write its file. Only when that signal was taken and the process is
    then gone (waited for up to ``wait_s``, without loops) is :data:`TRACE_ENDED` stamped;
    without the stamp the host waits for the bound, as before."""
    q = shlex.quote
    pid = '"$perfetto_pid"'
    sent, ended = q(f"{r}/{_TRACE_STOP}"), q(f"{r}/{TRACE_ENDED}")
    return [
        f"read perfetto_pid < {q(r + '/perfetto.out')}",
        f"test -n {pid} && kill -TERM {pid} 2> /dev/null && cat /proc/uptime > {sent}",
        *[f"test -e {sent} && kill -0 {pid} 2> /dev/null && sleep 0.2"] * int(wait_s / 0.2),
        f"kill -0 {pid} 2> /dev/null || test ! -e {sent} || cat /proc/uptime > {ended}",
    ]


def _battery_status_lines(r: str, when: str) -> list[str]:
    """Record the battery status (power_supply and `dumpsys battery`) at one end of the capture."""
    q = shlex.quote
    return [
        f"cat {STATUS_FILE} > {q(f'{r}/battery_status_at_{when}')} 2> /dev/null",
        f"dumpsys battery > {q(f'{r}/battery_dumpsys_at_{when}')} 2> /dev/null",
    ]


def battery_status(files: dict[str, str], when: str) -> str:
    """The status recorded at `when` (start/end): the power_supply file, else the
    `status: N` line of `dumpsys battery`; "" when neither was recorded."""
    text = files.get(f"battery_status_at_{when}", "").strip()
    if text:
        return text.splitlines()[0].strip()
    m = re.search(r"^\s*status:\s*(\d+)\s*$", files.get(f"battery_dumpsys_at_{when}", ""), re.M)
    if m:
        from as2d_cli.energy.refusals import DUMPSYS_STATUS

        return DUMPSYS_STATUS.get(m.group(1), f"status {m.group(1)}")
    return ""


def parse_uptime_ns(text: str, what: str) -> int:
    """First field of /proc/uptime ("12345.67 …") in ns, without float rounding."""
    field = text.split()[0] if text.split() else ""
    m = re.fullmatch(r"(\d+)(?:\.(\d{1,9}))?", field)
    if not m:
        raise FormatError(
            f"{what}: {text.strip()!r} is not a /proc/uptime reading; the "
            "episode was interrupted — check episode.log"
        )
    return int(m.group(1)) * 1_000_000_000 + int((m.group(2) or "0").ljust(9, "0"))


def _kv(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in line.split():
        k, sep, v = tok.partition("=")
        if sep:
            out[k] = v
    return out


@dataclass(frozen=True)
class _Stop:
    by: str  # "host" (its monitor), "phone" (the episode's own check) or "" (none)
    why: str
    boundary_ns: int | None = None  # boot clock: the host monitor's last good sample
    trip_ns: int | None = None  # boot clock: the sample that saw the core offline


def _stop_reason(files: dict[str, str], cores_online: str | None) -> _Stop:
    """Who stopped the episode and why; the host's stop file also carries, on the phone's
    boot clock, its monitor's last good sample and the sample that saw the loss."""
    host = files.get(STOP_HOST, "").strip()
    if host:
        stamps: dict[str, int] = {}
        words = host.split()
        while words and "=" in words[0]:
            key, _, val = words.pop(0).partition("=")
            if val.isdigit():
                stamps[key] = int(val)
        return _Stop(
            "host",
            " ".join(words) or "the host's monitor stopped it",
            stamps.get("boundary_boot_ns"),
            stamps.get("trip_boot_ns"),
        )
    cores = files.get(STOP_CORES, "").strip()
    if cores:
        return _Stop("phone", offline_reason(cores, cores_online))
    return _Stop("", "")


def _boundary(plan: EpisodePlan, files: dict[str, str], stop: _Stop) -> int | None:
    """The boot-clock time after which a request ran without the gated conditions: the
    host monitor's last good sample, moved later by every request whose own check after it
    saw all the cores online before the monitor saw one gone (the core went offline after
    that check: one loss, not a core that went and came back twice)."""
    if stop.boundary_ns is None:
        return None
    bound = stop.boundary_ns
    if plan.cores_online is None or stop.trip_ns is None:
        return bound
    for pr in plan.requests():
        s = pr.stem
        if f"{s}.end" not in files or f"{s}.stopped" in files or f"{s}.skipped" in files:
            continue
        try:
            end = parse_uptime_ns(files[f"{s}.end"], f"{s}.end")
        except FormatError:
            continue
        if end < stop.trip_ns:  # its check saw every core online at its end
            bound = max(bound, end)
    return bound


def offline_reason(online: str, expected: str | None) -> str:
    """What the episode's own check saw, e.g. 'CPU5 went offline (online 0-4,6-7, the gate
    saw 0-7)'."""
    from device_agents.base import parse_cpu_list

    try:
        gone = sorted(set(parse_cpu_list(expected or "")) - set(parse_cpu_list(online)))
    except ValueError:
        gone = []
    what = f"CPU{','.join(map(str, gone))} went offline" if gone else "the cores online changed"
    return f"{what} (online {online}, the gate saw {expected or 'unknown'})"


def assemble_episode(plan: EpisodePlan, files: dict[str, str]) -> Episode:
    """Build the Episode from the pulled raw files (name → text, names relative to the run
    directory). A request whose files are missing or that reported no tokens is kept as
    failed, never dropped. A request the episode skipped after its conditions broke
    (``reqNNN.skipped``) is NOT_RUN; one that ran when they broke (``reqNNN.stopped``, or
    it ended after the boundary the host's monitor stamped) is STOPPED: neither is a
    measurement. The metadata says who stopped the episode and why."""
    stop = _stop_reason(files, plan.cores_online)
    by, why, boundary = stop.by, stop.why, _boundary(plan, files, stop)
    reqs: list[RequestRecord] = []
    first_stop: int | None = None
    for pr in plan.requests():
        s = pr.stem
        if f"{s}.skipped" in files:
            first_stop = pr.index if first_stop is None else first_stop
            reqs.append(RequestRecord(pr.method, pr.phase, 0, 0, 0, 0, NOT_RUN))
            continue
        missing = [x for x in ("origin", "rc", "end") if f"{s}.{x}" not in files]
        if missing:
            reqs.append(RequestRecord(pr.method, pr.phase, 0, 0, 0, 0, RECORDS_MISSING))
            continue
        origin = parse_uptime_ns(files[f"{s}.origin"], f"{s}.origin")
        end = parse_uptime_ns(files[f"{s}.end"], f"{s}.end")
        if f"{s}.stopped" in files or (boundary is not None and end > boundary):
            first_stop = pr.index if first_stop is None else first_stop
            reqs.append(RequestRecord(pr.method, pr.phase, origin, end, end, 0, STOPPED))
            continue
        try:
            rc = int(files[f"{s}.rc"].strip() or "255")
        except ValueError:
            rc = RECORDS_MISSING
        eos = end
        tokens = 0
        found = _REQ_LINE.findall(files.get(f"{s}.out", ""))
        if found:
            kv = _kv(found[-1])
            try:
                tokens = int(kv.get("body_tokens", "0"))
                origin = int(kv.get("origin_boot_ns", origin))
                end = int(kv.get("end_boot_ns", end))
                eos = int(kv.get("target_eos_boot_ns", end))
            except ValueError:
                raise FormatError(
                    f"{s}.out: AS2D_REQUEST line {found[-1]!r} has a non-integer "
                    "field; the request command must print integers"
                ) from None
        elif rc == 0:
            rc = NO_TOKENS  # ran, but never said how many tokens it produced: not measurable
        reqs.append(RequestRecord(pr.method, pr.phase, origin, eos, end, tokens, rc))
    meta = {}
    for key in ("t_discharging", "t_trace_started", "t_episode_done"):
        if key in files:
            meta[key + "_boot_ns"] = str(parse_uptime_ns(files[key], key))
    for when in ("start", "end"):
        status = battery_status(files, when)
        if status:
            meta[f"battery_status_at_{when}"] = status
    if plan.cores_online is not None:
        meta["cores_online"] = plan.cores_online
    if by:
        meta["stopped_by"] = by
        meta["stop_reason"] = why
        if boundary is not None:
            meta["stop_boundary_boot_ns"] = str(boundary)
        if first_stop is not None:
            meta["stopped_at_request"] = str(first_stop)
    return Episode(reqs, meta)
