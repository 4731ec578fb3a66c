"""Every injected fault gives its documented error (docs/devices.md, "Errors"), keeps what
was measured, and never hangs."""

from __future__ import annotations

import time

import pytest

from as2d_cli.errors import UserError
from device_agents.adb_phone import list_attached
from device_agents.base import DeviceDisconnected, DeviceTimeout, DeviceUnavailable
from device_agents.emulator.adbd import PhoneAuth
from device_agents.emulator.faults import apply_fault
from device_agents.emulator.shell import CommandContext
from device_agents.registry import discover, resolve_phone


def states(session) -> dict[str, str]:
    return {a.serial: a.state for a in list_attached(session.adb_port)}


def test_stalled_command_times_out_with_partial_output(make_emulated_phone) -> None:
    session = make_emulated_phone()
    apply_fault(session.phone, "stall:sleep")
    start = time.monotonic()
    with pytest.raises(DeviceTimeout) as err:
        session.device().shell("echo measured-so-far; sleep 1", deadline_s=0.5)
    assert time.monotonic() - start < 2.0
    assert err.value.partial is not None and err.value.partial.stdout == "measured-so-far\n"
    assert "did not finish within 0.5 s" in str(err.value)
    assert session.device().shell(["echo", "alive"]).stdout == "alive\n"


def test_device_vanishing_mid_command(make_emulated_phone) -> None:
    session = make_emulated_phone()
    apply_fault(session.phone, "vanish:cat")
    dev = session.device()
    with pytest.raises(DeviceDisconnected, match="disconnected while running") as err:
        dev.shell("echo first-line; cat /proc/meminfo; echo never", deadline_s=5)
    partial = err.value.partial
    assert partial is not None and partial.stdout.startswith("first-line\nMemTotal:")
    assert "never" not in partial.stdout
    deadline = time.monotonic() + 5
    while states(session).get(session.serial) == "device" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert states(session).get(session.serial, "absent") != "device"
    start = time.monotonic()
    with pytest.raises(DeviceUnavailable):
        dev.shell(["echo", "x"], deadline_s=3)
    assert time.monotonic() - start < 3.5


def test_usb_unplug_removes_the_phone_and_replug_brings_it_back(make_emulated_phone) -> None:
    session = make_emulated_phone(connection="usb")
    dev = session.device()
    session.phone.unplug()
    assert session.serial not in states(session)
    with pytest.raises(DeviceUnavailable, match="not attached any more"):
        dev.shell(["echo", "x"])
    with pytest.raises(UserError, match="no attached phone is a Redmi K70 Pro"):
        resolve_phone("k70", session.adb_port)
    session.phone.replug()
    assert states(session).get(session.serial) == "device"
    assert dev.shell(["echo", "back"]).stdout == "back\n"


def test_unplug_over_wireless_keeps_the_phone_and_stops_charging(make_emulated_phone) -> None:
    session = make_emulated_phone(connection="wireless")
    dev = session.device()
    assert "status: 2" in dev.shell(["dumpsys", "battery"]).stdout
    session.phone.unplug()
    out = dev.shell(["dumpsys", "battery"]).stdout
    assert "USB powered: false" in out and "status: 3" in out
    assert (
        dev.read_files(["/sys/class/power_supply/battery/status"])[
            "/sys/class/power_supply/battery/status"
        ]
        == "Discharging\n"
    )
    assert states(session)[session.serial] == "device"


def test_timed_unplug_and_replug(make_emulated_phone) -> None:
    session = make_emulated_phone()
    apply_fault(session.phone, "unplug@0.1+0.4")
    time.sleep(0.3)
    assert session.serial not in states(session)
    deadline = time.monotonic() + 5
    while states(session).get(session.serial) != "device" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session.device().shell(["echo", "ok"]).stdout == "ok\n"


@pytest.mark.parametrize(
    "mode,advice",
    [("unauthorized", "accept the 'Allow USB debugging?' prompt"), ("offline", "replug the cable")],
)
def test_unusable_phone_states_give_one_line_with_advice(
    make_emulated_phone, mode: str, advice: str
) -> None:
    session = make_emulated_phone(auth=PhoneAuth(mode=mode))
    assert states(session)[session.serial] == mode
    for call in (
        lambda: resolve_phone(session.serial, session.adb_port),
        lambda: session.device().shell(["echo", "x"], deadline_s=3),
    ):
        with pytest.raises(DeviceUnavailable) as err:
            call()
        assert f"is {mode}" in str(err.value) and advice in str(err.value)
        assert "\n" not in str(err.value)
    listed = {d.serial: d for d in discover(session.adb_port, include_local=False)}
    assert listed[session.serial].state == mode and advice in (listed[session.serial].advice or "")


def test_scheduled_core_offline_and_ceiling_drop(make_emulated_phone) -> None:
    session = make_emulated_phone()
    assert apply_fault(session.phone, "core-offline:5@0.05") == "CPU5 goes offline at 0.05 s"
    apply_fault(session.phone, "ceiling:4=1.2@0.05")
    time.sleep(0.3)
    st = session.device().cpu_state()
    assert 5 not in st.online and st.core(4).ceiling_khz == 1_200_000


@pytest.mark.parametrize("spec", ["core-offline:9@1", "ceiling:4@1", "explode", "unplug@x"])
def test_bad_fault_specs_are_one_clear_line(make_emulated_phone, spec: str) -> None:
    session = make_emulated_phone()
    with pytest.raises(UserError, match="bad --fault") as err:
        apply_fault(session.phone, spec)
    assert "forms:" in str(err.value)


def test_a_crashing_command_handler_does_not_kill_the_phone(make_emulated_phone) -> None:
    session = make_emulated_phone()

    def broken(ctx: CommandContext) -> int:
        raise RuntimeError("handler bug")

    session.phone.register_command("broken", broken)
    res = session.device().shell(["broken"], deadline_s=3)  # like a crashed process
    assert res.exit_code == 255 and "RuntimeError: handler bug" in res.stderr
    assert session.device().shell(["echo", "fine"]).stdout == "fine\n"


def _state(pid: int) -> str:
    """A process's state letter from /proc (T: stopped); '' once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _until(cond, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_freeze_stops_the_phones_programs_for_a_while(make_emulated_phone, tmp_path) -> None:
    """freeze@T+D: a program the phone runs and its child (in a session of its own) are
    stopped, a program started during the freeze waits for its end, the phone's shell
    still answers, and everything continues afterwards."""
    import sys
    import threading

    session = make_emulated_phone()
    phone = session.phone
    go = tmp_path / "go"  # the child waits for it: the test says when the work may end
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)"
    work = (
        "import subprocess, sys; "
        f"c = subprocess.Popen([sys.executable, '-c', {wait!r}], start_new_session=True); "
        "c.wait(); print('done', flush=True)"
    )
    stamp = "import time; time.sleep(0.5); print(time.time(), flush=True)"
    phone.register_command("work", lambda ctx: ctx.run_host([sys.executable, "-c", work]))
    phone.register_command("stamp", lambda ctx: ctx.run_host([sys.executable, "-c", stamp]))
    dev = session.device()
    got: dict[str, object] = {}
    runner = threading.Thread(target=lambda: got.update(work=dev.shell(["work"], deadline_s=60)))
    runner.start()
    from device_agents.emulator.phone import _process_trees

    assert _until(lambda: len(_process_trees(phone.processes)) == 2, 20)
    (root,) = phone.processes
    tree = _process_trees({root})
    armed = time.time()
    assert apply_fault(phone, "freeze@0+3") == "the phone's programs freeze at 0 s for 3 s"
    assert _until(lambda: all(_state(p) == "T" for p in tree), 3)
    assert dev.shell(["echo", "alive"]).stdout == "alive\n"  # the phone itself answers
    late = dev.shell(["stamp"], deadline_s=30)  # started while frozen: waits for the end
    assert late.exit_code == 0 and float(late.stdout) >= armed + 3
    assert _until(lambda: all(_state(p) not in ("T", "") for p in tree), 5)
    go.touch()
    runner.join(timeout=30)
    assert got["work"].stdout == "done\n"  # type: ignore[attr-defined]
    assert not phone.processes


@pytest.mark.parametrize("spec", ["freeze@5", "freeze@1+0", "freeze@+2"])
def test_bad_freeze_specs_are_one_clear_line(make_emulated_phone, spec: str) -> None:
    session = make_emulated_phone()
    with pytest.raises(UserError, match="bad --fault") as err:
        apply_fault(session.phone, spec)
    assert "freeze@T+D" in str(err.value) and "\n" not in str(err.value)
