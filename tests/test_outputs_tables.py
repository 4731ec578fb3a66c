"""The paper's tables (tables.md and a CSV each), the tidy per-window table with every
setting in its own typed column, and `as2d compare`'s statistics, from one golden
evaluation per module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from outputs_golden import DATA, golden_run, run

TABLES = (2, 4, 5, 8, 9, 12)


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return golden_run(tmp_path_factory.mktemp("tables"))


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())["results"]


def test_tables_md_names_the_papers_tables_golden(golden: Path) -> None:
    md = (golden / "tables.md").read_text()
    body = md.split("\n", 3)[3]  # past the title and the provenance line (paths of this run)
    assert body == (DATA / "eval" / "tables.golden.md").read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert [h.split(":")[0] for h in heads] == [f"## Table {n}" for n in TABLES]
    assert "Tables 1 and 8" not in md and md.count("no equivalent") == 1


def test_each_table_is_also_a_csv_of_its_unrounded_values(golden: Path) -> None:
    import pandas as pd

    res = _results(golden)
    tps = {m["method"]: m for m in res["methods"]}
    name = res["provenance"]["profile"]["device"]
    t8 = pd.read_csv(golden / "table8.csv").set_index(["phone", "method"])
    assert t8.loc[(name, "As²d"), "all"] == pytest.approx(tps["as2d"]["tps"], rel=1e-12)
    assert t8.loc[(name, "Standard SD"), "all"] == pytest.approx(tps["sd"]["tps"], rel=1e-12)
    for d, v in tps["asp"]["tps_by_dataset"].items():
        assert t8.loc[(name, "SpecASR"), d] == pytest.approx(v, rel=1e-12)
    t9 = pd.read_csv(golden / "table9.csv").set_index("setting")
    assert list(t9.index) == ["K=5", "K=6", "K=7", "K=8", "Mean", "Range min", "Range max"]
    assert t9.loc["Mean", "all"] == pytest.approx(tps["sd"]["tps"], rel=1e-12)
    ks = t9.loc[["K=5", "K=6", "K=7", "K=8"], "all"]
    assert t9.loc["Range min", "all"] == ks.min() and t9.loc["Range max", "all"] == ks.max()
    t2 = pd.read_csv(golden / "table2.csv").set_index("dataset")
    assert t2.loc["all", name] == pytest.approx(res["oracle"]["gap_percent"], rel=1e-9)
    t12 = pd.read_csv(golden / "table12.csv").set_index("method")
    slower = tps["sd"]["slower"]
    assert (
        t12.loc["sd", "faster"] == slower["faster"] and t12.loc["sd", "slower"] == slower["slower"]
    )
    t4 = pd.read_csv(golden / "table4.csv").set_index("phone")
    assert t4.loc[name, "sd"] == pytest.approx(100 * slower["slower"] / res["windows"])
    t5 = pd.read_csv(golden / "table5.csv").set_index("phone")
    assert t5.loc[name, "as2d-no-td"] == pytest.approx(tps["as2d-no-td"]["tps"], rel=1e-12)


def test_table_2_per_dataset_pools_the_oracles_windows(golden: Path) -> None:
    from as2d_cli.evaluate.tables import read_per_window

    per = read_per_window(golden / "per_window.parquet")
    res = _results(golden)
    o = per[per["method"] == "oracle"]
    a = per[per["method"] == "as2d"]
    assert len(o) == res["windows"] and (o["tokens"].to_numpy() == a["tokens"].to_numpy()).all()
    # never slower than the fixed configuration on any window (it is among the choices)
    assert (o["time_ms"].to_numpy() <= a["time_ms"].to_numpy() * (1 + 1e-12)).all()
    assert o["tokens"].sum() / (o["time_ms"].sum() / 1e3) == pytest.approx(
        res["oracle"]["tps_oracle"], rel=1e-9
    )
    import pandas as pd

    t2 = pd.read_csv(golden / "table2.csv").set_index("dataset")
    for d in res["datasets"]:
        od, ad = o[o["dataset"] == d], a[a["dataset"] == d]
        gap = 100 * (
            1
            - (ad["tokens"].sum() / ad["time_ms"].sum())
            / (od["tokens"].sum() / od["time_ms"].sum())
        )
        assert t2.loc[d].iloc[0] == pytest.approx(gap, abs=1e-9)


def test_tidy_table_has_every_setting_in_a_typed_column_and_round_trips(golden: Path) -> None:
    import pandas as pd
    import pyarrow.parquet as pq

    from as2d_cli.evaluate.tables import PER_WINDOW_COLUMNS, read_per_window

    csv = read_per_window(golden / "per_window.csv")
    parquet = pd.read_parquet(golden / "per_window.parquet")
    pd.testing.assert_frame_equal(csv, parquet, check_exact=True)
    assert list(csv.columns) == PER_WINDOW_COLUMNS
    assert not [c for c in csv.columns if csv[c].dtype == object]  # no mixed-type columns
    meta = pq.read_schema(golden / "per_window.parquet").metadata
    assert meta[b"as2d.schema"] == b"as2d.per_window" and meta[b"as2d.version"] == b"3"
    res = _results(golden)
    dep = res["deployment"]
    as2d = csv[csv["method"] == "as2d"]
    assert set(as2d["budget"]) == {dep["budget"]} and set(as2d["batch"]) == {dep["batch"]}
    assert set(as2d["align"]) == {"paper"} and set(as2d["threshold"]) == {dep["threshold"]}
    assert set(as2d["history"]) == {dep["history"]}
    oracle = csv[csv["method"] == "oracle"]
    assert set(oracle["history"]) == {res["oracle"]["catalog"]["history"]}
    assert csv.loc[~csv["method"].isin(["as2d", "oracle"]), "history"].isna().all()
    sd = csv[csv["method"] == "sd"]
    assert sorted(set(sd["k"])) == [5, 6, 7, 8] and sd["budget"].isna().all()
    assert sd["source"].isna().all() and sd["align"].isna().all()
    assert set(csv["device"]) == {"k70-synthetic"} and set(csv["profile"]) == {
        "example-profile.yaml"
    }
    assert set(csv["task"]) == {"transcribe"} and set(csv["pair"]) == {"bundled"}
    # the per-window SD K5–8 mean, the figure the CDF and Table 4 count
    mean = sd.groupby("window")["tps"].mean()
    stored = sd.groupby("window")["window_tps"].first()
    assert (mean - stored).abs().max() < 1e-12
    cdf = {r["window"]: r["sd"] for r in res["per_window"]}
    assert all(stored[w] == pytest.approx(v, rel=1e-12) for w, v in cdf.items())
    assert csv.loc[csv["method"] == "target-only", "slower"].isna().all()


def test_report_of_two_runs_sets_the_phones_side_by_side(
    tmp_path: Path, golden: Path, capsys
) -> None:
    import yaml

    slow = yaml.safe_load((DATA / "example-profile.yaml").read_text())
    slow["device"]["name"] = "slowphone"
    slow["costs"]["target_step_ms"] *= 1.25
    slow["costs"]["verify"]["idle_ms"] = {
        k: v * 1.25 for k, v in slow["costs"]["verify"]["idle_ms"].items()
    }
    (tmp_path / "slow.profile.yaml").write_text(yaml.safe_dump(slow))
    other = golden_run(tmp_path, profile=tmp_path / "slow.profile.yaml")
    code, out, err = run(
        ["report", str(golden), str(other), "--out", str(tmp_path / "rep"), "--format", "svg"],
        capsys,
    )
    assert code == 0, err
    (dest,) = (tmp_path / "rep").iterdir()
    md = (dest / "tables.md").read_text()
    assert "| Dataset | k70-synthetic | slowphone |" in md
    assert "| Phone | Standard SD | SpecASR | As²d |" in md and "\n| All |" in md
    assert "| Method | k70-synthetic · librispeech |" in md and "slowphone · All |" in md
    assert "| **slowphone** |" in md  # Table 9: a block of rows per phone
    import pandas as pd

    t5 = pd.read_csv(dest / "table5.csv").set_index("phone")
    assert list(t5.index) == ["k70-synthetic", "slowphone", "All"]
    assert t5.loc["slowphone", "as2d"] < t5.loc["k70-synthetic", "as2d"]
    lo, hi = sorted(t5.loc[["k70-synthetic", "slowphone"], "as2d"])
    assert lo < t5.loc["All", "as2d"] < hi  # pooled over both phones' tokens and time


def test_report_rerenders_the_same_tables_and_adds_vector_figures(golden: Path, capsys) -> None:
    before = (golden / "tables.md").read_text()
    csv8 = (golden / "table8.csv").read_bytes()
    (golden / "tables.md").unlink()
    code, out, err = run(["report", str(golden)], capsys)
    assert code == 0, err
    assert (golden / "tables.md").read_text() == before and (
        golden / "table8.csv"
    ).read_bytes() == csv8
    assert (golden / "cdf.pdf").is_file() and (golden / "rk.svg").is_file()
    from as2d_cli.evaluate.compare import verify_run

    assert verify_run(golden) is not None  # complete again, the new files vouched for


def test_compare_holm_effect_sizes_and_too_few_windows(
    tmp_path: Path, golden: Path, capsys
) -> None:
    import yaml

    slow = yaml.safe_load((DATA / "example-profile.yaml").read_text())
    slow["costs"]["target_step_ms"] *= 1.25
    slow["costs"]["verify"]["idle_ms"] = {
        k: v * 1.25 for k, v in slow["costs"]["verify"]["idle_ms"].items()
    }
    (tmp_path / "slow.profile.yaml").write_text(yaml.safe_dump(slow))
    other = golden_run(tmp_path, profile=tmp_path / "slow.profile.yaml")
    code, out, err = run(["compare", str(golden), str(other), "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    rows = res["rows"]
    ps = [r["p_value"] for r in rows]
    from as2d_cli.stats.compare import holm

    assert [r["p_holm"] for r in rows] == holm(ps) and all(
        r["p_holm"] >= r["p_value"] for r in rows
    )
    to = next(r for r in rows if (r["method"], r["dataset"]) == ("target-only", "all"))
    # every window is slower in B: the effect size is −1 and its interval excludes 0
    assert to["effect_r"] == -1.0 and to["effect_ci_high"] < 0 and to["ci_high"] < 1
    assert to["p_value"] < 0.05 <= to["p_holm"] and not to["significant"] and not to["too_few"]
    # one window of a dataset can never give p < 0.05: said so, never called significant
    one = next(r for r in rows if r["windows"] == 1)
    assert one["too_few"] and not one["significant"]
    code, md, err = run(["compare", str(golden), str(other), "--markdown"], capsys)
    head = md.splitlines()[0].strip("|").split("|")
    assert all(h.strip() for h in head) and "p (Holm)" in md and "effect r" in md
    assert "Too few windows:" in md


def test_holm_and_rank_biserial_by_hand() -> None:
    import numpy as np

    from as2d_cli.stats.compare import holm, rank_biserial, wilcoxon_min_p

    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # step-down stays monotone
    # ranks of |d| among non-zero differences 1, 2, 3: (1 + 3 − 2) / 6
    assert float(rank_biserial(np.array([1.0, -2.0, 3.0, 0.0]))) == pytest.approx(2 / 6)
    assert np.isnan(rank_biserial(np.zeros(3)))
    assert wilcoxon_min_p(5) == 0.0625 and wilcoxon_min_p(6) == 0.03125


def test_report_bad_input_is_one_line(tmp_path: Path, golden: Path, capsys) -> None:
    s = tmp_path / "s"
    s.mkdir()
    (s / "stream.json").write_text("{}")
    code, _, err = run(["report", str(golden), str(s)], capsys)
    assert code == 2 and "not both" in err and err.count("\n") == 1
    code, _, err = run(["report", str(golden), str(golden)], capsys)
    assert code == 2 and "twice" in err and err.count("\n") == 1
    code, _, err = run(["report", str(tmp_path / "missing")], capsys)
    assert code == 2 and err.count("\n") == 1


def test_the_data_dictionary_in_the_docs_is_the_tables_own() -> None:
    """docs/formats.md lists every per_window column with its dtype, in order."""
    from as2d_cli.evaluate.tables import PER_WINDOW

    doc = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()
    section = doc.split("### `per_window` — the data dictionary", 1)[1].split("###", 1)[0]
    rows = [r.split("|") for r in section.splitlines() if r.startswith("| `")]
    assert [(r[1].strip(" `"), r[2].strip()) for r in rows] == [(c, t) for c, t, _ in PER_WINDOW]


def test_a_version_2_tidy_table_reads_with_history_off(golden: Path, tmp_path: Path) -> None:
    """Version 2 had no ``history``: As²d and the oracle ran without history candidates."""
    import pandas as pd

    from as2d_cli.evaluate.tables import read_per_window

    now = read_per_window(golden / "per_window.csv")
    old = now.drop(columns="history")
    old.to_csv(tmp_path / "per_window.csv", index=False)
    old.to_parquet(tmp_path / "per_window.parquet", index=False)
    for name in ("per_window.csv", "per_window.parquet"):
        back = read_per_window(tmp_path / name)
        assert list(back.columns) == list(now.columns)
        ran = back["method"].isin(["as2d", "oracle"])
        assert back.loc[ran, "history"].notna().all() and not back.loc[ran, "history"].any()
        assert back.loc[~ran, "history"].isna().all()
        pd.testing.assert_frame_equal(back.drop(columns="history"), old, check_exact=True)
