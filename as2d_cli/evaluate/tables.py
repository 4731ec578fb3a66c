"""Tidy tables of an evaluation for pandas: one row per (window, method, configuration),
every setting in its own typed column.

``per_window.csv`` / ``per_window.parquet`` hold every replayed window under every
configuration (standard SD has one row per K) and the hindsight oracle's choice per window
(method ``oracle``); ``summary.csv`` one row per method and dataset with the pooled figures
of ``results.json``. Pooling the per-window rows again — Σ tokens / Σ time per (method,
configuration), and for standard SD the mean over its K — gives the same figures
(docs/formats.md, "Tidy tables"). :data:`PER_WINDOW` is the data dictionary: column,
pandas dtype, meaning; :func:`read_per_window` reads either file back to the same frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from as2d_cli.engine.methods import DEFAULT_THRESHOLD
from as2d_cli.evaluate.fixed import LABELS, ORDER, FixedEval
from as2d_cli.formats import registry

SCHEMA, VERSION = registry.name_version("as2d.per_window")
# Version history: 1 — settings inside one ``config`` string; 2 — every setting in its
# own typed column (task, device, profile, pair, budget, k, threshold, batch, align), the
# per-window figure the CDF and Table 4 use (``window_tps``), the oracle's rows; 3 —
# ``history`` (a version-2 file reads with it false for As²d and the oracle: they ran
# without history candidates, and empty for the other methods).

# (column, pandas dtype, meaning): the order of the columns, the types, docs/formats.md
PER_WINDOW: tuple[tuple[str, str, str], ...] = (
    ("window", "str", "window id"),
    ("split", "str", "corpus split (test)"),
    ("dataset", "str", "the window's dataset (the setting it was recorded in)"),
    ("language", "str", "the window's language"),
    ("audio_s", "float64", "audio length (s)"),
    ("task", "str", "the model pair's task: transcribe, translate or answer"),
    ("device", "str", "the device whose cost profile priced the replay"),
    ("profile", "str", "the cost profile's file name"),
    ("pair", "str", "the model pair that made the traces"),
    ("method", "str", "method id: target-only, sd, asp, as2d-no-td, as2d-no-bc, as2d, oracle"),
    ("config", "str", "the configuration's name, e.g. sd-k5, as2d(drafter/b10)"),
    ("source", "str", "candidate source run (after the language fallback); empty: serial"),
    ("budget", "Int64", "proposal budget b (ASP and w/o BC: the proposal cap); empty: none"),
    ("k", "Int64", "fixed physical verification width K (standard SD; target-only 1)"),
    ("threshold", "float64", "confidence stop (empty: none)"),
    ("batch", "Int64", "publication batch of a target-decoupled source (tokens)"),
    ("align", "str", "alignment rules of a target-decoupled method: paper or suffix"),
    (
        "history",
        "boolean",
        "As²d (and the oracle's catalog): history candidates merged into the source's stream; empty for the other methods",
    ),
    ("tokens", "int64", "committed tokens (first token and EOS included)"),
    ("time_ms", "float64", "post-prefill decode time (ms)"),
    ("tps", "float64", "tokens / time (empty: no decode time)"),
    (
        "window_tps",
        "float64",
        "the method's TPS on the window as the CDF and Table 4 count it: for standard SD the mean over K5–8",
    ),
    ("rounds", "int64", "target calls"),
    ("accepted", "int64", "accepted draft tokens"),
    ("proposed", "int64", "proposed draft tokens"),
    ("eos", "bool", "the target committed EOS"),
    ("capped", "bool", "the output reached the token cap"),
    (
        "slower",
        "boolean",
        "this configuration's TPS below target-only's on the window (empty for target-only)",
    ),
)
PER_WINDOW_COLUMNS = [c for c, _, _ in PER_WINDOW]
DTYPES = {c: t for c, t, _ in PER_WINDOW}
DECOUPLED = ("as2d", "as2d-no-bc")


def _settings(method: str, spec: Any) -> dict[str, Any]:
    """The settings a method's configuration has, one column each (None: it has none)."""
    th = spec.threshold if spec.threshold is not None else None
    return {
        "budget": spec.budget if method not in ("target-only", "sd") else None,
        "k": 1 if method == "target-only" else spec.k if method == "sd" else None,
        "threshold": (th if th is not None or method == "as2d" else DEFAULT_THRESHOLD)
        if method not in ("target-only", "sd")
        else None,
        "batch": spec.batch if method in DECOUPLED else None,
        "align": spec.align if method in DECOUPLED else None,
        "history": spec.history if method == "as2d" else None,
    }


def _context(meta: Mapping[str, Any], wid: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    w = meta[wid]
    return {
        "window": wid,
        "split": w.split,
        "dataset": w.dataset,
        "language": w.language,
        "audio_s": float(w.audio_seconds),
        **settings,
    }


def per_window_rows(
    ev: FixedEval, meta: Mapping[str, Any], run: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The rows of ``per_window``; ``meta`` maps a window id to its trace (split, language,
    audio seconds); ``run`` gives the task, device, profile and pair columns."""
    common = {k: (run or {}).get(k) for k in ("task", "device", "profile", "pair")}
    base = {r.window: r.tps for r in ev.runs["target-only"].windows}
    rows: list[dict[str, Any]] = []
    for m in ORDER:
        mr = ev.runs[m]
        wtps = dict(zip((r.window for r in mr.windows), mr.window_tps()))
        for spec, replays in zip(mr.specs, mr.runs):
            for r in replays:
                tps, b = r.tps, base.get(r.window)
                rows.append(
                    _context(meta, r.window, common)
                    | {"method": m, "config": spec.label, "source": r.source}
                    | _settings(m, spec)
                    | _figures(r.tokens, r.time_ns, tps, wtps.get(r.window), b, m)
                    | {
                        "rounds": r.rounds,
                        "accepted": r.accepted,
                        "proposed": r.proposed,
                        "eos": r.eos,
                        "capped": r.capped,
                    }
                )
    rows += _oracle_rows(ev, meta, common, base)
    return rows


def _figures(
    tokens: int, time_ns: int, tps: float | None, wtps: float | None, base: float | None, m: str
) -> dict[str, Any]:
    return {
        "tokens": tokens,
        "time_ms": time_ns / 1e6,
        "tps": tps,
        "window_tps": wtps,
        "slower": None if m == "target-only" or tps is None or base is None else bool(tps < base),
    }


def _oracle_rows(
    ev: FixedEval, meta: Mapping[str, Any], common: Mapping[str, Any], base: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Per window: the hindsight oracle's configuration and time (what Table 2 pools per
    dataset); its rounds and draft counts are not kept by the catalog sweep (0)."""
    cat = ev.oracle.get("catalog") or {}
    tokens = {r.window: r.tokens for r in ev.runs["target-only"].windows}
    eos = {r.window: (r.eos, r.capped) for r in ev.runs["target-only"].windows}
    rows = []
    for wid, (src, budget, t_ns) in ev.oracle_windows.items():
        tps = tokens[wid] / (t_ns / 1e9) if t_ns > 0 else None
        rows.append(
            _context(meta, wid, common)
            | {"method": "oracle", "config": "oracle", "source": src}
            | {
                "budget": budget,
                "k": None,
                "threshold": cat.get("threshold"),
                "batch": cat.get("batch"),
                "align": cat.get("align"),
                "history": cat.get("history", False),
            }
            | _figures(tokens[wid], t_ns, tps, tps, base.get(wid), "oracle")
            | {"rounds": 0, "accepted": 0, "proposed": 0, "eos": eos[wid][0], "capped": eos[wid][1]}
        )
    return rows


def summary_rows(ev: FixedEval) -> list[dict[str, Any]]:
    """One row per method and dataset (and ``all``): pooled TPS, speedup over target-only."""
    base = ev.runs["target-only"]
    out = []
    for m in ORDER:
        run = ev.runs[m]
        for d in [*ev.datasets, "all"]:
            sel = None if d == "all" else d
            rows = [r for r in run.windows if sel is None or r.dataset == sel]
            tps, b = run.pooled_tps(sel), base.pooled_tps(sel)
            out.append(
                {
                    "method": m,
                    "label": LABELS[m],
                    "dataset": d,
                    "windows": len(rows),
                    "configs": len(run.specs),
                    "tps": tps,
                    "speedup": tps / b if tps and b else None,
                }
            )
    return out


def per_window_frame(rows: list[dict[str, Any]]) -> Any:
    """The rows as a DataFrame with the documented column order and types."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=PER_WINDOW_COLUMNS)
    return frame.astype(DTYPES)


# A version-2 file's columns: this version's without ``history``.
V2_COLUMNS = [c for c in PER_WINDOW_COLUMNS if c != "history"]


def read_per_window(path: Path) -> Any:
    """``per_window.csv`` or ``.parquet`` as a typed frame (both give the same one). A
    version-2 file reads with ``history`` added (:func:`_v2_to_v3`); a file written before
    version 2 is read as it stands."""
    import pandas as pd

    path = Path(path)
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return _v2_to_v3(frame) if list(frame.columns) == V2_COLUMNS else frame
    head = pd.read_csv(path, nrows=0).columns.tolist()
    if head not in (PER_WINDOW_COLUMNS, V2_COLUMNS):
        return pd.read_csv(path)
    dtypes = {c: DTYPES[c] for c in head}
    frame = pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values=[""])
    return frame if head == PER_WINDOW_COLUMNS else _v2_to_v3(frame)


def _v2_to_v3(frame: Any) -> Any:
    """A version-2 frame with ``history``: false for As²d and the oracle (an evaluation
    before deployments recorded it ran without history candidates), empty otherwise."""
    import pandas as pd

    ran = frame["method"].isin(["as2d", "oracle"])
    history = pd.Series(pd.NA, index=frame.index, dtype="boolean").mask(ran, False)
    out = frame.copy()
    out.insert(V2_COLUMNS.index("align") + 1, "history", history)
    return out


def write_tables(
    ev: FixedEval, meta: Mapping[str, Any], folder: Path, run: Mapping[str, Any] | None = None
) -> list[Path]:
    """Write per_window.csv, per_window.parquet (carrying its schema name and version) and
    summary.csv into ``folder``; ``run``: the task, device, profile and pair columns."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    per = per_window_frame(per_window_rows(ev, meta, run))
    paths = [folder / "per_window.csv", folder / "per_window.parquet", folder / "summary.csv"]
    per.to_csv(paths[0], index=False)
    table = pa.Table.from_pandas(per, preserve_index=False)
    meta_ = {
        **(table.schema.metadata or {}),
        b"as2d.schema": SCHEMA.encode(),
        b"as2d.version": str(VERSION).encode(),
    }
    pq.write_table(table.replace_schema_metadata(meta_), paths[1])
    pd.DataFrame(summary_rows(ev)).to_csv(paths[2], index=False)
    return paths


def run_columns(prov: Mapping[str, Any]) -> dict[str, Any]:
    """The per-run columns of ``per_window`` from an evaluation's provenance."""
    pair = prov.get("pair") or {}
    return {
        "task": pair.get("task") or "transcribe",
        "device": (prov.get("profile") or {}).get("device") or None,
        "profile": Path(str((prov.get("profile") or {}).get("path", ""))).name or None,
        "pair": pair.get("name") or "bundled",
    }
