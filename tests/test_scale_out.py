"""Scale-out on Ray: a catalog sweep, a selection and a trace build on a local Ray instance
give byte for byte what the local pool gives; a lost worker's task is retried without
changing or duplicating a result; `--ray` refuses cleanly without Ray or without a cluster.

One Ray instance (2 CPUs) serves the whole module; the CLI test joins it by its address,
as a user joins a cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from as2d_cli.execution import LocalPool
from as2d_cli.synthetic import synthetic_profile, synthetic_traces

ROOT = Path(__file__).resolve().parents[1]
REPLAY_DATA = ROOT / "tests" / "data" / "replay"
SOURCES = ["qwen", "parakeet", "sensevoice"]


def as2d(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def ray() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    import logging

    # This module's functions travel by value: Ray workers do not have tests/ on sys.path.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # One phone attached to this node, as `ray start --resources` declares it.
    ray.init(
        num_cpus=2,
        resources={"phone:EMU1": 1},
        include_dashboard=False,
        logging_level=logging.ERROR,
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def test_on_a_local_ray_instance_everything_equals_the_local_pool(ray: Any, tmp_path: Path) -> None:
    """One test, so that the suite's xdist workers start one Ray instance, not one each."""
    from as2d_cli.execution.ray_executor import RayExecutor

    executor = RayExecutor("local")  # joins the instance this process started
    assert executor.workers == 2 and executor.remote
    _sweep(executor)
    _select_budget_cli(ray.get_runtime_context().gcs_address, tmp_path / "select")
    _traces_build(executor, tmp_path / "traces")
    _lost_worker(executor, tmp_path / "lost")
    _farm_on_ray(executor, tmp_path)


def _farm_on_ray(executor: Any, tmp_path: Path) -> None:
    """The farm as Ray sees it: the node's phone, and a phone no node offers refused."""
    from as2d_cli.calibration.farm import FarmOptions, calibrate_farm
    from as2d_cli.errors import UserError

    (node,) = executor.nodes()
    assert node["alive"] and node["cpus"] == 2 and node["phones"] == ["EMU1"] and not node["busy"]
    with pytest.raises(UserError, match="no Ray node offers the resource 'phone:NOPE'"):
        calibrate_farm(["EMU1", "NOPE"], FarmOptions(out_dir=str(tmp_path)), executor)


def _sweep(executor: Any) -> None:
    from as2d_cli.replay.sweep import sweep

    ts, prof = synthetic_traces(seed=5, scale=0.03, drafter=False), synthetic_profile()
    here = sweep(ts.windows, prof, SOURCES, range(1, 9), processes=1)
    there = sweep(ts.windows, prof, SOURCES, range(1, 9), executor=executor)
    assert len(ts.windows) > 2 * 8  # more windows than chunks: several tasks per worker
    assert np.array_equal(here.times, there.times) and np.array_equal(here.rounds, there.rounds)
    assert here.used == there.used and here.simulated_rounds == there.simulated_rounds


def _select_budget_cli(address: str, work: Path) -> None:
    """The CLI joins the running instance by its address, as a user joins a cluster, and
    writes what the in-process selection writes."""
    from as2d_cli.engine.methods import MethodSpec, spec_grid
    from as2d_cli.replay.report import select_report, write_selection
    from as2d_cli.replay.selection import default_history

    work.mkdir()
    for name in ("profile.yaml", "traces.jsonl.gz"):
        shutil.copy(REPLAY_DATA / name, work / name)
    here = os.getcwd()
    os.chdir(work)  # the same relative paths as the CLI's, so the files may be equal
    try:
        # the command's default catalog: As²d's defaults without and with history candidates
        grid = spec_grid(MethodSpec("as2d"), {"history": default_history("suffix", None)})
        sel, rep = select_report(
            "profile.yaml", "traces.jsonl.gz", budgets=list(range(1, 13)), settings=grid
        )
        write_selection(sel, rep, "profile.yaml", "local.yaml")
    finally:
        os.chdir(here)
    args = ["select-budget", "--profile", "profile.yaml", "--traces", "traces.jsonl.gz"]
    there = as2d(
        *args, "--budgets", "1-12", "--json", "--ray", address, "--out", "ray.yaml", cwd=work
    )
    assert there.returncode == 0, there.stderr
    got = json.loads(there.stdout)
    assert got.pop("deployment") == "ray.yaml"
    assert got == json.loads(json.dumps(rep))

    def body(name: str) -> list[str]:  # without the environment block's creation time
        lines = (work / name).read_text().splitlines()
        return [x for x in lines if not x.strip().startswith("created:")]

    assert body("local.yaml") == body("ray.yaml")
    assert len(body("ray.yaml")) == len((work / "ray.yaml").read_text().splitlines()) - 1


def _traces_build(executor: Any, work: Path) -> None:
    """A local build of three windows on two processes; a Ray build resuming from the local
    partial's first window traces the other two on two workers (the pair shipped through
    the object store) and writes the same file."""
    from as2d_cli.tracegen.build import build_traces

    work.mkdir()
    local = build_traces("dev", work / "local.jsonl", limit=3, processes=2, max_tokens=24)
    lines = local.read_text().splitlines()
    partial = work / "ray.jsonl.partial.jsonl"
    header = json.loads(lines[0])
    partial.write_text(json.dumps({"pair": header["provenance"]["pair"]}) + "\n" + lines[1] + "\n")
    events: list[str] = []
    ray_path = build_traces(
        "dev",
        work / "ray.jsonl",
        limit=3,
        max_tokens=24,
        executor=executor,
        progress=lambda n, t, w: events.append(w),
    )
    assert events[0] == "resumed" and len(events) == 3 and not partial.exists()
    assert events[1:] == [json.loads(x)["id"] for x in lines[2:]]  # written in window order
    got = ray_path.read_text().splitlines()
    assert got[1:] == lines[1:]  # the windows, byte for byte
    env_a, env_b = json.loads(lines[0]), json.loads(got[0])
    env_a["provenance"].pop("created"), env_b["provenance"].pop("created")
    assert env_a == env_b


_CRASHED = "crashed-once"


def _crash_once(marker_dir: str, task: int) -> tuple[int, int]:
    """Task 3's first attempt kills its worker process, as a lost node would."""
    marker = Path(marker_dir) / f"{_CRASHED}-{task}"
    if task == 3 and not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return task * task, os.getpid()


def _lost_worker(executor: Any, work: Path) -> None:
    """A worker lost mid-run: Ray retries its task; every result arrives once, in order."""
    work.mkdir()
    got = list(executor.map(_crash_once, str(work), list(range(8))))
    assert [r for r, _ in got] == [t * t for t in range(8)]
    dead = int((work / f"{_CRASHED}-3").read_text())
    assert got[3][1] != dead  # the retry ran in another worker


def test_ray_refusals_are_one_line(tmp_path: Path) -> None:
    for name in ("profile.yaml", "traces.jsonl.gz"):
        shutil.copy(REPLAY_DATA / name, tmp_path / name)
    args = ["select-budget", "--profile", "profile.yaml", "--traces", "traces.jsonl.gz"]
    # Nothing listens on port 1: refused at once, not after Ray's minutes of retries.
    proc = as2d(*args, "--ray", "127.0.0.1:1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--ray 127.0.0.1:1: nothing answers there" in proc.stderr
    # Without Ray installed (the import made to fail), the line names the extra to install.
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from as2d_cli.cli.main import main\n"
        f"main({[*args, '--ray', 'local']!r})\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install -e '.[cluster]'" in proc.stderr
    assert not list(tmp_path.glob("calibrations/**/*.yaml"))  # nothing written


def _farm_plan(window: str) -> list[Any]:
    """Calibration's structure at test size (as tests/test_native_phone.py's plan)."""
    from as2d_cli.calibration.plan import Step

    c = {"op": "calibrate", "window": window}
    verify = {**c, "what": "verify", "widths": [1, 2], "offsets": [0], "warmup": 0, "reps": 1}
    return [
        Step("verify-idle", "verify", {**verify, "producer": False}, 1),
        Step("verify-busy", "verify+producer", {**verify, "producer": True}, 1),
        Step("target-step", "target", {**c, "what": "target_step", "reps": 2}, 1),
        Step("source-drafter", "src", {**c, "what": "source", "source": "drafter", "limit": 8}, 1),
        Step("source-ctc", "ctc", {**c, "what": "source", "source": "ctc"}, 1),
        Step("drafter", "drafter", {**c, "what": "drafter", "reps": 1, "widths": [1]}, 1),
        Step("loop", "loop", {**c, "what": "loop", "reps": 1, "max_tokens": 8}, 1),
    ]


@pytest.mark.slow  # ~20 s; benchmarks/scale_out.py --farm runs the same farm and times it
def test_a_farm_of_two_emulated_phones_calibrates_both_at_once(
    make_emulated_phone: Any, adb_server: Any, tmp_path: Path
) -> None:
    """Two emulated phones of one model (own serials), one process each: both profiles are
    written, each in its phone's folder; the two calibrations overlap in time while each
    phone's own measurements never do; a phone given twice, or under two names, is refused."""
    from as2d_cli.calibration.farm import FarmOptions, calibrate_farm
    from as2d_cli.calibration.run import calibration_windows
    from as2d_cli.errors import UserError
    from as2d_cli.execution.farm import farm_table
    from as2d_cli.formats.profile_io import load_profile
    from device_agents.emulator.python import enable_python
    from device_agents.measurement import MeasureOptions

    phones = [make_emulated_phone(serial=f"as2dfarm000{i}") for i in (1, 2)]
    for p in phones:
        enable_python(p.phone)
    window, _ = calibration_windows()
    opts = FarmOptions(
        out_dir=str(tmp_path),
        measure=MeasureOptions(rest_s=0.0, interval_s=0.05, settle_s=0.0),
        adb_port=adb_server.port,
        plan=_farm_plan(window),
    )
    serials = [p.serial for p in phones]
    with pytest.raises(UserError, match="given twice"):
        calibrate_farm([serials[0], serials[0]], opts, LocalPool(2))
    outcomes = calibrate_farm(serials, opts, LocalPool(2))
    assert [o.ok for o in outcomes] == [True, True], farm_table(outcomes)
    spans = []
    for _o, i in zip(outcomes, (1, 2)):
        folder = tmp_path / f"k70-as2dfarm000{i}"
        profile = load_profile(next(folder.glob("*.profile.yaml")))
        assert profile.device["serial"] == f"as2dfarm000{i}" and profile.target_step_ms > 0
        # Each step's monitor samples bound when the phone was measured: one step at a time.
        steps = [
            json.loads(x) for x in next(folder.glob("*.monitor.jsonl")).read_text().splitlines()
        ]
        own = [(s["samples"][0]["wall_time"], s["samples"][-1]["wall_time"]) for s in steps]
        assert len(own) == 7 and all(a[1] <= b[0] for a, b in zip(own, own[1:]))
        spans.append((own[0][0], own[-1][1]))
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1  # the two phones were measured at the same time
    table = farm_table(outcomes).splitlines()
    assert table[0].split()[:4] == ["phone", "device", "host", "status"] and len(table) == 3


def test_farm_table_matches_golden() -> None:
    from as2d_cli.execution.farm import PhoneOutcome, farm_table

    t0 = 1_800_000_000.0
    outcomes = [
        PhoneOutcome(
            "k70",
            True,
            "calibrations/k70-A1/k70-1.profile.yaml",
            "k70 A1",
            "lab1",
            t0,
            t0 + 300,
            11,
        ),
        PhoneOutcome(
            "R58M",
            False,
            "gate failed before verify: CPU6 offline",
            "mi14 B2",
            "lab2",
            t0 + 2,
            t0 + 62,
            11,
            4,
        ),
    ]
    assert farm_table(outcomes) == (
        "phone  device   host  status  steps           start s  minutes  profile / error\n"
        "k70    k70 A1   lab1  ok      11              0        5.0      "
        "calibrations/k70-A1/k70-1.profile.yaml\n"
        "R58M   mi14 B2  lab2  FAILED  11 (4 resumed)  2        1.0      "
        "gate failed before verify: CPU6 offline"
    )


def test_a_farm_refuses_the_host_a_phone_given_twice_and_one_phone_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from native import BLAS_THREAD_VARS

    # Importing the CLI sets one BLAS thread in os.environ; it is put back after this test.
    for var in BLAS_THREAD_VARS:
        if var in os.environ:
            monkeypatch.setenv(var, os.environ[var])
        else:
            monkeypatch.delenv(var, raising=False)
    from as2d_cli.cli.main import main

    monkeypatch.chdir(tmp_path)
    for args, needle in (
        (["calibrate", "--phone", "local", "--phone", "k70"], "--phone local measures this host"),
        (["calibrate", "--phone", "k70", "--phone", "k70"], "--phone k70 is given twice"),
        (["eval", "--phone", "k70", "--phone", "mi14"], "add --native"),
        (["eval", "--native", "--phone", "k70", "--phone", "mi14", "--ray", "local"], "drop --ray"),
        (["eval", "--native", "--phone", "a", "--phone", "b", "--append", "x"], "--append applies"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert not any(tmp_path.iterdir())  # nothing written


def test_eval_finds_a_farm_phones_profile_in_its_folder(tmp_path: Path) -> None:
    import yaml

    from as2d_cli.evaluate.inputs import find_profile

    folder = tmp_path / "k70-SER1"  # where `as2d calibrate --phone A --phone B` puts it
    folder.mkdir()
    path = folder / "k70-20261203-120000.profile.yaml"
    device = {"name": "k70", "serial": "SER1", "connection": "127.0.0.1:5555"}
    path.write_text(yaml.safe_dump({"device": device, "created": "2026-12-03T12:00:00Z"}))
    assert find_profile("SER1", tmp_path) == path == find_profile("127.0.0.1:5555", tmp_path)
