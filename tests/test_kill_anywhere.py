"""Kill anywhere (issue 45): `as2d traces build`, `as2d stream`, `as2d energy` and
`as2d eval --native` started as real processes, each in a process group of its own as a
terminal starts it (Ctrl-C there reaches the command and every worker it started), then
stopped with SIGINT and SIGKILL at points drawn with fixed seeds. Afterwards: no traceback
on stderr (neither the command's nor a worker's), the exit code the signal gives (130 with
one line for SIGINT), no process of the group left behind, and what is left on disk is
either complete or refused by whatever reads it — `report`, `compare`, the command's own
resume — and the resume measures nothing twice.

The other commands are covered where they are tested: `eval` (the replay part) in
test_results_integrity.py, `eval --native` interrupted in-process in that file and in
test_eval_native_resume.py, `calibrate` in test_measurement_conditions.py.

A point is "when a file appears or holds N records, then D seconds"; signals are sent
only once the command has begun its work (the Python interpreter and as2d's imports take
a few hundred milliseconds before that). The heavier variants are marked slow;
`python benchmarks/kill_anywhere.py` loops the same harnesses over many more points and
prints a summary.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXIT = {signal.SIGINT: 130, signal.SIGKILL: -signal.SIGKILL}
TIMEOUT_S = 240.0


# -- the harness: start, stop, check ------------------------------------------------------------


def cli(args: list[str]) -> tuple[int, str, str]:
    """`as2d ARGS` in this process: (exit code, stdout, stderr)."""
    from as2d_cli.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def one_line(code: int, err: str, *said: str) -> str:
    """A refusal: exit 2 and one line on stderr (prompts aside) saying each of ``said``."""
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith((">>> ", "energy: "))]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    for s in said:
        assert s in lines[0], lines[0]
    return lines[0]


def launch(args: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> Any:
    """`as2d ARGS` as a terminal starts it: its own process group, stderr into ``log``."""
    with log.open("w") as err:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "as2d_cli.cli.main", *args],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )


@dataclass
class Stop:
    """Send ``sig`` ``delay`` seconds after ``ready()`` first holds."""

    sig: signal.Signals
    what: str  # for messages: where the stop was meant to land
    ready: Callable[[], bool]
    delay: float = 0.0
    since: float | None = None
    group: bool = True  # the whole process group (a terminal's Ctrl-C), or the command alone

    def due(self) -> bool:
        if self.since is None:
            if not self.ready():
                return False
            self.since = time.monotonic()
        return time.monotonic() - self.since >= self.delay


@dataclass
class Proc:
    proc: Any
    log: Path
    stop: Stop | None
    sent: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def drive(procs: list[Proc], timeout_s: float = TIMEOUT_S) -> None:
    """Run every process until it ends, sending each its stop when due (all at once:
    each takes seconds, mostly waiting)."""
    deadline = time.monotonic() + timeout_s
    pending = [p for p in procs if p.stop is not None]
    while pending:
        assert time.monotonic() < deadline, "a command neither reached its point nor ended"
        for p in list(pending):
            if p.proc.poll() is not None:
                pending.remove(p)
            elif p.stop is not None and p.stop.due():
                with contextlib.suppress(ProcessLookupError):
                    if p.stop.group:
                        os.killpg(p.proc.pid, p.stop.sig)
                    else:  # `kill -9 PID`: its workers and runner are left to notice
                        os.kill(p.proc.pid, p.stop.sig)
                p.sent = True
                pending.remove(p)
        time.sleep(0.005)
    for p in procs:
        p.proc.wait(timeout=timeout_s)


# A Ctrl-C that reaches a command after its work is done, while `as2d` exits, is not
# turned into the command's one line (as2d_cli/cli/main.py does not guard its exit): the
# interpreter kills itself with the signal (exit -2), or prints a KeyboardInterrupt from
# a finalizer ("Exception ignored in …") or from the module's last line. `ended` lets that
# pass as "finished"; every harness then demands a finished result.
_SHUTDOWN_NOISE = ("Traceback", "Exception ignored in")


def ended(p: Proc) -> tuple[int, str]:
    """The command's exit code and stderr, checked: no traceback, the signal's exit code
    (or 0: it finished first), one line for Ctrl-C, and no process of its group left.
    The code of a command that finished its work is 0 (see ``finished``)."""
    rc = p.proc.returncode
    err = p.log.read_text()
    sig = p.stop.sig if p.stop is not None else None
    late = p.sent and sig == signal.SIGINT and rc in (0, -signal.SIGINT)
    cut = min((err.index(x) for x in _SHUTDOWN_NOISE if x in err), default=-1)
    if late and cut >= 0 and err.rstrip().rstrip(":").endswith("KeyboardInterrupt"):
        err = err[:cut]  # raised while the interpreter exits
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert rc == 0 or late or (sig is not None and rc == EXIT[sig]), (rc, sig, err)
    if rc == 130:
        lines = [x for x in err.splitlines() if "interrupted" in x.lower()]
        assert len(lines) == 1, err
    _group_gone(p.proc.pid)
    return (0 if late else rc), err


def _outcome(p: Proc, rc: int) -> str:
    """How a run ended, for summaries: ``SIGINT@point→130``; ``→0 (SIGINT unheeded)`` when
    a Ctrl-C was sent and the command still ran to its end."""
    if p.stop is None:
        return f"→{rc}"
    head = f"{p.stop.sig.name}@{p.stop.what}"
    if not p.sent:
        return f"{head} (ended first)→{rc}"
    if rc == 0 and p.proc.returncode != 0:
        return f"{head}→{p.proc.returncode} (after its work was done)"
    return f"{head}→{rc}" + (f" ({p.stop.sig.name} unheeded)" if rc == 0 else "")


def _group_gone(pgid: int, timeout_s: float = 20.0) -> None:
    """No process of the command's group outlives it (workers, runners, trackers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:  # pragma: no cover - a zombie being reaped
            pass
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
            raise AssertionError(f"processes of group {pgid} outlived the command")
        time.sleep(0.05)


def _lines(path: Path) -> list[dict]:
    """The whole JSON lines of a file (a last line a kill tore is not a record)."""
    if not path.exists():
        return []
    out = []
    for x in path.read_text().splitlines():
        try:
            out.append(json.loads(x))
        except json.JSONDecodeError:
            continue
    return out


# -- traces build ------------------------------------------------------------------------------

# Every window a process starts tracing is logged (run, window), in the workers too, and
# the build's start (run, "begin": the command is past its imports): a sitecustomize on
# PYTHONPATH wraps trace_window and build_traces in every interpreter the build starts.
_SITE = """
import os
if os.environ.get("AS2D_KILL_LOG"):
    import native
    native.limit_blas_threads()
    import as2d_cli.tracegen.build as _build

    def _note(what):
        with open(os.environ["AS2D_KILL_LOG"], "a") as f:
            f.write(os.environ["AS2D_KILL_RUN"] + " " + what + "\\n")
            f.flush()
            os.fsync(f.fileno())

    _traced, _built = _build.trace_window, _build.build_traces

    def _logged(window, models, *a, **kw):
        _note(window.id)
        return _traced(window, models, *a, **kw)

    def _begun(*a, **kw):
        _note("begin")
        return _built(*a, **kw)

    _build.trace_window, _build.build_traces = _logged, _begun
"""
TRACE_WINDOWS = 6


def _count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def traces_until_done(
    tmp: Path,
    stops: list[tuple[signal.Signals, int | None, float]],
    windows: int = TRACE_WINDOWS,
    group: bool = True,
) -> dict[str, Any]:
    """`as2d traces build` of the first ``windows`` dev windows, stopped at each of
    ``stops`` in turn — (signal, windows this run has recorded or None: all of them, then
    seconds) — and run again until it writes its file. Checked after every run: an output
    file is whole (all windows), no other trace-like file beside it loads as traces, the
    partial never holds a window twice, and no run traces a window an earlier run had
    recorded."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.errors import FormatError
    from as2d_cli.formats.trace_io import load_traces
    from as2d_cli.tracegen.build import partial_path

    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITE)
    folder = tmp / "traces"
    out = folder / "dev.jsonl"
    partial = partial_path(out)
    started = tmp / "started.log"
    env = {
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "AS2D_KILL_LOG": str(started),
    }
    args = ["traces", "build", "--split", "dev", "--limit", str(windows)]
    args += ["--max-tokens", "24", "--processes", "2", "--out", str(out)]
    recorded: set[str] = set()  # windows in the partial after the runs so far
    summary: dict[str, Any] = {"runs": 0, "stopped": 0, "retraced": 0, "outcomes": []}
    for run, stop in enumerate([*stops, None]):
        env["AS2D_KILL_RUN"] = str(run)
        s = None
        if stop is not None:
            sig, n, delay = stop
            base = max(_count(partial), 1)  # the partial's first line names the pair

            def ready(n: int | None = n, base: int = base, run: int = run) -> bool:
                log = started.read_text() if started.exists() else ""
                want = 1 + windows if n is None else base + n
                return f"{run} begin\n" in log and _count(partial) >= want

            s = Stop(sig, f"{n} windows + {delay:.2f} s", ready, delay, group=group)
        p = Proc(launch(args, tmp, tmp / f"traces{run}.err", env), tmp / f"traces{run}.err", s)
        drive([p])
        rc, err = ended(p)
        summary["runs"] += 1
        summary["stopped"] += rc != 0
        summary["outcomes"].append(_outcome(p, rc))
        if rc == 0:
            assert out.exists(), f"run {run} ended with 0 but wrote no file"
        if rc == 130:
            assert "error: as2d traces build interrupted" in err, err
        # What is left: the file whole or absent; nothing else that loads as traces.
        if out.exists():
            assert len(load_traces(out, split="dev").windows) == windows
        for f in [*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")]:
            if f != out:
                with pytest.raises(FormatError):
                    load_traces(f)
        ids = [r["id"] for r in _lines(partial) if "id" in r]
        assert len(ids) == len(set(ids)), f"a window recorded twice: {ids}"
        log = started.read_text().split("\n") if started.exists() else []
        traced = [x.split()[1] for x in log if x.startswith(f"{run} ") and x != f"{run} begin"]
        assert not set(traced) & recorded, f"run {run} traced again {set(traced) & recorded}"
        summary["retraced"] += len(traced) - len(set(traced))
        recorded |= set(ids)
        if out.exists():
            break
    else:
        raise AssertionError("the build never wrote its file")
    if partial.exists():  # killed between writing the file and removing the partial
        code, _, err = cli(args)
        one_line(code, err, "already exists", partial.name)
    else:
        code, _, err = cli(args)  # a finished build is never redone
        one_line(code, err, "already exists and is never overwritten")
    want = [w.id for w in load_corpus().split("dev")[:windows]]
    assert [w.id for w in load_traces(out).windows] == want
    return summary


@pytest.mark.slow  # how many kills land mid-run depends on the machine's load; benchmarks/kill_anywhere.py runs it
def test_traces_build_killed_anywhere_resumes_and_traces_no_window_twice(tmp_path: Path) -> None:
    """SIGKILL while the pool starts, Ctrl-C and SIGKILL between windows, SIGKILL in the
    final write, then the same command again until the file is written. (Ctrl-C while the
    pool starts: test_ctrl_c_while_the_pool_starts_is_not_lost.)"""
    rng = random.Random(451)
    stops: list[tuple[signal.Signals, int | None, float]] = [
        (signal.SIGKILL, 0, 0.0),  # the partial begun, the pool starting
        (signal.SIGKILL, 1, rng.uniform(0.0, 0.4)),
        (signal.SIGINT, 1, rng.uniform(0.0, 0.4)),
        (signal.SIGKILL, 2, rng.uniform(0.0, 0.6)),
        (signal.SIGKILL, None, 0.0),  # every window recorded: in the final write
    ]
    summary = traces_until_done(tmp_path, stops)
    assert summary["stopped"] >= 3, summary


@pytest.mark.slow
@pytest.mark.parametrize("seed, group", [(1, True), (2, True), (3, False)])
def test_traces_build_killed_at_random_points(tmp_path: Path, seed: int, group: bool) -> None:
    """Random points; ``group`` False signals the command alone (`kill PID`), leaving its
    workers to notice."""
    rng = random.Random(seed)
    stops: list[tuple[signal.Signals, int | None, float]] = [
        (rng.choice([signal.SIGINT, signal.SIGKILL]), rng.randint(1, 3), rng.uniform(0, 1.5))
        for _ in range(6)
    ]
    traces_until_done(tmp_path, [(signal.SIGKILL, 0, rng.uniform(0, 1)), *stops], group=group)


def _task(shared: Any, t: int) -> int:
    return 2 * t


@pytest.fixture
def ctrl_c_handler() -> Iterator[None]:
    """Python's own Ctrl-C handler here (a pytest-xdist worker ignores SIGINT)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _blocked(shared: Any, t: int) -> bool:
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.parametrize("fork", [False, True])
def test_ctrl_c_while_the_pool_starts_is_not_lost(
    monkeypatch: pytest.MonkeyPatch, ctrl_c_handler: None, fork: bool
) -> None:
    """A Ctrl-C that reaches `as2d traces build` while its workers start stops the build:
    it is held while they start and raised once they are up (and then stopped)."""
    import multiprocessing as mp

    import as2d_cli.execution.local as local

    real = mp.get_context

    class Context:
        def __init__(self, method: str) -> None:
            self.ctx = real(method)

        def Pool(self, *a: Any, **kw: Any) -> Any:  # noqa: N802 - multiprocessing's name
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the workers start
            return self.ctx.Pool(*a, **kw)

    monkeypatch.setattr(local.mp, "get_context", Context)
    with pytest.raises(KeyboardInterrupt):
        list(local.LocalPool(2).map(_task, None, [1, 2, 3], fork=fork))
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("fork", [False, True])
def test_workers_start_with_ctrl_c_unblocked_and_the_parent_keeps_its_handler(
    ctrl_c_handler: None, fork: bool
) -> None:
    """The hold ends in every worker (a blocked SIGINT would outlive the map in them) and
    in the parent, whose Ctrl-C handler is back after the map."""
    from as2d_cli.execution.local import LocalPool

    assert list(LocalPool(2).map(_blocked, None, [1, 2, 3, 4], fork=fork)) == [False] * 4
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# -- stream ------------------------------------------------------------------------------------

STREAM = ["--phone", "local", "--minutes", "0.1", "--block-s", "1", "--context-s", "3"]
STREAM += ["--rest", "0", "--interval", "0"]
STREAM_FILES = {"stream.json", "blocks.csv", "table.md"}  # and stream.png with blocks


def _stream_folder(out: Path) -> Path | None:
    found = sorted(out.glob("*-stream-*")) if out.exists() else []
    return found[0] if found else None


def _in_stream(out: Path, name: str, n: int = 1) -> Callable[[], bool]:
    """Ready when the stream's folder holds ``name`` (with at least ``n`` lines)."""

    def ready() -> bool:
        f = _stream_folder(out)
        if f is None or not (f / name).exists():
            return False
        return n <= 1 or (f / name).read_bytes().count(b"\n") >= n

    return ready


def streams_stopped(
    tmp: Path, stops: list[tuple[signal.Signals, str, int, float]], group: bool = True
) -> list[str]:
    """One `as2d stream --phone local` (6 blocks of 1 s) per stop — (signal, file in its
    folder, lines in it, then seconds) — all at once. Checked: a folder with stream.json
    holds every file whole, its blocks once each, and says interrupted exactly when Ctrl-C
    cut the stream; a folder without is marked INCOMPLETE and refused by `report` and
    `compare`. Returns how each ended."""
    from as2d_cli.formats.common import INCOMPLETE

    procs = []
    for i, (sig, name, n, delay) in enumerate(stops):
        out, log = tmp / f"stream{i}", tmp / f"stream{i}.err"
        p = launch(["stream", *STREAM, "--out", str(out)], tmp, log)
        stop = Stop(sig, f"{name}≥{n} + {delay:.2f} s", _in_stream(out, name, n), delay)
        stop.group = group
        procs.append(Proc(p, log, stop))
        procs[-1].info["out"] = out
    drive(procs)
    how = []
    for p in procs:
        rc, err = ended(p)
        folder = _stream_folder(p.info["out"])
        if folder is None:  # stopped before it began its folder
            assert rc != 0
            how.append("no folder")
            continue
        raw = [b["block"] for b in _lines(folder / "blocks.jsonl")]
        assert raw == list(range(len(raw))), raw  # each block once, in order
        if (folder / "stream.json").exists():
            doc = json.loads((folder / "stream.json").read_text())
            assert not (folder / INCOMPLETE).exists()
            assert STREAM_FILES <= {x.name for x in folder.iterdir()}
            assert [b["block"] for b in doc["blocks"]] == raw
            rows = (folder / "blocks.csv").read_text().strip().splitlines()
            assert len(rows) == 1 + len(raw)
            assert (folder / "stream.png").exists() == bool(raw)
            if rc == 130 and "error: stream interrupted; " in err:
                assert doc["status"] == "interrupted" and f"{len(raw)} block(s) kept" in err
                how.append(f"interrupted ({len(raw)} blocks)")
            else:  # ran to its end (a late Ctrl-C or SIGKILL found it writing or done)
                assert doc["status"] == "complete" and doc["stream"]["drained_s"] is not None
                how.append(f"complete, exit {rc}")
            continue
        assert rc == -signal.SIGKILL, (rc, err)
        assert (folder / INCOMPLETE).exists(), sorted(x.name for x in folder.iterdir())
        one_line(*cli(["report", str(folder)])[::2])  # no evaluation: refused
        one_line(*cli(["compare", str(folder), str(folder)])[::2])
        how.append(f"killed, incomplete ({len(raw)} blocks)")
    return how


@pytest.mark.slow  # how many kills land mid-run depends on the machine's load; benchmarks/kill_anywhere.py runs it
def test_stream_killed_anywhere_leaves_no_folder_taken_as_complete(tmp_path: Path) -> None:
    how = streams_stopped(
        tmp_path,
        [
            (signal.SIGINT, "blocks.jsonl", 2, 0.3),  # mid-stream
            (signal.SIGKILL, "blocks.jsonl", 3, 0.5),
            (signal.SIGKILL, "blocks.csv", 1, 0.0),  # while the files are written
            (signal.SIGINT, "INCOMPLETE", 1, 0.1),  # loading the models
        ],
    )
    assert sum(h.startswith("interrupted") for h in how) >= 1, how
    assert sum(h.startswith("killed") for h in how) >= 1, how


@pytest.mark.slow
@pytest.mark.parametrize("seed, group", [(1, True), (2, False)])
def test_stream_killed_at_random_points(tmp_path: Path, seed: int, group: bool) -> None:
    rng = random.Random(seed)
    names = ["INCOMPLETE", "blocks.jsonl", "blocks.csv", "table.md"]
    streams_stopped(
        tmp_path,
        [
            (
                rng.choice([signal.SIGINT, signal.SIGKILL]),
                (name := rng.choice(names)),
                rng.randint(1, 5) if name == "blocks.jsonl" else 1,
                rng.uniform(0, 0.8),
            )
            for _ in range(4)
        ],
        group=group,
    )


# -- energy ------------------------------------------------------------------------------------

ENERGY_TIMING = ["--rest", "0", "--interval", "0", "--settle-s", "0.3", "--gap-s", "0"]
ENERGY_TIMING += ["--tail-s", "0.3", "--poll-ms", "100", "--request-budget-s", "1"]
ENERGY_TIMING += ["--discharge-wait-s", "5", "--warmups", "0", "--repeats", "1"]
ENERGY_METHODS = ("as2d", "target-only")


def energy_phone(make: Callable[..., Any]) -> Any:
    """A wireless emulated phone off its charger with the battery model and a `req`
    command (one busy worker for 0.5 s) that logs every request it runs, per run."""
    from device_agents.emulator.battery import BatteryModel, BatteryParams, EmulatedPower

    s = make(connection="wireless")
    s.power = EmulatedPower(s.phone, BatteryModel(BatteryParams(gauge_update_ms=100))).install()
    s.requests = []
    lock = threading.Lock()

    def req(ctx: Any) -> int:
        with lock:
            s.requests.append(tuple(ctx.argv[1:]))
        with s.power.busy():
            time.sleep(0.5)
        ctx.out("AS2D_REQUEST body_tokens=20\n")
        return 0

    s.phone.register_command("req", req)
    s.phone.unplug()  # wireless adb stays; the charger is off
    return s


def _energy_folder(out: Path) -> Path | None:
    found = sorted(out.glob("*-energy-*")) if out.exists() else []
    return found[0] if found else None


def _energy_ready(out: Path, log: Path, point: str) -> Callable[[], bool]:
    def ready() -> bool:
        if point == "launched":  # the episode runs on the phone
            return log.exists() and "Wireless adb" in log.read_text()
        f = _energy_folder(out)
        return f is not None and (point == "folder" or (f / point).exists())

    return ready


def energies_stopped(
    tmp: Path, phones: list[Any], stops: list[tuple[signal.Signals, str, float]]
) -> list[str]:
    """One `as2d energy` per phone and stop — (signal, point, then seconds): the folder
    made, the episode launched, or a file appearing in the folder — all at once. Then
    what it left: energy.json (whole, complete, no INCOMPLETE note), or a folder marked
    INCOMPLETE that `--collect` (or, once collected, `--from-run`) finishes or refuses in
    one line. Each request the phone ran ran once, and a finished folder holds them all."""
    from as2d_cli.energy.results import load_energy_result
    from as2d_cli.formats.common import INCOMPLETE

    procs = []
    for i, ((sig, point, delay), s) in enumerate(zip(stops, phones)):
        out, log = tmp / f"energy{i}", tmp / f"energy{i}.err"
        args = ["energy", "--phone", s.serial, "--adb-port", str(s.adb_port)]
        args += ["--connection", "wireless", "--methods", ",".join(ENERGY_METHODS)]
        args += ["--request-cmd", "req {run_dir} {method} {phase} {index}", "--out", str(out)]
        p = Proc(launch([*args, *ENERGY_TIMING], tmp, log), log, None)
        p.stop = Stop(sig, f"{point} + {delay:.2f} s", _energy_ready(out, log, point), delay)
        p.info.update(out=out, phone=s)
        procs.append(p)
    drive(procs)
    how = []
    for p in procs:
        rc, err = ended(p)
        s, folder = p.info["phone"], _energy_folder(p.info["out"])
        if folder is None:
            assert rc != 0
            how.append("no folder")
            continue
        ran = [r for r in s.requests if Path(r[0]).name.startswith("as2d-energy-")]
        assert rc != 0 or (folder / "energy.json").exists(), err
        if (folder / "energy.json").exists():
            how.append(f"complete, exit {rc}")
        else:
            assert rc != 0, err
            assert (folder / INCOMPLETE).exists() or not any(folder.iterdir())
            code, _, err2 = cli(["energy", "--collect", str(folder), "--adb-port", str(s.adb_port)])
            if code == 0:
                how.append("collected")
            elif "already collected" in err2:
                one_line(code, err2, f"--from-run {folder}")
                code, _, err3 = cli(["energy", "--from-run", str(folder)])
                assert code == 0, err3
                how.append("analysed again")
            else:
                one_line(code, err2)
                assert (folder / INCOMPLETE).exists() or not any(folder.iterdir())
                code, _, err3 = cli(["energy", "--from-run", str(folder)])
                one_line(code, err3)  # nothing to analyse either
                how.append("refused: " + err2.strip().splitlines()[-1])
            ran = [r for r in s.requests if Path(r[0]).name.startswith("as2d-energy-")]
        runs = {r[0] for r in ran}
        assert len(runs) <= 1 and len(ran) == len(set(ran)), ran  # one episode, each request once
        if (folder / "energy.json").exists():
            doc = load_energy_result(folder / "energy.json")
            assert doc["status"] == "complete" and not (folder / INCOMPLETE).exists()
            assert [r["method"] for r in doc["requests"]] == list(ENERGY_METHODS)
            assert all(r["status"] == "ok" for r in doc["requests"]), doc["requests"]
            assert [r[1] for r in ran] == list(ENERGY_METHODS)
            code, _, e = cli(["energy", "--collect", str(folder), "--adb-port", str(s.adb_port)])
            one_line(code, e, "never overwritten")
            code, _, e = cli(["energy", "--from-run", str(folder)])
            one_line(code, e, "never overwritten")
        else:
            assert len(ran) <= len(ENERGY_METHODS)
    for s in phones:
        s.power.stop_all()
    return how


def test_energy_killed_anywhere_is_collected_or_refused_never_taken_as_complete(
    make_emulated_phone: Any, tmp_path: Path
) -> None:
    phones = [energy_phone(make_emulated_phone) for _ in range(3)]
    how = energies_stopped(
        tmp_path,
        phones,
        [
            (signal.SIGINT, "launched", 0.6),  # a request running on the phone
            (signal.SIGKILL, "launched", 1.2),
            (signal.SIGKILL, "episode.tsv", 0.0),  # pulled, analysing
        ],
    )
    assert "collected" in how and sum(h != "no folder" for h in how) == 3, how


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_energy_killed_at_random_points(
    make_emulated_phone: Any, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    points = ["folder", "plan.json", "phone_run.json", "launched", "episode.tsv", "table.md"]
    stops = [
        (rng.choice([signal.SIGINT, signal.SIGKILL]), rng.choice(points), rng.uniform(0, 2.5))
        for _ in range(3)
    ]
    energies_stopped(tmp_path, [energy_phone(make_emulated_phone) for _ in stops], stops)


# -- eval --native -----------------------------------------------------------------------------

NATIVE = ["--native", "--windows", "2", "--repeats", "2", "--warmup", "0", "--settle", "0"]
NATIVE_RUNS = 2 * 2 * 4  # windows × repeats × methods


def native_inputs(folder: Path) -> list[str]:
    """`as2d eval --phone local --native` options over the shortest test window of three
    datasets, priced with the shipped K70 profile and deployment (as
    test_eval_native_resume.py), results under ``folder``/res."""
    import dataclasses

    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.formats.trace_io import load_traces, write_traces

    ts = load_traces(ROOT / "as2d_cli" / "assets" / "traces" / "test.jsonl.gz")
    sec = load_corpus().seconds()
    first: dict[str, Any] = {}
    for w in sorted(ts.windows, key=lambda w: (sec.get(w.id, 1e9), w.id)):
        first.setdefault(w.dataset, w)
    keep = sorted(first.values(), key=lambda w: sec[w.id])[:3]
    traces = folder / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    write_traces(traces / "test.jsonl", dataclasses.replace(ts, windows=tuple(keep)), split="test")
    shipped = ROOT / "as2d_cli" / "assets" / "profiles"
    profile, deployment = shipped / "k70.profile.yaml", shipped / "k70" / "deployment.yaml"
    if not profile.is_file() or not deployment.is_file():
        pytest.skip("no shipped K70 profile and deployment")
    return [
        "eval",
        "--phone",
        "local",
        "--profile",
        str(profile),
        "--deployment",
        str(deployment),
        "--traces",
        str(traces),
        "--calibrations",
        str(folder / "cal"),
        "--results",
        str(folder / "res"),
        *NATIVE,
    ]


def native_until_done(
    tmp: Path, stops: list[tuple[signal.Signals, int, float]], args: list[str] | None = None
) -> dict[str, Any]:
    """`as2d eval --phone local --native` (16 runs) stopped at each of ``stops`` in turn —
    (signal, runs this process has recorded, then seconds) — and resumed with the command
    its folder's manifest names (`--append DIR`) until complete. After every stop the
    folder is incomplete and refused by `report` and `compare`; native.runs.jsonl never
    holds a run twice, and the finished folder's results hold each (window, rep, method)
    once."""
    from as2d_cli.formats.common import read_manifest

    args = args or native_inputs(tmp)
    res = tmp / "res"
    summary: dict[str, Any] = {"runs": 0, "stopped": 0, "outcomes": []}
    folder: Path | None = None
    cmd = args
    for i, stop in enumerate([*stops, None]):
        log = tmp / f"native{i}.err"
        s = None
        if stop is not None:
            sig, n, delay = stop
            base = 0 if folder is None else _count(folder / "native.runs.jsonl")

            def ready(n: int = n, base: int = base) -> bool:
                found = sorted(res.iterdir()) if res.exists() else []
                return bool(found) and _count(found[0] / "native.runs.jsonl") >= base + n

            s = Stop(sig, f"{n} runs + {delay:.2f} s", ready, delay)
        p = Proc(launch(cmd, tmp, log), log, s)
        drive([p])
        rc, err = ended(p)
        summary["runs"] += 1
        summary["stopped"] += rc != 0
        summary["outcomes"].append(_outcome(p, rc))
        (folder,) = list(res.iterdir())
        keys = [(r["window"], r["rep"], r["method"]) for r in _lines(folder / "native.runs.jsonl")]
        assert len(keys) == len(set(keys)), f"a run measured twice: {keys}"
        doc = read_manifest(folder)
        assert doc is not None and (rc != 0 or doc["complete"]), (rc, err)
        if doc["complete"]:
            break
        if rc == 130:
            (line,) = [x for x in err.splitlines() if x.startswith("error:")]
            assert "native evaluation interrupted" in line and "--append" in line, line
        one_line(*cli(["report", str(folder)])[::2], "is incomplete")
        one_line(*cli(["compare", str(folder), str(folder)])[::2])
        cmd = shlex.split(doc["command"])[1:]
        assert cmd[-2:] == ["--append", str(folder)], doc["command"]
    else:
        raise AssertionError("the evaluation never completed")
    assert folder is not None
    rows = json.loads((folder / "native.json").read_text())["results"]["rows"]
    keys = sorted((r["window"], r["rep"], r["method"]) for r in rows)
    assert len(keys) == NATIVE_RUNS and len(set(keys)) == NATIVE_RUNS, keys
    code, _, err = cli(["report", str(folder)])
    assert code == 0, err
    return summary


def test_eval_native_killed_then_appended_measures_each_run_once(tmp_path: Path) -> None:
    """SIGKILL during the native runs, then SIGKILL of the resume, then Ctrl-C of the
    next, then a resume that finishes."""
    rng = random.Random(452)
    stops = [
        (signal.SIGKILL, rng.randint(1, 4), rng.uniform(0.0, 0.3)),
        (signal.SIGKILL, 2, rng.uniform(0.0, 0.3)),
        (signal.SIGINT, 3, rng.uniform(0.0, 0.3)),
    ]
    summary = native_until_done(tmp_path, stops)
    assert summary["stopped"] >= 2, summary


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_eval_native_killed_at_random_points(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    stops = [
        (rng.choice([signal.SIGINT, signal.SIGKILL]), rng.randint(1, 5), rng.uniform(0, 0.5))
        for _ in range(4)
    ]
    native_until_done(tmp_path, stops)


@contextlib.contextmanager
def emulated_phones() -> Iterator[Callable[..., Any]]:
    """``make(**kw)`` emulated phones on a private adb server, outside pytest (the
    benchmark): as conftest's make_emulated_phone."""
    from device_agents.adbserver import PrivateAdbServer
    from device_agents.emulator.session import EmulatorSession

    server = PrivateAdbServer().start()
    made: list[Any] = []

    def make(**kw: Any) -> Any:
        s = EmulatorSession(private_server=False, adb_port=server.port, **kw).start()
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in made:
            s.stop()
        server.stop()


def test_ctrl_c_while_the_command_line_imports_is_one_line() -> None:
    """A Ctrl-C in the tenths of a second `as2d` spends importing its commands: one line,
    exit 130, no traceback (the console script's entry point guards the import)."""
    code = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Ctrl-C\n"
        "class CtrlC:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'typer':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, CtrlC())\n"
        "from as2d_cli.cli.entry import main\n"
        "main()\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "--version"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 130, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "interrupted before the command started; nothing was written"
    ]
