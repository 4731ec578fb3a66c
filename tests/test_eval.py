"""`as2d eval` on the committed example traces: selection when no deployment exists, the
summary table (golden), results never overwritten, JSON output, one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from as2d_cli.cli.main import main

DATA = Path(__file__).parent / "data"


@pytest.fixture()
def setup(tmp_path: Path) -> dict:
    tr = tmp_path / "traces"
    tr.mkdir()
    for split in ("dev", "val", "test"):
        shutil.copy(DATA / f"example-{split}.jsonl", tr)
    return {
        "traces": tr,
        "cal": tmp_path / "cal",
        "res": tmp_path / "res",
        "args": [
            "eval",
            "--phone",
            "k70",
            "--profile",
            str(DATA / "example-profile.yaml"),
            "--traces",
            str(tr),
            "--calibrations",
            str(tmp_path / "cal"),
            "--results",
            str(tmp_path / "res"),
            # The paper's alignment rules: the goldens hold the figures they gave before
            # suffix anchoring existed, which `--align paper` must reproduce exactly.
            "--align",
            "paper",
            # The example traces hold 7 dev windows (fewer than MIN_DEV_WINDOWS) and val does
            # not retain their selection: eval uses it only when told to (and records that).
            "--accept-unvalidated",
        ],
    }


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def test_eval_table_golden_and_results(setup, capsys) -> None:
    code, out, err = _run(setup["args"], capsys)
    assert code == 0, err
    assert "selecting one on the dev/val splits" in err
    golden = (DATA / "eval" / "table.golden.txt").read_text()
    assert out.startswith(golden)
    folders = list(setup["res"].iterdir())
    assert len(folders) == 1
    doc = json.loads((folders[0] / "results.json").read_text())
    assert doc["schema"] == "as2d.results" and doc["kind"] == "eval"
    res = doc["results"]
    methods = {m["method"]: m for m in res["methods"]}
    assert set(methods) == {"target-only", "sd", "asp", "as2d", "as2d-no-td", "as2d-no-bc"}
    assert methods["sd"]["configs"] == ["sd-k5", "sd-k6", "sd-k7", "sd-k8"]
    # The oracle is at least as fast as the fixed configuration it is compared with.
    assert res["oracle"]["tps_oracle"] >= res["oracle"]["tps_selected"] > 0
    assert res["oracle"]["tps_selected"] == pytest.approx(methods["as2d"]["tps"])
    assert (folders[0] / "cdf.png").read_bytes()[:4] == b"\x89PNG"
    # under the table and in the results: what it was computed from
    prov = res["provenance"]
    assert prov["profile"]["synthetic"] is True and prov["pair"]["name"] == "bundled"
    assert prov["deployment"]["validation_retained"] in (True, False) and len(prov["traces"]) == 3
    verdict = (
        "retained on validation" if prov["deployment"]["validation_retained"] else "NOT retained"
    )
    lines = out[len(golden) :].splitlines()[:3]
    assert [x.split()[0] for x in lines] == ["profile", "deployment", "traces"]
    assert "synthetic" in lines[0] and verdict in lines[1] and "model pair bundled" in lines[2]
    deps = list((setup["cal"]).rglob("deployment*.yaml"))
    assert len(deps) == 1

    # Second run: reuses the deployment chosen on this profile, writes a new folder.
    code, out2, err2 = _run(setup["args"] + ["--json"], capsys)
    assert code == 0 and "selecting" not in err2
    assert len(list(setup["res"].iterdir())) == 2
    assert json.loads(out2)["results"]["methods"][0]["tps"] == methods["target-only"]["tps"]
    assert len(list((setup["cal"]).rglob("deployment*.yaml"))) == 1


def test_tidy_tables_repool_to_the_results(setup, capsys) -> None:
    """pandas over per_window.csv (and the parquet copy) gives results.json's pooled figures."""
    import pandas as pd

    code, _, err = _run(setup["args"], capsys)
    assert code == 0, err
    folder = next(setup["res"].iterdir())
    res = json.loads((folder / "results.json").read_text())["results"]
    from as2d_cli.evaluate.tables import read_per_window

    per = read_per_window(folder / "per_window.csv")  # typed: the same frame as the parquet copy
    assert per.equals(pd.read_parquet(folder / "per_window.parquet"))
    assert set(per["split"]) == {"test"} and per["window"].nunique() == res["windows"]
    assert (per.groupby(["method", "config"])["window"].count() == res["windows"]).all()

    def pooled(rows: pd.DataFrame) -> float:
        by_config = rows.groupby("config").agg(tokens=("tokens", "sum"), ms=("time_ms", "sum"))
        return float(
            (by_config["tokens"] / (by_config["ms"] / 1e3)).mean()
        )  # SD: the mean over its K

    summary = pd.read_csv(folder / "summary.csv")
    for m in res["methods"]:
        rows = per[per["method"] == m["method"]]
        assert pooled(rows) == pytest.approx(m["tps"], rel=1e-9)
        for d, tps in m["tps_by_dataset"].items():
            assert pooled(rows[rows["dataset"] == d]) == pytest.approx(tps, rel=1e-9)
        got = summary[(summary["method"] == m["method"]) & (summary["dataset"] == "all")][
            "tps"
        ].item()
        assert got == pytest.approx(m["tps"], rel=1e-12)
    # the slower flag, per configuration: As²d's single configuration gives the table's count
    as2d = per[per["method"] == "as2d"]
    slow = next(m for m in res["methods"] if m["method"] == "as2d")["slower"]["slower"]
    assert int(as2d["slower"].sum()) == slow


def test_compare_two_profiles_golden_and_refusals(setup, capsys, tmp_path: Path) -> None:
    """`as2d compare` of the same windows priced by two profiles (the second's target 25 %
    slower): the table is golden; other windows or a folder without tables get one line."""
    import yaml

    code, _, err = _run(setup["args"], capsys)
    assert code == 0, err
    slow = yaml.safe_load((DATA / "example-profile.yaml").read_text())
    slow["costs"]["target_step_ms"] *= 1.25
    slow["costs"]["verify"]["idle_ms"] = {
        k: v * 1.25 for k, v in slow["costs"]["verify"]["idle_ms"].items()
    }
    (tmp_path / "slow.profile.yaml").write_text(yaml.safe_dump(slow))
    args = list(setup["args"])
    args[args.index("--profile") + 1] = str(tmp_path / "slow.profile.yaml")
    code, _, err = _run(args, capsys)
    assert code == 0, err
    a, b = sorted(setup["res"].iterdir())
    code, out, err = _run(["compare", str(a), str(b)], capsys)
    assert code == 0, err
    table = out.split("\n\nA: ")[0] + "\n"
    golden = DATA / "eval" / "compare.golden.txt"
    assert table == golden.read_text()
    code, out, _ = _run(["compare", str(a), str(b), "--json"], capsys)
    rows = {(r["method"], r["dataset"]): r for r in json.loads(out)["rows"]}
    to = rows[("target-only", "all")]
    assert to["ratio"] == pytest.approx(0.8, rel=1e-6) and to["ci_high"] < 1
    # 7 windows: the raw p passes, Holm's correction across the 36 tests does not
    assert to["p_value"] < 0.05 <= to["p_holm"] and not to["significant"]
    # a run whose table was edited after it was written (its manifest says so), and a
    # folder that is not a run, are refused in one line (other windows:
    # tests/test_results_integrity.py)
    other = tmp_path / "other"
    shutil.copytree(b, other)
    import pandas as pd

    per = pd.read_csv(other / "per_window.csv")
    per[per["window"] != per["window"].iloc[0]].to_csv(other / "per_window.csv", index=False)
    code, _, err = _run(["compare", str(a), str(other)], capsys)
    assert code == 2 and "per_window.csv has" in err and err.count("\n") == 1
    code, _, err = _run(["compare", str(a), str(tmp_path)], capsys)
    assert code == 2 and "no results.json" in err


def test_a_deployments_threshold_and_batch_reach_every_consumer(setup, tmp_path: Path) -> None:
    """Selected with a non-default confidence stop and batch, a deployment carries both to
    the replayed As²d run, its ablation's batch, the oracle sweep and the native runner."""
    from as2d_cli.engine.methods import DEFAULT_BATCH, DEFAULT_THRESHOLD, MethodSpec
    from as2d_cli.evaluate.native import native_commands
    from as2d_cli.evaluate.run import EvalSettings, run_eval
    from as2d_cli.formats.deployment_io import load_deployment
    from as2d_cli.replay.report import select_report, write_selection
    from native.protocol import decode_settings

    profile = DATA / "example-profile.yaml"
    files = sorted(setup["traces"].glob("*.jsonl"))
    th, batch = 0.6, 3
    assert (th, batch) != (DEFAULT_THRESHOLD, DEFAULT_BATCH)
    sel, rep = select_report(
        profile, files, settings=[MethodSpec("as2d", threshold=th, batch=batch)]
    )
    assert (
        (sel.threshold, sel.batch) == (th, batch)
        and rep["threshold"] == th
        and rep["batch"] == batch
    )
    dep_path = write_selection(sel, rep, profile, tmp_path / "deployment.yaml")
    dep = load_deployment(dep_path, profile=profile)
    assert (dep.threshold, dep.batch) == (th, batch)

    out = run_eval(
        EvalSettings(
            "k70",
            profile=profile,
            traces=setup["traces"],
            deployment=dep_path,
            results=tmp_path / "res",
            accept_unvalidated=True,  # 7 dev windows
        )
    )
    ev = out.evaluation
    as2d = ev.runs["as2d"].specs[0]
    assert (as2d.threshold, as2d.batch) == (th, batch) and ev.runs["as2d-no-bc"].specs[
        0
    ].batch == batch
    assert (ev.oracle["catalog"]["threshold"], ev.oracle["catalog"]["batch"]) == (th, batch)
    # the oracle's replay of the selected configuration is the As²d run itself
    assert ev.oracle["tps_selected"] == pytest.approx(ev.runs["as2d"].pooled_tps())
    doc = json.loads(out.results.read_text())["results"]["deployment"]
    assert (doc["threshold"], doc["batch"]) == (th, batch)
    # and the settings matter: the default ones replay to another time
    default = run_eval(
        EvalSettings(
            "k70",
            profile=profile,
            traces=setup["traces"],
            results=tmp_path / "res2",
            calibrations=tmp_path / "cal2",
            accept_unvalidated=True,
        )
    ).evaluation
    assert default.runs["as2d"].specs[0].batch == DEFAULT_BATCH

    import dataclasses

    # the example traces name the paper's sources; the runner serves its own (drafter)
    cmd = {
        "op": "decode",
        "window": "w",
        "method": "as2d",
        **native_commands(dep, 24)["as2d"],
        "source": "drafter",
    }
    assert decode_settings(cmd)["spec"].policy() == as2d.policy()
    assert decode_settings(cmd)["spec"] == dataclasses.replace(as2d, source="drafter")


def test_compare_native_uses_each_windows_median_repetition(tmp_path: Path, capsys) -> None:
    """`as2d compare --native` pools each window at the median of its repetitions (D.3):
    run B's As²d is 2x faster at the median, its one slow repetition does not count."""
    import pandas as pd

    from as2d_cli.evaluate.native import NATIVE_COLUMNS

    def run(name: str, as2d_ms: list[float]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "results.json").write_text(
            json.dumps({"kind": "eval", "results": {"split": "test", "datasets": ["read"]}})
        )
        rows = []
        for w in range(6):
            for rep in range(3):
                rows.append(
                    [
                        f"w{w}",
                        "read",
                        rep,
                        "target-only",
                        "target-only",
                        50,
                        1000.0 + w,
                        None,
                        None,
                        True,
                    ]
                )
                rows.append(
                    [
                        f"w{w}",
                        "read",
                        rep,
                        "as2d",
                        "as2d(drafter/b7)",
                        50,
                        as2d_ms[rep] + w,
                        None,
                        None,
                        True,
                    ]
                )
        pd.DataFrame(rows, columns=NATIVE_COLUMNS).to_csv(
            folder / "native_per_window.csv", index=False
        )
        return folder

    a, b = run("a", [1000.0, 1000.0, 1000.0]), run("b", [500.0, 500.0, 9000.0])
    code, out, err = _run(["compare", str(a), str(b), "--native", "--json"], capsys)
    assert code == 0, err
    rows = {(r["method"], r["dataset"]): r for r in json.loads(out)["rows"]}
    assert rows[("target-only", "all")]["ratio"] == pytest.approx(1.0)
    assert rows[("as2d", "all")]["ratio"] == pytest.approx(
        sum(1000.0 + w for w in range(6)) / sum(500.0 + w for w in range(6))
    )
    code, _, err = _run(["compare", str(a), str(tmp_path)], capsys)
    assert code == 2
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text("{}")
    code, _, err = _run(["compare", str(a), str(tmp_path / "c"), "--native"], capsys)
    assert code == 2 and "no native runs" in err


def test_paper_tables_golden_report_rerenders_and_rk_plot(
    setup, capsys, tmp_path: Path, monkeypatch
) -> None:
    code, _, err = _run(setup["args"], capsys)
    assert code == 0, err
    folder = next(setup["res"].iterdir())
    tables = (folder / "tables.md").read_text()
    body = tables.split("\n", 3)[3]  # past the title and the provenance line (paths of this run)
    assert body == (DATA / "eval" / "tables.golden.md").read_text()
    for png in ("cdf.png", "datasets.png", "rk.png"):
        assert (folder / png).read_bytes()[:4] == b"\x89PNG", png
    # `as2d report` renders the same tables from the stored files alone
    (folder / "tables.md").unlink()
    code, out, err = _run(["report", str(folder)], capsys)
    assert code == 0, err
    assert (folder / "tables.md").read_text() == tables
    assert "Table 4: As²d reduces slowdowns" in out
    prof = tmp_path / "p.profile.yaml"
    shutil.copy(DATA / "example-profile.yaml", prof)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)  # the figure goes to the current folder, not beside the profile
    code, out, err = _run(["plot", "rk", str(prof)], capsys)
    assert code == 0, err
    assert (here / "p.rk.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "p.rk.png").exists()
    code, _, err = _run(["plot", "rk", str(prof)], capsys)  # again: a new name, nothing lost
    assert code == 0 and len(list(here.glob("p*.rk.png"))) == 2
    code, _, err = _run(["plot", "rk", str(prof), "--out", str(here / "p.rk.png")], capsys)
    assert code == 2 and "never overwritten" in err


def test_regenerated_traces_get_a_fresh_selection(setup, capsys) -> None:
    code, _, err = _run(setup["args"], capsys)
    assert code == 0 and "selecting" in err
    # The dev traces change (regenerated): the deployment chosen on the old ones is stale.
    dev = setup["traces"] / "example-dev.jsonl"
    dev.write_text(dev.read_text() + "\n")
    code, _, err = _run(setup["args"], capsys)
    assert code == 0 and "selecting one on the dev/val splits" in err, err
    assert len(list((setup["cal"]).rglob("deployment*.yaml"))) == 2  # the old one is kept


def test_eval_errors_are_one_line(setup, capsys) -> None:
    args = setup["args"]
    code, out, err = _run(
        [
            "eval",
            "--phone",
            "nowhere",
            "--traces",
            str(setup["traces"]),
            "--calibrations",
            str(setup["cal"]),
        ],
        capsys,
    )
    assert code == 2 and "as2d calibrate --phone nowhere" in err and "Traceback" not in err
    code, out, err = _run(args + ["--split", "calib"], capsys)
    assert code == 2 and "no 'calib' windows" in err
    assert not setup["res"].exists() and not setup["cal"].exists()  # nothing written on failure


def test_native_summary_pools_each_windows_repetitions_and_reports_drift() -> None:
    """A window's agreement error pools its repetitions (time-weighted), the MAE averages
    windows, and the device's drift shows as target-only TPS per pass."""
    from as2d_cli.evaluate.native import METHODS, render_native, summarize

    rows = []
    # w1: two runs of 100 tokens, natively 0.1 s and 0.3 s (0.4 s), replayed 0.2 s each (0.4 s): runs −50 %
    # and +50 %, the window 0.
    # w2: one pass each, natively 0.1 s, replayed 0.125 s: −20 %.
    for m in METHODS:
        for _rep, (w, nat, rep_s) in enumerate([("w1", 0.1, 0.2), ("w2", 0.1, 0.125)]):
            rows.append(
                {
                    "window": w,
                    "rep": 0,
                    "method": m,
                    "divergence": None,
                    "res": {"n_tokens": 100, "time_ms": nat * 1e3},
                    "tps_native": 100 / nat,
                    "tps_replay": 100 / rep_s,
                    "error_percent": 100 * (nat / rep_s - 1),
                }
            )
        rows.append(
            {
                "window": "w1",
                "rep": 1,
                "method": m,
                "divergence": None,
                "res": {"n_tokens": 100, "time_ms": 300.0},
                "tps_native": 100 / 0.3,
                "tps_replay": 100 / 0.2,
                "error_percent": 100 * (0.3 / 0.2 - 1),
            }
        )
    s = summarize(rows)["methods"]["sd"]
    assert s["runs"] == 3 and s["windows"] == 2
    assert s["mae_percent"] == pytest.approx((0 + 20) / 2)
    assert s["mae_runs_percent"] == pytest.approx((50 + 20 + 50) / 3)
    summ = summarize(rows)
    assert summ["target_only_tps_per_pass"] == pytest.approx([200 / 0.2, 100 / 0.3])
    assert "device drift: target-only TPS per pass 1000.0 / 333.3" in render_native(summ)
    assert (
        render_native(summ) == (DATA / "eval" / "native.golden.txt").read_text()
    )  # the whole table


def test_native_summary_median_agreement_ignores_one_preempted_repetition() -> None:
    """D.3 compares the replay with the median native latency of the repetitions: one run
    preempted to 3× its time moves the pooled figure, not the median one."""
    from as2d_cli.evaluate.native import METHODS, render_native, summarize

    rows = []
    for m in METHODS:
        for rep, nat in enumerate([0.20, 0.22, 0.60, 0.18, 0.19]):  # replayed 0.2 s each time
            rows.append(
                {
                    "window": "w1",
                    "rep": rep,
                    "method": m,
                    "divergence": None,
                    "res": {"n_tokens": 100, "time_ms": nat * 1e3},
                    "tps_native": 100 / nat,
                    "tps_replay": 100 / 0.2,
                    "error_percent": 100 * (nat / 0.2 - 1),
                }
            )
    s = summarize(rows)["methods"]["as2d"]
    assert s["mae_median_percent"] == pytest.approx(0.0, abs=1e-9)
    assert s["pooled_error_median_percent"] == pytest.approx(0.0, abs=1e-9)
    assert s["mae_percent"] == pytest.approx(
        100 * (1.39 / 1.0 - 1)
    )  # pooled: the preempted run counts
    assert "MAE % (median)" in render_native(summarize(rows))


def test_native_summary_drift_adjusted_agreement_removes_the_devices_common_mode_speed() -> None:
    """The device runs 1.0× then 1.5× slower than the profile in two passes; target-only's
    replay misses by the drift alone, SD's replay is also 10 % optimistic of its own. The
    frozen-profile errors carry the drift; the drift-adjusted ones leave SD's 10 %."""
    from as2d_cli.evaluate.native import METHODS, render_native, summarize

    rows = []
    for rep, slow in enumerate([1.0, 1.5]):
        for w in ("w1", "w2"):
            for m in METHODS:
                rep_s = 0.2
                nat = (
                    rep_s * slow * (1.1 if m == "sd" else 1.0)
                )  # SD natively 10 % slower than its replay says
                rows.append(
                    {
                        "window": w,
                        "rep": rep,
                        "method": m,
                        "divergence": None,
                        "res": {"n_tokens": 100, "time_ms": nat * 1e3},
                        "tps_native": 100 / nat,
                        "tps_replay": 100 / rep_s,
                        "error_percent": 100 * (nat / rep_s - 1),
                    }
                )
    summ = summarize(rows)
    to, sd = summ["methods"]["target-only"], summ["methods"]["sd"]
    assert summ["drift_factor_per_pass"] == pytest.approx([1.0, 1.5])
    assert to["pooled_error_percent"] == pytest.approx(
        100 * (0.5 / 0.4 - 1)
    )  # the drift alone: +25 %
    assert to["pooled_error_drift_adjusted_percent"] == pytest.approx(0.0)
    assert to["mae_drift_adjusted_percent"] == pytest.approx(0.0)
    assert sd["mae_percent"] == pytest.approx(100 * (0.55 / 0.4 - 1))
    assert sd["mae_drift_adjusted_percent"] == pytest.approx(10.0)
    assert sd["pooled_error_drift_adjusted_percent"] == pytest.approx(10.0)
    assert "drift-adj" in render_native(summ) and "1.000 / 1.500" in render_native(summ)


def test_a_warm_up_divergence_is_reported_with_its_method() -> None:
    """Warm-up passes are not measured but their outputs are still checked: a difference
    there is listed, naming the method (not the divergent token, which the divergence
    record also calls ``method``)."""
    from as2d_cli.evaluate.native import METHODS, divergence, render_native, summarize

    ref = {"tokens": [5, 6, 7], "margins": [1.0, 0.5, 2.0]}
    d = divergence(ref, {"tokens": [5, 9, 7], "margins": [1.0, 0.4, 2.0]})
    rows = [
        {
            "window": "w1",
            "rep": 0,
            "method": m,
            "divergence": None,
            "res": {"n_tokens": 3, "time_ms": 3.0},
            "tps_native": 1000.0,
            "tps_replay": 1000.0,
            "error_percent": 0.0,
        }
        for m in METHODS
    ]
    summ = summarize(rows)
    summ["warmup_divergences"] = [{"window": "w1", "run": "sd", **d}]
    text = render_native(summ)
    assert (
        "DIVERGENCE sd on w1 (warm-up): position 1, target-only 6 (top-2 margin 0.5) vs 9 (margin 0.4)"
        in text
    )


def test_native_summary_reports_the_devices_repeatability_and_the_oracle_fit_floor() -> None:
    """Two figures tell device noise from calibration error: the split-half repeatability
    (even vs odd repetitions of the same requests) and the MAE of the target-only cost form
    fitted in hindsight to the native medians. Windows whose time is exactly linear in that
    form fit to 0; one window natively 20 % off the form shows in the floor; repetitions
    alternating 0.9× / 1.1× give a split-half of |0.9/1.1 − 1|."""
    from as2d_cli.evaluate.native import METHODS, render_native, summarize

    a, b, c = 0.7, 0.01, 0.03  # ms per step, per cached token, per audio second
    shapes = [(40, 5.0), (90, 6.0), (60, 11.0), (120, 14.0), (100, 19.0), (70, 8.0)]

    def rows_for(off: dict[int, float], wiggle: bool) -> list[dict]:
        rows = []
        for i, (n, audio) in enumerate(shapes):
            t = (a * n + b * n * (n - 1) / 2 + c * n * audio) * off.get(i, 1.0)
            for rep in range(4):
                f = (0.9 if rep % 2 == 0 else 1.1) if wiggle else 1.0
                for m in METHODS:
                    rows.append(
                        {
                            "window": f"w{i}",
                            "rep": rep,
                            "method": m,
                            "divergence": None,
                            "audio_s": audio,
                            "res": {"n_tokens": n, "time_ms": t * f},
                            "tps_native": n / (t * f / 1e3),
                            "tps_replay": n / (t / 1e3),
                            "error_percent": 0.0,
                        }
                    )
        return rows

    exact = summarize(rows_for({}, wiggle=False))
    fit = exact["target_only_oracle_fit"]
    assert fit["windows"] == 6 and fit["mae_percent"] == pytest.approx(0.0, abs=1e-6)
    assert (fit["step_ms"], fit["per_cached_token_ms"], fit["per_audio_s_ms"]) == pytest.approx(
        (a, b, c)
    )
    assert exact["methods"]["sd"]["split_half_percent"] == pytest.approx(0.0)
    off = summarize(rows_for({2: 1.2}, wiggle=False))["target_only_oracle_fit"]
    assert off["mae_percent"] > 2.0  # one window the form cannot follow
    noisy = summarize(rows_for({}, wiggle=True))
    assert noisy["methods"]["as2d"]["split_half_percent"] == pytest.approx(100 * abs(0.9 / 1.1 - 1))
    text = render_native(noisy)
    assert "split-half %" in text and "target-only oracle fit" in text


def test_replay_gap_pools_each_figure_and_measures_publication_lags() -> None:
    """replay ÷ native per pooled figure; publication lags pair the i-th publications."""
    from as2d_cli.evaluate.replay_gap import gap_summary, render_gap

    def facts(t, v, rounds, acc, pubs, fin):
        return {
            "time_ms": t,
            "verifier_ms": v,
            "not_verifying_ms": t - v,
            "rounds": rounds,
            "accepted": acc,
            "proposed": acc + 2,
            "publications_ms": pubs,
            "producer_finished_ms": fin,
        }

    rows = [
        {
            "method": "as2d",
            "native_facts": facts(100.0, 90.0, 10, 20, [10.0, 30.0, 60.0], 70.0),
            "replay_facts": facts(80.0, 72.0, 8, 24, [5.0, 20.0], 50.0),
        },
        {
            "method": "as2d",
            "native_facts": facts(300.0, 270.0, 30, 40, [40.0], 90.0),
            "replay_facts": facts(300.0, 270.0, 30, 40, [40.0, 80.0], 90.0),
        },
        {
            "method": "target-only",
            "native_facts": facts(50.0, 50.0, 9, 0, [], None),
            "replay_facts": facts(55.0, 55.0, 9, 0, [], None),
        },
        {
            "method": "sd",
            "native_facts": None,
            "replay_facts": None,
        },  # a row without figures: skipped
    ]
    g = gap_summary(rows)
    assert set(g) == {"as2d", "target-only"}
    a = g["as2d"]
    assert a["runs"] == 2 and a["time_ms"]["ratio"] == pytest.approx(380 / 400)
    assert a["verifier_ms"]["ratio"] == pytest.approx(342 / 360) and a["not_verifying_ms"][
        "ratio"
    ] == pytest.approx(38 / 40)
    assert a["rounds"]["ratio"] == pytest.approx(38 / 40) and a["accepted"][
        "ratio"
    ] == pytest.approx(64 / 60)
    assert a["publications"] == 3  # matched pairs only: 2 + 1
    assert a["publication_lag_ms"] == pytest.approx(5.0)  # lags 5, 10, 0
    assert a["first_publication_lag_ms"] == pytest.approx(2.5)  # 5 and 0
    assert a["producer_finish_lag_ms"] == pytest.approx(10.0)  # 20 and 0
    t = g["target-only"]
    assert (
        t["time_ms"]["ratio"] == pytest.approx(1.1)
        and t["publications"] == 0
        and t["publication_lag_ms"] is None
    )
    text = "\n".join(render_gap(g))
    assert "as2d" in text and "+5.0, +2.5, +10.0 (3 publications)" in text and "1.100" in text
    assert (
        "20.0/19.0" in text and "0.0/0.0" in text
    )  # T − V per run: as2d (40 vs 38 over 2), target-only
    assert render_gap({}) == []
