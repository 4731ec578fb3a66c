"""Results complete, or visibly not: an evaluation folder's manifest (every file with its
size and sha256, written last), the INCOMPLETE note while a command writes the folder, and
`as2d report`, `as2d compare` and `as2d eval --append` refusing — in one line, exit 2, no
traceback — a folder that is incomplete or was changed, or a run compared with itself.
Interruptions are real: Ctrl-C and a full disk in-process, and SIGINT / SIGKILL sent to a
running `as2d eval` of the shipped K70 profile and traces."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import as2d_cli.evaluate.run as run_mod
from as2d_cli.cli.main import main
from as2d_cli.errors import UserError
from as2d_cli.formats.common import INCOMPLETE, MANIFEST, sha256_file

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
EVAL_FILES = set(run_mod.eval_files())  # rk.png too: the example profile is there


def _run(args: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def _refused(args: list[str], capsys, *said: str) -> str:  # type: ignore[no-untyped-def]
    """The command is refused in one line (exit 2, no traceback) saying each of ``said``."""
    code, out, err = _run(args, capsys)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for s in said:
        assert s in err, err
    return err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:  # type: ignore[no-untyped-def]
    """The example traces and profile, and a deployment selected on them once."""
    from as2d_cli.evaluate.run import EvalSettings, run_eval

    base = tmp_path_factory.mktemp("inputs")
    traces = base / "traces"
    traces.mkdir()
    for split in ("dev", "val", "test"):
        shutil.copy(DATA / f"example-{split}.jsonl", traces)
    out = run_eval(
        EvalSettings(
            "k70",
            profile=DATA / "example-profile.yaml",
            traces=traces,
            calibrations=base / "cal",
            results=base / "res",
            accept_unvalidated=True,  # the example traces' selection (7 dev windows, NOT retained)
        )
    )
    return {"traces": traces, "deployment": out.deployment_path, "run": out.folder, "base": base}


def _eval(inputs: dict, results: Path, traces: Path | None = None) -> list[str]:
    return [
        "eval",
        "--phone",
        "k70",
        "--profile",
        str(DATA / "example-profile.yaml"),
        "--traces",
        str(traces or inputs["traces"]),
        "--deployment",
        str(inputs["deployment"]),
        "--calibrations",
        str(inputs["base"] / "cal"),
        "--results",
        str(results),
        "--accept-unvalidated",
    ]


@pytest.fixture()
def run(inputs, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """A copy of a complete evaluation folder, to damage."""
    return Path(shutil.copytree(inputs["run"], tmp_path / "run"))


@pytest.fixture()
def other(inputs, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """A second complete evaluation of the same windows."""
    from as2d_cli.evaluate.run import EvalSettings, run_eval

    return run_eval(
        EvalSettings(
            "k70",
            profile=DATA / "example-profile.yaml",
            traces=inputs["traces"],
            deployment=inputs["deployment"],
            results=tmp_path / "other",
            accept_unvalidated=True,
        )
    ).folder


def test_the_manifest_lists_every_file_with_its_size_and_sha256(inputs) -> None:
    folder = inputs["run"]
    doc = json.loads((folder / MANIFEST).read_text())
    assert doc["schema"] == "as2d.manifest" and doc["version"] == 1 and doc["complete"] is True
    assert set(doc) == {"schema", "version", "complete", "updated", "toolkit_version", "files"}
    names = {p.name for p in folder.iterdir()}
    assert set(doc["files"]) == EVAL_FILES == names - {MANIFEST}  # no note, no temp file left
    for name, entry in doc["files"].items():
        p = folder / name
        assert entry == {"size": p.stat().st_size, "sha256": sha256_file(p)}
    # results.json names its manifest, so a folder that lost it is not taken for an old one
    assert json.loads((folder / "results.json").read_text())["results"]["manifest"] == MANIFEST


def test_report_rerenders_a_verified_folder_and_records_what_it_wrote(run, capsys) -> None:
    before = json.loads((run / MANIFEST).read_text())["files"]
    (run / "tables.md").unlink()  # report's own outputs are rendered again, not checked
    code, out, err = _run(["report", str(run)], capsys)
    assert code == 0, err
    after = json.loads((run / MANIFEST).read_text())
    assert after["complete"] is True and not (run / INCOMPLETE).exists()
    assert after["files"]["tables.md"] == before["tables.md"]  # the same tables again
    figures = ("cdf.", "datasets.", "rk.")  # drawn again, now also as PDF and SVG
    assert {k: v for k, v in after["files"].items() if not k.startswith(figures)} == {
        k: v for k, v in before.items() if not k.startswith(figures)
    }
    assert {"cdf.pdf", "datasets.svg", "rk.pdf"} <= set(after["files"])
    assert not [p for p in run.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "damage, name, said",
    [
        ("edit", "per_window.csv", "has sha256"),
        ("truncate", "results.json", "has 100 bytes where the manifest records"),
        ("delete", "per_window.parquet", "is missing"),
        ("delete", "summary.csv", "is missing"),
    ],
)
def test_a_changed_file_is_refused_naming_it(
    run, other, capsys, damage: str, name: str, said: str
) -> None:
    p = run / name
    if damage == "edit":  # same size, one byte different
        data = bytearray(p.read_bytes())
        data[-2] = ord("7") if data[-2] != ord("7") else ord("8")
        p.write_bytes(bytes(data))
    elif damage == "truncate":
        p.write_bytes(p.read_bytes()[:100])
    else:
        p.unlink()
    before = _snapshot(run)
    remedy = "restore that file or run the evaluation again"
    _refused(["report", str(run)], capsys, f"{run / name} {said}", remedy)
    _refused(["compare", str(other), str(run)], capsys, f"{run / name} {said}", remedy)
    _refused(
        ["eval", "--phone", "local", "--native", "--settle", "0", "--append", str(run)],
        capsys,
        f"{run / name} {said}",
    )
    assert _snapshot(run) == before  # a refusal writes nothing


def test_a_changed_report_output_is_refused_by_compare_and_fixed_by_report(
    run, other, capsys
) -> None:
    (run / "datasets.png").write_bytes(b"\x89PNG not the figure")
    _refused(
        ["compare", str(other), str(run)],
        capsys,
        f"{run / 'datasets.png'} has",
        f"render it again with `as2d report {run}`",
    )
    code, _, err = _run(["report", str(run)], capsys)
    assert code == 0, err
    code, _, err = _run(["compare", str(other), str(run)], capsys)
    assert code == 0, err


def test_a_damaged_or_missing_manifest_is_refused(run, other, capsys) -> None:
    manifest = (run / MANIFEST).read_bytes()
    (run / MANIFEST).write_bytes(manifest[:50])
    _refused(["report", str(run)], capsys, f"{run / MANIFEST} is not valid JSON")
    doc = json.loads(manifest)
    (run / MANIFEST).write_text(json.dumps({**doc, "version": 2}))
    _refused(["compare", str(other), str(run)], capsys, "as2d.manifest version 2 is newer")
    (run / MANIFEST).unlink()  # results.json says there was one
    _refused(["report", str(run)], capsys, f"{run} has no {MANIFEST} though its results.json")


def test_a_folder_from_before_manifests_is_read_unverified_and_says_so(run, other, capsys) -> None:
    """An evaluation written before manifests existed: no manifest, and a results.json
    that names none. report and compare read it as it stands and say it is unverified."""
    (run / MANIFEST).unlink()
    doc = json.loads((run / "results.json").read_text())
    del doc["results"]["manifest"]
    (run / "results.json").write_text(json.dumps(doc))
    code, _, err = _run(["report", str(run)], capsys)
    assert code == 0 and f"note: {run} has no {MANIFEST}" in err, err
    assert not (run / MANIFEST).exists()  # report does not vouch for files it did not write
    code, out, err = _run(["compare", str(other), str(run)], capsys)
    assert code == 0, err
    assert f"B: {run} (no {MANIFEST}: written before manifests" in out
    assert f"A: {other}\n" in out


def test_compare_refuses_a_run_compared_with_itself(run, capsys, tmp_path: Path) -> None:
    _refused(["compare", str(run), str(run)], capsys, "are the same folder")
    _refused(["compare", str(run), str(run / ".." / "run")], capsys, "are the same folder")
    copy = shutil.copytree(run, tmp_path / "copy")
    _refused(["compare", str(run), str(copy)], capsys, "hold the same results.json")


def test_compare_refuses_runs_over_different_windows(inputs, other, capsys, tmp_path) -> None:
    """A complete, untouched run whose test traces lack one window of the other's."""
    from as2d_cli.formats.trace_io import load_traces, write_traces

    traces = tmp_path / "fewer"
    shutil.copytree(inputs["traces"], traces)
    test = traces / "example-test.jsonl"
    ts = load_traces(test)
    test.unlink()
    write_traces(test, dataclasses.replace(ts, windows=ts.windows[1:]), split="test")
    code, _, err = _run(_eval(inputs, tmp_path / "fewer-res", traces), capsys)
    assert code == 0, err
    (fewer,) = (tmp_path / "fewer-res").iterdir()
    _refused(
        ["compare", str(other), str(fewer)],
        capsys,
        "evaluated different windows (1 in one only",
        ts.windows[0].id,
    )


def _only_run(results: Path) -> Path:
    (folder,) = [p for p in results.iterdir()]
    return folder


def test_ctrl_c_while_eval_writes_leaves_a_folder_marked_incomplete(
    inputs, other, capsys, monkeypatch, tmp_path: Path
) -> None:
    def interrupted(*a: object, **kw: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_mod, "plot_cdf", interrupted)  # after results.json and the tables
    args = _eval(inputs, tmp_path / "res")
    code, _, err = _run(args, capsys)
    assert code == 130 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    folder = _only_run(tmp_path / "res")
    assert f"as2d eval interrupted while writing {folder}, which stays marked incomplete" in line
    redo = line.split("run `", 1)[1].split("` again")[0]
    assert redo.startswith("as2d eval --phone k70 --profile ") and "--results" in redo
    note = (folder / INCOMPLETE).read_text()
    assert "`as2d eval` began writing it" in note and f"Run `{redo}` again" in note
    assert "cdf.png" in note and "tables.md" in note
    doc = json.loads((folder / MANIFEST).read_text())
    assert doc["complete"] is False and doc["writing"] == "as2d eval" and doc["command"] == redo
    assert {"results.json", "per_window.csv"} <= {p.name for p in folder.iterdir()}
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp file left

    said = f"{folder} is incomplete: `as2d eval` did not finish it (10 of its files not written: cdf.png"
    _refused(["report", str(folder)], capsys, said, f"run `{redo}` again for a new folder")
    _refused(["compare", str(other), str(folder)], capsys, said)
    _refused(
        ["eval", "--phone", "local", "--native", "--settle", "0", "--append", str(folder)],
        capsys,
        said,
    )
    # The command it names makes a complete run beside it; the incomplete one is untouched.
    before = _snapshot(folder)
    monkeypatch.undo()
    code, _, err = _run(shlex.split(redo)[1:], capsys)
    assert code == 0, err
    assert _snapshot(folder) == before and len(list((tmp_path / "res").iterdir())) == 2


def test_a_full_disk_while_eval_writes_is_one_line_and_leaves_no_complete_folder(
    inputs, capsys, monkeypatch, tmp_path: Path
) -> None:
    import as2d_cli.evaluate.tables as tables

    def full(ev: object, meta: object, folder: Path, run: object = None) -> None:
        (folder / "per_window.csv").write_text("window,split\nw1,te")  # cut short
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "per_window.csv"))

    monkeypatch.setattr(tables, "write_tables", full)
    code, _, err = _run(_eval(inputs, tmp_path / "res"), capsys)
    assert code == 1 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    folder = _only_run(tmp_path / "res")
    assert f"could not write {folder} (No space left on device: " in line
    assert "stays marked incomplete" in line and "free the space" in line
    names = {p.name for p in folder.iterdir()}
    assert names == {MANIFEST, INCOMPLETE, "results.json", "table.txt"}  # no torn table, no scratch
    _refused(["report", str(folder)], capsys, f"{folder} is incomplete")

    # Full before the folder held anything: the empty folder goes, as it was before.
    def no_space(*a: object, **kw: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "manifest.json")

    monkeypatch.setattr(run_mod, "mark_writing", no_space)
    code, _, err = _run(_eval(inputs, tmp_path / "res2"), capsys)
    assert code == 1 and "(removed: nothing was in it)" in err and "Traceback" not in err
    assert list((tmp_path / "res2").iterdir()) == []


def test_an_interrupted_report_is_finished_by_report_and_refused_by_compare(
    run, other, capsys, monkeypatch
) -> None:
    import as2d_cli.evaluate.report as report

    def interrupted(*a: object, **kw: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "plot_datasets", interrupted)
    code, _, err = _run(["report", str(run)], capsys)
    assert code == 130 and "Traceback" not in err
    assert f"as2d report interrupted: {run} is marked incomplete until `as2d report {run}`" in err
    _refused(
        ["compare", str(other), str(run)],
        capsys,
        f"{run} is incomplete: `as2d report` did not finish it",
        f"resume it with `as2d report {run}`",
    )
    monkeypatch.undo()
    code, _, err = _run(["report", str(run)], capsys)
    assert code == 0, err
    assert json.loads((run / MANIFEST).read_text())["complete"] and not (run / INCOMPLETE).exists()
    code, _, err = _run(["compare", str(other), str(run)], capsys)
    assert code == 0, err


def test_a_native_part_in_progress_is_refused_except_by_its_resume(run, other, capsys) -> None:
    """While `eval --native` runs (or after it was stopped) the folder is incomplete:
    report and compare refuse it naming the --append command; that command's check passes,
    also when the native part was cut short while writing its outputs."""
    from as2d_cli.evaluate.native_record import RESULTS, SETTINGS, mark_native, reopen_eval

    resume = f"as2d eval --phone local --native --append {run}"
    mark_native(run, resume)
    res = json.loads((run / "results.json").read_text())
    dep = res["results"]["deployment"]
    settings = {  # what native_settings records, as far as --append reads it back
        "windows": [],
        "datasets": {},
        "profile": res["inputs"]["profile"],
        "deployment": {**res["inputs"]["deployment"], **dep},
    }
    (run / SETTINGS).write_text(json.dumps(settings))
    said = f"{run} is incomplete: `as2d eval --native` did not finish it"
    _refused(["report", str(run)], capsys, said, f"resume it with `{resume}`")
    _refused(["compare", str(other), str(run), "--native"], capsys, said)
    assert reopen_eval(run, native=True).folder == run
    (run / RESULTS).write_text("{}")  # its finishing was cut short: --append writes it again
    assert reopen_eval(run, native=True).folder == run
    (run / "results.json").write_text("{}")  # the replay part must still be as written
    with pytest.raises(UserError, match="results.json has"):
        reopen_eval(run, native=True)


def test_an_interrupted_native_evaluation_is_incomplete_until_append_finishes_it(
    inputs, capsys, monkeypatch, tmp_path: Path
) -> None:
    """Real native runs (the bundled models, locally) on two windows: Ctrl-C after two
    runs, the folder refused by report; `--append` completes it and the manifest then
    records the native files too."""
    import as2d_cli.launch.host

    real = as2d_cli.launch.host.open_runner
    calls: list[int] = []

    class Stop:
        def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
            self.inner = inner

        def call(self, cmd, on_event=None):  # type: ignore[no-untyped-def]
            if cmd.get("op") == "decode":
                calls.append(1)
                if len(calls) == 3:
                    raise KeyboardInterrupt
            return self.inner.call(cmd, on_event)

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc: object) -> None:
            self.inner.close()

    monkeypatch.setattr(as2d_cli.launch.host, "open_runner", lambda d, **kw: Stop(real(d, **kw)))
    profile = ROOT / "as2d_cli" / "assets" / "profiles" / "k70.profile.yaml"
    deployment = ROOT / "as2d_cli" / "assets" / "profiles" / "k70" / "deployment.yaml"
    if not (profile.is_file() and deployment.is_file()):
        pytest.skip("no shipped K70 profile")
    from as2d_cli.formats.trace_io import load_traces, write_traces

    ts = load_traces(ROOT / "as2d_cli" / "assets" / "traces" / "test.jsonl.gz")
    short = sorted(ts.windows, key=lambda w: len(w.reference))[:2]
    traces = tmp_path / "traces"
    traces.mkdir()
    write_traces(traces / "test.jsonl", dataclasses.replace(ts, windows=tuple(short)), split="test")
    native_opts = ["--native", "--windows", "2", "--repeats", "1", "--warmup", "0", "--settle", "0"]
    args = ["eval", "--phone", "local", "--profile", str(profile), "--deployment", str(deployment)]
    args += ["--traces", str(traces), "--results", str(tmp_path / "res"), *native_opts]
    code, _, err = _run(args, capsys)
    assert code == 130 and "Traceback" not in err, err
    folder = _only_run(tmp_path / "res")
    resume = err.split("resume with `", 1)[1].split("`")[0]
    _refused(["report", str(folder)], capsys, f"resume it with `{resume}`")
    assert f"Resume it with `{resume}`" in (folder / INCOMPLETE).read_text()

    monkeypatch.undo()
    code, _, err = _run(resume.split()[1:], capsys)
    assert code == 0, err
    doc = json.loads((folder / MANIFEST).read_text())
    assert doc["complete"] and not (folder / INCOMPLETE).exists()
    assert {
        "native.settings.json",
        "native.runs.jsonl",
        "native.gates.jsonl",
        "native_monitor.jsonl",
        "native.json",
        "native.txt",
        "native_per_window.csv",
        "native_vs_replay.png",
    } | EVAL_FILES == set(doc["files"])
    code, _, err = _run(["report", str(folder)], capsys)
    assert code == 0, err


# --- a real `as2d eval` stopped by signals --------------------------------------------


def _start_eval(results: Path, cwd: Path, log: Path) -> subprocess.Popen:
    """`as2d eval --phone k70` (the shipped profile and traces) in its own process group,
    as a terminal runs it: Ctrl-C there reaches the process and its pool's workers."""
    with log.open("w") as err:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "as2d_cli.cli.main", "eval", "--phone", "k70"]
            + ["--results", str(results)],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )


class Point:
    """Where to stop the run: when a file appears in its folder, or ``seconds`` after the
    replay began (the replay, then the oracle's sweep on the process pool)."""

    def __init__(self, file: str | None = None, seconds: float = 0.0) -> None:
        self.file, self.seconds = file, seconds
        self.since: float | None = None

    def __repr__(self) -> str:
        return self.file or f"replay+{self.seconds:g}s"

    def reached(self, results: Path, log: Path) -> bool:
        if self.file is not None:
            return results.is_dir() and any((d / self.file).exists() for d in results.iterdir())
        if self.since is None:
            if "replaying every method" not in (log.read_text() if log.exists() else ""):
                return False
            self.since = time.monotonic()
        return time.monotonic() - self.since >= self.seconds


# Where each run is stopped: Ctrl-C in the replay (or the oracle's pool) and while the
# folder is half written; SIGKILL in the tidy tables and in the report's figures.
STOPS = [
    (signal.SIGINT, Point(seconds=1.5)),
    (signal.SIGINT, Point("results.json")),
    (signal.SIGKILL, Point("per_window.parquet")),
    (signal.SIGKILL, Point("tables.md")),
]


def test_eval_stopped_by_signals_leaves_no_folder_taken_as_complete(
    inputs, other, capsys, tmp_path: Path
) -> None:
    """Every run at once (they take seconds each; a signal lands wherever the run is)."""
    from as2d_cli.evaluate.compare import verify_run
    from as2d_cli.evaluate.native_record import reopen_eval
    from as2d_cli.formats.common import read_manifest

    runs = []
    for i, (sig, point) in enumerate(STOPS):
        results, log = tmp_path / f"results{i}", tmp_path / f"stderr{i}.txt"
        runs.append((sig, point, results, log, _start_eval(results, tmp_path, log)))
    deadline = time.monotonic() + 300
    pending = list(runs)
    while pending:
        assert time.monotonic() < deadline, "an eval neither reached its point nor ended"
        for r in list(pending):
            sig, point, results, log, proc = r
            if proc.poll() is not None:
                pending.remove(r)
            elif point.reached(results, log):
                os.killpg(proc.pid, sig)
                pending.remove(r)
        time.sleep(0.005)
    refused = 0
    for sig, point, results, log, proc in runs:
        rc = proc.wait(timeout=120)
        err = log.read_text()
        assert "Traceback" not in err, err  # neither the command nor a worker of its pool
        assert rc == (0 if rc == 0 else 130 if sig == signal.SIGINT else -signal.SIGKILL), err
        folders = list(results.iterdir()) if results.exists() else []
        if point.file is not None:
            assert folders, f"{point}: the signal came after the folder was begun"
        elif rc == 130 and not folders:
            assert "error: as2d eval interrupted before it began a results folder" in err, err
        for f in folders:
            doc = read_manifest(f) if (f / "results.json").exists() else None
            if doc is not None and doc["complete"]:  # the signal came after its last write
                assert set(doc["files"]) == EVAL_FILES and verify_run(f) == doc
                continue
            said = "is incomplete" if doc is not None else "not an evaluation run"
            _refused(["report", str(f)], capsys, said)  # whatever is left: nothing takes it
            _refused(["compare", str(other), str(f)], capsys, said)
            with pytest.raises(UserError, match="is incomplete|not an `as2d eval` results"):
                reopen_eval(f, native=True)
            if sig == signal.SIGINT:
                (line,) = [x for x in err.splitlines() if x.startswith("error:")]
                assert line.startswith(f"error: as2d eval interrupted while writing {f}, which ")
            refused += 1
    assert refused >= 2  # the stops in the writing did land before its end
