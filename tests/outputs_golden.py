"""One golden evaluation for the output tests (tests/test_outputs_*.py): `as2d eval` on
the committed example traces with the paper's alignment rules, written once per module."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from as2d_cli.cli.main import main

DATA = Path(__file__).parent / "data"


def eval_args(root: Path, results: str = "res", profile: Path | None = None) -> list[str]:
    traces = root / "traces"
    if not traces.is_dir():
        traces.mkdir(parents=True)
        for split in ("dev", "val", "test"):
            shutil.copy(DATA / f"example-{split}.jsonl", traces)
    return [
        "eval",
        "--phone",
        "k70",
        "--profile",
        str(profile or DATA / "example-profile.yaml"),
        "--traces",
        str(traces),
        "--calibrations",
        str(root / "cal"),
        "--results",
        str(root / results),
        "--align",
        "paper",
        "--accept-unvalidated",  # 7 dev windows, not retained on val: the example traces
    ]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()  # what earlier commands printed is not this one's output
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def run_plain(args: list[str]) -> int:
    """A command without capturing its output (module-scoped fixtures have no capsys)."""
    with pytest.raises(SystemExit) as e:
        main(args)
    return int(e.value.code or 0)


def golden_run(root: Path, results: str = "res", profile: Path | None = None) -> Path:
    """A fresh evaluation folder under ``root / results``."""
    before = set((root / results).iterdir()) if (root / results).is_dir() else set()
    assert run_plain(eval_args(root, results, profile)) == 0
    (folder,) = set((root / results).iterdir()) - before
    return folder


def stream_doc(label: str, rtf: float, sensor: bool, n: int = 12) -> dict:
    """A small ``as2d.stream`` document: ``n`` blocks at a steady RTF (below 1 or not),
    with or without a temperature sensor."""
    blocks = [
        {
            "block": i,
            "arrival_s": 4.0 * (i + 1),
            "trailing_tps": 12.0 + 0.1 * i,
            "trailing_prefill_s": 2.0,
            "trailing_rtf": rtf,
            "lag_s": 3.0 + 0.01 * i,
            "queue_wait_s": 0.1 * (i % 3),
        }
        for i in range(n)
    ]
    return {
        "schema": "as2d.stream",
        "version": 2,
        "status": "complete",
        "label": label,
        "measurement": {"device": {"name": "local"}},
        "settings": {"block_s": 4.0, "context_s": 12.0, "source_lifetime": "arrival"},
        "stream": {"drained_s": 4.0 * n + 2 if sensor else None},
        "temperature": {
            "sensor": "battery" if sensor else None,
            "samples": [[float(t), 30.0 + 0.1 * t] for t in range(0, 4 * n, 4)] if sensor else [],
        },
        "metrics": {
            "mean_encoder_s": 0.7,
            "mean_prefill_s": 2.2,
            "mean_decode_s": 0.7,
            "mean_processing_s": 3.6,
            "active_rtf": rtf,
            "resource_rtf": rtf + 0.05,
            "decode_tps": 13.9,
            "p95_lag_s": 4.7,
            "final_lag_s": 4.1,
            "max_queue_wait_s": 0.2,
            "final_queue_wait_s": 0.1,
            "first_temp_c": 30.0 if sensor else None,
            "max_temp_c": 34.4 if sensor else None,
            "capped": 0,
            "keeps_pace": rtf < 1,
        },
        "blocks": blocks,
    }
