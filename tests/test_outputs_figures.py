"""Every figure, rendered from one golden evaluation (and small stream documents): the
files (PNG, PDF, SVG; size), axis labels, legend entries, and that no tick labels overlap,
checked on the matplotlib figures themselves (their text bounding boxes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from outputs_golden import golden_run, run, stream_doc

KB = 1024


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return golden_run(tmp_path_factory.mktemp("figs"))


@pytest.fixture()
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The figures drawn while the test runs, kept open for inspection (then closed)."""
    import matplotlib.pyplot as plt

    kept: list[Any] = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    monkeypatch.undo()
    for f in kept:
        plt.close(f)


def _texts(fig: Any) -> dict[str, Any]:
    """Axis labels, titles and legend entries of a figure."""
    legends = [lg for lg in [*(ax.get_legend() for ax in fig.axes), *fig.legends] if lg]
    return {
        "xlabels": [ax.get_xlabel() for ax in fig.axes],
        "ylabels": [ax.get_ylabel() for ax in fig.axes],
        "titles": [ax.get_title() for ax in fig.axes],
        "legend": [t.get_text() for lg in legends for t in lg.get_texts()],
    }


def _check_files(paths: list[Path], min_kb: float = 5) -> None:
    heads = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml"}
    for p in paths:
        data = p.read_bytes()
        assert data[:5].startswith(heads[p.suffix]), p
        assert len(data) > min_kb * KB, (p, len(data))


def test_eval_figures_read_cleanly_in_every_format(golden: Path, figures: list, capsys) -> None:
    from as2d_cli.figures import overlapping_ticks

    code, _, err = run(["report", str(golden)], capsys)
    assert code == 0, err
    names = [f"{n}.{x}" for n in ("cdf", "datasets", "rk") for x in ("png", "pdf", "svg")]
    _check_files([golden / n for n in names])
    cdf, datasets, rk = figures  # drawn in this order by the report
    for fig in figures:
        assert overlapping_ticks(fig) == []
    t = _texts(cdf)
    assert t["xlabels"] == ["decoding throughput per window (tokens/s)"]
    assert t["ylabels"] == ["fraction of windows"]
    assert t["legend"] == [
        "Target-only",
        "Standard SD (K5–8 mean)",
        "SpecASR",
        "As²d w/o TD",
        "As²d w/o BC",
        "As²d",
    ]
    t = _texts(datasets)
    assert t["ylabels"] == ["pooled decoding throughput (tokens/s)"]
    assert t["legend"][-1] == "As²d" and "as2d" not in t["legend"]
    # the legend covers no bar (it sits outside the axes)
    datasets.canvas.draw()
    ax = datasets.axes[0]
    box = ax.get_legend().get_window_extent()
    assert not any(box.overlaps(bar.get_window_extent()) for bar in ax.patches)
    assert _texts(rk)["xlabels"] == ["physical verification width K (incl. the known root)"]
    # the same colour for a method in every figure
    cdf_colors = {ln.get_label(): ln.get_color() for ln in cdf.axes[0].get_lines()}
    bar_colors = {c.get_label(): c.patches[0].get_facecolor() for c in datasets.axes[0].containers}
    from matplotlib.colors import to_rgba

    assert all(to_rgba(cdf_colors[k]) == bar_colors[k] for k in bar_colors)
    # SVG keeps text as text: the labels can be edited and searched
    svg = (golden / "cdf.svg").read_text()
    assert "fraction of windows" in svg and "As²d" in svg
    assert "<dc:date>" not in svg  # reproducible: no creation date inside


def test_rk_tick_labels_never_overlap_however_many_widths(tmp_path: Path, figures: list) -> None:
    from as2d_cli.figures import overlapping_ticks, rk_figure

    idle = {k: [30.0 + 4.0 * k, 31.0 + 4.0 * k] for k in range(1, 33)}
    paths = rk_figure(idle, tmp_path / "rk", ["png", "pdf"])
    _check_files(paths)
    (fig,) = figures
    assert overlapping_ticks(fig) == []
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks[0] == "1" and len(ticks) <= 12


def test_overlap_check_finds_overlapping_ticks(figures: list) -> None:
    """The check itself: crowded labels on a narrow axis are caught."""
    import matplotlib.pyplot as plt

    from as2d_cli.figures import overlapping_ticks

    fig, ax = plt.subplots(figsize=(1.5, 1.5))
    ax.set_xticks(range(30), [f"label{k}" for k in range(30)])
    assert overlapping_ticks(fig)
    plt.close(fig)


def test_stream_figure_keeps_rtf_1_and_drops_an_empty_temperature_panel(
    tmp_path: Path, figures: list
) -> None:
    from as2d_cli.figures import overlapping_ticks, stream_figure

    paths = stream_figure(
        [stream_doc("As²d (drafter, b7)", 0.6, sensor=False)], tmp_path / "s", ["svg"]
    )
    _check_files(paths)
    (fig,) = figures
    assert len(fig.axes) == 5  # no temperature panel without a sensor
    rtf = fig.axes[2]
    lo, hi = rtf.get_ylim()
    assert any(list(ln.get_ydata()) == [1.0, 1.0] for ln in rtf.get_lines()) and lo <= 1.0 < hi
    assert "no temperature sensor" in " ".join(t.get_text() for t in fig.texts)
    assert overlapping_ticks(fig) == []
    stream_figure(
        [
            stream_doc("cooled", 0.9, sensor=True),
            stream_doc("uncooled", 1.2, sensor=True),
        ],
        tmp_path / "two",
        ["png"],
    )
    two = figures[1]
    assert len(two.axes) == 6 and two.axes[5].get_title().startswith("(f) Temperature")
    assert _texts(two)["legend"] == ["cooled (local)", "uncooled (local)", "RTF 1"]


def test_native_figure_names_methods_and_device_not_ids(tmp_path: Path, figures: list) -> None:
    import pandas as pd

    from as2d_cli.evaluate.native import NATIVE_COLUMNS
    from as2d_cli.evaluate.report import plot_native

    rows = [
        [
            f"w{w}",
            "read",
            r,
            m,
            m,
            50,
            1000.0 + 10 * w + r,
            50 / (1 + 0.01 * w),
            49 / (1 + 0.01 * w),
            True,
        ]
        for w in range(4)
        for r in range(3)
        for m in ("target-only", "as2d")
    ]
    table = tmp_path / "native_per_window.csv"
    pd.DataFrame(rows, columns=NATIVE_COLUMNS).to_csv(table, index=False)
    paths = plot_native(
        table, tmp_path / "nvr", "Redmi K70 Pro · profile k70.profile.yaml", formats=("pdf",)
    )
    _check_files(paths, min_kb=3)
    (fig,) = figures
    t = _texts(fig)
    assert t["legend"] == ["Target-only", "As²d", "replay = native"]
    assert t["xlabels"][0].startswith("native throughput")


def test_report_of_two_runs_has_a_cdf_panel_per_device(
    tmp_path: Path, figures: list, capsys
) -> None:
    a = golden_run(tmp_path)
    b = golden_run(tmp_path)
    code, out, err = run(
        ["report", str(a), str(b), "--out", str(tmp_path / "rep"), "--format", "pdf"], capsys
    )
    assert code == 0, err
    (dest,) = (tmp_path / "rep").iterdir()
    _check_files([dest / "cdf.pdf", dest / "datasets.pdf"])
    assert not (dest / "cdf.png").exists()  # --format: that format only
    cdf = figures[-2]  # the report's CDF (the evaluations drew theirs first), then datasets
    assert len(cdf.axes) == 2 and all(ax.get_title() for ax in cdf.axes)
    doc = json.loads((dest / "report.json").read_text())
    assert doc["schema"] == "as2d.report" and doc["runs"] == [str(a), str(b)]


def test_report_of_two_streams_overlays_figure_9_and_writes_table_16(
    tmp_path: Path, capsys
) -> None:
    folders = []
    for name, rtf in (("cooled", 0.9), ("uncooled", 1.2)):
        f = tmp_path / name
        f.mkdir()
        (f / "stream.json").write_text(json.dumps(stream_doc(name, rtf, sensor=True)))
        folders.append(str(f))
    code, out, err = run(["report", *folders, "--out", str(tmp_path / "rep")], capsys)
    assert code == 0, err
    (dest,) = (tmp_path / "rep").iterdir()
    _check_files([dest / f"stream.{x}" for x in ("png", "pdf", "svg")])
    md = (dest / "tables.md").read_text()
    assert "| Metric | cooled (local) | uncooled (local) |" in md
    assert "| Active / resource RTF | 0.900 / 0.950 | 1.200 / 1.250 |" in md
    import pandas as pd

    csv = pd.read_csv(dest / "table16.csv")
    assert list(csv.columns) == ["metric", "cooled (local)", "uncooled (local)"]
    assert csv.set_index("metric").loc["active_rtf"].tolist() == [0.9, 1.2]
    # one stream, or a stream beside an evaluation: one line each
    code, _, err = run(["report", folders[0]], capsys)
    assert code == 2 and "one stream" in err and err.count("\n") == 1


def test_eval_and_plot_write_the_format_asked_for(tmp_path: Path, capsys) -> None:
    from outputs_golden import DATA, eval_args

    code, _, err = run([*eval_args(tmp_path), "--format", "pdf"], capsys)
    assert code == 0, err
    (folder,) = (tmp_path / "res").iterdir()
    assert {p.suffix for p in folder.glob("cdf.*")} == {".pdf"}
    _check_files([folder / "cdf.pdf", folder / "datasets.pdf", folder / "rk.pdf"])
    from as2d_cli.evaluate.compare import verify_run

    assert verify_run(folder) is not None  # the manifest vouches for the PDFs
    code, _, err = run(
        ["plot", "rk", str(DATA / "example-profile.yaml"), "--out", str(tmp_path / "r.svg")], capsys
    )
    assert code == 0, err
    _check_files([tmp_path / "r.svg"])
    code, _, err = run(["eval", "--format", "jpg"], capsys)
    assert code == 2 and "jpg" in err
