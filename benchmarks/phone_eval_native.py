"""End to end on the emulated phone with python3 (no hardware): traces, a full calibration
and `as2d eval --native` through the real adb server, with the runner pushed to the phone.

    python benchmarks/phone_eval_native.py [--windows 2] [--limit 4] [--out DIR] [--quick-gate]

Starts a private adb server and an emulated Redmi K70 Pro with python3, then runs the CLI:
`as2d traces build` (first --limit windows of dev, val and test), `as2d calibrate --phone
SERIAL` (the full plan; gate rest 0 s, checks 0.1 s apart) and `as2d eval --phone SERIAL
--native --windows N` with that profile, printing how long each took and the native
agreement table. Everything it starts is stopped by process id at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from device_agents.emulator.python import enable_python
from device_agents.emulator.session import EmulatorSession


def run(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *argv], env=env, text=True, capture_output=True
    )
    took = time.monotonic() - t0
    if proc.returncode != 0:
        print(
            f"FAILED ({proc.returncode}): as2d {' '.join(argv)}\n{proc.stderr[-2000:]}", flush=True
        )
        raise SystemExit(proc.returncode)
    return took, proc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=2, help="native test windows")
    ap.add_argument("--limit", type=int, default=4, help="windows per split in the traces")
    ap.add_argument("--out", default=None, help="output folder (default: a temp dir)")
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="as2d-phone-eval-"))
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for split in ("dev", "val", "test"):
        took, _ = run(
            [
                "traces",
                "build",
                "--split",
                split,
                "--limit",
                str(a.limit),
                "--force",
                "--out",
                str(traces / f"{split}.jsonl.gz"),
            ],
            env,
        )
        print(f"traces {split}: {took:.1f} s", flush=True)
    session = EmulatorSession(private_server=True).start()
    try:
        enable_python(session.phone)
        env.update(session.env)
        gate = ["--rest", "0", "--interval", "0.1"]
        took, _ = run(
            ["calibrate", "--phone", session.serial, *gate, "--out", str(out / "cal")], env
        )
        profile = max((out / "cal").glob("*.profile.yaml"), key=lambda p: p.stat().st_mtime)
        print(f"calibrate (full plan) on {session.serial}: {took:.1f} s -> {profile}", flush=True)
        before = sum("native.runner" in s for s in session.phone.history)
        took, proc = run(
            [
                "eval",
                "--phone",
                session.serial,
                "--native",
                "--windows",
                str(a.windows),
                *gate,
                "--profile",
                str(profile),
                "--traces",
                str(traces),
                "--calibrations",
                str(out / "cal"),
                "--results",
                str(out / "res"),
                # its traces hold a few windows per split: fewer dev windows than eval requires
                "--accept-unvalidated",
            ],
            env,
        )
        starts = sum("native.runner" in s for s in session.phone.history) - before
        print(
            f"eval --native --windows {a.windows} on {session.serial}: {took:.1f} s ({starts} runner starts on the phone)"
        )
        text = proc.stdout
        print(text[text.index("method       runs") :] if "method       runs" in text else text)
    finally:
        session.stop()
    print(f"output in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
