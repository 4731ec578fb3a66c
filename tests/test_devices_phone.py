"""AdbPhone against the emulated phone through the real adb server: facts, CPU state,
per-run directories, push/pull, --phone resolution, affinity, the total shell deadline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from as2d_cli.errors import DeviceError, UserError
from device_agents.base import DeviceTimeout
from device_agents.emulator.profiles import PROFILES
from device_agents.emulator.shell import CommandContext
from device_agents.registry import discover, resolve_phone


def test_facts_are_table_6_for_the_k70(emulated_phone) -> None:
    f = emulated_phone.device().facts()
    assert f.get("model_id") == "23117RK66C"
    assert f.get("soc") == "QTI SM8650"
    assert f.get("cpu_cores") == 8
    assert f.get("cpu_peak_ghz") == pytest.approx(3.3, abs=0.01)
    assert f.get("cpu_max_ghz_by_core")["4"] == pytest.approx(3.15, abs=0.01)
    assert f.get("gpu").startswith("Adreno750")
    assert f.get("ram_gib") == 10.91
    assert (f.get("android_version"), f.get("api_level")) == ("16", 36)
    assert f.get("build") == "OS3.0.304.0.WNMCNXM"
    assert f.get("security_patch") == "2026-06-01"
    opencl = f.values["opencl"]
    assert not opencl.available and opencl.source.startswith("unavailable")


@pytest.mark.parametrize("name", ["mi11pro", "note9pro"])
def test_facts_follow_the_phone_profile(make_emulated_phone, name: str) -> None:
    profile = PROFILES[name]
    f = make_emulated_phone(profile=name).device().facts()
    assert f.get("model_id") == profile.model_id
    assert f.get("ram_gib") == profile.ram_gib
    assert f.get("api_level") == profile.api
    assert f.get("cpu_peak_ghz") == pytest.approx(max(c.max_khz for c in profile.clusters) / 1e6)


def test_missing_facts_are_recorded_unavailable_not_guessed(make_emulated_phone) -> None:
    session = make_emulated_phone()
    session.phone.fs.remove_dynamic("/sys/class/kgsl/kgsl-3d0/gpu_model")
    del session.phone.props["ro.build.version.security_patch"]
    f = session.device().facts()
    assert f.get("gpu") is None and f.values["gpu"].source.startswith("unavailable")
    assert f.get("security_patch") is None and "unavailable" in f.values["security_patch"].source
    assert f.get("model_id") == "23117RK66C"


def test_cpu_state_reads_cores_ceilings_thermal_and_battery(emulated_phone) -> None:
    st = emulated_phone.device().cpu_state()
    assert sorted(st.online) == list(range(8))
    c4 = st.core(4)
    assert c4 is not None and c4.ceiling_khz == 3148800 and c4.max_khz == 3148800
    assert 0 < c4.cur_khz <= c4.ceiling_khz
    assert st.core(7).max_khz == 3302400
    assert "cpu-1-4-0" in st.thermal_c and 20 < st.thermal_c["cpu-1-4-0"] < 60
    assert st.battery_temp_c == 31.0


def test_cpu_state_follows_the_phone(make_emulated_phone) -> None:
    session = make_emulated_phone()
    dev = session.device()
    session.phone.set_core_online(6, False)
    session.phone.set_ceiling(4, 1_200_000)
    session.phone.thermal_mc["cpu-1-4-0"] = 71500
    st = dev.cpu_state()
    assert 6 not in st.online and not st.core(6).online
    assert st.core(2).ceiling_khz == 1_200_000  # the whole cluster (policy) of CPU4
    assert st.core(7).ceiling_khz == 3302400
    assert st.thermal_c["cpu-1-4-0"] == 71.5


def test_push_pull_round_trip_inside_a_run_dir_that_is_removed(
    emulated_phone, tmp_path: Path
) -> None:
    dev = emulated_phone.device()
    src = tmp_path / "model.onnx"
    src.write_bytes(bytes(range(256)) * 1000)
    with dev.run_dir("rt") as rd:
        assert rd.startswith("/data/local/tmp/as2d-rt-")
        dev.push(src, f"{rd}/models/model.onnx")
        assert (
            dev.shell(["sha256sum", f"{rd}/models/model.onnx"]).stdout.split()[0]
            == __import__("hashlib").sha256(src.read_bytes()).hexdigest()
        )
        dev.pull(f"{rd}/models/model.onnx", tmp_path / "back.onnx")
        assert (tmp_path / "back.onnx").read_bytes() == src.read_bytes()
    assert emulated_phone.phone.fs.stat(rd) is None


def test_push_outside_a_run_dir_is_refused(emulated_phone, tmp_path: Path) -> None:
    dev = emulated_phone.device()
    src = tmp_path / "x"
    src.write_text("x")
    for bad in (
        "/data/local/tmp/x",
        "/sdcard/x",
        "/data/local/tmp/as2d-run-1/../../evil",
        "/system/bin/x",
    ):
        with pytest.raises(UserError, match="per-run directory"):
            dev.push(src, bad)
    assert emulated_phone.phone.fs.stat("/data/local/tmp/x") is None


def test_pull_of_a_missing_file_is_one_clear_error_and_leaves_nothing(
    emulated_phone, tmp_path: Path
) -> None:
    with pytest.raises(DeviceError, match="does not exist"):
        emulated_phone.device().pull("/data/local/tmp/nope.bin", tmp_path / "nope.bin")
    assert list(tmp_path.iterdir()) == []


def test_resolve_phone_by_name_serial_and_errors(emulated_phone) -> None:
    port = emulated_phone.adb_port
    assert resolve_phone("k70", port).serial == emulated_phone.serial
    assert resolve_phone(emulated_phone.serial, port).serial == emulated_phone.serial
    assert resolve_phone("local", port).kind == "local"
    with pytest.raises(
        UserError, match=r"no attached phone is a Xiaomi 11 Pro \(model M2102K1AC\)"
    ) as err:
        resolve_phone("11pro", port)
    assert emulated_phone.serial in str(err.value)
    with pytest.raises(UserError, match="use one of local, k70, mi14, mi11pro, note9pro") as err2:
        resolve_phone("pixel9", port)
    assert "\n" not in str(err2.value)


def test_discover_lists_local_and_the_phone(emulated_phone) -> None:
    listing = {d.serial: d for d in discover(emulated_phone.adb_port)}
    assert listing["local"].kind == "local" and listing["local"].facts is not None
    phone = listing[emulated_phone.serial]
    assert phone.state == "device" and phone.known_as == "k70"


def test_run_with_affinity_uses_taskset_with_a_hex_mask(emulated_phone) -> None:
    dev = emulated_phone.device()
    res = dev.run(["echo", "pinned"], affinity={4, 5, 6, 7})
    assert res.stdout == "pinned\n"
    assert res.command == "taskset f0 echo pinned"
    assert emulated_phone.phone.affinity_log[-1] == (0xF0, ["echo", "pinned"])


def test_affinity_to_offline_cores_fails_like_on_a_phone(make_emulated_phone) -> None:
    session = make_emulated_phone()
    for c in (4, 5):
        session.phone.set_core_online(c, False)
    res = session.device().run(["echo", "x"], affinity={4, 5})
    assert res.exit_code != 0 and "sched_setaffinity" in res.stderr


def test_shell_deadline_is_total_not_per_read(make_emulated_phone) -> None:
    session = make_emulated_phone()

    def ticker(ctx: CommandContext) -> int:  # prints forever: a per-read timeout never fires
        i = 0
        while not ctx.cancel.wait(0.05):
            ctx.out(f"tick {i}\n")
            i += 1
        return 0

    session.phone.register_command("ticker", ticker)
    start = time.monotonic()
    with pytest.raises(DeviceTimeout, match="did not finish within 0.6 s") as err:
        session.device().shell(["ticker"], deadline_s=0.6)
    elapsed = time.monotonic() - start
    assert elapsed < 2.0
    partial = err.value.partial
    assert partial is not None and partial.exit_code is None and partial.stdout.count("tick") >= 3
    assert session.device().shell(["echo", "still here"]).stdout == "still here\n"


def test_runner_measured_facts_can_be_added(emulated_phone) -> None:
    from device_agents.base import Fact

    f = emulated_phone.device().facts()
    g = f.updated(opencl=Fact("3.0", "native runner CL_DEVICE_VERSION"))
    assert g.get("opencl") == "3.0" and f.get("opencl") is None
    assert g.get("model_id") == f.get("model_id")
