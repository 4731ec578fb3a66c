"""A stalled block mid-stream (issue 28, faults): `as2d stream` as a person types it, a
subprocess through the real adb server to the emulated phone, whose programs (the runner
payload and its source worker) are frozen with SIGSTOP for a while once the first block is
back on the host. The stream goes on, every block is kept, and the backlog shows."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from device_agents.emulator.faults import apply_fault

FREEZE_S = 6.0
BLOCK_S = 2.0
STREAM_S = 15.0  # --minutes 0.25: 8 blocks (the last one 1 s)


@pytest.mark.slow  # ~40 s: loading on the phone, then a 15 s stream paced in real time
def test_a_frozen_phone_mid_stream_queues_the_blocks_and_keeps_them_all(
    make_emulated_phone, tmp_path: Path
) -> None:
    """By hand: `as2d emulator start --python --fault freeze@40+6`, then
    `as2d stream --phone as2demu0001 --minutes 0.25 --block-s 2 --context-s 4 --rest 0`
    (start it right away: the freeze must land in the stream, after loading).

    Here the freeze is armed when the first block's record reaches the host, so it hits
    the stream whatever loading took. Whatever the runner is doing when it freezes, some
    block is then kept waiting at least the freeze less one block interval (a block in
    progress finishes only after the thaw, and the next has arrived by then; an idle runner
    wakes up after the thaw for a block that arrived meanwhile)."""
    from device_agents.emulator.python import enable_python

    session = make_emulated_phone()
    enable_python(session.phone)
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "as2d_cli.cli.main",
        "stream",
        "--phone",
        session.serial,
        "--minutes",
        str(STREAM_S / 60),
        "--block-s",
        str(BLOCK_S),
        "--context-s",
        str(2 * BLOCK_S),
        "--rest",
        "0",
        "--interval",
        "0.05",
        "--out",
        str(out),
    ]
    with (tmp_path / "stderr.txt").open("w+") as err:
        proc = subprocess.Popen(
            cmd, env={**os.environ, **session.env}, stdout=subprocess.PIPE, stderr=err, text=True
        )
        try:
            deadline = time.monotonic() + 300
            armed = None
            while proc.poll() is None and time.monotonic() < deadline:
                raw = list(out.glob("*-stream-*/blocks.jsonl"))
                if armed is None and raw and raw[0].read_text().strip():
                    armed = apply_fault(session.phone, f"freeze@0+{FREEZE_S:g}")
                time.sleep(0.05)
            proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        stderr = err.read()
    assert armed is not None, stderr[-2000:]
    assert proc.returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr

    (folder,) = out.glob("*-stream-*")
    doc = json.loads((folder / "stream.json").read_text())
    n = math.ceil(STREAM_S / BLOCK_S)
    assert doc["status"] == "complete" and doc["stopped"] is None
    assert [b["block"] for b in doc["blocks"]] == list(range(n))  # none dropped
    csv = pd.read_csv(folder / "blocks.csv")
    assert list(csv["block"]) == list(range(n))
    raw_blocks = (folder / "blocks.jsonl").read_text().splitlines()
    assert len(raw_blocks) == n  # each appended as it came back

    backlog = FREEZE_S - BLOCK_S  # what the freeze forces, whatever the machine's speed
    waited = csv["queue_wait_s"].idxmax()
    assert csv["queue_wait_s"].max() >= backlog and csv["lag_s"].max() >= backlog
    assert waited > 0  # the first block came back before the freeze was armed
    assert doc["metrics"]["max_queue_wait_s"] >= backlog
    assert doc["monitor"]["failure"] is None  # the device stayed up: a stall, not a loss
