"""The paper's tables and figures of one evaluation, or of several side by side, from
their stored files only.

``write_report(folder)`` reads ``results.json`` and ``per_window.csv`` once and renders the
paper's tables (``paper_tables``: Tables 2, 4, 5, 8, 9 and 12) into ``tables.md`` and one
CSV each (``table2.csv`` …), and the figures ``cdf`` (per-window TPS, Figure 5),
``datasets`` (pooled TPS per dataset) and ``rk`` (R(K) of the profile used, when its file
is still there) as PNG, PDF and SVG. `as2d report RUN_DIR` re-renders them once the folder
checks out against its manifest (``compare.verify_run``), marking the folder incomplete
while it writes; results are never changed. ``write_reports(folders, out)`` renders two or
more evaluations side by side into a fresh folder (each phone a column; a CDF panel per
device). Every file is written atomically.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from as2d_cli.errors import Interrupted, UserError
from as2d_cli.evaluate.paper_tables import (
    RunData,
    paper_tables,
    render_markdown,
    run_data,
    write_csvs,
)
from as2d_cli.figures import (
    FORMATS,
    cdf_figure,
    datasets_figure,
    date_text,
    native_figure,
    rk_figure,
)
from as2d_cli.formats import registry
from as2d_cli.formats.common import mark_complete, mark_writing, write_atomic
from as2d_cli.formats.layout import report_folder
from as2d_cli.formats.pairs import describe_pair

FIGURES = ("cdf", "datasets", "rk")  # what a report draws (rk only with its profile)
TABLE_FILES = ("table2.csv", "table4.csv", "table5.csv", "table8.csv", "table9.csv", "table12.csv")
# report.json of a report over several runs
REPORT_SCHEMA, REPORT_VERSION = registry.name_version("as2d.report")


def load_report(folder: Path) -> tuple[dict, Any]:
    """An evaluation folder's results document and per-window table (checked by the caller)."""
    from as2d_cli.evaluate.compare import load_run

    doc, per = load_run(folder)
    if doc.get("kind") != "eval":
        raise UserError(f"{folder}/results.json is a {doc.get('kind')!r} result, not an evaluation")
    return doc, per


def run_name(doc: dict, folder: Path | None = None) -> str:
    """A run's column heading: the device whose profile priced it."""
    prov = doc.get("results", {}).get("provenance") or {}
    name = (prov.get("profile") or {}).get("device") or (doc.get("environment") or {}).get(
        "device", {}
    ).get("name")
    return str(name or (folder.name if folder else "run"))


def _head(doc: dict) -> list[str]:
    """tables.md's title and provenance line of one evaluation."""
    res = doc["results"]
    dep = res.get("deployment", {})
    prof = (res.get("provenance") or {}).get("profile", {})
    return [
        f"# Evaluation tables: {res.get('windows')} {res.get('split')} windows",
        "",
        f"Fixed configuration {dep.get('source')}/budget {dep.get('budget')} (threshold "
        f"{dep.get('threshold')}, batch {dep.get('batch')}); profile {prof.get('path', '?')}"
        + (" (synthetic)" if prof.get("synthetic") else "")
        + f"; model pair {describe_pair((res.get('provenance') or {}).get('pair'))}.",
    ]


def _title(doc: dict) -> str:
    res = doc["results"]
    prof = (res.get("provenance") or {}).get("profile", {})
    dep = res.get("deployment", {})
    when = date_text(str((doc.get("environment") or {}).get("created", "")))
    return (
        f"{prof.get('device', '')} · profile {Path(prof.get('path', '?')).name} · "
        f"{dep.get('source')}/b{dep.get('budget')} · {when}"
    )


def plot_cdf(ev: Any, base: Path, title: str = "", formats: Sequence[str] = ("png",)) -> list[Path]:
    """Per-window TPS of every method of a FixedEval as CDFs (``base.<format>``)."""
    return cdf_figure([("", ev.cdf())], base, formats, title=title)


def _cdf_panels(runs: Sequence[RunData]) -> list[tuple[str, dict[str, list[float]]]]:
    return [
        (
            r.name if len(runs) > 1 else "",
            {m: r.window_tps[m].dropna().tolist() for m in r.window_tps if m != "oracle"},
        )
        for r in runs
    ]


def _dataset_panels(
    runs: Sequence[RunData],
) -> list[tuple[str, dict[str, dict[str, float | None]]]]:
    return [
        (
            r.name,
            {
                m: {d: v for d, v in by.items() if d != "all"}
                for m, by in r.pooled.items()
                if m != "oracle"
            },
        )
        for r in runs
    ]


def plot_rk(
    profile_path: Path,
    base: Path,
    title: str | None = None,
    *,
    formats: Sequence[str] = ("png",),
    force: bool = False,
) -> list[Path]:
    """R(K) of a profile's idle verification costs (paper Figure 8), ``base.<format>``."""
    from as2d_cli.formats.profile_io import load_profile

    prof = load_profile(profile_path)
    idle = {int(k): [float(v)] for k, v in prof.verify_idle_ms.items()}
    if 1 not in idle:
        raise UserError(f"{profile_path} has no K1 verification cost: R(K) is relative to it")
    name = title or f"{prof.device.get('name', '')}: per-token verification saving R(K)"
    return rk_figure(idle, base, formats, title=name, force=force)


def plot_native(
    table: Path, base: Path, title: str, *, formats: Sequence[str] = ("png",), force: bool = False
) -> list[Path]:
    """Replay against native TPS per window and method (median of each window's
    repetitions), with the diagonal: how well the profile predicts the device."""
    import pandas as pd

    runs = pd.read_csv(table)
    med = runs.groupby(["method", "window"], as_index=False).agg(
        native=("tps", "median"), replay=("tps_replay", "first")
    )
    points = {
        str(m): (g["native"].tolist(), g["replay"].tolist()) for m, g in med.groupby("method")
    }
    return native_figure(points, base, formats, title=title, force=force)


def _profile_file(doc: dict) -> Path | None:
    p = Path(((doc["results"].get("provenance") or {}).get("profile") or {}).get("path", ""))
    return p if str(p) not in ("", ".") and p.is_file() else None


def report_outputs(doc: dict, formats: Sequence[str] = FORMATS, cdf: bool = True) -> list[str]:
    """What :func:`render_report` writes for this results document."""
    figs = [f for f in FIGURES if (f != "rk" or _profile_file(doc)) and (f != "cdf" or cdf)]
    return ["tables.md", *TABLE_FILES, *(f"{f}.{x}" for f in figs for x in formats)]


def render_report(
    folder: Path,
    doc: dict,
    per: Any,
    *,
    force: bool = False,
    formats: Sequence[str] = FORMATS,
    cdf: bool = True,
) -> list[Path]:
    """tables.md, the tables' CSVs and the figures (``cdf``: the CDF too) in ``folder``
    from the results document and per-window table (``load_report``), each written
    atomically; ``force``: replace the ones there."""
    run = run_data(run_name(doc), doc, per)
    tables = paper_tables([run])
    text = render_markdown(tables, _head(doc))
    out = [write_atomic(folder / "tables.md", text.encode("utf-8"), force=force)]
    out += write_csvs(tables, folder, force=force)
    if cdf:
        out += cdf_figure(
            _cdf_panels([run]), folder / "cdf", formats, title=_title(doc), force=force
        )
    out += plot_datasets(doc, per, folder / "datasets", _title(doc), formats=formats, force=force)
    profile = _profile_file(doc)
    if profile is not None:
        out += plot_rk(profile, folder / "rk", formats=formats, force=force)
    return out


def plot_datasets(
    doc: dict,
    per: Any,
    base: Path,
    title: str,
    *,
    formats: Sequence[str] = ("png",),
    force: bool = False,
) -> list[Path]:
    """Pooled TPS per dataset and method of one evaluation."""
    run = run_data(run_name(doc), doc, per)
    return datasets_figure(_dataset_panels([run]), base, formats, title=title, force=force)


def write_report(folder: Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """`as2d report RUN_DIR`: the folder checked against its manifest (its report outputs
    aside: they are rendered again), marked incomplete while tables.md, the tables' CSVs
    and the figures are rendered again, then recorded complete. A folder written before
    manifests is rendered as it stands and stays without one."""
    from as2d_cli.evaluate.compare import REPORT, REPORT_OUTPUTS, verify_run

    folder = Path(folder)
    manifest = verify_run(folder, resumes=REPORT, skip=REPORT_OUTPUTS)
    doc, per = load_report(folder)  # read once: every table and figure comes from these two
    if manifest is None:
        return render_report(folder, doc, per, force=True, formats=formats)
    outputs = report_outputs(doc, formats)
    command = f"as2d report {shlex.quote(str(folder))}"
    mark_writing(
        folder,
        writing=REPORT,
        pending=outputs,
        command=command,
        in_place=True,
        files=manifest["files"],
    )
    try:
        paths = render_report(folder, doc, per, force=True, formats=formats)
        mark_complete(folder)
    except KeyboardInterrupt:
        raise Interrupted(
            f"as2d report interrupted: {folder} is marked incomplete until `{command}` finishes"
        ) from None
    return paths


def write_reports(
    folders: Sequence[Path], out: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """`as2d report RUN_A RUN_B …`: the paper's tables with each run's phone as a column
    (or block of columns), the CDF with a panel per device and pooled TPS per dataset, in
    a fresh folder under ``out`` (``report-<time>``) with ``report.json`` naming the runs."""
    from as2d_cli.evaluate.compare import verify_run

    runs, docs = [], []
    for f in folders:
        verify_run(Path(f))
        doc, per = load_report(Path(f))
        runs.append(run_data(run_name(doc, Path(f)), doc, per))
        docs.append(doc)
    _distinct_names(runs, folders)
    tables = paper_tables(runs)
    head = [f"# Evaluation tables: {len(runs)} runs side by side", ""]
    head += [f"- {r.name}: {f} — " + _head(d)[2] for r, f, d in zip(runs, folders, docs)]
    dest = report_folder(Path(out))
    paths = [write_atomic(dest / "tables.md", render_markdown(tables, head).encode("utf-8"))]
    paths += write_csvs(tables, dest)
    paths += cdf_figure(_cdf_panels(runs), dest / "cdf", formats)
    paths += datasets_figure(_dataset_panels(runs), dest / "datasets", formats)
    paths.append(_report_json(dest, "eval", folders))
    return paths


def _distinct_names(runs: Sequence[RunData], folders: Sequence[Path]) -> None:
    """Two runs of one device are told apart by their folders' names."""
    names = [r.name for r in runs]
    for r, f in zip(runs, folders):
        if names.count(r.name) > 1:
            r.name = f"{r.name} ({Path(f).name})"


def _report_json(dest: Path, kind: str, folders: Sequence[Path]) -> Path:
    from as2d_cli.formats.common import utc_now

    doc = {
        "schema": REPORT_SCHEMA,
        "version": REPORT_VERSION,
        "kind": kind,
        "created": utc_now(),
        "runs": [str(f) for f in folders],
    }
    return write_atomic(dest / "report.json", (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
