"""The real-phone path on the emulated arm64 phone, through the real adb server: push the
bundle once, unpack it, preflight, start it with the explicit loader (qemu runs it) and
decode a real ONNX model with the same tokens as the host."""

from __future__ import annotations

import json
import posixpath
import time
from pathlib import Path

import pytest
from test_bundle_common import DECODE_SCRIPT, host_decode, need_qemu, shared_build, toy_decoder

from as2d_cli.bundle.deploy import bundle_area, deploy
from as2d_cli.bundle.emulated import enable_arm64_bundle
from as2d_cli.errors import DeviceError


@pytest.fixture(scope="module")
def arm64_phone(adb_server):  # type: ignore[no-untyped-def]
    need_qemu()
    from device_agents.emulator.session import EmulatorSession

    session = EmulatorSession(private_server=False, adb_port=adb_server.port).start()
    enable_arm64_bundle(session.phone)
    try:
        yield session
    finally:
        session.stop()


def test_deploy_once_then_run_decoder_same_tokens_as_host(arm64_phone, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    device = arm64_phone.device()
    build = shared_build()
    first = deploy(device, build.archive)
    assert first.pushed and first.manifest_hash == build.manifest_hash
    assert first.path == posixpath.join(bundle_area(device), build.manifest_hash[:16])
    assert (
        first.preflight.cpuinfo_processors
        == arm64_phone.phone.profile.n_cpus
        == first.preflight.sysfs_cpus
    )
    assert not first.rseq_off
    t0 = time.monotonic()
    second = deploy(device, build.archive)
    assert not second.pushed and second.path == first.path
    print(
        f"push+unpack {first.push_seconds:.1f} s; second deploy (skipped push) {time.monotonic() - t0:.1f} s"
    )
    # Only the bundle directory is left in the area: the archive and .partial are gone.
    assert device.list_dir(bundle_area(device)) == [build.manifest_hash[:16], "smoke"]

    model = toy_decoder(tmp_path / "toy.onnx")
    script = tmp_path / "decode.py"
    script.write_text(DECODE_SCRIPT)
    with device.run_dir("bundletest") as run:
        device.push(model, f"{run}/toy.onnx")
        device.push(script, f"{run}/decode.py")
        result = device.shell(
            first.command([f"{run}/decode.py", f"{run}/toy.onnx"], run), deadline_s=240
        )
        assert result.exit_code == 0, result.stderr[-3000:]
        assert "LD_PRELOAD" in arm64_phone.phone.history[-1]  # started through `env -u LD_PRELOAD`
    got = json.loads(result.stdout)
    want = host_decode(script, model)
    assert {k: v["tokens"] for k, v in got["results"].items()} == {
        k: v["tokens"] for k, v in want["results"].items()
    }
    assert got["ort"] == "1.32.0" and got["numpy"] == "2.4.6"


def test_phone_hiding_proc_cpuinfo_is_refused_in_one_line(arm64_phone) -> None:  # type: ignore[no-untyped-def]
    arm64_phone.phone.fs.remove_dynamic("/proc/cpuinfo")
    try:
        with pytest.raises(DeviceError) as err:
            deploy(arm64_phone.device(), shared_build().archive)
    finally:
        enable_arm64_bundle(arm64_phone.phone)
    msg = str(err.value)
    assert f"{arm64_phone.serial}: /proc/cpuinfo is hidden" in msg and "\n" not in msg


def test_cli_deploy_is_skipped_when_held_and_remove_cleans_up(arm64_phone) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    device = arm64_phone.device()
    archive = shared_build().archive
    deploy(device, archive)
    base = [sys.executable, "-m", "as2d_cli.cli.main", "bundle"]
    where = ["--phone", arm64_phone.serial, "--adb-port", str(arm64_phone.adb_port)]
    proc = subprocess.run(
        [*base, "deploy", *where, "--archive", str(archive)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "already there (same manifest hash), not pushed" in proc.stdout
    assert "env -u LD_PRELOAD" in proc.stdout and "native.runner" in proc.stdout
    proc = subprocess.run([*base, "remove", *where], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"removed {bundle_area(device)}" in proc.stdout
    assert device.list_dir(bundle_area(device)) == []
    proc = subprocess.run([*base, "remove", *where], capture_output=True, text=True, timeout=120)
    assert "nothing to remove" in proc.stdout


def test_runner_on_the_arm64_phone_through_the_runner_host_gives_host_tokens(arm64_phone) -> None:  # type: ignore[no-untyped-def]
    """The real-phone path of `as2d decode/calibrate/eval --native`: as2d_cli.launch.host's file-mode
    runner (push commands and corpus window, start from the bundle, pull events) on the
    emulated arm64 phone, against the host runner on the same frozen code and models."""
    import os
    import subprocess
    import sys

    from test_bundle_common import project_snapshot

    from as2d_cli.launch.host import open_runner
    from as2d_cli.launch.payload import BundleLauncher

    project = project_snapshot()
    corpus = project / "as2d_cli" / "assets" / "corpus" / "manifest.json"
    if not (
        (project / "as2d_cli" / "assets" / "models" / "models.json").is_file() and corpus.is_file()
    ):
        pytest.skip("the shipped models or corpus are not in as2d_cli/assets yet")
    window = min(json.loads(corpus.read_text())["windows"], key=lambda w: (w["seconds"], w["id"]))[
        "id"
    ]
    cmd = {"op": "decode", "window": window, "method": "as2d", "max_tokens": 12, "events": True}
    device = arm64_phone.device()
    runner = open_runner(device, launcher=BundleLauncher(deploy(device, shared_build().archive)))
    got = runner.call(cmd)
    assert got["event"] == "result" and got["rounds"] and got["events"]
    assert any(
        "ld-linux-aarch64.so.1" in s and "native.runner" in s for s in arm64_phone.phone.history
    )
    lines = [{"op": "hello"}, {"op": "load"}, {**cmd, "method": "target-only"}, {"op": "quit"}]
    host = subprocess.run(
        [sys.executable, "-m", "native.runner"],
        input="".join(json.dumps(x) + "\n" for x in lines),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(project)},
        cwd=project,
        timeout=300,
    )
    want = [json.loads(x) for x in host.stdout.splitlines() if '"result"' in x]
    assert want and got["tokens"] == want[0]["tokens"]


@pytest.mark.slow  # ~7 min under qemu; benchmarks/bundle_phone_calibrate.py runs the same path
def test_calibrate_quick_end_to_end_through_the_bundle(arm64_phone, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        **arm64_phone.env,
        "AS2D_PHONE_RUNTIME": "bundle",
    }  # as2d_cli/launch/payload.py: the real-phone runtime
    before = len(arm64_phone.phone.history)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "as2d_cli.cli.main",
            "calibrate",
            "--phone",
            arm64_phone.serial,
            "--quick",
            "--rest",
            "0",
            "--interval",
            "0",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(tmp_path.glob("*.profile.yaml")) and list(tmp_path.glob("*.savings.png"))
    starts = [
        s
        for s in arm64_phone.phone.history[before:]
        if "ld-linux-aarch64.so.1" in s and "native.runner" in s
    ]
    assert starts, "the runner was not started from the bundle"
