"""`as2d devices`, `as2d devices gate` and `as2d emulator start` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import adbutils
import jsonschema
import pytest

from as2d_cli.cli.main import main
from as2d_cli.formats.common import json_schema
from device_agents.emulator.adbd import PhoneAuth


def run_cli(args: list[str], capsys, monkeypatch, port: int) -> tuple[int, str, str]:
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    monkeypatch.setenv("COLUMNS", "250")
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_devices_lists_local_and_the_emulated_phone(emulated_phone, capsys, monkeypatch) -> None:
    code, out, err = run_cli(["devices"], capsys, monkeypatch, emulated_phone.adb_port)
    assert code == 0, err
    rows = [ln for ln in out.splitlines() if "│" in ln]
    local = next(r for r in rows if "local" in r.split("│")[1])
    phone = next(r for r in rows if emulated_phone.serial in r)
    assert "device" in local
    for expected in (
        "k70",
        "23117RK66C",
        "SM8650",
        "3.3024",
        "Adreno750v2",
        "10.91",
        "16/36",
        "2026-06-01",
    ):
        assert expected in phone


def test_devices_json_is_versioned(emulated_phone, capsys, monkeypatch) -> None:
    code, out, _ = run_cli(["devices", "--json"], capsys, monkeypatch, emulated_phone.adb_port)
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "as2d.devices" and doc["version"] == 1
    jsonschema.validate(doc, json_schema("devices.schema.json"))
    by_serial = {d["serial"]: d for d in doc["devices"]}
    assert by_serial["local"]["kind"] == "local"
    assert by_serial[emulated_phone.serial]["facts"]["model_id"]["value"] == "23117RK66C"


def test_devices_tells_what_to_do_for_an_unauthorized_phone(
    make_emulated_phone, capsys, monkeypatch
) -> None:
    session = make_emulated_phone(auth=PhoneAuth(mode="unauthorized"))
    code, out, _ = run_cli(["devices"], capsys, monkeypatch, session.adb_port)
    assert code == 0
    notes = [ln for ln in out.splitlines() if ln.startswith(session.serial)]
    assert notes == [
        f"{session.serial} is unauthorized: unlock the phone and accept the 'Allow USB debugging?' "
        f"prompt (tick 'Always allow'), then retry"
    ]


def test_gate_command_pass_and_fail(make_emulated_phone, capsys, monkeypatch) -> None:
    session = make_emulated_phone()
    args = ["devices", "gate", "--phone", session.serial, "--rest", "0", "--interval", "0"]
    code, out, err = run_cli(args, capsys, monkeypatch, session.adb_port)
    assert code == 0, err
    assert out.count("ceiling       ok") == 2
    session.phone.set_core_online(3, False)
    code, out, err = run_cli(args, capsys, monkeypatch, session.adb_port)
    assert code == 3
    assert err.startswith("error: gate failed: check 1/2: CPU3 offline") and err.count("\n") == 1


def test_unknown_phone_is_one_line(emulated_phone, capsys, monkeypatch) -> None:
    code, out, err = run_cli(
        ["devices", "gate", "--phone", "nokia3310"], capsys, monkeypatch, emulated_phone.adb_port
    )
    assert code == 2 and out == ""
    assert err.startswith(
        "error: unknown --phone 'nokia3310': use one of local, k70, mi14, mi11pro, note9pro"
    )
    assert err.count("\n") == 1


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
        return True
    except OSError:
        return False


def test_emulator_start_runs_until_ctrl_c(tmp_path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "as2d_cli.cli.main",
            "emulator",
            "start",
            "--private-server",
            "--fault",
            "core-offline:5@0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, HOME=str(tmp_path)),
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("emulated Redmi K70 Pro (23117RK66C) at 127.0.0.1:"), (
            first + proc.stderr.read()
        )
        serial = first.split(" at ")[1].split()[0]
        adb_port = int(first.split("adb server on port ")[1].split()[0])
        assert proc.stdout.readline().startswith("fault: CPU5 goes offline")
        time.sleep(0.4)
        r = subprocess.run(
            [
                adbutils.adb_path(),
                "-P",
                str(adb_port),
                "-s",
                serial,
                "shell",
                "cat /sys/devices/system/cpu/online",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert r.stdout == "0-4,6-7\n", r.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "emulated phone stopped" in rest
    assert not _listening(adb_port)  # the private adb server went with it


def test_emulator_rejects_a_bad_fault_in_one_line(capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["emulator", "start", "--private-server", "--fault", "melt:cpu"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: bad --fault 'melt:cpu'") and err.count("\n") == 1


def test_devices_without_an_adb_server_lists_the_local_host(capsys, monkeypatch) -> None:
    from device_agents.adbserver import free_port

    port = free_port()  # nothing listens there, and nothing may be started there
    code, out, _ = run_cli(["devices"], capsys, monkeypatch, port)
    assert code == 0
    assert "local" in out and "no phone attached" in out
    assert not _listening(port)


def test_watch_stops_with_the_monitor_error(make_emulated_phone, capsys, monkeypatch) -> None:
    session = make_emulated_phone()
    phone, before = session.phone, len(session.phone.history)

    def offline_after_the_first_sample() -> None:
        # Not after a fixed delay: on a loaded host the CLI may take longer than any delay to
        # connect, and its first sample would then already show the core offline. A second
        # script reading the online mask means the first one has finished.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum("cpu/online" in s for s in phone.history[before:]) >= 2:
                break
            time.sleep(0.01)
        phone.set_core_online(2, False)

    threading.Thread(target=offline_after_the_first_sample, daemon=True).start()
    code, out, err = run_cli(
        ["devices", "watch", "--phone", session.serial, "--seconds", "5", "--interval", "0.05"],
        capsys,
        monkeypatch,
        session.adb_port,
    )
    assert code == 3
    assert "online 0,1,2,3,4,5,6,7" in out and "4:3.15" in out
    assert err.startswith("error: CPU2 went offline") and err.count("\n") == 1


def test_a_bad_adb_port_variable_is_one_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", "five")
    with pytest.raises(SystemExit) as exc:
        main(["devices"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ANDROID_ADB_SERVER_PORT='five' is not a TCP port")
        and err.count("\n") == 1
    )


def test_emulator_rejects_an_unknown_profile_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["emulator", "start", "--private-server", "--profile", "pixel"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith(
        "error: unknown --profile 'pixel'; choose one of k70, mi14"
    )


def test_phone_without_an_adb_server_says_how_to_start_one(capsys, monkeypatch) -> None:
    from device_agents.adbserver import free_port

    port = free_port()
    code, _, err = run_cli(["devices", "gate", "--phone", "k70"], capsys, monkeypatch, port)
    assert code == 2
    assert err.startswith(
        f"error: --phone k70: no adb server runs on port {port}; start it with `adb start-server`"
    )
    assert not _listening(port)
