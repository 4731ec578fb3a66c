"""The paper's tables and figures for one evaluation, from its stored files only.

``write_report(folder)`` reads ``results.json`` and ``per_window.csv`` once and renders, as
Markdown: pooled TPS per dataset with gains over target-only and over the fastest
baseline (paper Tables 1/8), the share of windows slower than target-only (Table 4), the
median and maximum loss of those windows (Table 12), the ablations (Table 5), standard SD
at each K (Table 9) and the hindsight-oracle gap (Table 2, over all windows: the catalog
is not stored per dataset) into ``tables.md``, and the figures
``datasets.png`` (pooled TPS per dataset) and ``rk.png`` (R(K) of the profile used, when its
file is still there). `as2d report RUN_DIR` re-renders them once the folder checks out
against its manifest (``compare.verify_run``), marking the folder incomplete while it
writes; results are never changed. Every file is written atomically.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from as2d_cli.errors import Interrupted, UserError
from as2d_cli.evaluate.fixed import LABELS, ORDER
from as2d_cli.evaluate.inputs import describe_pair
from as2d_cli.formats.common import atomic_path, mark_complete, mark_writing, write_atomic

BASELINES = ("sd", "asp")


def load_report(folder: Path) -> tuple[dict, Any]:
    """An evaluation folder's results document and per-window table (checked by the caller)."""
    from as2d_cli.evaluate.compare import load_run

    doc, per = load_run(folder)
    if doc.get("kind") != "eval":
        raise UserError(f"{folder}/results.json is a {doc.get('kind')!r} result, not an evaluation")
    return doc, per


def _pooled(rows: Any) -> float | None:
    """Σ tokens / Σ time per configuration, the mean over configurations (SD's K)."""
    if rows.empty:
        return None
    by = rows.groupby("config").agg(tokens=("tokens", "sum"), ms=("time_ms", "sum"))
    by = by[by["ms"] > 0]
    return float((by["tokens"] / (by["ms"] / 1e3)).mean()) if not by.empty else None


def _ratio(x: float | None, y: float | None) -> str:
    """x / y to 3 places; "—" when either is missing (None) or zero."""
    return _f(x / y, 3) if x and y else "—"


def _window_tps(per: Any, method: str) -> Any:
    """Per window: TPS (SD: the mean over its K), indexed by window."""
    return per[per["method"] == method].groupby("window")["tps"].mean()


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _f(x: float | None, nd: int = 2, pct: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:+.{nd}f} %" if pct else f"{x:.{nd}f}"


def render_tables(doc: dict, per: Any) -> str:
    """The tables of an evaluation's results document and per-window table (``load_report``)."""
    res = doc["results"]
    datasets = list(res.get("datasets") or sorted(set(per["dataset"])))
    cols = [*datasets, "all"]
    methods = [m for m in ORDER if m in set(per["method"])]

    def sel(m: str, d: str) -> Any:
        rows = per[per["method"] == m]
        return rows if d == "all" else rows[rows["dataset"] == d]

    pooled = {m: {d: _pooled(sel(m, d)) for d in cols} for m in methods}
    out = [f"# Evaluation tables: {res.get('windows')} {res.get('split')} windows", ""]
    dep = res.get("deployment", {})
    prov = res.get("provenance") or {}
    out.append(
        f"Fixed configuration {dep.get('source')}/budget {dep.get('budget')} (threshold {dep.get('threshold')}, "
        f"batch {dep.get('batch')}); profile {prov.get('profile', {}).get('path', '?')}"
        + (" (synthetic)" if prov.get("profile", {}).get("synthetic") else "")
        + f"; model pair {describe_pair(prov.get('pair'))}."
    )
    out += ["", "## Pooled TPS per dataset (Tables 1 and 8)", ""]
    out += _md(["method", *cols], [[LABELS[m], *(_f(pooled[m][d]) for d in cols)] for m in methods])
    out += [
        "",
        "Gain over target-only and over the fastest baseline (standard SD or SpecASR-ASP, per dataset):",
        "",
    ]
    rows = []
    for m in methods:
        if m == "target-only":
            continue
        cells = []
        for d in cols:
            to, x = pooled["target-only"][d], pooled[m][d]
            known = [pooled[b][d] for b in BASELINES if b in pooled]
            best = max((v for v in known if v is not None), default=None)
            g1 = 100 * (x / to - 1) if x and to else None
            g2 = 100 * (x / best - 1) if x and best and m not in BASELINES else None
            cells.append(f"{_f(g1, 1, True)} / {_f(g2, 1, True)}")
        rows.append([LABELS[m], *cells])
    out += _md(["method (vs TO / vs best baseline)", *cols], rows)

    base = _window_tps(per, "target-only")
    meta = per[per["method"] == "target-only"].set_index("window")["dataset"]
    out += ["", "## Windows slower than target-only (Table 4) and their loss (Table 12)", ""]
    rows4, rows12 = [], []
    for m in methods:
        if m == "target-only":
            continue
        w = _window_tps(per, m)
        both = w.notna() & base.reindex(w.index).notna()
        loss = 100 * (1 - w[both] / base.reindex(w.index)[both])
        slow = loss[loss > 1e-9 * 100]
        cells = []
        for d in cols:
            ids = loss.index if d == "all" else loss.index[meta.reindex(loss.index) == d]
            n, k = len(ids), len(slow.index.intersection(ids))
            cells.append(f"{k}/{n} ({100 * k / n:.1f} %)" if n else "—")
        rows4.append([LABELS[m], *cells])
        rows12.append(
            [
                LABELS[m],
                str(len(slow)),
                _f(float(slow.median()) if len(slow) else None, 1),
                _f(float(slow.max()) if len(slow) else None, 1),
            ]
        )
    out += _md(["method", *cols], rows4)
    out += ["", "Loss of the slower windows, 100·(1 − TPS/TPS_target-only) %:", ""]
    out += _md(["method", "slower windows", "median loss %", "max loss %"], rows12)

    out += ["", "## Ablations (Table 5)", ""]
    abl = [m for m in ("as2d", "as2d-no-td", "as2d-no-bc") if m in pooled]
    a_all = pooled.get("as2d", {}).get("all")
    out += _md(
        ["method", "pooled TPS", "× target-only", "× As²d"],
        [
            [
                LABELS[m],
                _f(pooled[m]["all"]),
                _ratio(pooled[m]["all"], pooled["target-only"]["all"]),
                _ratio(pooled[m]["all"], a_all),
            ]
            for m in abl
        ],
    )

    if "sd" in pooled:
        sd = per[per["method"] == "sd"]
        configs = sorted(
            set(sd["config"]),
            key=lambda c: int(c.rsplit("k", 1)[-1]) if c.rsplit("k", 1)[-1].isdigit() else 0,
        )
        out += ["", "## Standard SD at each physical width K (Table 9)", ""]
        out += _md(
            ["K", *cols],
            [
                [
                    c,
                    *(
                        _f(
                            _pooled(
                                sd[
                                    (sd["config"] == c)
                                    & ((sd["dataset"] == d) if d != "all" else True)
                                ]
                            )
                        )
                        for d in cols
                    ),
                ]
                for c in configs
            ],
        )

    o = res.get("oracle") or {}
    if o:
        out += ["", "## Hindsight oracle (Table 2, all windows)", ""]
        out += _md(
            ["oracle TPS", "selected TPS", "gap %"],
            [[_f(o.get("tps_oracle")), _f(o.get("tps_selected")), _f(o.get("gap_percent"))]],
        )
    return "\n".join(out) + "\n"


def plot_datasets(doc: dict, per: Any, path: Path, title: str, *, force: bool = False) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(doc["results"].get("datasets") or sorted(set(per["dataset"])))
    methods = [m for m in ORDER if m in set(per["method"])]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    width = 0.8 / len(methods)
    for i, m in enumerate(methods):
        vals = [_pooled(per[(per["method"] == m) & (per["dataset"] == d)]) or 0.0 for d in datasets]
        ax.bar([j + i * width for j in range(len(datasets))], vals, width, label=LABELS[m])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(datasets))], datasets, fontsize=8)
    ax.set_ylabel("pooled tokens per second")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    with atomic_path(path, force=force) as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path


def plot_native(table: Path, path: Path, title: str, *, force: bool = False) -> Path:
    """Replay against native TPS per window and method (median of each window's
    repetitions), with the diagonal: how well the profile predicts the device."""
    import matplotlib
    import pandas as pd

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = pd.read_csv(table)
    med = runs.groupby(["method", "window"], as_index=False).agg(
        native=("tps", "median"), replay=("tps_replay", "first")
    )
    fig, ax = plt.subplots(figsize=(4.6, 4.2), dpi=120)
    for m, g in med.groupby("method"):
        ax.scatter(
            g["native"], g["replay"], s=14, label=str(m)
        )  # native SD runs one K: the method's name
    lo = float(min(med["native"].min(), med["replay"].min()))
    hi = float(max(med["native"].max(), med["replay"].max()))
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.7)
    ax.set_xlabel("native TPS (median of repetitions)")
    ax.set_ylabel("replayed TPS (same trajectory)")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6)
    fig.tight_layout()
    with atomic_path(path, force=force) as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path


def plot_rk(
    profile_path: Path, path: Path, title: str | None = None, *, force: bool = False
) -> Path:
    """R(K) of a profile's idle verification costs (paper Figure 8), written atomically."""
    from as2d_cli.calibration.plot import plot_savings
    from as2d_cli.formats.profile_io import load_profile

    prof = load_profile(profile_path)
    idle = {int(k): [float(v)] for k, v in prof.verify_idle_ms.items()}
    if 1 not in idle:
        raise UserError(f"{profile_path} has no K1 verification cost: R(K) is relative to it")
    with atomic_path(path, force=force) as tmp:
        plot_savings(
            idle,
            tmp,
            title or f"{prof.device.get('name', '')}: per-token verification saving R(K)",
        )
    return path


def report_outputs(doc: dict) -> list[str]:
    """What :func:`render_report` writes for this results document: tables.md,
    datasets.png and, when the profile's file is still there, rk.png."""
    profile = Path((doc["results"].get("provenance") or {}).get("profile", {}).get("path", ""))
    return ["tables.md", "datasets.png", *(["rk.png"] if profile.is_file() else [])]


def render_report(folder: Path, doc: dict, per: Any, *, force: bool = False) -> list[Path]:
    """tables.md, datasets.png and (when the profile file is there) rk.png in ``folder``
    from the results document and per-window table (``load_report``), each written atomically;
    ``force``: replace the ones there."""
    res = doc["results"]
    prov = res.get("provenance") or {}
    when = str(doc.get("environment", {}).get("created", ""))[:10]
    title = (
        f"{prov.get('profile', {}).get('device', '')} · profile {Path(prov.get('profile', {}).get('path', '?')).name} · "
        f"{res.get('deployment', {}).get('source')}/b{res.get('deployment', {}).get('budget')} · {when}"
    )
    out = [write_atomic(folder / "tables.md", render_tables(doc, per).encode("utf-8"), force=force)]
    out.append(plot_datasets(doc, per, folder / "datasets.png", title, force=force))
    if "rk.png" in report_outputs(doc):
        out.append(plot_rk(Path(prov["profile"]["path"]), folder / "rk.png", force=force))
    return out


def write_report(folder: Path) -> list[Path]:
    """`as2d report`: the folder checked against its manifest (its report outputs aside:
    they are rendered again), marked incomplete while tables.md and the figures are
    rendered again, then recorded complete. A folder written before manifests is rendered
    as it stands and stays without one."""
    from as2d_cli.evaluate.compare import REPORT, REPORT_OUTPUTS, verify_run

    folder = Path(folder)
    manifest = verify_run(folder, resumes=REPORT, skip=REPORT_OUTPUTS)
    doc, per = load_report(folder)  # read once: every table and figure comes from these two
    if manifest is None:
        return render_report(folder, doc, per, force=True)
    outputs = report_outputs(doc)
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
        paths = render_report(folder, doc, per, force=True)
        mark_complete(folder)
    except KeyboardInterrupt:
        raise Interrupted(
            f"as2d report interrupted: {folder} is marked incomplete until `{command}` finishes"
        ) from None
    return paths
