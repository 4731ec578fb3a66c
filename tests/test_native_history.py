"""A deployment's history setting reaches the native runner through MethodSpec's wire form,
the runner commits target-only's tokens with it, and a native run of the history alone —
no producer, so nothing depends on timing — makes exactly the rounds its replay prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d_cli.engine.methods import HISTORY, MethodSpec
from as2d_cli.evaluate.native import native_trace, replay_native
from as2d_cli.evaluate.native_record import run_spec
from as2d_cli.evaluate.native_runs import native_commands
from as2d_cli.formats.deployment import Deployment, ProfileRef, as2d_settings
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.launch.host import LocalRunner, default_cores
from as2d_cli.replay.driver import Prepared, replay_window

# A development window whose output repeats itself (the replay of the bundled traces finds
# history candidates accepted there).
WINDOW = "dev-meeting-002"
PROFILE = (
    Path(__file__).resolve().parents[1] / "as2d_cli" / "assets" / "profiles" / "k70.profile.yaml"
)


@pytest.fixture(scope="module")
def runner():
    tc, pc = default_cores()
    r = LocalRunner()
    r.call({"op": "hello"})
    r.call({"op": "load", "target_cores": tc, "producer_cores": pc})
    yield r
    r.close()


def _decode(r: LocalRunner, command: dict) -> dict:
    return r.call({"op": "decode", "window": WINDOW, **command})


def test_a_deployment_with_history_runs_natively_with_it(runner) -> None:
    ref = _decode(runner, {"method": "target-only"})
    dep = Deployment(
        "drafter", 7, 0.4, 8, ProfileRef("p.yaml", "0" * 64), align="suffix", history=True
    )
    res = _decode(runner, native_commands(dep, 24)["as2d"])
    assert res["tokens"] == ref["tokens"] and res["history"] is True
    assert run_spec(res) == MethodSpec("as2d", **as2d_settings(dep))  # what the replay prices
    assert res["summary"]["history_proposed"] >= res["summary"]["history_accepted"] >= 0


def test_history_alone_natively_makes_the_rounds_its_replay_prices(runner) -> None:
    ref = _decode(runner, {"method": "target-only"})
    res = _decode(runner, MethodSpec("as2d", budget=7, source=HISTORY).to_wire())
    assert res["tokens"] == ref["tokens"] and res["source"] == HISTORY
    eos = int(res["tokens"][-1]) if res["eos"] else -1
    w = native_trace(WINDOW, "meeting", res, eos_id=eos, audio_s=9.6)
    profile = load_profile(PROFILE)
    tps, _ = replay_native(profile, w, res)  # no producer to rebuild: priced as run
    assert tps is not None and tps > 0
    replayed = replay_window(w, Prepared(profile, run_spec(res)), keep_rounds=True)

    def rounds(rs):
        return [(r["width"], r["offered"], r["accepted"], r["from_history"]) for r in rs]

    assert rounds(res["rounds"]) == rounds(
        {"width": r.width, "offered": r.offered, "accepted": r.accepted}
        | {"from_history": r.from_history}
        for r in replayed.round_records
    )
    assert any(r["from_history"] and r["accepted"] for r in res["rounds"])  # the test can tell
