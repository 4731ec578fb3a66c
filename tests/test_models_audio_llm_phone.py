"""An audio-LLM pair on a phone: the runner payload (the emulated phone's python3) carries
the pair — a Whisper drafter's own tokenizer included — and the prompt settings, and a
decode there gives the host's tokens for every method."""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d_cli.launch.host import LocalRunner, open_runner
from as2d_cli.models.model_pair import load_pair
from as2d_cli.models.pair import import_pair
from as2d_cli.models.prompting import PromptSpec
from device_agents.emulator.python import enable_python

DATA = Path(__file__).parent / "data"
WINDOW = "dev-read-000"
PROMPT = PromptSpec("answer", question="What is the first word spoken?")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_pair(
        DATA / "audio_llm" / "target",
        DATA / "whisper" / "drafter",
        tmp_path_factory.mktemp("pair") / "cross",
        ctc=DATA / "whisper" / "ctc",
    )


def test_the_payload_carries_an_audio_llm_pair_and_its_prompt(emulated_phone, pair: Path) -> None:  # type: ignore[no-untyped-def]
    local = LocalRunner()
    try:
        local.call({"op": "hello"})
        local.call({"op": "load", "models": str(pair), "prompt": PROMPT.to_wire()})
        want = local.call(
            {
                "op": "decode",
                "window": WINDOW,
                "method": "target-only",
                "events": False,
                "max_tokens": 24,
            }
        )
    finally:
        local.close()
    enable_python(emulated_phone.phone)
    runner = open_runner(emulated_phone.device(), load_pair(pair, prompt=PROMPT))
    got = runner.batch(
        [
            {
                "op": "decode",
                "window": WINDOW,
                "method": m,
                "events": False,
                "source": s,
                "max_tokens": 24,
            }
            for m, s in (
                ("target-only", "drafter"),
                ("as2d", "drafter"),
                ("as2d", "ctc"),
                ("sd", "drafter"),
            )
        ]
    )
    assert [r["tokens"] for r in got] == [want["tokens"]] * 4
    assert {r["question"] for r in got} == {PROMPT.question}
    assert {r["prompt_sha256"] for r in got} == {want["prompt_sha256"]} and want["prompt_sha256"]
