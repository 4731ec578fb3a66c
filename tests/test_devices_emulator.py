"""The emulated phone through the real adb server and the real adb binary: discovery,
shell v2 exit codes and stdin, sync push/pull, quoting, the command table, host programs."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import adbutils
import pytest

from device_agents.base import DeviceTimeout
from device_agents.emulator.shell import CommandContext


def adb(
    session, *args: str, input: bytes | None = None, timeout: float = 20
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, **session.env)
    return subprocess.run(
        [adbutils.adb_path(), "-P", str(session.adb_port), "-s", session.serial, *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env=env,
    )


def test_adb_devices_lists_the_emulated_phone_with_its_model(emulated_phone) -> None:
    out = subprocess.run(
        [adbutils.adb_path(), "-P", str(emulated_phone.adb_port), "devices", "-l"],
        capture_output=True,
        text=True,
        timeout=20,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith(emulated_phone.serial))
    assert "device" in line.split()[1]
    assert "model:23117RK66C" in line and "device:manet" in line


def test_adb_binary_shell_gives_exit_status_and_stderr(emulated_phone) -> None:
    r = adb(emulated_phone, "shell", "echo out; ls /no/such/dir; exit 3")
    assert r.returncode == 3
    assert r.stdout == b"out\n"
    assert b"/no/such/dir: No such file or directory" in r.stderr


def test_adb_binary_forwards_stdin(emulated_phone) -> None:
    r = adb(emulated_phone, "shell", "cat", input=b"line one\nline two\n")
    assert r.returncode == 0
    assert r.stdout == b"line one\nline two\n"


def test_adb_binary_push_pull_round_trip(emulated_phone, tmp_path: Path) -> None:
    data = os.urandom(700_000)  # several WRTE chunks and sync DATA blocks
    src, back = tmp_path / "blob.bin", tmp_path / "back.bin"
    src.write_bytes(data)
    assert adb(emulated_phone, "push", str(src), "/data/local/tmp/emu-rt/blob.bin").returncode == 0
    assert emulated_phone.phone.fs.host_path("/data/local/tmp/emu-rt/blob.bin").read_bytes() == data
    assert adb(emulated_phone, "pull", "/data/local/tmp/emu-rt/blob.bin", str(back)).returncode == 0
    assert back.read_bytes() == data
    adb(emulated_phone, "shell", "rm -rf /data/local/tmp/emu-rt")
    assert emulated_phone.phone.fs.stat("/data/local/tmp/emu-rt") is None


def test_quoted_arguments_are_never_interpreted(emulated_phone) -> None:
    dev = emulated_phone.device()
    nasty = "a; rm -rf /data/local/tmp/keep && echo pwned $(id) `id` 'q' \"d\" $HOME *"
    dev.shell(["mkdir", "-p", "/data/local/tmp/keep"]).check("mkdir")
    res = dev.shell(["echo", nasty])
    assert res.exit_code == 0
    assert res.stdout == nasty + "\n"
    assert emulated_phone.phone.fs.is_dir("/data/local/tmp/keep")
    assert shlex.join(["echo", nasty]) in emulated_phone.phone.history


def test_writes_outside_the_writable_areas_are_refused(emulated_phone) -> None:
    dev = emulated_phone.device()
    r = dev.shell("echo 1 > /sys/devices/system/cpu/cpu5/online")
    assert r.exit_code != 0 and "Permission denied" in r.stderr
    r = dev.shell("echo x > /system/evil")
    assert r.exit_code != 0 and "Read-only file system" in r.stderr
    assert dev.shell("cat /sys/devices/system/cpu/online").stdout == "0-7\n"


def test_adbd_listens_on_loopback_only(emulated_phone) -> None:
    listener = emulated_phone.adbd._listener
    assert listener is not None and listener.getsockname()[0] == "127.0.0.1"
    # 127.0.0.2 reaches this host too (all of 127/8 is loopback on Linux): a socket bound to
    # 0.0.0.0 would answer there; one bound to 127.0.0.1 refuses.
    others = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} | {
        "127.0.0.2"
    }
    for addr in others - {"127.0.0.1"}:  # the same port on any other address is not served
        with pytest.raises(OSError):
            socket.create_connection((addr, emulated_phone.adbd.port), timeout=0.5).close()


def test_command_table_extension_point(make_emulated_phone) -> None:
    session = make_emulated_phone()
    seen: list[list[str]] = []

    def hello(ctx: CommandContext) -> int:
        seen.append(ctx.argv)
        data = ctx.stdin.read()
        ctx.out(f"hello {' '.join(ctx.argv[1:])} stdin={data.decode()!r}\n")
        ctx.err("to stderr\n")
        return 7

    session.phone.register_command("hello", hello)
    res = session.device().shell(["hello", "big world"])
    assert res.exit_code == 7
    assert res.stdout == "hello big world stdin=''\n" and res.stderr == "to stderr\n"
    assert seen == [["hello", "big world"]]
    piped = session.device().shell("echo piped | hello x")
    assert "stdin='piped\\n'" in piped.stdout


def test_a_pushed_program_runs_as_a_real_host_process(make_emulated_phone, tmp_path: Path) -> None:
    session = make_emulated_phone()
    dev = session.device()
    script = tmp_path / "prog.py"
    script.write_text(
        f"#!{sys.executable}\nimport os, sys\n"
        "print('pid', os.getpid(), 'args', sys.argv[1:])\n"
        "print('in', os.path.isfile(sys.argv[1]))\n"
    )
    script.chmod(0o755)
    with dev.run_dir("prog") as rd:
        dev.push(script, f"{rd}/prog.py")
        dev.push(script, f"{rd}/data.txt")
        res = dev.run([f"{rd}/prog.py", f"{rd}/data.txt"], affinity={4, 5, 6, 7})
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("pid ") and int(lines[0].split()[1]) != os.getpid()
    assert lines[1] == "in True"  # the run-dir argument was mapped to the host file
    assert session.phone.affinity_log[-1][0] == 0xF0


def test_closing_the_stream_kills_the_host_process(make_emulated_phone, tmp_path: Path) -> None:
    session = make_emulated_phone()
    dev = session.device()
    script = tmp_path / "forever.py"
    pidfile = tmp_path / "pid"
    script.write_text(
        f"#!{sys.executable}\nimport os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "print('started', flush=True)\nwhile True: time.sleep(0.05)\n"
    )
    script.chmod(0o755)
    with dev.run_dir("forever") as rd:
        dev.push(script, f"{rd}/forever.py")
        with pytest.raises(DeviceTimeout) as err:
            dev.shell([f"{rd}/forever.py"], deadline_s=1.5)
    assert err.value.partial is not None and "started" in err.value.partial.stdout
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"host process {pid} still alive after the stream closed")


def test_interactive_adb_shell_keeps_its_directory_and_exit_status(emulated_phone) -> None:
    r = adb(emulated_phone, "shell", input=b"cd /data/local/tmp\necho here\nexit 4\n")
    assert r.returncode == 4
    assert b"manet:/data/local/tmp $ echo here\r\nhere\r\n" in r.stdout


def test_legacy_shell_exec_out_and_sync_listing_through_adbutils(emulated_phone) -> None:
    d = adbutils.AdbClient(host="127.0.0.1", port=emulated_phone.adb_port).device(
        emulated_phone.serial
    )
    assert d.shell("echo legacy; echo err >&2") == "legacy\nerr"  # shell: merges the streams
    assert adb(emulated_phone, "exec-out", "getprop ro.build.version.sdk").stdout == b"36\n"
    d.sync.push(b"abc", "/data/local/tmp/emu-ls/f.txt")
    names = {f.path: f.size for f in d.sync.list("/data/local/tmp/emu-ls")}
    assert names == {"f.txt": 3}
    assert d.sync.stat("/data/local/tmp/emu-ls/f.txt").size == 3
    assert not d.sync.exists("/data/local/tmp/emu-ls/missing")
    d.shell("rm -rf /data/local/tmp/emu-ls")


def test_push_to_a_read_only_place_fails_cleanly(emulated_phone, tmp_path: Path) -> None:
    src = tmp_path / "x.bin"
    src.write_bytes(os.urandom(300_000))
    r = adb(emulated_phone, "push", str(src), "/system/bin/x.bin")
    assert r.returncode != 0 and b"Read-only file system" in r.stderr
    assert emulated_phone.phone.fs.stat("/system/bin/x.bin") is None
    assert adb(emulated_phone, "shell", "echo still-fine").stdout == b"still-fine\n"


def _emulator_cli(args: list[str], capsys) -> tuple[int, str]:
    from as2d_cli.cli.main import main

    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, needles",
    [
        (
            ["--battery", "--gauge-period-ms", "5"],
            ["--gauge-period-ms", "greater than or equal to 10"],
        ),
        (["--battery", "--gauge-period-ms", "60001"], ["--gauge-period-ms", "60000"]),
        (["--battery", "--gauge-sign", "up"], ["--gauge-sign", "'up'", "negative, positive"]),
        (["--battery", "--gauge-units", "A"], ["--gauge-units", "'A'", "uA, mA, nA"]),
        (["--gauge-sign", "positive"], ["--gauge-sign", "add --battery"]),
        (["--gauge-period-ms", "500"], ["--gauge-period-ms", "add --battery"]),
    ],
)
def test_emulator_gauge_options_are_checked_in_one_line(extra, needles, capsys) -> None:
    code, err = _emulator_cli(["emulator", "start", "--private-server", *extra], capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_gauge_model_sets_period_sign_and_units() -> None:
    from device_agents.emulator.battery import GaugeFaults, gauge_model, simulate_readings

    m = gauge_model(500, "positive", "mA")
    assert m.params.gauge_update_ms == 500
    assert m.faults == GaugeFaults(current_scale=1e-3, current_sign=-1)
    # On a virtual clock: a new reading every 500 ms (2 per second of 250 ms polls), the
    # discharge current (idle 420 mA) positive and in mA.
    rs = simulate_readings(m.params, m.faults, 10**12, 250, 4000, lambda t: 0.0)
    updates = sorted({r.updated_ns for r in rs})
    assert [b - a for a, b in zip(updates, updates[1:])] == [500_000_000] * (len(updates) - 1)
    assert len(updates) == 9
    assert all(400 <= r.current_ua <= 440 for r in rs)
    default = gauge_model()
    assert default.params.gauge_update_ms == 1000 and default.faults == GaugeFaults()


def test_emulator_start_sets_the_gauge_from_its_options(tmp_path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "as2d_cli.cli.main",
            "emulator",
            "start",
            "--private-server",
            "--battery",
            "--gauge-period-ms",
            "500",
            "--gauge-sign",
            "positive",
            "--gauge-units",
            "mA",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, HOME=str(tmp_path)),
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("emulated "), first + proc.stderr.read()
        serial = first.split(" at ")[1].split()[0]
        adb_port = int(first.split("adb server on port ")[1].split()[0])
        line = proc.stdout.readline()
        assert line.startswith("battery model installed") and (
            "every 500 ms, discharge current positive, current in mA" in line
        ), line
        r = subprocess.run(
            [adbutils.adb_path(), "-P", str(adb_port), "-s", serial, "shell"]
            + ["cat /sys/class/power_supply/battery/current_now"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        # On the charger: +1580 mA net (2000 in, 420 idle) -> negative in this convention,
        # in mA (±1 % gauge jitter), not µA.
        assert -1600 <= int(r.stdout) <= -1560, (r.stdout, r.stderr)
    finally:
        proc.send_signal(2)
        proc.communicate(timeout=20)
    assert proc.returncode == 0
