"""The native runner's phone path through the real adb server and the emulated phone: the
runner payload (code + models) is pushed once per hash and started by the phone's python3
with only the pushed copy on PYTHONPATH; a decode there gives the local runner's tokens;
a small calibration gates on the phone's sysfs, runs there and writes a valid profile; a
core going offline stops it with one DeviceError line, keeps the samples, and a rerun
resumes.

The models are the bundled ones (as2d_cli/assets/models); while they are being
regenerated, ``AS2D_TEST_MODELS=DIR`` points these tests at another model directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from pathlib import Path

import pytest

from as2d_cli.calibration.plan import Step
from as2d_cli.calibration.run import CalibrationSettings, _Partial, calibrate, calibration_windows
from as2d_cli.errors import DeviceError, UserError
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.launch.host import DeviceRunner, LocalRunner, RunnerError, open_runner
from as2d_cli.launch.payload import (
    MARKER,
    RUNTIME_AREA,
    BundleLauncher,
    PythonPayloadLauncher,
    build_payload,
    choose_launcher,
    probe_python,
    push_windows,
)
from as2d_cli.models.model_pair import load_pair
from device_agents.emulator.python import enable_python
from device_agents.gating import GateConfig

MODELS = Path(os.environ["AS2D_TEST_MODELS"]) if os.environ.get("AS2D_TEST_MODELS") else None
PAIR = None if MODELS is None else load_pair(MODELS, check_hashes=False)
MAX = 40


def _shortest_test_window() -> str:
    from as2d_cli.corpus.manifest import load_corpus

    return min(load_corpus().split("test"), key=lambda w: w.seconds).id


def _fast_gate(device) -> GateConfig:  # type: ignore[no-untyped-def]
    """The phone's gate (all cores online, CPU4 ceiling), without the 15 s rest and 5 s wait."""
    return dataclasses.replace(GateConfig.for_device(device), rest_s=0.0, interval_s=0.05)


@pytest.fixture(scope="module")
def py_phone(emulated_phone):  # type: ignore[no-untyped-def]
    enable_python(emulated_phone.phone)
    return emulated_phone


@pytest.fixture(scope="module")
def launcher(py_phone) -> PythonPayloadLauncher:  # type: ignore[no-untyped-def]
    got = choose_launcher(py_phone.device(), PAIR)
    assert isinstance(got, PythonPayloadLauncher) and got.pushed == ("app", "models")
    return got


def test_payload_is_pushed_once_and_the_code_runs_from_the_pushed_copy(py_phone, launcher) -> None:
    dev = py_phone.device()
    again = choose_launcher(dev, PAIR)
    assert isinstance(again, PythonPayloadLauncher) and again.pushed == ()
    assert (again.app, again.models_dir) == (launcher.app, launcher.models_dir)
    for path, part in zip((launcher.app, launcher.models_dir), build_payload(PAIR)):
        marker = posixpath.join(path, MARKER)
        assert dev.read_files([marker])[marker].strip() == part.digest and part.digest[:16] in path
    area = posixpath.join("/data/local/tmp", RUNTIME_AREA)
    assert sorted(dev.list_dir(area)) == sorted(
        posixpath.basename(p) for p in (launcher.app, launcher.models_dir)
    )
    host_copy = str(py_phone.phone.fs.host_path(launcher.app))
    probe = "import as2d_cli, native.runner, numpy; print(as2d_cli.__file__); print(native.runner.__file__)"
    with dev.run_dir("probe") as rd:
        res = dev.shell(launcher.command(["-c", probe], rd, {}), deadline_s=60)
    assert res.exit_code == 0, res.stderr
    code_files = res.stdout.split()
    assert len(code_files) == 2 and all(f.startswith(host_copy + "/app/") for f in code_files), (
        code_files
    )
    # Nothing but the payload area is left under /data/local/tmp once runs are over.
    assert dev.list_dir("/data/local/tmp") == [RUNTIME_AREA]


def test_payload_archives_are_reproducible_and_a_damaged_cache_entry_is_repacked(tmp_path) -> None:
    from as2d_cli.launch.payload import app_files, pack_part

    one = pack_part("app", app_files(), cache=tmp_path / "a")
    two = pack_part("app", app_files(), cache=tmp_path / "b")
    assert one.digest == two.digest and one.archive.read_bytes() == two.archive.read_bytes()
    names = set(one.manifest["files"])
    assert "app/native/runner.py" in names and not any(
        n.startswith(("app/as2d_cli/cli/", "app/as2d_cli/assets/")) for n in names
    )
    whole = one.archive.read_bytes()
    one.archive.write_bytes(whole[:200])  # a truncated cache entry
    again = pack_part("app", app_files(), cache=tmp_path / "a")
    assert again.archive == one.archive and again.archive.read_bytes() == whole


def test_a_phone_without_python_gets_the_bundle_strategy(make_emulated_phone) -> None:
    dev = make_emulated_phone().device()
    usable, why = probe_python(dev)
    assert not usable and "python3" in why
    with pytest.raises(DeviceError, match="no usable python3"):
        choose_launcher(dev, runtime="python")
    with pytest.raises(UserError, match="AS2D_PHONE_RUNTIME='arm32' is not a runtime"):
        choose_launcher(dev, runtime="arm32")
    assert (
        BundleLauncher.name == "bundle"
    )  # auto would deploy the arm64 bundle (tests/test_bundle_phone.py)


def test_only_the_needed_windows_are_pushed(py_phone) -> None:
    from as2d_cli.corpus.manifest import load_corpus

    dev = py_phone.device()
    wid = _shortest_test_window()
    with dev.run_dir("corpus") as rd:
        with pytest.raises(UserError, match="no window 'no-such-window'"):
            push_windows(dev, rd, [wid, "no-such-window"])
        assert dev.list_dir(rd) == []
        remote = push_windows(dev, rd, [wid])
        assert remote == posixpath.join(rd, "corpus")
        assert dev.list_dir(posixpath.join(remote, "audio")) == [f"{wid}.ogg"]
        pushed = load_corpus(py_phone.phone.fs.host_path(remote))
        assert [w.id for w in pushed.windows] == [wid]
        assert pushed.get(wid).load_audio().shape == load_corpus().get(wid).load_audio().shape


def test_decode_on_the_phone_gives_the_local_runners_tokens(py_phone, launcher) -> None:
    wid = _shortest_test_window()
    local = LocalRunner()
    try:
        local.call({"op": "hello"})
        local.call({"op": "load", "models": str(MODELS) if MODELS else None})
        ref = local.call(
            {
                "op": "decode",
                "window": wid,
                "method": "target-only",
                "max_tokens": MAX,
                "events": False,
            }
        )
    finally:
        local.close()
    runner = open_runner(py_phone.device(), launcher=launcher)
    assert isinstance(runner, DeviceRunner)
    hello, got, tgt = runner.batch(
        [
            {"op": "hello"},
            {"op": "decode", "window": wid, "method": "as2d", "max_tokens": MAX, "events": False},
            {
                "op": "decode",
                "window": wid,
                "method": "target-only",
                "max_tokens": MAX,
                "events": False,
            },
        ]
    )
    assert hello["protocol"] == "as2d.runner" and hello["pid"] > 0
    assert got["tokens"] == ref["tokens"] == tgt["tokens"] and len(ref["tokens"]) >= 2
    assert got["method"] == "as2d" and got["time_ms"] > 0
    acc = got["accounting_ns"]
    assert acc["T"] == acc["D"] + acc["V"] - acc["O"] + acc["H"]


def test_a_code_change_pushes_only_the_code_and_models_come_from_the_pushed_copy(
    make_emulated_phone, tmp_path
) -> None:
    import shutil

    from as2d_cli.bundle.recipe import PROJECT_PACKAGES
    from as2d_cli.launch.payload import PROJECT_ROOT, app_files, deploy_payload, pack_part

    session = make_emulated_phone()
    enable_python(session.phone)
    dev = session.device()
    first = choose_launcher(dev, PAIR)
    assert isinstance(first, PythonPayloadLauncher) and first.pushed == ("app", "models")
    # The same models with edited code: only the code part goes to the phone again.
    for pkg in PROJECT_PACKAGES:
        shutil.copytree(
            PROJECT_ROOT / pkg, tmp_path / "src" / pkg, ignore=shutil.ignore_patterns("__pycache__")
        )
    with open(tmp_path / "src" / "native" / "runner.py", "a") as f:
        f.write("\n# edited\n")
    edited = pack_part("app", app_files(tmp_path / "src"), cache=tmp_path / "cache")
    second = deploy_payload(dev, edited, build_payload(PAIR)[1])
    assert (
        second.pushed == ("app",)
        and second.models_dir == first.models_dir
        and second.app != first.app
    )
    assert sorted(dev.list_dir(second.area)) == sorted(
        posixpath.basename(p) for p in (second.app, second.models_dir)
    )
    # The runner loads the models from the pushed copy: remove one file there and load fails.
    dev.shell(["rm", posixpath.join(second.models_dir, "models", "target_decoder.onnx")]).check(
        "removing a model"
    )
    with pytest.raises(RunnerError, match="target_decoder.onnx is missing"):
        open_runner(dev, launcher=second).call({"op": "hello"})


def _plan(window: str) -> list[Step]:
    """Calibration's structure at test size (idle and concurrent verify, every probe kind)."""
    c = {"op": "calibrate", "window": window}
    return [
        Step(
            "verify-idle",
            "verify",
            {
                **c,
                "what": "verify",
                "widths": [1, 2, 4],
                "offsets": [0],
                "warmup": 1,
                "reps": 2,
                "producer": False,
            },
            1,
        ),
        Step(
            "verify-busy",
            "verify+producer",
            {
                **c,
                "what": "verify",
                "widths": [1, 2, 4],
                "offsets": [0],
                "warmup": 1,
                "reps": 2,
                "producer": True,
            },
            1,
        ),
        Step("target-step", "target", {**c, "what": "target_step", "reps": 4}, 1),
        Step("source-drafter", "src", {**c, "what": "source", "source": "drafter", "limit": 16}, 1),
        Step("source-ctc", "ctc", {**c, "what": "source", "source": "ctc"}, 1),
        Step("drafter", "drafter", {**c, "what": "drafter", "reps": 1, "widths": [1, 2]}, 1),
        Step("loop", "loop", {**c, "what": "loop", "reps": 1, "max_tokens": 16}, 1),
    ]


def test_calibration_on_the_phone_stops_at_an_offline_core_and_resumes(
    make_emulated_phone, tmp_path
) -> None:
    session = make_emulated_phone()
    enable_python(session.phone)
    dev = session.device()
    window, _ = calibration_windows()
    plan = _plan(window)
    launcher = choose_launcher(dev, PAIR)
    opener = lambda device, **kw: open_runner(device, launcher=launcher, **kw)  # noqa: E731
    calls: list[str] = []

    def core_goes_offline(label: str, done: float, total: float) -> None:
        calls.append(label)
        if len(calls) == 3:  # after two steps: the gate before the third sees it
            session.phone.set_core_online(6, False)

    with pytest.raises(
        DeviceError, match=r"gate failed before target: .*CPU6.*2 finished steps kept in .*resume"
    ) as err:
        calibrate(
            dev,
            CalibrationSettings(out_dir=tmp_path, plan=plan, gate=_fast_gate(dev)),
            open_runner=opener,
            progress=core_goes_offline,
        )
    assert "\n" not in str(err.value)
    partial = next((tmp_path / ".partial").iterdir())
    kept = _Partial(partial).samples()  # the committed steps' samples
    assert {s["step"] for s in kept} == {"verify-idle", "verify-busy"}
    gates = [json.loads(x) for x in (partial / "gates.jsonl").read_text().splitlines()]
    assert [g["passed"] for g in gates] == [True, True, False]

    session.phone.set_core_online(6, True)
    res = calibrate(
        dev,
        CalibrationSettings(out_dir=tmp_path, plan=plan, gate=_fast_gate(dev)),
        open_runner=opener,
    )
    assert res.resumed_steps == 2 and res.steps == len(plan)
    prof = load_profile(res.profile_path)
    assert prof.widths == (1, 2, 4) and prof.target_step_ms > 0
    assert set(prof.sources) == {"drafter", "ctc"} and prof.drafter is not None
    assert prof.device["connection"] == session.serial and prof.device["kind"] == "adb"
    # The gate read the phone's sysfs: its CPU4 ceiling, as the emulated K70 reports it.
    ceiling = str(session.phone.ceiling_khz[session.phone._policy(4)])
    assert any(ceiling in json.dumps(g["observations"]) for g in prof.device["gates"])
    samples = [json.loads(x) for x in res.samples_path.read_text().splitlines()]
    assert sum(1 for s in samples if s["figure"] == "verify.K4" and not s["concurrent"]) == 2
    assert dev.list_dir("/data/local/tmp") == [RUNTIME_AREA]


def test_a_core_going_offline_mid_step_stops_the_calibration_and_keeps_the_record(
    make_emulated_phone, tmp_path
) -> None:
    """The 1 Hz monitor runs beside every calibration step: CPU5 going offline while the
    third step runs (the emulated phone's ``core-offline:5@T`` fault) stops the calibration
    in one line naming the core and the time; the finished steps' samples, every monitor
    record and the failure are kept, and the rerun resumes on the same phone."""
    import threading
    import time

    from device_agents.emulator.faults import apply_fault

    session = make_emulated_phone()
    enable_python(session.phone)
    dev = session.device()
    window, _ = calibration_windows()
    plan = _plan(window)[:4]
    launcher = choose_launcher(dev, PAIR)
    opener = lambda device, **kw: open_runner(device, launcher=launcher, **kw)  # noqa: E731
    calls: list[str] = []

    def offline_while_the_third_step_runs(label: str, done: float, total: float) -> None:
        calls.append(label)
        if len(calls) != 3:
            return
        seen = len(session.phone.history)

        def watch() -> None:  # once the third step's runner has started on the phone
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if any("native.runner" in h for h in session.phone.history[seen:]):
                    apply_fault(session.phone, "core-offline:5@0.2")
                    return
                time.sleep(0.02)

        threading.Thread(target=watch, daemon=True).start()

    with pytest.raises(
        DeviceError,
        match=r"^calibration stopped: CPU5 went offline on .* s into target \(at "
        r"\d\d:\d\d:\d\d\).*2 finished steps kept in .*run `as2d calibrate --phone k70 .*` "
        r"again to resume",
    ) as err:
        calibrate(
            dev,
            CalibrationSettings(
                out_dir=tmp_path, plan=plan, gate=_fast_gate(dev), monitor_interval_s=0.1
            ),
            open_runner=opener,
            progress=offline_while_the_third_step_runs,
        )
    assert "\n" not in str(err.value)
    partial = next((tmp_path / ".partial").iterdir())
    assert partial.name.startswith("k70-as2demu0001-")  # keyed by the phone, not its connection
    kept = _Partial(partial).samples()
    assert {s["step"] for s in kept} == {
        "verify-idle",
        "verify-busy",
    }  # the interrupted step's are not
    assert f"--phone {session.serial}" not in str(err.value)  # but by what it is: k70
    records = [json.loads(x) for x in (partial / "monitor.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == ["verify-idle", "verify-busy", "target-step"]
    assert records[0]["failure"] is None and records[0]["samples"]
    assert records[0]["cpu"]["steal_source"] == "host"  # the host's, not the phone's script
    first = records[0]["samples"][0]
    assert first["online"] == list(range(8)) and first["battery_temp_c"] == 31.0
    assert first["thermal_c"]["skin-msm-therm"] > 0 and first["cur_khz"]["4"] > 0
    failure = records[-1]["failure"]
    assert failure["kind"] == "core_offline" and failure["detail"]["offline"] == [5]
    assert 5 not in records[-1]["samples"][-1]["online"]

    session.phone.set_core_online(5, True)
    res = calibrate(
        dev,
        CalibrationSettings(
            out_dir=tmp_path, plan=plan, gate=_fast_gate(dev), monitor_interval_s=0.1
        ),
        open_runner=opener,
    )
    assert res.resumed_steps == 2
    prof = load_profile(res.profile_path)
    assert prof.device["name"] == "k70" and prof.device["serial"] == "as2demu0001"
    assert prof.device["connection"] == session.serial
    assert res.profile_path.name.startswith("k70-")
    # The gate records of the interrupted run survive the resume.
    assert [g["step"] for g in prof.device["gates"]] == [
        "verify-idle",
        "verify-busy",
        "target-step",
        "target-step",
        "source-drafter",
    ]
    stored = [
        json.loads(x)
        for x in res.profile_path.with_name(
            res.profile_path.name.replace(".profile.yaml", ".monitor.jsonl")
        )
        .read_text()
        .splitlines()
    ]
    assert [r["step"] for r in stored] == [
        "verify-idle",
        "verify-busy",
        "target-step",
        "target-step",
        "source-drafter",
    ]


def test_phone_lost_mid_step_is_one_line_and_a_rerun_resumes(make_emulated_phone, tmp_path) -> None:
    session = make_emulated_phone()
    enable_python(session.phone)
    dev = session.device()
    window, _ = calibration_windows()
    plan = _plan(window)[:3] + _plan(window)[-1:]
    launcher = choose_launcher(dev, PAIR)
    opener = lambda device, **kw: open_runner(device, launcher=launcher, **kw)  # noqa: E731
    calls: list[str] = []

    def unplug_during_third(label: str, done: float, total: float) -> None:
        calls.append(label)
        if len(calls) == 3:  # the phone leaves while the third step's runner runs
            session.phone.vanish_on_command("python3")

    with pytest.raises(
        DeviceError, match=r"^target: phone .* disconnected .*2 finished steps kept in .*resume"
    ) as err:
        calibrate(
            dev,
            CalibrationSettings(out_dir=tmp_path, plan=plan, gate=_fast_gate(dev)),
            open_runner=opener,
            progress=unplug_during_third,
        )
    assert "\n" not in str(err.value)
    partial = next((tmp_path / ".partial").iterdir())
    assert _Partial(partial).done() == ["verify-idle", "verify-busy"]

    session.phone.vanish_on.clear()
    session.phone.replug()  # back: adbd accepts again
    session.connect(timeout=20)  # and the adb server lists it as a device again
    dev = session.device()
    res = calibrate(
        dev,
        CalibrationSettings(out_dir=tmp_path, plan=plan, gate=_fast_gate(dev)),
        open_runner=opener,
    )
    assert res.resumed_steps == 2 and load_profile(res.profile_path).target_step_ms > 0


@pytest.mark.slow  # ~1 min; benchmarks/bundle_phone_calibrate.py runs the same command on the phone
def test_cli_calibrate_quick_on_the_emulated_phone(py_phone, tmp_path) -> None:
    """`as2d calibrate --quick` as a person types it, a subprocess through the real adb
    server: every step of the quick plan gated, in-loop costs from native episodes."""
    import subprocess
    import sys

    env = {**os.environ, **py_phone.env}
    base = [sys.executable, "-m", "as2d_cli.cli.main"]
    cal = subprocess.run(
        [
            *base,
            "calibrate",
            "--phone",
            py_phone.serial,
            "--quick",
            "--rest",
            "0",
            "--interval",
            "0.05",
            "--out",
            str(tmp_path),
        ],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert cal.returncode == 0, cal.stderr[-2000:]
    profile = next(tmp_path.glob("*.profile.yaml"))
    prof = load_profile(profile)
    assert prof.widths == tuple(range(1, 17)) and prof.device["kind"] == "adb"
    from as2d_cli.calibration.plan import make_plan
    from as2d_cli.calibration.run import episode_windows, short_calibration_window

    main_window, ctc_window = calibration_windows()
    steps = make_plan(
        main_window,
        quick=True,
        ctc_window=ctc_window,
        short_window=short_calibration_window(main_window),
        episode_windows=episode_windows(main_window),
    )
    assert len(prof.device["gates"]) == len(steps) == 11 and all(
        g["passed"] for g in prof.device["gates"]
    )
    assert (
        prof.context is not None and prof.context.ref_audio_s > 0
    )  # two window lengths, offsets 0 and 64
    assert (
        prof.in_loop and "sd" in prof.in_loop
    )  # native episodes ran on the phone (windows pushed there)


def test_cli_decode_on_the_emulated_phone(py_phone) -> None:
    """`as2d decode --json` as a person types it, through the real adb server (the bundled
    models: this pushes them unless the phone already holds them): the source's worker
    process starts on the phone, the placement and device identity are reported."""
    import subprocess
    import sys

    env = {**os.environ, **py_phone.env}
    base = [sys.executable, "-m", "as2d_cli.cli.main"]
    wid = _shortest_test_window()
    dec = subprocess.run(
        [
            *base,
            "decode",
            "--phone",
            py_phone.serial,
            "--window",
            wid,
            "--method",
            "as2d",
            "--max-tokens",
            str(MAX),
            "--json",
        ],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert dec.returncode == 0, dec.stderr[-2000:]
    got = json.loads(dec.stdout)
    assert got["method"] == "as2d" and got["n_tokens"] == len(got["tokens"]) >= 2
    assert got["producer_mode"] == "process"  # the source's worker process started on the phone too
    assert got["device"]["name"] == "k70" and got["device"]["serial"] == "as2demu0001"
    assert got["placement"]["verifier"] == [7] and got["placement"]["producer"] == [2, 3, 4]
    assert got["pinned"] and got["producer_pinned"]
    assert got["monitor"]["failure"] is None and got["monitor"]["samples"]
    bad = subprocess.run(
        [
            *base,
            "decode",
            "--phone",
            py_phone.serial,
            "--window",
            "no-such-window",
            "--method",
            "as2d",
        ],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "no-such-window" in bad.stderr and "Traceback" not in bad.stderr


def test_eval_native_gates_each_window_on_the_phone(
    make_emulated_phone, tmp_path, monkeypatch, capsys
) -> None:
    """`as2d eval --native` reads the phone's sysfs before each window: an offline core
    stops it before any native run, in one line (the replay results are already written)."""
    import shutil

    from as2d_cli.cli.main import main

    data = Path(__file__).parent / "data"
    session = make_emulated_phone()
    enable_python(session.phone)
    session.phone.set_core_online(3, False)
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(session.adb_port))
    tr = tmp_path / "traces"
    tr.mkdir()
    for split in ("dev", "val", "test"):
        shutil.copy(data / f"example-{split}.jsonl", tr)
    with pytest.raises(SystemExit) as e:
        main(
            [
                "eval",
                "--phone",
                session.serial,
                "--profile",
                str(data / "example-profile.yaml"),
                "--traces",
                str(tr),
                "--calibrations",
                str(tmp_path / "cal"),
                "--results",
                str(tmp_path / "res"),
                "--native",
                "--windows",
                "1",
                "--rest",
                "0",
                "--interval",
                "0.05",
                "--accept-unvalidated",  # the example traces' selection: 7 dev windows
            ]
        )
    err = capsys.readouterr().err
    assert e.value.code == 3, err
    assert (
        "native window 1/6" in err
    )  # 1 window × (1 warm-up + 5 measured passes) and "not started: gate failed: CPU3 offline" in err and "Traceback" not in err
    # The runner started once (hello, load); no window was decoded.
    assert sum("native.runner" in s for s in session.phone.history) == 1
    assert list((tmp_path / "res").glob("*/results.json")) and not list(
        (tmp_path / "res").glob("*/native.json")
    )


@pytest.mark.slow
def test_arm64_phone_runs_the_runner_from_the_bundle(adb_server) -> None:  # type: ignore[no-untyped-def]
    """Smoke (slow: the bundle is built if needed and inference runs under qemu): on an
    arm64 phone without python3 the auto strategy is the bundle; hello, load and a short
    decode through it give the local runner's tokens. benchmarks/bundle_phone_calibrate.py
    covers the same path with a whole calibration."""
    from test_bundle_common import need_qemu

    from as2d_cli.bundle.emulated import enable_arm64_bundle
    from device_agents.emulator.session import EmulatorSession

    need_qemu()
    session = EmulatorSession(private_server=False, adb_port=adb_server.port).start()
    try:
        enable_arm64_bundle(session.phone)
        launcher = choose_launcher(session.device())
        assert isinstance(launcher, BundleLauncher)
        wid = _shortest_test_window()
        cmd = {"op": "decode", "window": wid, "method": "as2d", "max_tokens": 8, "events": False}
        hello, got = open_runner(session.device(), launcher=launcher).batch([{"op": "hello"}, cmd])
        assert hello["protocol"] == "as2d.runner"
        assert any(
            "ld-linux-aarch64.so.1" in s and "AS2D_CORPUS" in s for s in session.phone.history
        )
    finally:
        session.stop()
    local = LocalRunner()
    try:
        local.call({"op": "load"})
        ref = local.call({**cmd, "method": "target-only"})
    finally:
        local.close()
    assert got["tokens"] == ref["tokens"]
