"""An imported Whisper pair on phones: the runner payload (the emulated phone's python3)
and the arm64 bundle under qemu each carry the pair as one self-contained folder, and a
decode there gives the host's tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from as2d_cli.launch.host import LocalRunner, open_runner
from as2d_cli.models.model_pair import load_pair
from as2d_cli.models.pair import import_pair
from device_agents.emulator.python import enable_python

DATA = Path(__file__).parent / "data" / "whisper"
WINDOW = "dev-read-000"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # referenced files (not copied): the phone copy must still be self-contained
    return import_pair(
        DATA / "target",
        DATA / "drafter",
        tmp_path_factory.mktemp("pair") / "tiny",
        ctc=DATA / "ctc",
    )


@pytest.fixture(scope="module")
def host_tokens(pair: Path) -> list[int]:
    local = LocalRunner()
    try:
        local.call({"op": "hello"})
        local.call({"op": "load", "models": str(pair)})
        return local.call(
            {"op": "decode", "window": WINDOW, "method": "target-only", "events": False}
        )["tokens"]
    finally:
        local.close()


def test_the_payload_carries_the_pair_to_the_phone(
    emulated_phone, pair: Path, host_tokens: list[int]
) -> None:  # type: ignore[no-untyped-def]
    enable_python(emulated_phone.phone)
    runner = open_runner(emulated_phone.device(), load_pair(pair))
    got = runner.batch(
        [
            {"op": "decode", "window": WINDOW, "method": m, "events": False, "source": s}
            for m, s in (("as2d", "drafter"), ("as2d", "ctc"), ("sd", "drafter"))
        ]
    )
    assert [r["tokens"] for r in got] == [host_tokens] * 3
    assert {r["pair"] for r in got} == {"tiny"}
    # what went to the phone: the manifest names files inside the pushed folder only
    pushed = [c for c in emulated_phone.phone.history if "models-" in c]
    assert pushed


@pytest.mark.slow  # ~70 s (a second bundle and qemu); benchmarks/bundle_pair.py runs the same path
def test_the_arm64_bundle_carries_the_pair_under_qemu(
    adb_server, pair: Path, host_tokens: list[int]
) -> None:  # type: ignore[no-untyped-def]
    from test_bundle_common import need_qemu, project_snapshot

    from as2d_cli.bundle.build import build_bundle, pair_folder
    from as2d_cli.bundle.deploy import deploy
    from as2d_cli.bundle.emulated import enable_arm64_bundle
    from as2d_cli.launch.payload import BundleLauncher
    from device_agents.emulator.session import EmulatorSession

    need_qemu()
    loaded = load_pair(pair)
    built = build_bundle(project_root=project_snapshot(), pair=loaded)
    rel = pair_folder(loaded)
    assert f"app/{rel}/models.json" in built.manifest["project"]["assets"]
    session = EmulatorSession(private_server=False, adb_port=adb_server.port).start()
    enable_arm64_bundle(session.phone)
    try:
        device = session.device()
        deployed = deploy(device, built.archive)
        launcher = BundleLauncher(deployed, models=deployed.carried(rel))
        runner = open_runner(device, loaded, launcher=launcher)
        got = runner.call({"op": "decode", "window": WINDOW, "method": "as2d", "events": False})
        assert got["tokens"] == host_tokens and got["pair"] == "tiny"
        carried = json.loads(
            device.read_files([f"{deployed.path}/app/{rel}/models.json"])[
                f"{deployed.path}/app/{rel}/models.json"
            ]
        )
        # the phone's copy is self-contained: every file is named inside the pair's folder
        assert not any(
            Path(f).is_absolute() for m in carried["models"].values() for f in m["sha256"]
        )
    finally:
        session.stop()
