"""What the phone path costs on the emulated phone with python3 (no hardware):

    python benchmarks/phone_path.py [--window ID] [--max-tokens N] [--reps R]

Starts a private adb server and an emulated Redmi K70 Pro with python3, then measures in
one run: the runner payload's first deploy (push + unpack of code and models) and a warm
check (hash already there); a batch's fixed cost (push commands, start the runner, load
the models, pull events: a `hello`-only batch); and one decode of the same window on the
phone and on this host through pipes, with the ratio of their decode times (the runner is
the same code on the same CPUs, so the ratio should be near 1; the batch cost is what the
file mode adds per call). Everything it starts is stopped by process id at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.launch.host import LocalRunner, open_runner
from as2d_cli.launch.payload import build_payload, choose_launcher
from device_agents.emulator.python import enable_python
from device_agents.emulator.session import EmulatorSession


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", default=None, help="window id (default: the shortest test window)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    wid = a.window or min(load_corpus().split("test"), key=lambda w: w.seconds).id
    t0 = time.monotonic()
    app, models = build_payload()
    print(
        f"payload: code {app.archive.stat().st_size / 1e6:.2f} MB, models {models.archive.stat().st_size / 1e6:.1f} MB "
        f"(built or found in the cache in {time.monotonic() - t0:.1f} s)"
    )
    session = EmulatorSession(private_server=True).start()
    try:
        enable_python(session.phone)
        dev = session.device()
        t0 = time.monotonic()
        cold = choose_launcher(dev)
        t_cold = time.monotonic() - t0
        t0 = time.monotonic()
        warm = choose_launcher(dev)
        t_warm = time.monotonic() - t0
        pushed = [getattr(x, "pushed", ()) for x in (cold, warm)]  # the python payload's
        print(
            f"deploy: first {t_cold:.2f} s (pushed {', '.join(pushed[0]) or 'nothing'}), "
            f"again {t_warm:.2f} s (pushed {', '.join(pushed[1]) or 'nothing'})"
        )
        runner = open_runner(dev, launcher=warm)
        hello = []
        for _ in range(a.reps):
            t0 = time.monotonic()
            runner.call({"op": "hello"})
            hello.append(time.monotonic() - t0)
        cmd = {
            "op": "decode",
            "window": wid,
            "method": "as2d",
            "max_tokens": a.max_tokens,
            "events": False,
        }
        phone = [runner.call(cmd) for _ in range(a.reps)]
    finally:
        session.stop()
    local = LocalRunner()
    try:
        local.call({"op": "load"})
        host = [local.call(cmd) for _ in range(a.reps)]
    finally:
        local.close()
    same = all(r["tokens"] == host[0]["tokens"] for r in phone + host)
    p_ms = statistics.median(r["time_ms"] for r in phone)
    h_ms = statistics.median(r["time_ms"] for r in host)
    print(
        f"batch fixed cost (hello + load + quit, push/pull): median {statistics.median(hello):.2f} s over {a.reps}"
    )
    print(
        f"decode {wid} as2d, {phone[0]['n_tokens']} tokens: phone {p_ms:.1f} ms, host {h_ms:.1f} ms, "
        f"phone/host {p_ms / h_ms:.2f}x (medians of {a.reps}); same tokens: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
