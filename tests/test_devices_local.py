"""The local host as a device: facts, CPU state, affinity, deadline, run directories."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from as2d_cli.errors import UserError
from device_agents.base import DeviceTimeout, parse_cpu_list
from device_agents.local import LocalHost


def test_cpu_list_parsing() -> None:
    assert parse_cpu_list("0-3,5,7-7\n") == [0, 1, 2, 3, 5, 7]
    assert parse_cpu_list("") == []


def test_facts_and_cpu_state_match_sysfs() -> None:
    host = LocalHost()
    possible = parse_cpu_list(Path("/sys/devices/system/cpu/possible").read_text())
    facts = host.facts()
    assert facts.get("cpu_cores") == len(possible)
    assert facts.get("ram_gib") > 0
    for name in ("android_version", "api_level", "security_patch"):
        assert facts.get(name) is None and facts.values[name].source.startswith("unavailable")
    if not Path(f"/sys/devices/system/cpu/cpu{possible[0]}/cpufreq/cpuinfo_max_freq").exists():
        assert facts.get("cpu_peak_ghz") is None  # never guessed
    state = host.cpu_state()
    assert sorted(state.online) == parse_cpu_list(
        Path("/sys/devices/system/cpu/online").read_text()
    )


def test_run_with_affinity_pins_the_child() -> None:
    host = LocalHost()
    cpu = min(os.sched_getaffinity(0))
    res = host.run(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], affinity={cpu}
    )
    assert res.exit_code == 0 and res.stdout.strip() == f"[{cpu}]"
    unpinned = host.run([sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"])
    assert int(unpinned.stdout) == len(os.sched_getaffinity(0))


def test_affinity_to_missing_cpus_is_a_user_error() -> None:
    with pytest.raises(UserError, match="usable CPUs"):
        LocalHost().run(["true"], affinity={4096})


def test_total_deadline_keeps_partial_output() -> None:
    start = time.monotonic()
    with pytest.raises(DeviceTimeout) as err:
        LocalHost().shell("echo early; sleep 5", deadline_s=0.5)
    assert time.monotonic() - start < 3
    assert err.value.partial is not None and err.value.partial.stdout == "early\n"


def test_run_dir_push_pull_and_cleanup(tmp_path: Path) -> None:
    host = LocalHost(root=str(tmp_path))
    src = tmp_path / "src.bin"
    src.write_bytes(b"payload")
    with host.run_dir("loc") as rd:
        host.push(src, f"{rd}/a/b.bin")
        host.pull(f"{rd}/a/b.bin", tmp_path / "back.bin")
        with pytest.raises(UserError, match="per-run directory"):
            host.push(src, str(tmp_path / "outside.bin"))
    assert (tmp_path / "back.bin").read_bytes() == b"payload"
    assert not Path(rd).exists() and not (tmp_path / "outside.bin").exists()
