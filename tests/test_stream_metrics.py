"""The D.6.2 metrics on constructed streams whose figures are worked out by hand."""

from __future__ import annotations

import pytest

from as2d_cli.stream.metrics import BlockTiming, block_metrics, quantile, run_metrics

# block, audio, arrival, start, encoder, prefill, decode, finish, body tokens, capped
ROWS = [
    (0, 4.0, 4.0, 4.0, 0.5, 1.0, 1.0, 6.6, 10, False),  # p 2.6, lag 2.6, wait 0
    (1, 4.0, 8.0, 8.0, 0.5, 2.0, 3.0, 13.6, 20, False),  # p 5.6, lag 5.6, wait 0
    (2, 4.0, 12.0, 13.6, 0.5, 1.0, 1.0, 16.2, 5, True),  # queued behind 1: wait 1.6, lag 4.2
    (3, 4.0, 16.0, 16.2, 0.5, 1.0, 2.0, 19.8, 15, False),  # wait 0.2, p 3.6, lag 3.8
    (4, 4.0, 20.0, 20.0, 0.5, 1.0, 0.5, 22.1, 0, False),  # p 2.1, lag 2.1
    (5, 4.0, 24.0, 24.0, 0.5, 1.0, 1.5, 27.0, 10, False),  # p 3.0, lag 3.0
]
BLOCKS = [BlockTiming(*r) for r in ROWS]


def test_per_block_figures() -> None:
    m = block_metrics(BLOCKS)
    assert [round(b.queue_wait_s, 9) for b in m] == [0, 0, 1.6, 0.2, 0, 0]
    assert [round(b.processing_s, 9) for b in m] == [2.6, 5.6, 2.6, 3.6, 2.1, 3.0]
    assert [round(b.lag_s, 9) for b in m] == [2.6, 5.6, 4.2, 3.8, 2.1, 3.0]
    assert [round(b.host_s, 9) for b in m] == [0.1, 0.1, 0.1, 0.1, 0.1, 0.0]
    # trailing window of block 1 = blocks 0-1: 30 tokens / 4 s decoding; prefill (1+2)/2;
    # processing (2.6 + 5.6) / 8 s of audio
    assert m[1].trailing_tps == pytest.approx(7.5)
    assert m[1].trailing_prefill_s == pytest.approx(1.5)
    assert m[1].trailing_rtf == pytest.approx(1.025)


def test_run_figures() -> None:
    r = run_metrics(BLOCKS, block_s=4.0, drained_s=27.5, temperatures_c=[30.0, 31.5, 33.0, 32.0])
    assert r.blocks == 6 and r.audio_s == 24.0
    assert r.mean_encoder_s == pytest.approx(0.5)
    assert r.mean_prefill_s == pytest.approx(7 / 6)
    assert r.mean_decode_s == pytest.approx(1.5)
    assert r.mean_processing_s == pytest.approx(3.25)  # 19.5 s over 6 blocks
    assert r.active_rtf == pytest.approx(19.5 / 24)
    assert r.resource_rtf == pytest.approx(27.5 / 24)
    assert r.decode_tps == pytest.approx(60 / 9)
    # lags sorted 2.1 2.6 3.0 3.8 4.2 5.6: position 5 x 0.95 = 4.75 -> 4.2 + 0.75 x 1.4
    assert r.p95_lag_s == pytest.approx(5.25)
    assert r.final_lag_s == pytest.approx(3.0)
    assert r.max_queue_wait_s == pytest.approx(1.6)
    assert r.final_queue_wait_s == pytest.approx(0.0)
    assert r.capped == 1
    assert (r.first_temp_c, r.max_temp_c) == (30.0, 33.0)
    # the last third is 2 blocks: too few for a trend, so keeping pace is undecided
    assert r.lag_trend_s is None and r.keeps_pace is None


def _paced(processing: list[float], block_s: float = 4.0) -> list[BlockTiming]:
    """Blocks arriving every block_s, each processed serially for the given time."""
    out, free = [], 0.0
    for i, p in enumerate(processing):
        arrival = (i + 1) * block_s
        start = max(arrival, free)
        free = start + p
        out.append(BlockTiming(i, block_s, arrival, start, 0.0, 0.0, p, free, 1, False))
    return out


def test_keeps_pace_when_lag_is_flat() -> None:
    # 9 blocks of 3 s each: every lag 3 s; last third (blocks 6-8) flat
    r = run_metrics(_paced([3.0] * 9), block_s=4.0, drained_s=39.0)
    assert r.lag_trend_s == pytest.approx(0.0)
    assert r.keeps_pace is True
    assert r.max_queue_wait_s == 0.0


def test_backlog_does_not_keep_pace() -> None:
    # 3 s blocks, then 6 s blocks from block 6 on: lags 6, 8, 10 at arrivals 28, 32, 36 ->
    # slope 0.5 s/s over 8 s = a 4 s rise, not below the 4 s interval; mean (18 + 18) / 9 = 4
    r = run_metrics(_paced([3.0] * 6 + [6.0] * 3), block_s=4.0, drained_s=None)
    assert r.lag_trend_s == pytest.approx(4.0)
    assert r.mean_processing_s == pytest.approx(4.0)
    assert r.keeps_pace is False
    assert r.resource_rtf is None
    assert r.final_queue_wait_s == pytest.approx(4.0)  # block 8 waits 2 + 2 s


def test_mean_processing_decides_even_with_flat_lag() -> None:
    # every block takes 4.5 s > 4 s interval: lag grows 0.5 s per block (rise 1 s < 4 s),
    # but the mean processing alone already fails
    r = run_metrics(_paced([4.5] * 9), block_s=4.0, drained_s=None)
    assert r.lag_trend_s == pytest.approx(1.0)
    assert r.keeps_pace is False


def test_quantile_is_linear_interpolation() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([5.0], 0.95) == 5.0
    assert quantile([0.0, 10.0], 0.95) == pytest.approx(9.5)


def _outcome():
    from as2d_cli.stream.run import StreamOutcome

    blocks = []
    for r in ROWS:
        b = BlockTiming(*r)
        n = b.body_tokens
        blocks.append(
            {
                "block": b.block,
                "epoch": b.block // 3,
                "audio_start_s": b.arrival_s - b.audio_s,
                "audio_end_s": b.arrival_s,
                "arrival_s": b.arrival_s,
                "start_s": b.start_s,
                "encoder_s": b.encoder_s,
                "prefill_s": b.prefill_s,
                "decode_s": b.decode_s,
                "finish_s": b.finish_s,
                # capped: no EOS; otherwise the body and EOS (2)
                "tokens": [5] * n if b.capped else [5] * n + [2],
                "eos": not b.capped,
                "capped": b.capped,
                "summary": {"proposed": 4, "accepted": 3},
                "text": "x",
            }
        )
    monitor = {
        "samples": [
            {"t_s": 0.0, "wall_time": 100.0 + t, "battery_temp_c": c, "thermal_c": {}}
            for t, c in ((0, 30.0), (10, 33.0), (20, 32.0))
        ]
    }
    return StreamOutcome(
        start={"wall_time": 100.0, "warmup_s": 1.5, "blocks": 6},
        blocks=blocks,
        checks=[{"block": i, "equal": True, "first_divergence": None} for i in range(6)],
        streamed={"end_s": 27.0, "drained_s": 27.5, "epochs": []},
        monitor=monitor,
    )


GOLDEN = """\
# Sustained stream: As²d (drafter, b7)

Pixel, 6 blocks of 4 s, context 12 s, source lifetime arrival; status complete.
Recording: 6 corpus window(s) joined (test-read-000 … test-read-005; en read), 24 s.

| Metric                                     | As²d (drafter, b7) |
|--------------------------------------------|--------------------|
| Mean encoder / prefill / decode (s)        | 0.50 / 1.17 / 1.50 |
| Mean complete block processing (s)         | 3.25 |
| Active / resource RTF                      | 0.812 / 1.146 |
| Decode throughput (tokens/s)               | 6.67 |
| p95 completion lag (s)                     | 5.25 |
| Final completion lag (s)                   | 3.00 |
| Maximum / final queue wait (s)             | 1.60 / 0.00 |
| First / maximum temperature (battery) (°C) | 30.0 / 33.0 |
| Capped outputs                             | 1 |
| Keeps pace                                 | undecided (fewer than 3 blocks in the last third) |
| Blocks equal to target-only (--check)      | 6/6 |

Loading and warm-up (1.50 s) precede the stream.
"""


def test_the_files_and_the_table(tmp_path) -> None:
    import json

    import pandas as pd

    from as2d_cli.errors import UserError
    from as2d_cli.stream.results import CSV_COLUMNS, write_stream

    settings = {"block_s": 4.0, "context_s": 12.0, "source_lifetime": "arrival"}
    kw = dict(
        settings=settings,
        recording={
            "kind": "corpus",
            "language": "en",
            "setting": "read",
            "windows": [f"test-read-{i:03d}" for i in range(6)],
            "seconds": 24.0,
        },
        measurement={"device": {"name": "Pixel"}},
        command="as2d stream",
        label="As²d (drafter, b7)",
    )
    doc = write_stream(tmp_path, _outcome(), **kw)
    assert (tmp_path / "table.md").read_text() == GOLDEN
    stored = json.loads((tmp_path / "stream.json").read_text())
    assert (stored["schema"], stored["version"], stored["status"]) == ("as2d.stream", 2, "complete")
    assert stored["metrics"] == doc["metrics"] and stored["metrics"]["p95_lag_s"] == pytest.approx(
        5.25
    )
    assert stored["temperature"]["samples"] == [[0, 30.0], [10, 33.0], [20, 32.0]]
    csv = pd.read_csv(tmp_path / "blocks.csv")
    assert list(csv.columns) == list(CSV_COLUMNS) and len(csv) == 6
    assert csv["lag_s"].round(9).tolist() == [2.6, 5.6, 4.2, 3.8, 2.1, 3.0]
    assert csv["body_tokens"].tolist() == [10, 20, 5, 15, 0, 10]
    assert (tmp_path / "stream.png").stat().st_size > 0
    with pytest.raises(UserError, match="never overwritten"):
        write_stream(tmp_path, _outcome(), **kw)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--block-s", "4", "--context-s", "2"], "--context-s 2 is shorter than --block-s 4"),
        (["--minutes", "500"], "--minutes 500: the bundled corpus holds"),
        (["--method", "sd", "--budget", "3"], "method sd has none"),
        (["--method", "asp"], "'asp' is not one of as2d, target-only, sd"),
    ],
)
def test_bad_input_is_one_line(args, message, tmp_path, capsys, monkeypatch) -> None:
    from as2d_cli.cli.main import main

    monkeypatch.setenv("COLUMNS", "250")
    with pytest.raises(SystemExit) as exc:
        main(["stream", "--phone", "local", "--out", str(tmp_path / "r"), *args])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_audio_that_is_not_16_khz_mono_is_refused_before_anything_runs(
    tmp_path, capsys, monkeypatch
) -> None:
    import numpy as np
    import soundfile as sf

    from as2d_cli.cli.main import main

    monkeypatch.setenv("COLUMNS", "250")
    wav = tmp_path / "talk.wav"
    sf.write(wav, np.zeros((8000, 2), dtype=np.float32), 8000)
    with pytest.raises(SystemExit) as exc:
        main(["stream", "--audio", str(wav), "--out", str(tmp_path / "r")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "is 8000 Hz with 2 channel(s)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
