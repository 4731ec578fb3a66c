"""`as2d replay` and `as2d select-budget` through the real CLI: golden JSON on the
committed example, one-line errors for bad input, nothing written on failure."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).resolve().parent / "data" / "replay"
GOLDEN = DATA / "golden"
UPDATE = os.environ.get("AS2D_UPDATE_GOLDEN") == "1"


def same(got, want, path: str = "$") -> None:
    """Exact for ints, strings, booleans and structure; floats to 1e-12 relative (the
    summation order of a pooled figure may move its last bit)."""
    if isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, (int, float)) and got == pytest.approx(want, rel=1e-12, abs=0), path
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), path
        for k in want:
            same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{path}[{i}]")
    else:
        assert got == want and type(got) is type(want), path


def as2d(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *args], cwd=cwd, capture_output=True, text=True
    )


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    for name in ("profile.yaml", "traces.jsonl.gz"):
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path


# The paper's alignment rules keep the figures these goldens had before suffix anchoring
# (docs/engine.md); "as2d-suffix" is the default rules.
GOLDENS = {
    "target-only": [],
    "sd": ["--no-spans"],
    "asp": [],
    "as2d": ["--align", "paper"],
    "as2d-suffix": [],
    "as2d-parakeet-b3": ["--source", "parakeet", "--budget", "3", "--align", "paper"],
    "as2d-no-td": [],
    "as2d-no-bc": ["--align", "paper"],
}


@pytest.mark.parametrize("name", list(GOLDENS))
def test_replay_json_matches_golden(name: str) -> None:
    method = (
        name if name in ("target-only", "sd", "asp", "as2d", "as2d-no-td", "as2d-no-bc") else "as2d"
    )
    proc = as2d(
        "replay",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--method",
        method,
        *GOLDENS[name],
        "--json",
        cwd=DATA,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    path = GOLDEN / f"replay-{name}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1) + "\n")
    # If an intended change moves these figures, regenerate with AS2D_UPDATE_GOLDEN=1.
    same(got, json.loads(path.read_text()))
    # Structural facts that must hold whatever the numbers.
    assert got["schema"] == "as2d.replay-report" and got["version"] == 2
    assert got["align"] == (
        None
        if method in ("target-only", "sd", "asp", "as2d-no-td")
        else "paper"
        if "paper" in GOLDENS[name]
        else "suffix"
    )
    assert len(got["windows"]) == 12
    for w in got["windows"]:
        for c in w["configs"]:
            a = c["accounting_ns"]
            assert a["T"] == a["D"] + a["V"] - a["O"] + a["H"] == c["time_ns"]


SHARED = (
    DATA.parent
)  # the formats engineer's committed example (dev/val/test files, synthetic K70 profile)


@pytest.mark.parametrize(
    "method,extra", [("as2d", []), ("sd", ["--no-spans"]), ("asp", ["--no-spans"])]
)
def test_replay_json_on_the_shared_example_matches_golden(method: str, extra: list[str]) -> None:
    proc = as2d(
        "replay",
        "--profile",
        "example-profile.yaml",
        "--traces",
        "example-test.jsonl",
        "--method",
        method,
        *extra,
        "--json",
        cwd=SHARED,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    path = GOLDEN / f"example-test-{method}.json"
    if UPDATE:
        path.write_text(json.dumps(got, indent=1) + "\n")
    same(got, json.loads(path.read_text()))
    assert {w["split"] for w in got["windows"]} == {"test"}


def test_select_budget_over_separate_dev_and_val_files(tmp_path: Path) -> None:
    for name in ("example-profile.yaml", "example-dev.jsonl", "example-val.jsonl"):
        shutil.copy(SHARED / name, tmp_path / name)
    proc = as2d(
        "select-budget",
        "--profile",
        "example-profile.yaml",
        "--traces",
        "example-dev.jsonl",
        "--traces",
        "example-val.jsonl",
        "--budgets",
        "1-10",
        "--processes",
        "2",
        "--out",
        "dep.yaml",
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["dev"]["windows"] > 0 and rep["val"]["windows"] > 0
    assert [r["path"] for r in rep["inputs"]["traces"]] == [
        "example-dev.jsonl",
        "example-val.jsonl",
    ]
    assert (tmp_path / "dep.yaml").exists()
    dup = as2d(
        "select-budget",
        "--profile",
        "example-profile.yaml",
        "--traces",
        "example-dev.jsonl",
        "--traces",
        "example-dev.jsonl",
        "--out",
        "dep2.yaml",
        cwd=tmp_path,
    )
    _one_line_error(dup, "appears in")
    assert not (tmp_path / "dep2.yaml").exists()


def test_sd_summary_is_mean_of_per_k_pooled_tps_and_window_mean() -> None:
    rep = json.loads((GOLDEN / "replay-sd.json").read_text())
    per_k = [c["tps"] for c in rep["summary"]["configs"]]
    assert [c["config"] for c in rep["summary"]["configs"]] == ["sd-k5", "sd-k6", "sd-k7", "sd-k8"]
    assert rep["summary"]["tps"] == pytest.approx(sum(per_k) / 4, rel=1e-12)
    for c in rep["summary"]["configs"]:
        toks = sum(w["configs"][0]["tokens"] for w in rep["windows"])
        t = sum(
            next(x for x in w["configs"] if x["config"] == c["config"])["time_ns"]
            for w in rep["windows"]
        )
        assert c["tps"] == pytest.approx(toks / (t / 1e9), rel=1e-12)
    for w in rep["windows"]:
        assert w["tps"] == pytest.approx(sum(c["tps"] for c in w["configs"]) / 4, rel=1e-12)


def test_human_output_and_results_file(work: Path) -> None:
    proc = as2d(
        "replay",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--method",
        "as2d",
        "--split",
        "val",
        "--out",
        "r.json",
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "as2d(qwen/b7)" in proc.stdout
        and "vs target-only" in proc.stdout
        and "wrote r.json" in proc.stdout
    )
    doc = json.loads((work / "r.json").read_text())
    assert doc["schema"] == "as2d.results" and doc["kind"] == "replay"
    assert len(doc["results"]["windows"]) == 6 and all(
        w["split"] == "val" for w in doc["results"]["windows"]
    )
    before = (work / "r.json").read_bytes()
    again = as2d(
        "replay",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--out",
        "r.json",
        cwd=work,
    )
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert (work / "r.json").read_bytes() == before


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def _rewrite_traces(work: Path, edit) -> None:
    with gzip.open(work / "traces.jsonl.gz", "rt") as f:
        recs = [json.loads(l) for l in f if l.strip()]
    edit(recs)
    with gzip.open(work / "traces.jsonl.gz", "wt") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def _run_bad(work: Path, *extra: str) -> subprocess.CompletedProcess:
    proc = as2d(
        "replay",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--out",
        "out.json",
        *extra,
        cwd=work,
    )
    assert not (work / "out.json").exists()  # nothing written on failure
    return proc


def test_truncated_trace(work: Path) -> None:
    data = gzip.decompress((work / "traces.jsonl.gz").read_bytes())
    (work / "traces.jsonl.gz").write_bytes(gzip.compress(data[: len(data) // 2]))
    _one_line_error(_run_bad(work), "traces.jsonl.gz")


def test_future_profile_version(work: Path) -> None:
    doc = yaml.safe_load((work / "profile.yaml").read_text())
    doc["version"] = 99
    (work / "profile.yaml").write_text(yaml.safe_dump(doc))
    _one_line_error(_run_bad(work), "profile.yaml", "version 99", "upgrade")


def test_unknown_source(work: Path) -> None:
    _one_line_error(_run_bad(work, "--source", "whisper"), "whisper")


def test_width_the_profile_lacks(work: Path) -> None:
    _one_line_error(_run_bad(work, "--budget", "20"), "profile.yaml", "K21")
    _one_line_error(_run_bad(work, "--method", "sd", "--k", "14"), "K14")


def test_tokens_of_the_wrong_type(work: Path) -> None:
    def edit(recs):
        recs[1]["reference"][3] = "hello"

    _rewrite_traces(work, edit)
    _one_line_error(_run_bad(work), "traces.jsonl.gz", "reference")


def test_window_whose_split_disagrees(work: Path) -> None:
    def edit(recs):
        recs[0]["split"] = "dev"
        recs[8]["split"] = "test"  # a val window relabelled: header says dev

    _rewrite_traces(work, edit)
    _one_line_error(_run_bad(work), "traces.jsonl.gz", "split")


def test_unknown_method_and_missing_file(work: Path) -> None:
    _one_line_error(_run_bad(work, "--method", "medusa"), "medusa")
    proc = as2d("replay", "--profile", "nope.yaml", "--traces", "traces.jsonl.gz", cwd=work)
    _one_line_error(proc, "nope.yaml")


def test_options_that_do_not_apply_are_refused(work: Path) -> None:
    _one_line_error(_run_bad(work, "--method", "sd", "--source", "qwen"), "--source")
    _one_line_error(_run_bad(work, "--method", "asp", "--k", "5"), "--k")
    _one_line_error(_run_bad(work, "--method", "target-only", "--budget", "3"), "--budget")
    _one_line_error(_run_bad(work, "--split", "test"), "no 'test' windows")


def test_select_budget_writes_a_versioned_deployment_and_never_overwrites(work: Path) -> None:
    proc = as2d(
        "select-budget",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--budgets",
        "1-12",
        "--processes",
        "1",
        "--json",
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    dest = work / rep["deployment"]
    assert dest.parent.parent.name == "calibrations" and dest.name == "deployment.yaml"
    dep = yaml.safe_load(dest.read_text())
    assert dep["schema"] == "as2d.deployment" and dep["version"] == 3
    assert (dep["config"]["source"], dep["config"]["budget"]) == (rep["source"], rep["budget"])
    best = rep["ranking"][0]
    assert (best["source"], best["budget"]) == (rep["source"], rep["budget"])
    assert all(best["tps"] >= r["tps"] for r in rep["ranking"])
    assert rep["dev"]["windows"] == 6 and rep["val"]["windows"] == 6
    assert rep["dev"]["oracle"]["tps_oracle"] >= rep["dev"]["tps"]
    # A second run picks a fresh name; an explicit existing --out is refused.
    again = as2d(
        "select-budget",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--budgets",
        "1-4",
        "--processes",
        "1",
        cwd=work,
    )
    assert again.returncode == 0, again.stderr
    assert (dest.parent / "deployment-2.yaml").exists()
    before = dest.read_bytes()
    refused = as2d(
        "select-budget",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--budgets",
        "1-2",
        "--out",
        str(dest),
        cwd=work,
    )
    _one_line_error(refused, "never overwritten")
    assert dest.read_bytes() == before
    # The deployment drives a replay (checked against the profile's hash).
    r = as2d(
        "replay",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--deployment",
        str(dest),
        "--json",
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["configs"] == [f"as2d({rep['source']}/b{rep['budget']})"]


def test_deployment_from_another_profile_is_refused(work: Path) -> None:
    from as2d_cli.formats.deployment_io import make_deployment, write_deployment

    write_deployment(
        work / "dep.yaml", make_deployment("qwen", 5, 0.4, 8, work / "profile.yaml", "k70", {})
    )
    ok = as2d(
        "replay",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--deployment",
        "dep.yaml",
        "--json",
        cwd=work,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["configs"] == ["as2d(qwen/b5)"]
    (work / "profile.yaml").write_text((work / "profile.yaml").read_text() + "\n# edited\n")
    _one_line_error(_run_bad(work, "--deployment", "dep.yaml"), "dep.yaml", "profile")


@pytest.mark.parametrize("method", ["as2d", "sd"])
def test_replay_table_matches_golden(method: str) -> None:
    proc = as2d(
        "replay",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--method",
        method,
        cwd=DATA,
    )
    assert proc.returncode == 0, proc.stderr
    path = GOLDEN / f"replay-{method}.table.txt"
    if UPDATE:
        path.write_text(proc.stdout)
    assert proc.stdout == path.read_text()


def test_select_budget_text_matches_golden(work: Path) -> None:
    proc = as2d(
        "select-budget",
        "--profile",
        "profile.yaml",
        "--traces",
        "traces.jsonl.gz",
        "--budgets",
        "1-12",
        "--processes",
        "1",
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr
    path = GOLDEN / "select-budget.txt"
    if UPDATE:
        path.write_text(proc.stdout)
    assert proc.stdout == path.read_text()


def test_select_budget_searches_listed_thresholds_and_batches(work: Path) -> None:
    args = ("--profile", "profile.yaml", "--traces", "traces.jsonl.gz", "--budgets", "1-6")
    proc = as2d(
        "select-budget",
        *args,
        "--threshold",
        "0.4,0.9",
        "--batch",
        "1,8",
        "--processes",
        "1",
        "--json",
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["catalog"]["thresholds"] == [0.4, 0.9] and rep["catalog"]["batches"] == [1, 8]
    best = rep["ranking"][0]
    assert (rep["threshold"], rep["batch"]) == (best["threshold"], best["batch"])
    dep = yaml.safe_load((work / rep["deployment"]).read_text())
    assert (dep["config"]["threshold"], dep["config"]["batch"]) == (
        best["threshold"],
        best["batch"],
    )
    assert "source × budget × threshold × batch" in dep["selection"]["method"]
    # The text names the chosen setting; a value that is not a fraction is one usage line.
    text = as2d("select-budget", *args, "--threshold", "0.4,0.9", "--processes", "1", cwd=work)
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert any(
        f"threshold {t}, batch 8, history {h}:" in flat
        for t in ("0.4", "0.9")
        for h in ("off", "on")
    ), flat
    for flag, bad in (("--threshold", "0.4,x"), ("--threshold", "1.5"), ("--batch", "0,8")):
        proc = as2d("select-budget", *args, flag, bad, cwd=work)
        assert proc.returncode == 2 and flag in proc.stderr and "Traceback" not in proc.stderr
