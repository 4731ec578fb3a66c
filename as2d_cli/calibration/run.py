"""Run a calibration on a device: gate, probe, keep every sample, resume, fit, write.

Samples are appended to ``<out>/.partial/<device>-<plan>/samples.jsonl`` as each step
finishes, with the gate observations beside them; an interrupted calibration resumes from
the steps already done. The finished profile is written next to its raw samples and the
R(K) plot, never over an earlier profile.
"""

from __future__ import annotations

import dataclasses

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from as2d_cli.calibration.fit import fit_profile
from as2d_cli.calibration.plan import Step, make_plan, plan_hash
from as2d_cli.calibration.plot import plot_savings
from as2d_cli.errors import DeviceError, UserError
from as2d_cli.formats.common import safe_name

Progress = Callable[[str, float, float], None]  # (label, done weight, total weight)


@dataclass
class CalibrationResult:
    profile_path: Path
    plot_path: Path
    samples_path: Path
    steps: int
    resumed_steps: int
    gates: list[dict] = field(default_factory=list)
    seconds: float = 0.0


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
    dev = [w for w in corpus.split("dev") if w.language == "en" and w.id != main and w.seconds < 0.6 * long.seconds]
    read = [w for w in dev if w.setting == "read"] or dev
    return min(read, key=lambda w: w.seconds).id if read else None


def episode_windows(main: str, corpus: Any = None, n: int = 6) -> tuple[str, ...]:
    """``n`` English development windows spread evenly over their lengths (the main window
    is the longest read one): the in-loop fit separates the target's step cost by audio
    length and by cache length."""
    from as2d_cli.corpus.manifest import load_corpus

    corpus = corpus or load_corpus()
    dev = sorted((w for w in corpus.split("dev") if w.language == "en"), key=lambda w: (w.seconds, w.id))
    if len(dev) <= n:
        return tuple(w.id for w in dev)
    return tuple(dict.fromkeys(dev[round(i * (len(dev) - 1) / (n - 1))].id for i in range(n)))


def calibrate(
    device: Any,
    *,
    out_dir: Path = Path("calibrations"),
    quick: bool = False,
    window: str | None = None,
    progress: Progress | None = None,
    gate: Any = None,
    open_runner: Callable[..., Any] | None = None,
    cores: tuple[list[int] | None, list[int] | None] = (None, None),
    plan: list[Step] | None = None,
    models: Path | None = None,
    task: str | None = None,
    language: str | None = None,
) -> CalibrationResult:
    """Calibrate ``device`` running the model pair ``models`` (None: the bundled pair);
    ``gate`` is a device_agents GateConfig (None: the device's default)."""
    from as2d_cli.models.bundle import load_bundle
    from device_agents.gating import GateConfig, run_gate, settle
    from native.host import open_runner as default_open

    t_start = time.time()
    win, ctc_win = (window, window) if window else calibration_windows()
    from as2d_cli.corpus.manifest import load_corpus

    corpus = load_corpus()
    if window is not None and corpus.get(window).split == "test":  # an unknown id: one line from get()
        raise UserError(f"--window {window} is a test window; calibrate on dev or val audio "
                        "(calibration is kept apart from the test split), or leave --window out")
    pair = load_bundle(models, check_hashes=False, task=task, language=language)  # the runner checks the files
    ident = pair.identity()
    steps = plan if plan is not None else make_plan(
        win, quick=quick, ctc_window=ctc_win, short_window=None if window else short_calibration_window(win, corpus),
        episode_windows=(win,) if window else episode_windows(win, corpus),
        sources=("drafter", "ctc") if pair.has("ctc") else ("drafter",),
        max_length=None if models is None else pair.max_length())
    seconds = corpus.seconds()  # samples carry their window's length (context terms)
    key = f"{safe_name(device.serial)}-{plan_hash(steps)}" + ("" if models is None else f"-{ident['sha256'][:12]}")
    partial = out_dir / ".partial" / key
    partial.mkdir(parents=True, exist_ok=True)
    samples_file, done_file, gates_file = partial / "samples.jsonl", partial / "done.json", partial / "gates.jsonl"
    done: list[str] = json.loads(done_file.read_text()) if done_file.exists() else []
    resumed = len(done)
    total = sum(s.weight for s in steps)
    gate_cfg = gate or GateConfig.for_device(device)
    runner = None
    gates: list[dict] = []
    try:
        for step in steps:
            finished = sum(s.weight for s in steps if s.key in done)
            if step.key in done:
                continue
            settled = None
            if not gates and gate_cfg.settle_s > 0:  # once, before the first measurement
                if progress:
                    progress("waiting for a quiet host", finished, total)
                settled = settle(device, gate_cfg.settle_s)
            if progress:
                progress(step.label, finished, total)
            result = run_gate(device, gate_cfg)
            rec = result.to_dict()
            if settled is not None:
                rec["observations"].insert(0, dataclasses.asdict(settled))
            rec["step"] = step.key
            gates.append(rec)
            _append(gates_file, [rec])
            if not result.passed:
                raise DeviceError(f"gate failed before {step.label}: {result.failure}; samples so far are kept in "
                                  f"{partial} and the next `as2d calibrate` resumes from there")
            if runner is None:
                runner = (open_runner or default_open)(device, models=None if models is None else str(models),
                                                       target_cores=cores[0], producer_cores=cores[1],
                                                       task=task, language=language)
            got: list[dict] = []

            def collect(ev: dict, got: list[dict] = got) -> None:
                if ev.get("event") == "sample":
                    ev = dict(ev)
                    ev.pop("event")
                    got.append(ev)

            try:
                runner.call(step.command, on_event=collect)
            except DeviceError as exc:  # the device failed mid-step: say what is kept and how to go on
                raise DeviceError(f"{step.label}: {exc}; samples of the finished steps are kept in {partial} "
                                  "and the next `as2d calibrate` resumes from there") from None
            for s in got:
                s["step"] = step.key
                w = s.get("window", step.command.get("window"))  # a probe over several windows names each
                if w in seconds:
                    s["audio_s"] = seconds[w]
            _append(samples_file, got)
            done.append(step.key)
            _write(done_file, json.dumps(done))
        if progress:
            progress("fitting the profile", total, total)
    finally:
        if runner is not None:
            runner.close()
    samples = [json.loads(x) for x in samples_file.read_text().splitlines() if x.strip()]
    facts = device.facts().to_dict()
    name = facts.get("model", {}).get("value") if isinstance(facts.get("model"), dict) else None
    dev_block = {"name": str(name or device.serial), "serial": device.serial,
                 "kind": device.kind, "facts": facts, "gates": gates, "calibration_window": win, "plan": key}
    if models is not None:  # which pair these costs belong to (the bundled pair's profiles carry none)
        dev_block["pair"] = ident
    profile = fit_profile(samples, dev_block,
                          notes=f"{'quick' if quick else 'full'} calibration on {win}",
                          ref_audio_s=seconds.get(win),
                          created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    from as2d_cli.formats.profile_io import write_profile

    stem = f"{safe_name(device.serial)}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    out_dir.mkdir(parents=True, exist_ok=True)
    profile_path = write_profile(out_dir / f"{stem}.profile.yaml", profile)
    stem = profile_path.name.removesuffix(".profile.yaml")
    idle: dict[int, list[float]] = {}
    for s in samples:
        if s["figure"].startswith("verify.K") and not s.get("concurrent"):
            idle.setdefault(int(s["width"]), []).append(float(s["ms"]))
    plot_path = plot_savings(idle, out_dir / f"{stem}.savings.png",
                             f"{device.serial}: per-token verification saving R(K)")
    samples_path = out_dir / f"{stem}.samples.jsonl"
    shutil.copyfile(samples_file, samples_path)
    shutil.copyfile(gates_file, out_dir / f"{stem}.gates.jsonl")
    shutil.rmtree(partial, ignore_errors=True)
    return CalibrationResult(profile_path, plot_path, samples_path, len(steps), resumed, gates, time.time() - t_start)


def _append(path: Path, rows: list[dict]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
