"""End to end on the emulated arm64 phone: `as2d calibrate --phone SERIAL --quick` through
the real adb server, with the runner started from the arm64 bundle under qemu.

    python benchmarks/bundle_phone_calibrate.py [--out DIR] [--window ID] [-- extra calibrate options]

Starts a private adb server and an emulated Redmi K70 Pro whose arm64 programs run under
qemu-aarch64-static (as2d_cli.bundle.emulated), runs the CLI against it and prints how
long the whole real-phone path took (build/deploy, gate, probes through the bundle).
Everything it starts is stopped by process id at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from as2d_cli.bundle.emulated import enable_arm64_bundle
from device_agents.emulator.session import EmulatorSession


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="calibration output folder (default: a temp dir)")
    ap.add_argument("--window", default=None, help="calibration window id")
    ap.add_argument("extra", nargs="*", help="more `as2d calibrate` options (after --)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="as2d-e2e-cal-")
    session = EmulatorSession(private_server=True).start()
    try:
        enable_arm64_bundle(session.phone)
        argv = [
            sys.executable,
            "-m",
            "as2d_cli.cli.main",
            "calibrate",
            "--phone",
            session.serial,
            "--quick",
            "--rest",
            "0",
            "--interval",
            "0",
            "--out",
            out,
            *(["--window", args.window] if args.window else []),
            *args.extra,
        ]
        env = {**os.environ, **session.env}
        print("running:", " ".join(argv), flush=True)
        t0 = time.monotonic()
        proc = subprocess.run(argv, env=env, text=True)
        print(
            f"exit {proc.returncode} after {time.monotonic() - t0:.0f} s; output in {out}",
            flush=True,
        )
        scripts = [s for s in session.phone.history if "ld-linux-aarch64.so.1" in s]
        print(f"{len(scripts)} runner starts through the bundle's loader on the phone", flush=True)
        return proc.returncode
    finally:
        session.stop()


if __name__ == "__main__":
    sys.exit(main())
