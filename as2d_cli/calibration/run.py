"""Run a calibration on a device: gate, probe, keep every sample, resume, fit, write.

Each finished step is committed to ``<out>/.partial/<device>-<serial>-<plan>/steps/`` as one
file holding its samples (written whole, then renamed into place: the step's samples and its
done mark are one file), with the gate and monitor records beside them; an interrupted
calibration — Ctrl-C, an error, or the process killed at any point — resumes from the steps
already committed, on the same device whatever its connection, and never measures one twice.
The finished profile is written next to its raw samples and the R(K) plot, never over an
earlier profile.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from as2d_cli.calibration.fit import fit_profile
from as2d_cli.calibration.plan import Step, make_plan, plan_hash
from as2d_cli.calibration.plot import plot_savings
from as2d_cli.errors import DeviceError, UserError
from as2d_cli.formats.common import append_jsonl, safe_name, write_atomic
from as2d_cli.models.model_pair import ModelPair, PairSettings
from as2d_cli.models.prompting import PromptSpec
from as2d_cli.reporting import Progress, settle_waiting


@dataclass
class CalibrationResult:
    profile_path: Path
    plot_path: Path
    samples_path: Path
    steps: int
    resumed_steps: int
    gates: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def calibrated_sources(pair: Any) -> tuple[str, ...]:
    """The pair's As²d sources: the drafter, its look-ahead form when the drafter has that
    decoder, and the CTC recognizer when the pair has one."""
    ahead = ("lookahead",) if pair.has_ahead() else ()
    return ("drafter", *ahead, *(("ctc",) if pair.has("ctc") else ()))


def calibration_windows() -> tuple[str, str | None]:
    """Calibration audio kept apart from the test split: the longest English dev window."""
    from as2d_cli.corpus.manifest import load_corpus

    dev = [w for w in load_corpus().split("dev") if w.language == "en"]
    if not dev:
        raise UserError("the corpus has no English development window to calibrate on")
    read = [w for w in dev if w.setting == "read"] or dev
    best = max(read, key=lambda w: w.seconds)
    return best.id, best.id


def short_calibration_window(main: str, corpus: Any = None) -> str | None:
    """A second, short English development window: calibrating on two audio lengths lets
    the fit separate cost by audio length from cost by cache length."""
    from as2d_cli.corpus.manifest import load_corpus

    corpus = corpus or load_corpus()
    long = corpus.get(main)
    dev = [
        w
        for w in corpus.split("dev")
        if w.language == "en" and w.id != main and w.seconds < 0.6 * long.seconds
    ]
    read = [w for w in dev if w.setting == "read"] or dev
    return min(read, key=lambda w: w.seconds).id if read else None


def episode_windows(main: str, corpus: Any = None, n: int = 6) -> tuple[str, ...]:
    """``n`` English development windows spread evenly over their lengths (the main window
    is the longest read one): the in-loop fit separates the target's step cost by audio
    length and by cache length."""
    from as2d_cli.corpus.manifest import load_corpus

    corpus = corpus or load_corpus()
    dev = sorted(
        (w for w in corpus.split("dev") if w.language == "en"), key=lambda w: (w.seconds, w.id)
    )
    if len(dev) <= n:
        return tuple(w.id for w in dev)
    return tuple(dict.fromkeys(dev[round(i * (len(dev) - 1) / (n - 1))].id for i in range(n)))


STEP_FILE = "step.json"


@dataclass
class _Partial:
    """An interrupted calibration's folder: ``calibrations/.partial/<device>-<serial>-<plan>/``.

    Each finished step is committed as one file, ``steps/<NNNN>-<step>.json`` (its samples,
    written to a temporary file and renamed into place): the file is the step's done mark,
    so a step's samples and its mark appear together or not at all, and a calibration
    killed at any point resumes without measuring a finished step again or keeping a
    half-recorded one. ``gates.jsonl`` and ``monitor.jsonl`` record every attempt (a gate
    that failed, a step that was stopped) as it happens; a line torn by a kill is skipped."""

    folder: Path
    resume: str = "run the same `as2d calibrate` command again"

    @property
    def steps_dir(self) -> Path:
        return self.folder / "steps"

    @property
    def gates(self) -> Path:
        return self.folder / "gates.jsonl"

    @property
    def monitor(self) -> Path:
        return self.folder / "monitor.jsonl"

    def _committed(self) -> list[tuple[str, list[dict]]]:
        """(step key, samples) of every committed step, in commit order."""
        self._upgrade()
        out: list[tuple[str, list[dict]]] = []
        if not self.steps_dir.is_dir():
            return out
        for p in sorted(self.steps_dir.glob("[0-9]*.json")):
            try:
                doc = json.loads(p.read_text(encoding="utf-8"))
                out.append((str(doc["step"]), list(doc["samples"])))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise UserError(
                    f"{p} is damaged ({exc}); delete it to measure that step again"
                ) from None
        return out

    def done(self) -> list[str]:
        return [key for key, _ in self._committed()]

    def samples(self) -> list[dict]:
        return [s for _, rows in self._committed() for s in rows]

    def commit(self, step: str, samples: list[dict]) -> None:
        """Commit one finished step: its samples and its done mark in one atomic file."""
        taken = [p.name.split("-", 1)[0] for p in self.steps_dir.glob("[0-9]*.json")]
        n = 1 + max((int(t) for t in taken if t.isdigit()), default=-1)
        doc = {"step": step, "samples": samples}
        write_atomic(
            self.steps_dir / f"{n:04d}-{safe_name(step, 'step')}.json",
            (json.dumps(doc) + "\n").encode(),
        )

    def records(self, path: Path) -> list[dict]:
        """The JSON lines of ``gates.jsonl`` or ``monitor.jsonl``; a line a kill tore is skipped."""
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def _upgrade(self) -> None:
        """A folder an earlier as2d left (``samples.jsonl`` appended per step, then
        ``done.json`` rewritten): its done steps become committed step files with their
        samples; samples of a step never marked done (a kill between the two writes) were
        not committed and are dropped, so the resume measures that step once."""
        legacy_done = self.folder / "done.json"
        legacy_samples = self.folder / "samples.jsonl"
        if not legacy_done.exists():
            legacy_samples.unlink(missing_ok=True)  # nothing in it was ever committed
            return
        try:
            done = [str(k) for k in json.loads(legacy_done.read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError):
            done = []
        rows: dict[str, list[dict]] = {key: [] for key in done}
        for s in self.records(legacy_samples):
            if str(s.get("step")) in rows:
                rows[str(s.get("step"))].append(s)
        for n, key in enumerate(done):
            write_atomic(
                self.steps_dir / f"{n:04d}-{safe_name(key, 'step')}.json",
                (json.dumps({"step": key, "samples": rows[key]}) + "\n").encode(),
                force=True,
            )
        legacy_done.unlink()
        legacy_samples.unlink(missing_ok=True)

    def kept(self, done: list[str]) -> str:
        return (
            f"{len(done)} finished step{'s' if len(done) != 1 else ''} kept in {self.folder}; "
            f"{self.resume} to resume from there"
        )


def resume_command(
    who: Any,
    *,
    quick: bool,
    window: str | None,
    models: Path | None,
    prompt: PromptSpec | None,
    cores: tuple[list[int] | None, list[int] | None] = (None, None),
) -> str:
    """How to resume this calibration: the `as2d calibrate` command with the phone named by
    its stable identity (not an adb serial that changes with the connection), the options
    that decide the plan and the pair, and the cores the finished steps ran on."""
    import shlex

    parts = ["as2d", "calibrate", "--phone", who.phone_option]
    if quick:
        parts.append("--quick")
    if window is not None:
        parts += ["--window", window]
    if models is not None:
        parts += ["--models", str(models)]
    if cores == (None, None):
        parts.append("--os-placement")
    for opt, cpus in (("--verifier-cores", cores[0]), ("--producer-cores", cores[1])):
        if cpus:
            parts += [opt, ",".join(map(str, cpus))]
    spec = prompt or PromptSpec()
    for opt, val in (
        ("--task", spec.task),
        ("--language", spec.language),
        ("--question", spec.question),
        ("--prompt", spec.text),
    ):
        if val is not None:
            parts += [opt, str(val)]
    return f"run `{shlex.join(parts)}` again"


@dataclass(frozen=True)
class CalibrationSettings(PairSettings):
    """What one calibration uses (the `as2d calibrate` options, built once): ``pair`` the
    model pair, loaded once (None: the bundled pair); ``gate`` a device_agents GateConfig (None: the
    device's default); ``cores`` the (target, producer) CPUs the runner pins; ``plan`` the
    steps (None: the quick or full plan for ``window``)."""

    out_dir: Path = Path("calibrations")
    quick: bool = False
    window: str | None = None
    gate: Any = None
    cores: tuple[list[int] | None, list[int] | None] = (None, None)
    plan: list[Step] | None = None
    pair: ModelPair | None = None
    monitor_interval_s: float = 1.0


@dataclass(frozen=True)
class _StepRun:
    """What every step of one calibration run shares."""

    device: Any
    partial: _Partial
    gate: Any
    open_runner: Callable[..., Any]
    runner_opts: dict[str, Any]
    seconds: dict[str, float]
    progress: Progress | None
    monitor_interval_s: float


def calibrate(
    device: Any,
    s: CalibrationSettings = CalibrationSettings(),
    *,
    progress: Progress | None = None,
    open_runner: Callable[..., Any] | None = None,
) -> CalibrationResult:
    """Calibrate ``device`` with settings ``s``. The 1 Hz monitor runs beside every step: a
    core going offline stops the calibration at once, keeping every finished step."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.launch.host import open_runner as default_open
    from as2d_cli.models.model_pair import load_pair
    from device_agents.gating import GateConfig
    from device_agents.identity import identify

    t_start = time.time()
    win = s.window or calibration_windows()[0]
    corpus = load_corpus()
    if s.window is not None and corpus.get(s.window).split == "test":  # unknown: get() says so
        raise UserError(
            f"--window {s.window} is a test window; calibrate on dev or val audio "
            "(calibration is kept apart from the test split), or leave --window out"
        )
    pair = s.pair or load_pair(check_hashes=False)  # the runner checks the files
    ident = pair.identity()
    steps = s.plan if s.plan is not None else _plan(s, pair, corpus)
    who = identify(device)
    # Keyed by what the device is, not how it is reached: a wireless serial changes per connection.
    key = f"{who.key}-{plan_hash(steps)}"
    key += "" if s.models is None else f"-{ident['sha256'][:12]}"
    redo = resume_command(
        who, quick=s.quick, window=s.window, models=s.models, prompt=s.prompt, cores=s.cores
    )
    partial = _Partial(s.out_dir / ".partial" / key, redo)
    partial.folder.mkdir(parents=True, exist_ok=True)
    done = partial.done()
    resumed = len(done)
    runner_opts = {"pair": pair, "target_cores": s.cores[0], "producer_cores": s.cores[1]}
    run = _StepRun(
        device,
        partial,
        s.gate or GateConfig.for_device(device),
        open_runner or default_open,
        runner_opts,
        corpus.seconds(),
        progress,
        s.monitor_interval_s,
    )
    _run_steps(run, steps, done)
    gates = partial.records(partial.gates)  # earlier runs' too
    dev_block = {
        **who.to_dict(),
        "facts": device.facts().to_dict(),
        "gates": gates,
        "calibration_window": win,
        "plan": key,
        "cores": {"target": s.cores[0], "producer": s.cores[1]},
    }
    if s.models is not None:  # which pair these costs belong to (the bundled pair's carry none)
        dev_block["pair"] = ident
    samples: list[Any] = partial.samples()
    profile = fit_profile(
        samples,
        dev_block,
        notes=f"{'quick' if s.quick else 'full'} calibration on {win}",
        ref_audio_s=corpus.seconds().get(win),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    paths = _write_outputs(s.out_dir, who, profile, samples, partial)
    return CalibrationResult(*paths, len(steps), resumed, gates, time.time() - t_start)


def _plan(s: CalibrationSettings, pair: Any, corpus: Any) -> list[Step]:
    """The quick or full plan on ``s.window`` (default: the calibration windows)."""
    win, ctc_win = (s.window, s.window) if s.window else calibration_windows()
    return make_plan(
        win,
        quick=s.quick,
        ctc_window=ctc_win,
        short_window=None if s.window else short_calibration_window(win, corpus),
        episode_windows=(win,) if s.window else episode_windows(win, corpus),
        sources=calibrated_sources(pair),
        max_length=None if s.models is None else pair.max_length(),
    )


def _run_steps(run: _StepRun, steps: list[Step], done: list[str]) -> list[dict]:
    """Gate and run every step not done yet, under the monitor; append each step's samples,
    gate record and monitor record as it finishes. Returns the gate records of this run."""
    from as2d_cli.errors import Interrupted

    total = sum(s.weight for s in steps)
    runners: list[Any] = []  # the runner, opened at the first step that runs
    gates: list[dict] = []
    try:
        for step in steps:
            if step.key in done:
                continue
            finished = sum(s.weight for s in steps if s.key in done)
            gates.append(_gate_step(run, step, done, finished, total, first=not gates))
            if not runners:
                runners.append(run.open_runner(run.device, **run.runner_opts))
            got = _measure_step(run, runners[0], step, done)
            run.partial.commit(step.key, got)  # the samples and the done mark, together
            done.append(step.key)
        if run.progress:
            run.progress("fitting the profile", total, total)
    except KeyboardInterrupt:
        raise Interrupted(f"calibration interrupted; {run.partial.kept(done)}") from None
    finally:
        for r in runners:
            r.close()
    return gates


def _gate_step(
    run: _StepRun, step: Step, done: list[str], finished: float, total: float, *, first: bool
) -> dict:
    """The host's quiet (once, before the first measurement) and the gate before ``step``;
    its record appended; a failed gate stops the calibration."""
    from device_agents.gating import run_gate, settle

    settled = None
    if first and run.gate.settle_s > 0:
        settled = settle(
            run.device,
            run.gate.settle_s,
            waiting=settle_waiting(run.progress, run.gate.settle_s, finished, total),
        )
    if run.progress:
        run.progress(step.label, finished, total)
    result = run_gate(run.device, run.gate)
    rec = result.to_dict()
    if settled is not None:
        rec["observations"].insert(0, dataclasses.asdict(settled))
    rec["step"] = step.key
    append_jsonl(run.partial.gates, [rec])
    if not result.passed:
        raise DeviceError(
            f"gate failed before {step.label}: {result.failure}; {run.partial.kept(done)}"
        )
    return rec


def _measure_step(run: _StepRun, runner: Any, step: Step, done: list[str]) -> list[dict]:
    """One step under the core monitor; its monitor record appended; its samples, each
    naming its step and its window's audio seconds."""
    from device_agents.gating import CpuTimes
    from device_agents.monitor import CoreMonitor, abort_on_trip

    device = run.device
    got: list[dict] = []

    def collect(ev: dict) -> None:
        if ev.get("event") == "sample":
            ev = dict(ev)
            ev.pop("event")
            got.append(ev)

    before = CpuTimes.read_work(device)
    monitor = CoreMonitor(device, run.monitor_interval_s, on_trip=abort_on_trip(runner)).start()
    error: DeviceError | None = None
    try:
        runner.call(step.command, on_event=collect)
    except DeviceError as exc:
        error = exc
    finally:
        monitor.stop()
    try:
        after = CpuTimes.read_work(device)
    except DeviceError:  # the device left; the step's error says so below
        after = None
    mrec = {
        "step": step.key,
        **monitor.record(),
        "cpu": (
            {**after.since(before), "steal_source": after.source}
            if before is not None and after is not None
            else None
        ),
    }
    append_jsonl(run.partial.monitor, [mrec])
    if monitor.failure is not None and monitor.failure.kind == "core_offline":
        f = monitor.failure
        gone = ",".join(map(str, f.detail.get("offline", [])))
        raise DeviceError(
            f"calibration stopped: CPU{gone} went offline on {device.serial} {f.t_s:.1f} s into "
            f"{step.label} (at {time.strftime('%H:%M:%S', time.localtime(f.wall_time))}); the "
            f"step's samples are discarded and the failure is recorded in {run.partial.monitor}; "
            f"{run.partial.kept(done)} once the phone has cooled down"
        )
    if error is not None:  # the device failed mid-step: say what is kept and how to go on
        raise DeviceError(f"{step.label}: {error}; {run.partial.kept(done)}") from None
    for s in got:
        s["step"] = step.key
        w = s.get("window", step.command.get("window"))  # a probe over several windows names each
        if w in run.seconds:
            s["audio_s"] = run.seconds[w]
    return got


def _write_outputs(
    out_dir: Path, who: Any, profile: Any, samples: list[dict], partial: _Partial
) -> tuple[Path, Path, Path]:
    """The profile, its raw samples, gate and monitor records and the R(K) plot, named by
    the device (never over an earlier profile); the partial folder goes last."""
    from as2d_cli.formats.layout import companion
    from as2d_cli.formats.layout import profile_path as new_profile_path
    from as2d_cli.formats.profile_io import write_profile

    out_dir.mkdir(parents=True, exist_ok=True)
    profile_path = write_profile(new_profile_path(out_dir, who.name), profile)
    idle: dict[int, list[float]] = {}
    for s in samples:
        if s["figure"].startswith("verify.K") and not s.get("concurrent"):
            idle.setdefault(int(s["width"]), []).append(float(s["ms"]))
    plot_path = plot_savings(
        idle,
        companion(profile_path, "savings.png"),
        f"{who.name}: per-token verification saving R(K)",
    )
    samples_path = companion(profile_path, "samples.jsonl")
    write_atomic(samples_path, "".join(json.dumps(s) + "\n" for s in samples).encode())
    for src, name in ((partial.gates, "gates"), (partial.monitor, "monitor")):
        if src.exists():  # every whole record (a line a kill tore is left out)
            rows = partial.records(src)
            write_atomic(
                companion(profile_path, f"{name}.jsonl"),
                "".join(json.dumps(r) + "\n" for r in rows).encode(),
            )
    shutil.rmtree(partial.folder, ignore_errors=True)
    return profile_path, plot_path, samples_path
