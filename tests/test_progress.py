"""Long commands tell their progress: plain lines off a terminal (CI logs), throttled,
with the time left; nothing with --quiet."""

from __future__ import annotations

import io

import pytest

from as2d_cli.cli import progress as progress_mod
from as2d_cli.cli.progress import PLAIN_EVERY_S, Steps


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", c)
    return c


def test_plain_lines_are_throttled_and_carry_the_time_left(clock: Clock) -> None:
    out = io.StringIO()
    with Steps("tracing test", stream=out) as steps:
        steps.update("test-read-000", 0, 40)  # the first line at once
        clock.t += 2
        steps.update("test-read-001", 1, 40)  # within PLAIN_EVERY_S: not printed
        clock.t += PLAIN_EVERY_S
        steps.update("test-read-010", 10, 40)
        clock.t += 1
        steps.update("test-sung-039", 40, 40)  # the last is always printed
    lines = out.getvalue().splitlines()
    assert lines == [
        "tracing test: test-read-000 — 0/40 (0%), 0 s elapsed",
        "tracing test: test-read-010 — 10/40 (25%), 12 s elapsed, about 36 s left",
        "tracing test: test-sung-039 — 40/40 (100%), 13 s elapsed",
    ]


def test_a_new_phase_is_printed_at_once_and_percent_only_without_counts(clock: Clock) -> None:
    out = io.StringIO()
    with Steps("calibrate", count=False, stream=out) as steps:
        steps.update("waiting for a quiet host: 0 of 20 s quiet, waited 0 s", 0, 10)
        clock.t += 1
        steps.update("waiting for a quiet host: 1 of 20 s quiet, waited 1 s", 0, 10)
        clock.t += 1
        steps.update("verify K1-8 idle", 2.5, 10)
        clock.t += 200
        steps.update("verify K1-8 concurrent", 5, 10)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[1] == "calibrate: verify K1-8 idle — 25%, 2 s elapsed, about 6 s left"
    assert lines[2].endswith("— 50%, 3 min elapsed, about 3 min left")


def test_quiet_says_nothing(clock: Clock) -> None:
    out = io.StringIO()
    with Steps("eval", quiet=True, stream=out) as steps:
        steps.update("x", 1, 2)
        steps.update("y", 2, 2)
    assert out.getvalue() == ""


def test_traces_build_prints_progress_lines_off_a_terminal(tmp_path, capsys) -> None:
    from as2d_cli.cli.main import main

    out = tmp_path / "dev.jsonl.gz"
    with pytest.raises(SystemExit) as e:
        main(["traces", "build", "--split", "dev", "--limit", "1", "--out", str(out)])
    assert (e.value.code or 0) == 0
    err = capsys.readouterr().err
    assert "tracing dev: " in err and "1/1 (100%)" in err and out.exists()
