"""A stream's files (docs/formats.md, "as2d.stream"): ``blocks.csv`` (one row per block),
``stream.json`` (the whole record), ``table.md`` (Table 16's rows) and ``stream.png``
(Figure 9's panels). Written once, into the run's own fresh folder, also after Ctrl-C or
a stop: every block measured is kept.

Complete, or visibly not: from the moment the folder is made an ``INCOMPLETE`` note says
it is no stream result yet (:func:`mark_incomplete`); each file is written whole
(atomically), and ``stream.json`` last, after the note is gone. A folder without
``stream.json`` — a killed run leaves ``blocks.jsonl`` and the note — is never a stream."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from as2d_cli.formats import registry
from as2d_cli.formats.common import INCOMPLETE, atomic_path, environment, utc_now, write_atomic
from as2d_cli.formats.results import to_jsonable
from as2d_cli.stream.metrics import (
    BlockMetrics,
    BlockTiming,
    RunMetrics,
    block_metrics,
    run_metrics,
)

SCHEMA, VERSION = registry.name_version("as2d.stream")
# Version history: 1 — first release; 2 — blocks that ran after the monitor tripped are
# marked (each block's ``degraded``), the run's figures leave them out
# (``metrics.degraded_blocks``) and keeping pace is not judged then
# (``metrics.conditions_held``).

CSV_COLUMNS = (
    "block",
    "epoch",
    "audio_start_s",
    "audio_end_s",
    "arrival_s",
    "queued",
    "start_s",
    "queue_wait_s",
    "encoder_s",
    "prefill_s",
    "decode_s",
    "host_s",
    "processing_s",
    "finish_s",
    "lag_s",
    "committed_tokens",
    "body_tokens",
    "eos",
    "capped",
    "context_audio_s",
    "context_tokens",
    "ready_at_start",
    "proposed",
    "accepted",
    "equal_to_target_only",
    "degraded",
    "text",
)


def timings(blocks: Sequence[dict[str, Any]], eos: int | None = None) -> list[BlockTiming]:
    """The metric inputs of the runner's block records."""
    return [
        BlockTiming(
            b["block"],
            b["audio_end_s"] - b["audio_start_s"],
            b["arrival_s"],
            b["start_s"],
            b["encoder_s"],
            b["prefill_s"],
            b["decode_s"],
            b["finish_s"],
            body_tokens(b),
            bool(b["capped"]),
        )
        for b in blocks
    ]


def body_tokens(b: dict[str, Any]) -> int:
    """Committed tokens other than the stop token (EOS ends an output that reached it)."""
    return len(b["tokens"]) - (1 if b["eos"] else 0)


def temperature(monitor: dict[str, Any] | None, start_wall: float | None) -> dict[str, Any]:
    """The device's temperature over stream time: the battery sensor where there is one,
    else the first CPU thermal zone (the paper reports the battery's)."""
    samples = (monitor or {}).get("samples") or []
    sensor: str | None = None
    if any(s.get("battery_temp_c") is not None for s in samples):
        sensor = "battery"
    else:
        zones = sorted({z for s in samples for z in (s.get("thermal_c") or {})})
        cpu = [z for z in zones if "cpu" in z.lower() or "pkg" in z.lower() or "soc" in z.lower()]
        sensor = (cpu or zones or [None])[0]
    points: list[list[float]] = []
    if sensor is not None:
        for s in samples:
            c = (
                s.get("battery_temp_c")
                if sensor == "battery"
                else (s.get("thermal_c") or {}).get(sensor)
            )
            if c is not None:
                t = s["wall_time"] - start_wall if start_wall is not None else s["t_s"]
                points.append([round(t, 3), float(c)])
    return {"sensor": sensor, "samples": points, "clock": "stream" if start_wall else "monitor"}


def summarize(
    outcome: Any, settings: dict[str, Any]
) -> tuple[list[BlockMetrics], RunMetrics | None, dict[str, Any]]:
    """Per-block metrics of every block, and the run's metrics over the blocks measured
    under the gated conditions (those before ``outcome.degraded_from``), with the
    temperature series of a stream's outcome."""
    start_wall = (outcome.start or {}).get("wall_time")
    temp = temperature(outcome.monitor, start_wall)
    if not outcome.blocks:
        return [], None, temp
    tim = timings(outcome.blocks)
    cut = getattr(outcome, "degraded_from", None)
    clean = tim if cut is None else tim[:cut]
    held = bool(getattr(outcome, "conditions_held", True))
    drained = (outcome.streamed or {}).get("drained_s") if held else None
    run = (
        run_metrics(
            clean,
            block_s=float(settings["block_s"]),
            drained_s=drained,
            temperatures_c=[c for _, c in temp["samples"]],
            degraded_blocks=len(tim) - len(clean),
            conditions_held=held,
        )
        if clean
        else None
    )
    return block_metrics(tim), run, temp


def check_summary(checks: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    if not checks:
        return None
    bad = [c for c in checks if not c["equal"]]
    return {
        "blocks": len(checks),
        "equal": len(checks) - len(bad),
        "first_divergent_block": bad[0]["block"] if bad else None,
        "first_divergence": bad[0]["first_divergence"] if bad else None,
    }


def mark_incomplete(folder: Path, command: str) -> None:
    """The INCOMPLETE note of a stream folder being written (``command``: what made it)."""
    text = (
        f"{folder} is incomplete: `as2d stream` began it at {utc_now()} and has not written "
        "stream.json.\n"
        "If that command is no longer running it was killed: blocks.jsonl holds the blocks "
        "it finished, as the runner reported them, but the stream's files (stream.json, "
        "blocks.csv, table.md, stream.png) were not written, and nothing reads this folder "
        "as a stream.\n"
        f"Run `{command}` again (it writes a new folder) and delete this one.\n"
        "(Ctrl-C leaves no such folder: it writes the files from the blocks so far, with "
        "status `interrupted`.)\n"
    )
    write_atomic(Path(folder) / INCOMPLETE, text.encode("utf-8"), force=True)


def write_stream(
    folder: Path,
    outcome: Any,
    *,
    settings: dict[str, Any],
    recording: dict[str, Any],
    measurement: dict[str, Any],
    command: str,
    label: str,
    figure_format: str = "png",
) -> dict[str, Any]:
    """Write the four files, stream.json last (its presence says the others are whole),
    and remove the INCOMPLETE note; return stream.json's content. ``figure_format``:
    stream.png, .pdf or .svg."""
    per, run, temp = summarize(outcome, settings)
    checks = {c["block"]: c for c in outcome.checks}
    status = "interrupted" if outcome.interrupted else "stopped" if outcome.stopped else "complete"
    cut = getattr(outcome, "degraded_from", None)
    blocks = []
    for i, (b, bm) in enumerate(zip(outcome.blocks, per)):
        c = checks.get(b["block"])
        blocks.append(
            {
                **b,
                **{k: v for k, v in bm.__dict__.items() if k != "block"},
                "body_tokens": body_tokens(b),
                "equal_to_target_only": None if c is None else c["equal"],
                "first_divergence": None if c is None else c["first_divergence"],
                "degraded": cut is not None and i >= cut,
            }
        )
    streamed = outcome.streamed or {}
    doc = {
        "schema": SCHEMA,
        "version": VERSION,
        "status": status,
        "stopped": outcome.stopped,
        "command": command,
        "label": label,
        "environment": environment(measurement.get("device")),
        "measurement": measurement,
        "gate": outcome.gate,
        "settings": settings,
        "recording": recording,
        "stream": {
            **(outcome.start or {}),
            "end_s": streamed.get("end_s"),
            "drained_s": streamed.get("drained_s"),
            "source_mode": streamed.get("source_mode", (outcome.start or {}).get("source_mode")),
            "source_error": streamed.get("source_error"),
            "epochs": streamed.get("epochs"),
        },
        "metrics": None if run is None else run.to_dict(),
        "check": check_summary(outcome.checks),
        "temperature": temp,
        "blocks": blocks,
        "monitor": outcome.monitor,
    }
    doc = to_jsonable(doc, "stream.json")
    _csv(folder / "blocks.csv", blocks)
    write_atomic(folder / "table.md", table(doc).encode())
    if blocks:
        from as2d_cli.stream.plot import plot_stream

        with atomic_path(folder / f"stream.{figure_format}") as tmp:
            plot_stream(doc, tmp)
    # The note goes first, stream.json last: a kill in between leaves a folder without
    # stream.json, which is no stream either.
    (Path(folder) / INCOMPLETE).unlink(missing_ok=True)
    write_atomic(folder / "stream.json", (json.dumps(doc, indent=1) + "\n").encode())
    return doc


def _csv(path: Path, blocks: Sequence[dict[str, Any]]) -> None:
    import pandas as pd

    rows = []
    for b in blocks:
        s = b.get("summary") or {}
        row = {
            **b,
            "committed_tokens": len(b["tokens"]),
            "proposed": s.get("proposed"),
            "accepted": s.get("accepted"),
        }
        rows.append({c: row.get(c) for c in CSV_COLUMNS})
    write_atomic(path, pd.DataFrame(rows, columns=list(CSV_COLUMNS)).to_csv(index=False).encode())


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _recording_line(rec: dict[str, Any]) -> str:
    """Which audio the stream was (the corpus windows joined, or the file)."""
    if rec.get("kind") == "corpus" and rec.get("windows"):
        w = rec["windows"]
        span = w[0] if len(w) == 1 else f"{w[0]} … {w[-1]}"
        return (
            f"Recording: {len(w)} corpus window(s) joined ({span}; {rec.get('language')} "
            f"{rec.get('setting')}), {rec.get('seconds'):g} s.\n"
        )
    if rec.get("kind") == "file":
        return f"Recording: {rec.get('path')}.\n"
    return ""


def table(doc: dict[str, Any]) -> str:
    """Table 16's rows for one run (Markdown)."""
    m = doc.get("metrics")
    st = doc["stream"]
    head = (
        f"# Sustained stream: {doc['label']}\n\n"
        f"{doc['measurement']['device']['name']}, {len(doc['blocks'])} blocks of "
        f"{doc['settings']['block_s']:g} s, context {doc['settings']['context_s']:g} s, "
        f"source lifetime {doc['settings']['source_lifetime']}; status {doc['status']}"
        + (f" ({doc['stopped']})" if doc.get("stopped") else "")
        + ".\n"
        + _recording_line(doc.get("recording") or {})
        + "\n"
    )
    degraded = sum(1 for b in doc["blocks"] if b.get("degraded"))
    if m is None:
        if degraded:
            return head + (
                f"No block finished before the monitor tripped ({degraded} degraded block(s) "
                "kept): nothing to report.\n"
            )
        return head + "No block finished: nothing to report.\n"
    temp = doc["temperature"]
    sensor = f" ({temp['sensor']})" if temp.get("sensor") else ""
    if not m.get("conditions_held", True):
        keeps = "not judged: the monitor tripped during the stream" + (
            f"; the figures cover the {m['blocks']} block(s) before it, {degraded} later "
            "block(s) are degraded"
            if degraded
            else ""
        )
    elif m["lag_trend_s"] is None:
        keeps = "undecided (fewer than 3 blocks in the last third)"
    else:
        keeps = (
            f"{'yes' if m['keeps_pace'] else 'no'} (lag trend over the last third "
            f"{m['lag_trend_s']:+.2f} s)"
        )
    rows = [
        (
            "Mean encoder / prefill / decode (s)",
            f"{_f(m['mean_encoder_s'])} / {_f(m['mean_prefill_s'])} / {_f(m['mean_decode_s'])}",
        ),
        ("Mean complete block processing (s)", _f(m["mean_processing_s"])),
        ("Active / resource RTF", f"{_f(m['active_rtf'], 3)} / {_f(m['resource_rtf'], 3)}"),
        ("Decode throughput (tokens/s)", _f(m["decode_tps"])),
        ("p95 completion lag (s)", _f(m["p95_lag_s"])),
        ("Final completion lag (s)", _f(m["final_lag_s"])),
        (
            "Maximum / final queue wait (s)",
            f"{_f(m['max_queue_wait_s'])} / {_f(m['final_queue_wait_s'])}",
        ),
        (
            f"First / maximum temperature{sensor} (°C)",
            f"{_f(m['first_temp_c'], 1)} / {_f(m['max_temp_c'], 1)}",
        ),
        ("Capped outputs", str(m["capped"])),
        ("Keeps pace", keeps),
    ]
    c = doc.get("check")
    if c is not None:
        rows.append(("Blocks equal to target-only (--check)", f"{c['equal']}/{c['blocks']}"))
    width = max(len(r[0]) for r in rows)
    lines = [
        f"| {'Metric':<{width}} | {doc['label']} |",
        f"|{'-' * (width + 2)}|{'-' * (len(doc['label']) + 2)}|",
    ]
    lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
    warm = st.get("warmup_s")
    foot = f"\nLoading and warm-up ({_f(warm)} s) precede the stream." if warm is not None else ""
    return head + "\n".join(lines) + "\n" + foot + "\n"
