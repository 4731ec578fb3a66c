"""The paper's tables, named and laid out as the paper has them, for one evaluation or
several side by side (each phone a column, or a block of columns, as in the paper).

From each run's ``per_window`` table (and ``results.json`` for runs written before the
oracle's rows were kept): Table 2 (shortfall from the hindsight oracle per dataset),
Table 4 (windows slower than target-only), Table 5 (ablations), Table 8 (pooled TPS per
dataset with the gain over the best baseline), Table 9 (standard SD at each K with Mean
and Range) and Table 12 (faster and slower windows and the losses of the slower ones).
Each table renders as Markdown and as a CSV of its unrounded values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from as2d_cli.stats.compare import TIE

BASELINES = ("sd", "asp")
# The paper's row and column names of the methods.
NAMES = {
    "target-only": "Target-only",
    "sd": "Standard SD",
    "asp": "SpecASR",
    "as2d": "As²d",
    "as2d-no-bc": "w/o BC",
    "as2d-no-td": "w/o TD",
}
# Tables 1, 3, 6, 7, 10, 11, 13, 14: what this evaluation has no equivalent of, said once.
NOT_HERE = (
    "Tables 1, 3, 10, 11, 13 and 14 of the paper (representative cases, translation and "
    "QA cohorts, the K8/K12 controls, case groups, native scheduling cases, native drafter "
    "comparisons) have no equivalent in this evaluation. Replay against native agreement "
    "(Table 7) is `native.txt` of `as2d eval --native`; Table 15 is written by "
    "`as2d energy`, Table 16 by `as2d stream` (and `as2d report` of two streams); Table 6 "
    "(phones) is `as2d devices`."
)


@dataclass
class RunData:
    """One evaluation's figures, as every table reads them."""

    name: str  # the phone's column heading
    datasets: list[str]
    pooled: dict[str, dict[str, float | None]]  # method → dataset (and "all") → TPS
    sd_k: dict[int, dict[str, float | None]]  # K → dataset → pooled TPS
    tokens_s: dict[str, tuple[float, float]]  # method → (Σ tokens, Σ s) over all windows
    window_tps: dict[str, Any]  # method → per-window TPS (pandas Series by window)
    dataset_of: Any  # window → dataset (pandas Series)
    oracle_gap: dict[str, float | None] = field(default_factory=dict)  # dataset → gap %


@dataclass
class PaperTable:
    number: int
    caption: str
    head: list[str]
    rows: list[list[Any]]  # Markdown cells (already formatted)
    csv_head: list[str]
    csv_rows: list[list[Any]]  # unrounded values
    text_columns: int = 1  # the leading columns that hold names (left-aligned)

    def markdown(self) -> list[str]:
        title, _, rest = self.caption.partition(". ")
        out = [f"## Table {self.number}: {title.rstrip('.')}", ""]
        out += [rest, ""] if rest else []
        out.append("| " + " | ".join(self.head) + " |")
        out.append(
            "|"
            + "|".join("---" if i < self.text_columns else "---:" for i in range(len(self.head)))
            + "|"
        )
        out += ["| " + " | ".join(str(c) for c in r) + " |" for r in self.rows]
        return out

    def csv(self) -> bytes:
        import pandas as pd

        frame = pd.DataFrame(self.csv_rows, columns=self.csv_head)
        return frame.to_csv(index=False).encode("utf-8")


def _pooled(rows: Any) -> float | None:
    """Σ tokens / Σ time per configuration, the mean over configurations (SD's K)."""
    if rows.empty:
        return None
    by = rows.groupby("config").agg(tokens=("tokens", "sum"), ms=("time_ms", "sum"))
    by = by[by["ms"] > 0]
    return float((by["tokens"] / (by["ms"] / 1e3)).mean()) if not by.empty else None


def _sd_k(config: str) -> int | None:
    tail = str(config).rsplit("k", 1)[-1]
    return int(tail) if tail.isdigit() else None


def run_data(name: str, doc: dict, per: Any) -> RunData:
    """A run's figures from its results document and per-window table."""
    res = doc["results"]
    datasets = list(res.get("datasets") or sorted(set(per["dataset"])))
    cols = [*datasets, "all"]

    def sel(rows: Any, d: str) -> Any:
        return rows if d == "all" else rows[rows["dataset"] == d]

    pooled, tokens_s, wtps = {}, {}, {}
    for m in [m for m in (*NAMES, "oracle") if m in set(per["method"])]:
        rows = per[per["method"] == m]
        pooled[m] = {d: _pooled(sel(rows, d)) for d in cols}
        n_cfg = max(rows["config"].nunique() if m != "oracle" else 1, 1)
        tokens_s[m] = (
            float(rows["tokens"].sum()) / n_cfg,
            float(rows["time_ms"].sum()) / 1e3 / n_cfg,
        )
        wtps[m] = rows.groupby("window")["tps"].mean()  # SD: the mean over its K
    sd = per[per["method"] == "sd"]
    sd_k = {}
    for c in sorted(set(sd["config"]), key=lambda c: _sd_k(c) or 0):
        k = _sd_k(c)
        if k is not None:
            sd_k[k] = {d: _pooled(sel(sd[sd["config"] == c], d)) for d in cols}
    dataset_of = per[per["method"] == "target-only"].set_index("window")["dataset"]
    gap = {}
    for d in cols:
        a, o = pooled.get("as2d", {}).get(d), pooled.get("oracle", {}).get(d)
        gap[d] = 100 * (1 - a / o) if a and o else None
    if "oracle" not in pooled and (res.get("oracle") or {}).get("gap_percent") is not None:
        gap["all"] = float(res["oracle"]["gap_percent"])  # a run before the oracle's rows
    return RunData(name, datasets, pooled, sd_k, tokens_s, wtps, dataset_of, gap)


def _f(x: float | None, nd: int = 2) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def _pct(x: float | None, nd: int = 1) -> str:
    return "—" if x is None else f"{x:+.{nd}f}"


def _columns(runs: Sequence[RunData]) -> list[str]:
    return list(dict.fromkeys(d for r in runs for d in r.datasets))


def table2(runs: Sequence[RunData]) -> PaperTable:
    ds = [*_columns(runs), "all"]
    rows = [[d if d != "all" else "All", *(_f(r.oracle_gap.get(d)) for r in runs)] for d in ds]
    csv = [[d, *(r.oracle_gap.get(d) for r in runs)] for d in ds]
    return PaperTable(
        2,
        "As²d approaches the per-window oracle. TPS shortfall (%) from the hindsight "
        "source/budget oracle.",
        ["Dataset", *(r.name for r in runs)],
        rows,
        ["dataset", *(r.name for r in runs)],
        csv,
    )


def _slowdown(r: RunData, m: str) -> dict[str, Any] | None:
    """Faster, slower and tied windows against target-only, and the losses (%)."""
    if m not in r.window_tps or "target-only" not in r.window_tps:
        return None
    w, b = r.window_tps[m], r.window_tps["target-only"].reindex(r.window_tps[m].index)
    ok = w.notna() & b.notna() & (b > 0)
    ratio = w[ok] / b[ok]
    slower = ratio[ratio < 1 - TIE]
    loss = 100 * (1 - slower)
    return {
        "windows": int(ok.sum()),
        "faster": int((ratio > 1 + TIE).sum()),
        "slower": int(len(slower)),
        "median_loss": float(loss.median()) if len(loss) else None,
        "max_loss": float(loss.max()) if len(loss) else None,
    }


def table4(runs: Sequence[RunData]) -> PaperTable:
    ms = ("sd", "asp", "as2d")
    rows, csv = [], []
    total = {m: [0, 0] for m in ms}
    for r in runs:
        cells = []
        for m in ms:
            s = _slowdown(r, m)
            v = 100 * s["slower"] / s["windows"] if s and s["windows"] else None
            if s:
                total[m][0] += s["slower"]
                total[m][1] += s["windows"]
            cells.append(v)
        rows.append([r.name, *(_f(v, 1) for v in cells)])
        csv.append([r.name, *cells])
    if len(runs) > 1:  # over every phone/window pair, as the paper's "All"
        cells = [100 * total[m][0] / total[m][1] if total[m][1] else None for m in ms]
        rows.append(["All", *(_f(v, 1) for v in cells)])
        csv.append(["All", *cells])
    return PaperTable(
        4,
        "As²d reduces slowdowns. Windows below target-only TPS (%).",
        ["Phone", *(NAMES[m] for m in ms)],
        rows,
        ["phone", *ms],
        csv,
    )


def _all_pooled(runs: Sequence[RunData], m: str) -> float | None:
    """TPS pooled over every run's tokens and time (the paper's "All" phones row)."""
    tok = sum(r.tokens_s[m][0] for r in runs if m in r.tokens_s)
    sec = sum(r.tokens_s[m][1] for r in runs if m in r.tokens_s)
    return tok / sec if sec > 0 and all(m in r.tokens_s for r in runs) else None


def table5(runs: Sequence[RunData]) -> PaperTable:
    ms = ("as2d", "as2d-no-bc", "as2d-no-td")
    vals: list[tuple[str, list[float | None]]] = [
        (r.name, [r.pooled.get(m, {}).get("all") for m in ms]) for r in runs
    ]
    if len(runs) > 1:  # pooled over every phone's tokens and time, as the paper's "All"
        vals.append(("All", [_all_pooled(runs, m) for m in ms]))
    return PaperTable(
        5,
        "Removing TD lowers TPS most. Values show TPS after removing BC or TD.",
        ["Phone", "As²d", "−BC", "−TD"],
        [[name, *(_f(v) for v in vs)] for name, vs in vals],
        ["phone", *ms],
        [[name, *vs] for name, vs in vals],
    )


def _gain(r: RunData, d: str) -> float | None:
    """100·(TPS_As²d / max(TPS_SD, TPS_SpecASR) − 1), before rounding."""
    best = max(
        (v for m in BASELINES if (v := r.pooled.get(m, {}).get(d)) is not None), default=None
    )
    a = r.pooled.get("as2d", {}).get(d)
    return 100 * (a / best - 1) if a and best else None


def table8(runs: Sequence[RunData]) -> PaperTable:
    ds = [*_columns(runs), "all"]
    order = ("target-only", "sd", "asp", "as2d", "gain", "as2d-no-bc", "as2d-no-td")
    head = ["Method"] + [
        (f"{r.name} · {d}" if len(runs) > 1 else d)
        if d != "all"
        else (f"{r.name} · All" if len(runs) > 1 else "All")
        for r in runs
        for d in ds
    ]
    rows, csv = [], []
    for key in order:
        if key != "gain" and not any(key in r.pooled for r in runs):
            continue
        if key == "gain":
            vals = [_gain(r, d) for r in runs for d in ds]
            rows.append(["Gain (%)", *(_pct(v) for v in vals)])
        else:
            vals = [r.pooled.get(key, {}).get(d) for r in runs for d in ds]
            rows.append([NAMES[key], *(_f(v) for v in vals)])
        for i, r in enumerate(runs):
            csv.append([r.name, rows[-1][0], *vals[i * len(ds) : (i + 1) * len(ds)]])
    return PaperTable(
        8,
        "As²d improves pooled throughput over the baselines. Replay TPS; Standard SD pools "
        "tokens and time for each fixed K = 5, 6, 7, 8, then averages the four TPS values. "
        "Gain is the relative TPS increase of As²d over the best baseline (Standard SD or "
        "SpecASR), excluding ablations.",
        head,
        rows,
        ["phone", "method", *ds],
        csv,
    )


def table9(runs: Sequence[RunData]) -> PaperTable:
    ds = [*_columns(runs), "all"]
    head = ["Setting", *(d if d != "all" else "All" for d in ds)]
    rows: list[list[Any]] = []
    csv: list[list[Any]] = []
    for r in runs:
        if not r.sd_k:
            continue
        rows.append([f"**{r.name}**", *([""] * len(ds))])
        for k, by_d in r.sd_k.items():
            rows.append([f"K = {k}", *(_f(by_d.get(d)) for d in ds)])
            csv.append([r.name, f"K={k}", *(by_d.get(d) for d in ds)])
        cells = {d: [v for by_d in r.sd_k.values() if (v := by_d.get(d)) is not None] for d in ds}
        mean = {d: sum(v) / len(v) if v else None for d, v in cells.items()}
        rows.append(["Mean", *(_f(mean[d]) for d in ds)])
        rows.append(
            [
                "Range",
                *(f"{min(cells[d]):.2f}–{max(cells[d]):.2f}" if cells[d] else "—" for d in ds),
            ]
        )
        csv.append([r.name, "Mean", *(mean[d] for d in ds)])
        csv.append([r.name, "Range min", *(min(cells[d]) if cells[d] else None for d in ds)])
        csv.append([r.name, "Range max", *(max(cells[d]) if cells[d] else None for d in ds)])
    return PaperTable(
        9,
        "Standard SD throughput varies with fixed verification width on the same windows. "
        "Physical K includes one known root; each K pools tokens and decode time. Mean is "
        "the equal-weight mean of TPS at K = 5–8; Range is their spread, not run-to-run "
        "uncertainty.",
        head,
        rows,
        ["phone", "setting", *ds],
        csv,
    )


def table12(runs: Sequence[RunData]) -> PaperTable:
    rows, csv = [], []
    for r in runs:
        for i, m in enumerate(("sd", "asp", "as2d")):
            s = _slowdown(r, m)
            if s is None:
                continue
            rows.append(
                [
                    r.name if i == 0 else "",
                    NAMES[m],
                    str(s["faster"]),
                    str(s["slower"]),
                    "—" if s["median_loss"] is None else f"{s['median_loss']:.1f}%",
                    "—" if s["max_loss"] is None else f"{s['max_loss']:.1f}%",
                ]
            )
            csv.append(
                [r.name, m, s["windows"], s["faster"], s["slower"], s["median_loss"], s["max_loss"]]
            )
    return PaperTable(
        12,
        "The counts compare per-window throughput with target-only. Ties within 1e-9 count "
        "as neither; all windows are retained. Losses measure TPS reductions among slower "
        "windows.",
        ["Phone", "Method", "Faster", "Slower", "Median loss", "Max. loss"],
        rows,
        ["phone", "method", "windows", "faster", "slower", "median_loss_pct", "max_loss_pct"],
        csv,
        text_columns=2,
    )


def paper_tables(runs: Sequence[RunData]) -> list[PaperTable]:
    """The paper's tables in the paper's order."""
    return [table2(runs), table4(runs), table5(runs), table8(runs), table9(runs), table12(runs)]


def render_markdown(tables: Sequence[PaperTable], head: Sequence[str]) -> str:
    """``tables.md``: ``head`` (title and provenance lines), each table, then the note on
    the paper's tables this evaluation has no equivalent of."""
    out = list(head)
    for t in tables:
        out += ["", *t.markdown()]
    out += ["", NOT_HERE]
    return "\n".join(out) + "\n"


def csv_name(t: PaperTable) -> str:
    return f"table{t.number}.csv"


def write_csvs(tables: Sequence[PaperTable], folder: Path, *, force: bool = False) -> list[Path]:
    from as2d_cli.formats.common import write_atomic

    return [write_atomic(folder / csv_name(t), t.csv(), force=force) for t in tables]
