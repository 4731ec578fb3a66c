"""Bad input through the real CLI: one ``error:`` line on stderr naming the option or
path, a non-zero exit, no traceback, and nothing written or changed — refused before any
work starts (no case calibrates, builds traces or runs a model)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from as2d_cli import __version__
from as2d_cli.cli.main import main

DATA = Path(__file__).resolve().parent / "data"
PROFILE = "profile.yaml"  # the replay example: widths K1..K13
TRACES = "traces.jsonl.gz"
EXAMPLE = "example-profile.yaml"  # the eval example


@pytest.fixture()
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a regular FILE, a folder DIR, an existing results file and
    the example inputs; the commands run in it."""
    (tmp_path / "FILE").write_text("not a folder\n")
    (tmp_path / "DIR").mkdir()
    (tmp_path / "EXISTING.json").write_text("{}\n")
    shutil.copy(DATA / "replay" / "profile.yaml", tmp_path / PROFILE)
    shutil.copy(DATA / "replay" / "traces.jsonl.gz", tmp_path / TRACES)
    shutil.copy(DATA / "example-profile.yaml", tmp_path / EXAMPLE)
    (tmp_path / "tr").mkdir()
    for split in ("dev", "val", "test"):
        shutil.copy(DATA / f"example-{split}.jsonl", tmp_path / "tr")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    return tmp_path


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file and folder under ``root``: its mtime and content hash (folders: '')."""
    out = {}
    for p in sorted(root.rglob("*")):
        digest = "" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        out[str(p.relative_to(root))] = (p.stat().st_mtime_ns, digest)
    return out


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line(code: int, err: str, *needles: str) -> str:
    assert code != 0
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# (id, arguments, what the error line must name)
CASES = [
    # folders and files given where the other is expected
    ("eval-results-file", ["eval", "--results", "FILE"], ["--results", "FILE"]),
    ("eval-calibrations-file", ["eval", "--calibrations", "FILE"], ["--calibrations", "FILE"]),
    ("eval-profile-folder", ["eval", "--profile", "DIR"], ["--profile", "DIR"]),
    ("eval-profile-missing", ["eval", "--profile", "nope.yaml"], ["--profile", "nope.yaml"]),
    ("eval-deployment-folder", ["eval", "--deployment", "DIR"], ["--deployment", "DIR"]),
    ("calibrate-out-file", ["calibrate", "--out", "FILE"], ["--out", "FILE"]),
    ("calibrate-out-under-file", ["calibrate", "--out", "FILE/sub"], ["--out", "FILE"]),
    (
        "energy-out-file",
        ["energy", "--out", "FILE", "--phone", "k70", "--request-cmd", "true"],
        ["--out", "FILE"],
    ),
    ("energy-from-run-file", ["energy", "--from-run", "FILE"], ["--from-run", "FILE"]),
    (
        "energy-task-own-command",
        ["energy", "--phone", "k70", "--request-cmd", "true", "--models", "audio-llm"]
        + ["--task", "answer"],
        ["--task", "--request-cmd", "--bundle"],
    ),
    ("energy-from-run-missing", ["energy", "--from-run", "nope"], ["--from-run", "nope"]),
    (
        "energy-push-folder",
        ["energy", "--phone", "k70", "--request-cmd", "true", "--push", "DIR"],
        ["--push", "DIR"],
    ),
    (
        "traces-out-under-file",
        ["traces", "build", "--split", "dev", "--out", "FILE/sub"],
        ["--out", "FILE"],
    ),
    ("traces-out-folder", ["traces", "build", "--split", "dev", "--out", "DIR"], ["--out", "DIR"]),
    (
        "replay-out-existing",
        ["replay", "--profile", PROFILE, "--traces", TRACES, "--out", "EXISTING.json"],
        ["--out", "EXISTING.json", "never overwritten"],
    ),
    (
        "replay-out-under-file",
        ["replay", "--profile", PROFILE, "--traces", TRACES, "--out", "FILE/r.json"],
        ["--out", "FILE"],
    ),
    (
        "replay-deployment-folder",
        ["replay", "--profile", PROFILE, "--traces", TRACES, "--deployment", "DIR"],
        ["--deployment", "DIR"],
    ),
    (
        "select-budget-out-existing",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--out", "EXISTING.json"],
        ["--out", "EXISTING.json"],
    ),
    ("compare-file", ["compare", "FILE", "DIR"], ["FILE"]),
    ("report-file", ["report", "FILE"], ["FILE"]),
    (
        "plot-rk-out-existing",
        ["plot", "rk", PROFILE, "--out", "EXISTING.json"],
        ["--out", "EXISTING.json"],
    ),
    ("plot-rk-profile-folder", ["plot", "rk", "DIR"], ["DIR"]),
    ("corpus-file", ["corpus", "list", "--corpus", "FILE"], ["--corpus", "FILE"]),
    (
        "decode-candidates-folder",
        ["decode", "--window", "w", "--candidates", "DIR"],
        ["--candidates", "DIR"],
    ),
    (
        "models-import-target-file",
        ["models", "import", "--target", "FILE", "--drafter", "DIR", "--out", "pair"],
        ["--target", "FILE"],
    ),
    (
        "models-import-out-existing",
        ["models", "import", "--target", "DIR", "--drafter", "DIR", "--out", "DIR"],
        ["--out", "DIR", "never overwritten"],
    ),
    (
        "models-import-out-under-file",
        ["models", "import", "--target", "DIR", "--drafter", "DIR", "--out", "FILE/p"],
        ["--out", "FILE"],
    ),
    ("bundle-out-under-file", ["bundle", "build", "--out", "FILE/b.tar"], ["--out", "FILE"]),
    ("bundle-cache-file", ["bundle", "build", "--cache", "FILE"], ["--cache", "FILE"]),
    ("bundle-project-file", ["bundle", "build", "--project", "FILE"], ["--project", "FILE"]),
    (
        "bundle-archive-folder",
        ["bundle", "deploy", "--phone", "k70", "--archive", "DIR"],
        ["--archive", "DIR"],
    ),
    # ports
    ("emulator-port", ["emulator", "start", "--port", "70000"], ["--port"]),
    ("emulator-port-negative", ["emulator", "start", "--port", "-1"], ["--port"]),
    ("emulator-adb-port", ["emulator", "start", "--adb-port", "0"], ["--adb-port"]),
    ("devices-adb-port", ["devices", "--adb-port", "99999"], ["--adb-port"]),
    ("gate-adb-port", ["devices", "gate", "--phone", "local", "--adb-port", "0"], ["--adb-port"]),
    (
        "watch-adb-port",
        ["devices", "watch", "--phone", "local", "--adb-port", "65536"],
        ["--adb-port"],
    ),
    ("energy-adb-port", ["energy", "--adb-port", "0"], ["--adb-port"]),
    (
        "bundle-deploy-adb-port",
        ["bundle", "deploy", "--phone", "k70", "--adb-port", "70000"],
        ["--adb-port"],
    ),
    (
        "bundle-remove-adb-port",
        ["bundle", "remove", "--phone", "k70", "--adb-port", "-3"],
        ["--adb-port"],
    ),
    # seconds
    ("gate-rest", ["devices", "gate", "--phone", "local", "--rest", "-5"], ["--rest"]),
    ("gate-interval", ["devices", "gate", "--phone", "local", "--interval", "-1"], ["--interval"]),
    ("gate-min-ghz", ["devices", "gate", "--phone", "local", "--min-ghz", "0"], ["--min-ghz"]),
    ("watch-seconds", ["devices", "watch", "--phone", "local", "--seconds", "0"], ["--seconds"]),
    (
        "watch-interval",
        ["devices", "watch", "--phone", "local", "--interval", "-1"],
        ["--interval"],
    ),
    ("calibrate-rest", ["calibrate", "--rest", "-1"], ["--rest"]),
    ("calibrate-interval", ["calibrate", "--interval", "-1"], ["--interval"]),
    ("calibrate-settle", ["calibrate", "--settle", "-1"], ["--settle"]),
    ("calibrate-max-temp", ["calibrate", "--max-temp", "-5"], ["--max-temp"]),
    (
        "calibrate-verifier-cores",
        ["calibrate", "--verifier-cores", "4095"],
        ["--verifier-cores", "4095"],
    ),
    (
        "calibrate-cores-overlap",
        ["calibrate", "--verifier-cores", "0", "--producer-cores", "0"],
        ["share cores"],
    ),
    (
        "calibrate-os-and-cores",
        ["calibrate", "--os-placement", "--producer-cores", "0"],
        ["--os-placement"],
    ),
    (
        "decode-producer-cores",
        ["decode", "--window", "w", "--producer-cores", "x"],
        ["--producer-cores", "CPU list"],
    ),
    (
        "eval-native-cores",
        ["eval", "--phone", "local", "--native", "--verifier-cores", "4095"],
        ["--verifier-cores"],
    ),
    ("eval-rest", ["eval", "--native", "--rest", "-1"], ["--rest"]),
    ("eval-interval", ["eval", "--native", "--interval", "-0.5"], ["--interval"]),
    ("eval-settle", ["eval", "--native", "--settle", "-1"], ["--settle"]),
    ("energy-request-budget", ["energy", "--request-budget-s", "0"], ["--request-budget-s"]),
    ("energy-settle", ["energy", "--settle-s", "-1"], ["--settle-s"]),
    ("energy-gap", ["energy", "--gap-s", "-1"], ["--gap-s"]),
    ("eval-align", ["eval", "--align", "nearest"], ["--align", "paper, suffix"]),
    ("replay-align", ["replay", "--align", "x", "--profile", "p", "--traces", "t"], ["--align"]),
    ("energy-tail", ["energy", "--tail-s", "-1"], ["--tail-s"]),
    ("energy-discharge-wait", ["energy", "--discharge-wait-s", "-1"], ["--discharge-wait-s"]),
    # counts and limits
    ("traces-limit", ["traces", "build", "--split", "dev", "--limit", "-2"], ["--limit"]),
    (
        "traces-processes",
        ["traces", "build", "--split", "dev", "--processes", "0"],
        ["--processes"],
    ),
    (
        "traces-max-tokens",
        ["traces", "build", "--split", "dev", "--max-tokens", "0"],
        ["--max-tokens"],
    ),
    ("eval-windows", ["eval", "--native", "--windows", "0"], ["--windows"]),
    ("eval-repeats", ["eval", "--native", "--repeats", "0"], ["--repeats"]),
    ("eval-warmup", ["eval", "--native", "--warmup", "-1"], ["--warmup"]),
    ("energy-poll-ms", ["energy", "--poll-ms", "0"], ["--poll-ms"]),
    ("energy-warmups", ["energy", "--warmups", "-1"], ["--warmups"]),
    ("energy-repeats", ["energy", "--repeats", "0"], ["--repeats"]),
    ("models-check-windows", ["models", "check", "--windows", "0"], ["--windows"]),
    ("models-check-reps", ["models", "check", "--reps", "0"], ["--reps"]),
    ("compare-resamples", ["compare", "DIR", "DIR", "--resamples", "5"], ["--resamples"]),
    ("compare-seed", ["compare", "DIR", "DIR", "--seed", "-1"], ["--seed"]),
    ("decode-max-tokens", ["decode", "--window", "w", "--max-tokens", "0"], ["--max-tokens"]),
    (
        "select-budget-processes",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--processes", "0"],
        ["--processes"],
    ),
    (
        "select-budget-batch",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--batch", "0"],
        ["--batch"],
    ),
    # fractions
    (
        "select-budget-tolerance",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--tolerance", "2"],
        ["--tolerance"],
    ),
    (
        "select-budget-threshold",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--threshold", "-0.1"],
        ["--threshold"],
    ),
    # budgets and widths
    (
        "select-budget-out-of-range",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--budgets", "1-100"],
        ["--budgets", "25-100", "1-24"],
    ),
    (
        "select-budget-zero",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--budgets", "0-3"],
        ["--budgets", "0"],
    ),
    (
        "select-budget-garbage",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--budgets", "a-b"],
        ["--budgets"],
    ),
    (
        "select-budget-unmeasured",
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--budgets", "1-20"],
        ["--budgets", "13-20", "K13"],
    ),
    (
        "replay-budget",
        ["replay", "--profile", PROFILE, "--traces", TRACES, "--budget", "0"],
        ["--budget"],
    ),
    (
        "replay-budget-high",
        ["replay", "--profile", PROFILE, "--traces", TRACES, "--budget", "25"],
        ["--budget"],
    ),
    (
        "replay-k",
        ["replay", "--profile", PROFILE, "--traces", TRACES, "--method", "sd", "--k", "0"],
        ["--k"],
    ),
    ("decode-budget", ["decode", "--window", "w", "--budget", "0"], ["--budget"]),
    ("decode-k", ["decode", "--window", "w", "--k", "99"], ["--k"]),
    # cores: checked against the device once it is resolved
    (
        "gate-core-negative",
        ["devices", "gate", "--phone", "local", "--gate-core", "-1"],
        ["--gate-core"],
    ),
    (
        "gate-core-absent",
        ["devices", "gate", "--phone", "local", "--gate-core", "100000"],
        ["--gate-core", "100000"],
    ),
    # usage
    ("unknown-option", ["eval", "--nope"], ["--nope", "as2d eval --help"]),
    ("unknown-command", ["nosuch"], ["nosuch"]),
]


@pytest.mark.parametrize("args,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(
    work: Path, capsys, args: list[str], needles: list[str]
) -> None:
    before = snapshot(work)
    code, out, err = run(args, capsys)
    line = assert_one_line(code, err, *needles)
    assert out == ""
    assert "--force" not in line or args[0] == "traces"  # no command but `traces build` has --force
    assert snapshot(work) == before  # nothing written, nothing changed


def _unconfirmed_deployment(path: Path, profile: Path) -> Path:
    from as2d_cli.formats.deployment_io import make_deployment, write_deployment

    path.parent.mkdir(parents=True, exist_ok=True)
    return write_deployment(
        path,
        make_deployment(
            "qwen",
            5,
            0.4,
            8,
            profile,
            "k70-synthetic",
            {"split": "dev", "retained": None, "val": None},
            align="suffix",  # the default rules: eval looks for a deployment under them
        ),
    )


def test_eval_refuses_an_unconfirmed_deployment_it_was_given(work: Path, capsys) -> None:
    dep = _unconfirmed_deployment(work / "dep.yaml", work / EXAMPLE)
    before = snapshot(work)
    code, _, err = run(
        [
            "eval",
            "--profile",
            EXAMPLE,
            "--traces",
            "tr",
            "--deployment",
            "dep.yaml",
            "--calibrations",
            "cal",
            "--results",
            "res",
        ],
        capsys,
    )
    assert_one_line(code, err, str(dep.name), "dev only", "--allow-unconfirmed")
    assert snapshot(work) == before


@pytest.mark.parametrize("command", ["eval", "replay"])
def test_align_other_than_the_deployments_rules_is_refused(
    work: Path, capsys, command: str
) -> None:
    """A deployment's budget was chosen under its alignment rules: asking for the other
    rules with it is one line naming both, before anything runs."""
    _unconfirmed_deployment(work / "dep.yaml", work / EXAMPLE)  # selected under suffix
    before = snapshot(work)
    traces = "tr" if command == "eval" else "tr/example-test.jsonl"  # replay: one file
    args = ["--profile", EXAMPLE, "--traces", traces, "--deployment", "dep.yaml"]
    args += ["--align", "paper"]
    if command == "eval":
        args += ["--calibrations", "cal", "--results", "res"]
    code, _, err = run([command, *args], capsys)
    assert_one_line(code, err, "--align paper", "dep.yaml", "suffix rules", "select-budget")
    assert snapshot(work) == before


def test_eval_refuses_a_newest_unconfirmed_deployment_it_found(work: Path, capsys) -> None:
    """The newest deployment chosen on the profile was selected on dev only: eval names
    it and refuses, rather than silently evaluating it."""
    dep = _unconfirmed_deployment(
        work / "cal" / "k70-synthetic" / "deployment.yaml", work / EXAMPLE
    )
    before = snapshot(work)
    code, _, err = run(
        [
            "eval",
            "--profile",
            EXAMPLE,
            "--traces",
            "tr",
            "--calibrations",
            "cal",
            "--results",
            "res",
        ],
        capsys,
    )
    assert_one_line(code, err, str(dep.relative_to(work)), "--allow-unconfirmed")
    assert snapshot(work) == before


def test_eval_will_not_select_on_traces_without_val_windows(work: Path, capsys) -> None:
    (work / "tr" / "example-val.jsonl").unlink()
    before = snapshot(work)
    code, _, err = run(
        [
            "eval",
            "--profile",
            EXAMPLE,
            "--traces",
            "tr",
            "--calibrations",
            "cal",
            "--results",
            "res",
        ],
        capsys,
    )
    assert_one_line(code, err, "val", "--allow-unconfirmed")
    assert snapshot(work) == before


def _cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def test_a_malformed_adb_port_variable_is_one_line(tmp_path: Path) -> None:
    """adbutils reads ANDROID_ADB_SERVER_PORT when it is imported: the variable is checked first."""
    proc = _cli("devices", env={"ANDROID_ADB_SERVER_PORT": "abc"}, cwd=tmp_path)
    assert_one_line(proc.returncode, proc.stderr, "ANDROID_ADB_SERVER_PORT", "abc")
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []


def test_an_os_error_that_escapes_is_one_line_naming_the_path(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """The last line of defence: an OSError no check foresaw prints its path, not a traceback."""
    from as2d_cli.cli import main as cli_main

    def boom(args: list[str]) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "locked"))

    monkeypatch.setattr(cli_main, "_run", boom)
    code, _, err = run(["corpus", "list"], capsys)
    assert_one_line(code, err, "Permission denied", str(tmp_path / "locked"))


def test_version() -> None:
    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == __version__ and proc.stderr == ""
    proc = _cli("version")
    assert proc.returncode == 0 and proc.stdout.strip() == __version__
