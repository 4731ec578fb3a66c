"""Runner conformance: any runner speaking docs/runner-protocol.md against recorded vectors.

Set ``AS2D_RUNNER`` to another runner's command line (it must read commands on stdin and
write events on stdout) to check it; by default the bundled Python runner is checked. The
vectors pin the bundled models' hashes: after retraining, re-record them with
``python training/record_runner_vectors.py``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from as2d_cli.models.model_pair import load_pair

VECTORS = Path(__file__).parent / "data" / "runner" / "vectors.jsonl"
ROOT = Path(__file__).resolve().parents[1]
TERMINAL = {"hello", "loaded", "result", "calibrated", "error", "bye"}
RESULT_FIELDS = {
    "tokens",
    "n_tokens",
    "eos",
    "capped",
    "time_ms",
    "tps",
    "accounting_ns",
    "accounting_ms",
    "summary",
    "margins",
    "method",
    "source",
}


def _load() -> tuple[dict, list[dict]]:
    lines = [json.loads(x) for x in VECTORS.read_text().splitlines() if x.strip()]
    return lines[0], lines[1:]


@pytest.fixture(scope="module")
def runner():
    argv = shlex.split(os.environ.get("AS2D_RUNNER", "")) or [sys.executable, "-m", "native.runner"]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(ROOT), bufsize=1
    )

    def call(cmd: dict) -> list[dict]:
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        events = []
        while True:
            line = proc.stdout.readline()
            assert line, f"the runner closed its output during {cmd.get('op')!r}"
            ev = json.loads(line)
            assert isinstance(ev, dict) and isinstance(ev.get("event"), str), line
            events.append(ev)
            if ev["event"] in TERMINAL:
                return events

    yield call
    if proc.poll() is None:
        proc.stdin.close()  # end of input also ends a runner
        proc.wait(timeout=30)


def test_vectors_match_the_bundled_models() -> None:
    header, vectors = _load()
    assert header["schema"] == "as2d.runner-vectors" and header["version"] == 1
    models = {name: info["sha256"] for name, info in load_pair().manifest["models"].items()}
    assert header["models"] == models, (
        "the bundled models changed since the vectors were recorded: "
        "run python training/record_runner_vectors.py"
    )
    assert len(vectors) >= 10


def test_runner_answers_every_vector(runner) -> None:
    header, vectors = _load()
    hello = runner({"op": "hello"})[-1]
    assert hello["event"] == "hello" and hello["protocol"] == header["protocol"]
    assert hello["version"] == header["protocol_version"]
    assert runner({"op": "load"})[-1]["event"] == "loaded"
    for v in vectors:
        ev = runner(v["command"])[-1]
        exp = v["expect"]
        assert ev["event"] == exp["event"], (v["command"], ev)
        if exp["event"] == "error":
            assert exp["message_contains"] in ev["message"] and "\n" not in ev["message"]
            continue
        assert RESULT_FIELDS <= set(ev), sorted(RESULT_FIELDS - set(ev))
        assert ev["tokens"] == exp["tokens"], (
            f"{v['command']['method']} on {v['command']['window']} diverged"
        )
        a = ev["accounting_ns"]
        assert a["T"] == a["D"] + a["V"] - a["O"] + a["H"] and a["T"] > 0
        rounds = ev.get("rounds")
        if rounds is not None:
            assert sum(r["committed"] for r in rounds) == ev["n_tokens"] - 1
            assert all(r["width"] == r["offered"] + 1 for r in rounds)
    assert runner({"op": "quit"})[-1]["event"] == "bye"
