"""`as2d report STREAM_A STREAM_B …`: two or more streams (e.g. with and without a cooler)
side by side — Table 16 with a column per stream (``tables.md`` and ``table16.csv``) and
Figure 9's panels with the streams overlaid (``stream.<format>``), in a fresh folder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from as2d_cli.errors import UserError
from as2d_cli.figures import FORMATS, stream_figure, stream_name
from as2d_cli.formats import registry
from as2d_cli.formats.common import write_atomic
from as2d_cli.formats.layout import report_folder

STREAM_SCHEMA = registry.entry("as2d.stream").schema
# Table 16's rows: (metric, the metrics' keys, decimals), as the paper names them.
ROWS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    (
        "Mean encoder / prefill / decode (s)",
        ("mean_encoder_s", "mean_prefill_s", "mean_decode_s"),
        2,
    ),
    ("Mean complete block processing (s)", ("mean_processing_s",), 2),
    ("Active / resource RTF", ("active_rtf", "resource_rtf"), 3),
    ("Decode throughput (tokens/s)", ("decode_tps",), 2),
    ("p95 completion lag (s)", ("p95_lag_s",), 2),
    ("Final completion lag (s)", ("final_lag_s",), 2),
    ("Maximum / final queue wait (s)", ("max_queue_wait_s", "final_queue_wait_s"), 2),
    ("First / maximum temperature (°C)", ("first_temp_c", "max_temp_c"), 1),
    ("Capped outputs", ("capped",), 0),
)


def load_stream(folder: Path) -> dict[str, Any]:
    """A stream folder's ``stream.json`` (refused in one line when it is not one)."""
    path = Path(folder) / "stream.json"
    if not path.is_file():
        raise UserError(
            f"{folder} is not a stream (no stream.json); give folders `as2d stream` wrote"
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); run the stream again") from None
    if doc.get("schema") != STREAM_SCHEMA:
        raise UserError(
            f"{path} is not an {STREAM_SCHEMA} document; give folders `as2d stream` wrote"
        )
    return doc


def _cell(m: dict[str, Any] | None, keys: Sequence[str], nd: int) -> str:
    vals = [None if m is None else m.get(k) for k in keys]
    return " / ".join("–" if v is None else f"{v:.{nd}f}" for v in vals)


def table16(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> tuple[str, bytes]:
    """Table 16 (Markdown lines and CSV) with one column per stream."""
    import pandas as pd

    lines = [
        "## Table 16: The table summarizes the streams side by side",
        "",
        "Temperature comes from each stream's sensor; settings differ as each stream's "
        "folder records, so a difference is not attributable to one of them alone.",
        "",
        "| Metric | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    csv: list[list[Any]] = []
    for label, keys, nd in ROWS:
        lines.append(
            f"| {label} | " + " | ".join(_cell(d.get("metrics"), keys, nd) for d in docs) + " |"
        )
        for k in keys:
            csv.append([k, *((d.get("metrics") or {}).get(k) for d in docs)])
    lines.append("| Keeps pace | " + " | ".join(_keeps(d.get("metrics")) for d in docs) + " |")
    frame = pd.DataFrame(csv, columns=["metric", *names])
    return "\n".join(lines) + "\n", frame.to_csv(index=False).encode("utf-8")


def _keeps(m: dict[str, Any] | None) -> str:
    if m is None or m.get("keeps_pace") is None:
        return "not judged"
    return "yes" if m["keeps_pace"] else "no"


def write_stream_report(
    folders: Sequence[Path], out: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """Table 16 and Figure 9 of ``folders``' streams in a fresh ``out/report-<time>``."""
    from as2d_cli.evaluate.report import _report_json

    docs = [load_stream(Path(f)) for f in folders]
    names = [stream_name(d) for d in docs]
    for i, (n, f) in enumerate(zip(list(names), folders)):
        if names.count(n) > 1:
            names[i] = f"{n} ({Path(f).name})"
    text, csv = table16(docs, names)
    head = f"# Streams side by side: {len(docs)} runs\n\n" + "".join(
        f"- {n}: {f} ({d.get('status')}, {len(d.get('blocks') or [])} blocks)\n"
        for n, f, d in zip(names, folders, docs)
    )
    dest = report_folder(Path(out))
    paths = [write_atomic(dest / "tables.md", (head + "\n" + text).encode("utf-8"))]
    paths.append(write_atomic(dest / "table16.csv", csv))
    named = [{**d, "label": n, "measurement": {}} for d, n in zip(docs, names)]
    paths += stream_figure(named, dest / "stream", formats)
    paths.append(_report_json(dest, "stream", folders))
    return paths
