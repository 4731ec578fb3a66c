"""`as2d stream` through the host's device path: the local runner process (Ctrl-C keeps
the blocks measured and writes the files) and the emulated phone (the runner payload
started by the phone's python3, the corpus windows pushed with it, exact against
target-only there). Virtual clocks skip the waits for arrivals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from as2d_cli.launch.host import open_runner
from as2d_cli.stream.recording import Recording, corpus_recording
from as2d_cli.stream.results import write_stream
from as2d_cli.stream.run import StreamHooks, run_stream, settings_for
from device_agents.measurement import prepare

SETTINGS = settings_for(
    "as2d",
    budget=7,
    block_s=2.0,
    context_s=4.0,
    lifetime="consumption",
    source="drafter",
    check=True,
    clock="virtual",
)


def _recording(seconds: float) -> Recording:
    rec = corpus_recording(seconds / 60)
    assert rec.language == "en" and rec.windows
    return rec


def _write(folder: Path, outcome: Any, m: Any) -> dict:
    return write_stream(
        folder,
        outcome,
        settings=SETTINGS,
        recording={},
        measurement=m.record(),
        command="as2d stream",
        label="As²d (drafter, b7)",
    )


def test_ctrl_c_keeps_the_blocks_measured(tmp_path: Path) -> None:
    m = prepare("local")

    def interrupt_after_two(block: dict) -> None:
        if block["block"] == 1:
            raise KeyboardInterrupt  # as Ctrl-C would, in the host's main thread

    outcome = run_stream(
        m,
        _recording(12.0),
        SETTINGS,
        tmp_path,
        open_runner=open_runner,
        hooks=StreamHooks(on_block=interrupt_after_two),
    )
    assert outcome.interrupted and outcome.streamed is None
    assert [b["block"] for b in outcome.blocks] == [0, 1]
    raw = [json.loads(x) for x in (tmp_path / "blocks.jsonl").read_text().splitlines()]
    assert [b["block"] for b in raw] == [0, 1]  # appended as each arrived
    doc = _write(tmp_path, outcome, m)
    assert doc["status"] == "interrupted" and len(doc["blocks"]) == 2
    assert doc["metrics"]["resource_rtf"] is None  # the drain was never measured
    assert "status interrupted" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "blocks.csv").is_file() and (tmp_path / "stream.png").is_file()


@pytest.fixture(scope="module")
def py_phone(emulated_phone):  # type: ignore[no-untyped-def]
    from device_agents.emulator.python import enable_python

    enable_python(emulated_phone.phone)
    return emulated_phone


def test_a_stream_on_the_emulated_phone_is_exact_and_complete(py_phone, tmp_path: Path) -> None:
    from as2d_cli.launch.payload import choose_launcher

    m = prepare(py_phone.serial, adb_port=py_phone.adb_port)
    m = dataclasses.replace(m, gate=dataclasses.replace(m.gate, rest_s=0.0, interval_s=0.05))
    launcher = choose_launcher(m.device)

    def on_phone(device: Any, models: Any, **kw: Any) -> Any:
        return open_runner(device, models, launcher=launcher, **kw)

    outcome = run_stream(m, _recording(4.0), SETTINGS, tmp_path, open_runner=on_phone)
    assert outcome.stopped is None and outcome.streamed is not None
    assert [b["block"] for b in outcome.blocks] == [0, 1]
    assert [c["equal"] for c in outcome.checks] == [True, True]
    assert outcome.start is not None and outcome.start["source_mode"] in ("process", "thread")
    assert outcome.gate is not None and outcome.gate["passed"]
    doc = _write(tmp_path, outcome, m)
    assert doc["status"] == "complete" and doc["check"] == {
        "blocks": 2,
        "equal": 2,
        "first_divergent_block": None,
        "first_divergence": None,
    }
    assert doc["temperature"]["sensor"] == "battery"  # the phone's, as the paper reports
    assert doc["metrics"]["first_temp_c"] is not None


def test_a_host_audio_file_streams_on_the_emulated_phone(py_phone, tmp_path: Path) -> None:
    """``--audio FILE`` on a phone: the file is pushed with the batch and read there."""
    import numpy as np
    import soundfile as sf

    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.launch.payload import choose_launcher
    from as2d_cli.stream.recording import file_recording

    rec = _recording(4.0)
    corpus = load_corpus()
    samples = np.concatenate([corpus.get(w).load_audio() for w in rec.windows])[: 4 * 16_000]
    audio = tmp_path / "my recording.wav"
    sf.write(str(audio), samples, 16_000)
    m = prepare(py_phone.serial, adb_port=py_phone.adb_port)
    m = dataclasses.replace(m, gate=dataclasses.replace(m.gate, rest_s=0.0, interval_s=0.05))
    launcher = choose_launcher(m.device)

    def on_phone(device: Any, models: Any, **kw: Any) -> Any:
        return open_runner(device, models, launcher=launcher, **kw)

    outcome = run_stream(m, file_recording(audio), SETTINGS, tmp_path, open_runner=on_phone)
    assert outcome.stopped is None and outcome.streamed is not None
    assert [b["block"] for b in outcome.blocks] == [0, 1]
    assert [c["equal"] for c in outcome.checks] == [True, True]


@pytest.mark.slow
def test_a_core_going_offline_mid_stream_stops_it_and_keeps_every_block(
    make_emulated_phone, tmp_path: Path
) -> None:
    """A 40 s stream paced in real time on a fresh emulated phone; CPU7 goes offline 25 s
    after the runner payload is on the phone (the gate and loading take a few seconds), and
    its frequency ceiling drops before that: the drop is recorded, the core stops the
    stream with its reason (the phone's runner ends before its next block), every block the
    phone's run finished is kept, those after the trip marked degraded."""
    from as2d_cli.launch.payload import choose_launcher
    from device_agents.emulator.python import enable_python

    session = make_emulated_phone()
    enable_python(session.phone)
    m = prepare(session.serial, adb_port=session.adb_port)
    m = dataclasses.replace(m, gate=dataclasses.replace(m.gate, rest_s=0.0, interval_s=0.05))
    launcher = choose_launcher(m.device)
    session.phone.schedule(15, lambda: session.phone.set_ceiling(7, 1_200_000))
    session.phone.schedule(25, lambda: session.phone.set_core_online(7, False))

    def on_phone(device: Any, models: Any, **kw: Any) -> Any:
        return open_runner(device, models, launcher=launcher, **kw)

    real = {**SETTINGS, "clock": "real", "check": False}
    outcome = run_stream(m, _recording(40.0), real, tmp_path, open_runner=on_phone)
    assert outcome.stopped is not None and "CPU7 went offline" in outcome.stopped
    assert 0 < len(outcome.blocks) < 20  # stopped early; every block it finished is kept
    ceilings = {s["ceiling_khz"].get(7) for s in outcome.monitor["samples"]}
    assert 1_200_000 in ceilings  # the drop is in the monitor's record
    doc = _write(tmp_path, outcome, m)
    assert doc["status"] == "stopped" and doc["monitor"]["failure"]["kind"] == "core_offline"
    assert doc["metrics"] is None or doc["metrics"]["keeps_pace"] is None  # not judged
