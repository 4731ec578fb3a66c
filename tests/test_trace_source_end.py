"""The trace check: a source ends at its own end (nothing after its EOS, and an end marked
only on an EOS token), refused in one line naming the window and the key."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from as2d_cli.errors import FormatError
from as2d_cli.formats.trace_io import load_traces

DEV = Path(__file__).resolve().parents[1] / "as2d_cli" / "assets" / "traces" / "dev.jsonl.gz"


def _with(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    lines = gzip.open(DEV, "rt").read().splitlines()
    doc = json.loads(lines[1])
    edit(doc["sources"]["drafter"], json.loads(lines[0])["eos_id"])
    out = tmp_path / "t.jsonl"
    out.write_text("\n".join([lines[0], json.dumps(doc), *lines[2:]]) + "\n")
    return out


def test_tokens_after_the_sources_eos_are_refused(tmp_path: Path) -> None:
    def after_eos(s: dict, eos: int) -> None:
        s["tokens"] += [5, 6]
        s["confidences"] += [0.5, 0.5]

    with pytest.raises(
        FormatError,
        match=r"window dev-read-000\): key sources\.drafter\.tokens\[\d+\]: a token after the source's own EOS",
    ):
        load_traces(_with(tmp_path, after_eos))


def test_an_end_marked_on_a_token_that_is_not_eos_is_refused(tmp_path: Path) -> None:
    def not_eos(s: dict, eos: int) -> None:
        s["tokens"] = s["tokens"][:-1]
        s["confidences"] = s["confidences"][:-1]
        s["eos"] = True

    with pytest.raises(
        FormatError, match=r"key sources\.drafter\.eos: is true but the last token is"
    ):
        load_traces(_with(tmp_path, not_eos))


def test_a_source_stopped_at_its_cap_is_fine(tmp_path: Path) -> None:
    def capped(s: dict, eos: int) -> None:
        s["tokens"] = s["tokens"][:10]
        s["confidences"] = s["confidences"][:10]
        s["eos"] = False

    assert load_traces(_with(tmp_path, capped)).windows
