"""`as2d eval --native` keeps every finished run and resumes (`--append RUN_DIR`): Ctrl-C
names the folder and the command that resumes it; the resume runs only what is missing and
builds the tables from all the runs; a core going offline on the phone mid-window stops the
evaluation in one line and keeps the record; `--append` onto other settings is refused.

The runs are real (the bundled models, locally and on the emulated phone with Python) on
three short test windows, priced with the K70 profile."""

from __future__ import annotations

import dataclasses
import json
import shlex
import threading
import time
from pathlib import Path

import pytest
import yaml

from as2d_cli.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def _shipped(name: str) -> Path:
    """The K70 profile or its deployment, where this checkout keeps them."""
    for base in (ROOT / "as2d_cli" / "assets" / "profiles", ROOT / "calibrations"):
        if (base / name).is_file():
            return base / name
    pytest.skip(f"no shipped {name}")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    """Traces of the shortest test window of three datasets (a fast replay part)."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.formats.trace_io import load_traces, write_traces

    ts = load_traces(ROOT / "as2d_cli" / "assets" / "traces" / "test.jsonl.gz")
    sec = load_corpus().seconds()
    first: dict[str, object] = {}
    for w in sorted(ts.windows, key=lambda w: (sec.get(w.id, 1e9), w.id)):
        first.setdefault(w.dataset, w)
    keep = sorted(first.values(), key=lambda w: sec[w.id])[:3]  # type: ignore[attr-defined]
    folder = tmp_path_factory.mktemp("traces")
    write_traces(folder / "test.jsonl", dataclasses.replace(ts, windows=tuple(keep)), split="test")
    return {
        "traces": folder,
        "profile": _shipped("k70.profile.yaml"),
        "deployment": _shipped("k70/deployment.yaml"),
    }


class Counting:
    """A runner handle that counts decodes (window, method) and can raise Ctrl-C before one."""

    def __init__(self, inner, log: list, interrupt_at: int | None) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.log, self.interrupt_at = inner, log, interrupt_at

    def call(self, cmd, on_event=None):  # type: ignore[no-untyped-def]
        if cmd.get("op") == "decode":
            if self.interrupt_at is not None and len(self.log) + 1 == self.interrupt_at:
                raise KeyboardInterrupt
            self.log.append((cmd["window"], cmd["method"]))
        return self.inner.call(cmd, on_event)

    def batch(self, cmds):  # type: ignore[no-untyped-def]
        return [self.call(c) for c in cmds]

    def abort(self) -> None:
        self.inner.abort()

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _count_runs(monkeypatch, interrupt_at: int | None = None) -> list:  # type: ignore[no-untyped-def]
    import as2d_cli.launch.host

    real = as2d_cli.launch.host.open_runner
    log: list = []
    monkeypatch.setattr(
        as2d_cli.launch.host,
        "open_runner",
        lambda device, **kw: Counting(real(device, **kw), log, interrupt_at),
    )
    return log


def _main(args: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


NATIVE = ["--native", "--windows", "2", "--repeats", "1", "--warmup", "0", "--settle", "0"]


def _eval_args(inputs: dict, tmp_path: Path) -> list[str]:
    return [
        "eval",
        "--phone",
        "local",
        "--profile",
        str(inputs["profile"]),
        "--deployment",
        str(inputs["deployment"]),
        "--traces",
        str(inputs["traces"]),
        "--calibrations",
        str(tmp_path / "cal"),
        "--results",
        str(tmp_path / "res"),
        *NATIVE,
    ]


def _interrupt(
    inputs: dict, tmp_path: Path, monkeypatch, capsys, at: int
) -> tuple[Path, list, str]:  # type: ignore[no-untyped-def]
    """A local `as2d eval --native` (2 windows × 4 methods, 1 repeat) stopped by Ctrl-C
    before its ``at``-th run: (its results folder, the runs made, stderr)."""
    log = _count_runs(monkeypatch, interrupt_at=at)
    code, _, err = _main(_eval_args(inputs, tmp_path), capsys)
    assert code == 130, err
    monkeypatch.undo()
    (folder,) = (tmp_path / "res").iterdir()
    return folder, list(log), err


def test_ctrl_c_keeps_the_finished_runs_and_append_completes_the_run(
    inputs, tmp_path, monkeypatch, capsys
) -> None:
    folder, first, err = _interrupt(inputs, tmp_path, monkeypatch, capsys, at=6)
    assert len(first) == 5
    kept = _lines(folder / "native.runs.jsonl")
    assert [(r["window"], r["method"]) for r in kept] == first  # each run recorded as it finished
    assert not (folder / "native.json").exists()
    # One line naming what is kept, the folder and the exact command that resumes.
    (line,) = [x for x in err.splitlines() if "interrupted" in x]
    assert line.startswith(
        "error: native evaluation interrupted; 5 finished runs kept in " + str(folder) + "; "
    )
    cmd = line.split("resume with `", 1)[1].rstrip("`")
    assert cmd == shlex.join(["as2d", "eval", "--phone", "local", *NATIVE, "--append", str(folder)])

    # That command runs only the three missing runs, none twice, and completes the run.
    log = _count_runs(monkeypatch)
    code, out, err = _main(shlex.split(cmd)[1:], capsys)
    assert code == 0, err
    assert len(log) == 3 and not set(log) & set(first)
    assert "5 of 8 runs finished, 3 to run" in err
    assert [r["session"] for r in _lines(folder / "native.runs.jsonl")] == [0] * 5 + [1] * 3
    assert list((tmp_path / "res").iterdir()) == [folder]  # the replay part was not made again
    doc = json.loads((folder / "native.json").read_text())["results"]
    picked = doc["windows"]
    assert len(picked) == 2 and doc["sessions"] == 2
    assert sorted((r["window"], r["rep"], r["method"]) for r in doc["rows"]) == sorted(
        (w, 0, m) for w in picked for m in ("target-only", "sd", "asp", "as2d")
    )
    assert all(s["runs"] == 2 and s["windows"] == 2 for s in doc["summary"]["methods"].values())
    assert len((folder / "native_per_window.csv").read_text().splitlines()) == 1 + 8
    assert "target-only" in out and f"results in {folder}" in out
    assert [p["pass"] for p in doc["summary"]["host_cpu_per_pass"]] == [0]
    monitor = _lines(folder / "native_monitor.jsonl")
    assert [m["session"] for m in monitor] == [0, 0, 1]  # the interrupted window's record too
    assert all(m["failure"] is None and m["samples"] and m["cpu"] is not None for m in monitor)

    # Complete: nothing to resume.
    code, _, err = _main(["eval", "--phone", "local", *NATIVE, "--append", str(folder)], capsys)
    assert code == 2 and "is complete" in err and len(err.strip().splitlines()) == 1


def test_append_onto_other_settings_is_refused_in_one_line(
    inputs, tmp_path, monkeypatch, capsys
) -> None:
    folder, log, _ = _interrupt(inputs, tmp_path, monkeypatch, capsys, at=1)
    assert log == [] and (folder / "native.settings.json").is_file()
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}

    def refused(args: list[str]) -> str:
        code, _, err = _main(args, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        return err

    err = refused(
        [
            "eval",
            "--phone",
            "local",
            "--native",
            "--windows",
            "2",
            "--repeats",
            "3",
            "--warmup",
            "0",
            "--append",
            str(folder),
        ]
    )
    assert "that run was made with repeats 1 (this command: 3)" in err
    err = refused(
        [
            "eval",
            "--phone",
            "local",
            "--native",
            "--windows",
            "3",
            "--repeats",
            "1",
            "--warmup",
            "1",
            "--append",
            str(folder),
        ]
    )
    assert "window_count 2 (this command: 3)" in err and "warmup 0 (this command: 1)" in err
    err = refused(["eval", "--phone", "local", "--repeats", "1", "--append", str(folder)])
    assert "add --native" in err
    err = refused(["eval", "--phone", "local", *NATIVE, "--append", str(tmp_path)])
    assert "not an `as2d eval` results folder" in err
    other = tmp_path / "other.yaml"
    other.write_text(inputs["deployment"].read_text().replace("budget: ", "budget: 1"))
    err = refused(
        ["eval", "--phone", "local", *NATIVE, "--deployment", str(other), "--append", str(folder)]
    )
    assert f"that run used the deployment {inputs['deployment'].resolve()}, not {other}" in err
    # What the run recorded, changed: its device identity, its deployment file, its model pair.
    recorded = json.loads(before["native.settings.json"])
    for key, value, said in (
        (
            "device",
            {**recorded["device"], "serial": "another-host"},
            "device local (serial another-host)",
        ),
        (
            "deployment",
            {**recorded["deployment"], "sha256": "0" * 64},
            f"batch {yaml.safe_load(inputs['deployment'].read_text())['config']['batch']}; sha256 000000000000)",
        ),
        ("pair", {"name": "turbo-base", "sha256": "ab" * 32}, "pair turbo-base abababababab"),
    ):
        (folder / "native.settings.json").write_text(json.dumps({**recorded, key: value}))
        assert said in refused(["eval", "--phone", "local", *NATIVE, "--append", str(folder)])
    (folder / "native.settings.json").write_bytes(before["native.settings.json"])
    assert {
        p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()
    } == before  # nothing written


def test_a_core_going_offline_on_the_phone_stops_the_window_and_keeps_the_record(
    make_emulated_phone, inputs, tmp_path, monkeypatch
) -> None:
    """CPU5 goes offline while the second window's runner runs on the emulated phone: the
    1 Hz monitor (0.1 s here) stops the evaluation in one line naming the core and the
    time; the first window's runs and every monitor record are kept, the second window's
    batch is discarded, and the resume runs only that window."""
    from as2d_cli.errors import DeviceError
    from as2d_cli.evaluate.native import NativeSettings, run_native_eval
    from as2d_cli.evaluate.native_record import reopen_eval
    from as2d_cli.evaluate.run import EvalSettings, run_eval
    from device_agents.emulator.python import enable_python
    from device_agents.gating import GateConfig

    session = make_emulated_phone()
    enable_python(session.phone)
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(session.adb_port))
    dev = session.device()
    gate = dataclasses.replace(GateConfig.for_device(dev), rest_s=0.0, interval_s=0.05)
    out = run_eval(
        EvalSettings(
            session.serial,
            profile=inputs["profile"],
            traces=inputs["traces"],
            deployment=inputs["deployment"],
            calibrations=tmp_path / "cal",
            results=tmp_path / "res",
        )
    )

    def offline_during_the_second_window(line: str) -> None:
        if not line.startswith("[1/2]"):
            return
        seen = len(session.phone.history)

        def watch() -> None:  # once the second window's runner has started on the phone
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if any("native.runner" in h for h in session.phone.history[seen:]):
                    session.phone.set_core_online(5, False)
                    return
                time.sleep(0.02)

        threading.Thread(target=watch, daemon=True).start()

    with (
        pytest.raises(
            DeviceError,
            match=r"^native evaluation stopped: CPU5 went offline on .* s into native window "
            r"2/2 \(.*\) \(at \d\d:\d\d:\d\d\).* 4 finished runs kept in .*resume with `as2d eval --phone "
            + "k70"  # the phone's stable name, not the adb serial it had (which can change)
            + r" --native --windows 2 --repeats 1 --warmup 0 --rest 0 --interval 0.05 "
            r"--append ",
        ) as err
    ):
        run_native_eval(
            session.serial,
            out,
            NativeSettings(windows=2, repeats=1, warmup=0, gate=gate, monitor_interval_s=0.1),
            say=offline_during_the_second_window,
        )
    assert "\n" not in str(err.value)
    runs = _lines(out.folder / "native.runs.jsonl")
    first_window = {r["window"] for r in runs}
    assert len(runs) == 4 and len(first_window) == 1
    records = _lines(out.folder / "native_monitor.jsonl")
    assert len(records) == 2 and records[0]["failure"] is None and records[1]["finished"] == []
    failure = records[1]["failure"]
    assert failure["kind"] == "core_offline" and failure["detail"]["offline"] == [5]
    sample = records[0]["samples"][0]
    assert (
        sample["online"] == list(range(8))
        and sample["battery_temp_c"] is not None
        and sample["cur_khz"]
    )
    assert records[0]["cpu"] is not None and 0.0 <= records[0]["cpu"]["steal"] <= 1.0
    assert records[0]["cpu"]["steal_source"] == "host"  # the host's, not the phone's script

    session.phone.set_core_online(5, True)
    started = sum("native.runner" in h for h in session.phone.history)
    res = run_native_eval(
        session.serial,
        reopen_eval(out.folder, native=True),
        NativeSettings(
            windows=2, repeats=1, warmup=0, gate=gate, monitor_interval_s=0.1, append=True
        ),
    )
    assert (
        sum("native.runner" in h for h in session.phone.history) - started == 2
    )  # hello, one window's batch
    runs = _lines(out.folder / "native.runs.jsonl")
    assert len(runs) == 8 and {r["window"] for r in runs[4:]}.isdisjoint(first_window)
    doc = json.loads(res.results.read_text())["results"]
    assert len(doc["rows"]) == 8 and doc["identity"]["name"] == "k70" and doc["sessions"] == 2
    assert [m["session"] for m in _lines(out.folder / "native_monitor.jsonl")] == [0, 0, 1]


def test_host_steal_per_pass_and_the_host_bound_line() -> None:
    """Steal pools a pass's windows by the time each covered; a measured pass over 5 %
    steal says the host, not the profile, bounds the agreement (in one line)."""
    from as2d_cli.evaluate.native import METHODS, render_native, summarize
    from as2d_cli.evaluate.native_stats import host_per_pass

    host = host_per_pass(
        [
            {"rep": -1, "cpu": {"busy": 0.5, "steal": 0.0, "jiffies": 100}},
            {"rep": 0, "cpu": {"busy": 0.9, "steal": 0.02, "jiffies": 100}},
            {"rep": 0, "cpu": {"busy": 0.9, "steal": 0.14, "jiffies": 300}},
            {"rep": 0, "cpu": None},  # the device left before the reading
        ]
    )
    assert host == [
        {"pass": -1, "warmup": True, "busy": 0.5, "steal": 0.0},
        {"pass": 0, "warmup": False, "busy": 0.9, "steal": 0.11},
    ]
    rows = [
        {
            "window": "w1",
            "rep": 0,
            "method": m,
            "divergence": None,
            "res": {"n_tokens": 100, "time_ms": 100.0},
            "tps_native": 1000.0,
            "tps_replay": 1100.0,
            "error_percent": 10.0,
        }
        for m in METHODS
    ]
    text = render_native(summarize(rows, host))
    assert (
        "host CPU steal per pass (/proc/stat over each window's runs): 0.0 (warm-up) / 11.0 %"
        in text
    )
    (line,) = [x for x in text.splitlines() if x.startswith("host bound:")]
    assert (
        "CPU steal reached 11.0 % in a measured pass (over 5 %)" in line
        and "not the profile" in line
    )
    assert "host bound:" not in render_native(
        summarize(rows, host[:1])
    )  # one pass, no steal: nothing to say


def test_a_line_torn_by_a_crash_is_dropped_on_resuming(tmp_path: Path) -> None:
    from as2d_cli.evaluate.native_record import RUNS, NativeRecord

    (tmp_path / "native.settings.json").write_text(json.dumps({"repeats": 1}))
    whole = (
        json.dumps({"window": "w", "rep": 0, "method": "sd", "res": {"tps": 1.0}, "session": 0})
        + "\n"
    )
    (tmp_path / RUNS).write_text(whole + '{"window": "w", "rep": 0, "meth')
    record = NativeRecord.resume(tmp_path, {"repeats": 1})
    assert record.resumed and record.session == 1 and record.done() == {("w", 0, "sd"): 1.0}
    record.append(RUNS, {"window": "w", "rep": 0, "method": "asp", "res": {"tps": 2.0}})
    assert len(_lines(tmp_path / RUNS)) == 2
