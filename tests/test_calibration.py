"""`as2d calibrate` on the local host: probes through the real runner, an interrupted run
resumes from its saved samples, and the fitted profile loads back with only measured widths."""

from __future__ import annotations

import json

import pytest

from as2d_cli.calibration.fit import savings
from as2d_cli.calibration.plan import Step, make_plan
from as2d_cli.calibration.run import calibrate, calibration_windows
from as2d_cli.errors import FormatError
from as2d_cli.formats.profile_io import load_profile
from device_agents.local import LocalHost
from native.host import default_cores


def mini_plan(window: str) -> list[Step]:
    """The full plan's structure at test size."""
    steps = []
    for producer in (False, True):
        steps.append(Step(f"verify-{producer}", "verify", {"op": "calibrate", "what": "verify", "window": window,
                          "widths": [1, 2, 4], "offsets": [0, 8], "warmup": 1, "reps": 2, "producer": producer}, 1))
    steps += [
        Step("target-step", "target", {"op": "calibrate", "what": "target_step", "window": window, "reps": 6}, 1),
        Step("source-drafter", "src", {"op": "calibrate", "what": "source", "source": "drafter", "window": window, "limit": 24}, 1),
        Step("source-ctc", "ctc", {"op": "calibrate", "what": "source", "source": "ctc", "window": window}, 1),
        Step("drafter", "drafter", {"op": "calibrate", "what": "drafter", "window": window, "reps": 1, "widths": [1, 2, 3]}, 1),
        Step("loop", "loop", {"op": "calibrate", "what": "loop", "window": window, "reps": 1, "max_tokens": 24}, 1),
    ]
    return steps


def test_full_plan_shape() -> None:
    plan = make_plan("w")
    verify = [s for s in plan if s.command["what"] == "verify"]
    assert len(verify) == 6  # offsets 0, 64, 128 × idle/concurrent
    assert all(s.command["widths"] == list(range(1, 17)) and s.command["reps"] == 5 and s.command["warmup"] == 1
               for s in verify)


def test_interrupted_calibration_resumes_and_writes_profile(tmp_path) -> None:
    window, _ = calibration_windows()
    assert window.startswith("dev-")  # calibration audio is kept apart from the test split
    plan = mini_plan(window)
    device = LocalHost()
    seen: list[str] = []

    def stop_at_third(label: str, done: float, total: float) -> None:
        seen.append(label)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate(device, out_dir=tmp_path, plan=plan, progress=stop_at_third, cores=default_cores())
    partial = next((tmp_path / ".partial").iterdir())
    kept = [json.loads(x) for x in (partial / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in kept} == {"verify-False", "verify-True"}

    res = calibrate(device, out_dir=tmp_path, plan=plan, cores=default_cores())
    assert res.resumed_steps == 2 and res.steps == len(plan)
    assert not (tmp_path / ".partial" / partial.name).exists()
    prof = load_profile(res.profile_path)
    assert prof.widths == (1, 2, 4)
    assert all(prof.verify_concurrent_ratio[k] > 0 for k in prof.widths)
    assert prof.target_step_ms > 0 and prof.drafter is not None and set(prof.sources) == {"drafter", "ctc"}
    with pytest.raises(FormatError, match="K8"):
        prof.verify_ms(8)
    samples = [json.loads(x) for x in res.samples_path.read_text().splitlines()]
    assert sum(1 for s in samples if s["figure"] == "verify.K4" and not s["concurrent"]) == 4  # 2 offsets × 2 reps
    assert res.plot_path.stat().st_size > 1000 and res.plot_path.read_bytes()[:4] == b"\x89PNG"
    assert set(savings(prof)) == {1, 2, 4} and savings(prof)[1] == pytest.approx(0.0)
    # A second calibration never overwrites the first profile.
    res2 = calibrate(device, out_dir=tmp_path, plan=plan[:1] + plan[2:], cores=default_cores())
    assert res2.profile_path != res.profile_path and res.profile_path.exists()
