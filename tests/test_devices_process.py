"""Device.spawn: a long-running program with a stdin/stdout line protocol, on the local
host and on the emulated phone (a real host process behind the adb shell v2 stream)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from device_agents.base import Device, DeviceDisconnected, DeviceTimeout
from device_agents.local import LocalHost

ECHO = f"""#!{sys.executable}
import os, sys
print("ready", sorted(os.sched_getaffinity(0)) != [], flush=True)
while True:
    line = sys.stdin.readline()
    if not line:
        break
    if line.strip() == "hang":
        import time
        open(sys.argv[1], "w").write(str(os.getpid()))
        print("hanging", flush=True)
        time.sleep(600)
    print("ack", line.strip(), flush=True)
print("bye", flush=True)
sys.exit(5)
"""


@contextlib.contextmanager
def echo_program(device: Device, tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    script = tmp_path / "echo.py"
    script.write_text(ECHO)
    script.chmod(0o755)
    pidfile = tmp_path / "pid"
    if device.kind == "local":
        yield [str(script), str(pidfile)], pidfile
        return
    with device.run_dir("spawn") as rd:
        device.push(script, f"{rd}/echo.py")
        yield [f"{rd}/echo.py", str(pidfile)], pidfile


@pytest.fixture(params=["local", "phone"])
def device(request, emulated_phone) -> Device:
    return LocalHost() if request.param == "local" else emulated_phone.device()


def test_line_protocol_round_trip(device: Device, tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0)) if device.kind == "local" else 4
    with echo_program(device, tmp_path) as (argv, _):
        with device.spawn(argv, affinity={cpu}) as proc:
            assert proc.read_line(timeout=10) == "ready True"
            for word in ("alpha", "beta gamma"):
                proc.write(f"{word}\n".encode())
                assert proc.read_line(timeout=10) == f"ack {word}"
            proc.close_stdin()
            assert proc.read_line(timeout=10) == "bye"
            assert proc.read_line(timeout=10) is None
            assert proc.wait(10) == 5


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_wait_deadline_stops_the_program(device: Device, tmp_path: Path) -> None:
    with echo_program(device, tmp_path) as (argv, pidfile):
        proc = device.spawn(argv)
        assert proc.read_line(timeout=10) == "ready True"
        proc.write(b"hang\n")
        assert proc.read_line(timeout=10) == "hanging"
        with pytest.raises(DeviceTimeout, match="did not finish within 0.3 s") as err:
            proc.wait(0.3)
        assert err.value.partial is not None
        assert _gone(int(pidfile.read_text()), 5), "the program survived its deadline"


def test_read_line_timeout(device: Device, tmp_path: Path) -> None:
    with echo_program(device, tmp_path) as (argv, _):
        with device.spawn(argv) as proc:
            assert proc.read_line(timeout=10) == "ready True"
            with pytest.raises(DeviceTimeout, match="no output line"):
                proc.read_line(timeout=0.2)


def test_phone_vanishing_during_a_spawned_program(make_emulated_phone, tmp_path: Path) -> None:
    session = make_emulated_phone()
    dev = session.device()
    script = tmp_path / "echo.py"
    script.write_text(ECHO)
    script.chmod(0o755)
    dev.shell(["mkdir", "-p", "/data/local/tmp/as2d-v-1"]).check("mkdir")
    dev.push(script, "/data/local/tmp/as2d-v-1/echo.py")
    proc = dev.spawn(["/data/local/tmp/as2d-v-1/echo.py", str(tmp_path / "pid")])
    assert proc.read_line(timeout=10) == "ready True"
    proc.write(b"one\n")
    assert proc.read_line(timeout=10) == "ack one"
    session.phone.vanish()
    with pytest.raises(DeviceDisconnected, match="disconnected while running") as err:
        proc.read_line(timeout=5)
    assert err.value.partial is not None
