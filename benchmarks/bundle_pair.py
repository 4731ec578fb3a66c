"""An imported model pair in the arm64 bundle, end to end on the emulated arm64 phone.

    python benchmarks/bundle_pair.py [--models PAIR] [--window ID]

Builds (or reuses) the bundle carrying the pair (default: the Whisper test fixture pair,
imported into a temporary folder), deploys it to an emulated Redmi K70 Pro whose arm64
programs run under qemu-aarch64-static, decodes one window with As²d through the bundle
and with target-only on this host, and prints whether the tokens agree and how long each
stage took. The test suite's default run leaves this path to this script
(tests/test_models_whisper_phone.py marks its copy slow); the exit code is 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from as2d_cli.bundle.build import build_bundle, pair_folder  # noqa: E402
from as2d_cli.bundle.deploy import deploy  # noqa: E402
from as2d_cli.bundle.emulated import enable_arm64_bundle  # noqa: E402
from as2d_cli.launch.host import LocalRunner, open_runner  # noqa: E402
from as2d_cli.launch.payload import BundleLauncher  # noqa: E402
from as2d_cli.models.model_pair import load_pair  # noqa: E402
from device_agents.emulator.session import EmulatorSession  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, help="a pair folder (default: the test fixture pair)")
    ap.add_argument("--window", default="dev-read-000")
    a = ap.parse_args()
    pair = a.models
    if pair is None:
        from as2d_cli.models.pair import import_pair

        data = ROOT / "tests" / "data" / "whisper"
        pair = import_pair(
            data / "target", data / "drafter", Path(tempfile.mkdtemp()) / "tiny", ctc=data / "ctc"
        )
    t0 = time.monotonic()
    local = LocalRunner()
    try:
        local.call({"op": "hello"})
        local.call({"op": "load", "models": str(pair)})
        want = local.call(
            {"op": "decode", "window": a.window, "method": "target-only", "events": False}
        )["tokens"]
    finally:
        local.close()
    t1 = time.monotonic()
    loaded = load_pair(pair, check_hashes=False)
    built = build_bundle(pair=loaded)
    t2 = time.monotonic()
    session = EmulatorSession(private_server=True).start()
    try:
        enable_arm64_bundle(session.phone)
        device = session.device()
        deployed = deploy(device, built.archive)
        t3 = time.monotonic()
        launcher = BundleLauncher(deployed, models=deployed.carried(pair_folder(loaded)))
        got = open_runner(device, loaded, launcher=launcher).call(
            {"op": "decode", "window": a.window, "method": "as2d", "events": False}
        )
        t4 = time.monotonic()
    finally:
        session.stop()
    same = got["tokens"] == want
    print(
        f"pair {got.get('pair')}: As²d on the arm64 bundle under qemu {'==' if same else '!='} target-only on "
        f"this host ({len(want)} tokens)"
    )
    print(
        f"host decode {t1 - t0:.1f} s, bundle build {t2 - t1:.1f} s ({'cache hit' if built.cache_hit else 'built'}), "
        f"deploy {t3 - t2:.1f} s, decode through the bundle {t4 - t3:.1f} s"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
