"""The shipped audio-LLM pair's plumbing: `--models NAME` resolves a pair shipped in the
package, `traces build --task T` traces that task's corpus requests (QA requests under their
own ids), a pair's synthetic K70 profile (costs scaled by model size, marked derived) is found
for it, and `eval --task all` writes the per-task table in one folder.

The mechanics run on the committed random-weight fixtures (tests/data/audio_llm); the tests
of the shipped pair itself (as2d_cli/assets/pairs/audio-llm, made by training/alm_ship.py)
skip when it is not in this checkout."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.errors import UserError
from as2d_cli.evaluate.inputs import SHIPPED_PROFILES, find_profile
from as2d_cli.formats.common import read_manifest
from as2d_cli.formats.profile_io import load_profile, write_profile
from as2d_cli.formats.trace_io import load_traces
from as2d_cli.models.model_pair import load_pair
from as2d_cli.models.pair import import_pair
from as2d_cli.models.prompting import TASKS, PromptSpec
from as2d_cli.models.shipped import SHIPPED_NAMES, resolve_models, shipped_pair
from as2d_cli.synthetic.profile import (
    ALPHA,
    K70,
    decoder_macs,
    pair_profile,
    scaled_draft_ms,
)

DATA = Path(__file__).parent / "data" / "audio_llm"
CORPUS = load_corpus()
SPLITS = ("dev", "test")
SHIPPED = shipped_pair("audio-llm")
needs_shipped = pytest.mark.skipif(
    SHIPPED is None,
    reason="the shipped audio-LLM pair is not in this checkout (as2d_cli/assets/pairs/audio-llm "
    "is made by `python training/alm_ship.py` from the trained exports)",
)


def _as2d(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _traces_dir(pair: Path, task: str) -> Path:
    return pair / "traces" if task == "transcribe" else pair / "traces" / task


@pytest.fixture(scope="module")
def fixture_pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture pair with traces of every task on two requests of dev and test."""
    from as2d_cli.tracegen.build import build_traces

    p = import_pair(
        DATA / "target", DATA / "drafter", tmp_path_factory.mktemp("alm") / "alm", copy=True
    )
    for task in TASKS:
        pair = load_pair(p, prompt=PromptSpec(task))
        for split in SPLITS:
            out = _traces_dir(p, task) / f"{split}.jsonl.gz"
            build_traces(split, out, pair=pair, processes=1, limit=2, max_tokens=8)
    return p


@pytest.fixture(scope="module")
def calibrations(fixture_pair: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A calibrations folder holding the fixture pair's synthetic K70 profile."""
    folder = tmp_path_factory.mktemp("cal")
    pair = load_pair(fixture_pair)

    def config(role: str) -> dict:
        return json.loads(pair.path(pair.model(role)["files"]["config"]).read_text())

    prof = pair_profile(config("target"), config("drafter"), pair.identity())
    write_profile(folder / f"k70.{pair.name}.profile.yaml", prof)
    return folder


# ---------------------------------------------------------------------------- --models NAME
def test_a_shipped_name_resolves_to_its_folder_and_a_path_wins(tmp_path: Path) -> None:
    root = tmp_path / "pairs"
    (root / "audio-llm").mkdir(parents=True)
    (root / "audio-llm" / "models.json").write_text("{}")
    assert resolve_models("audio-llm", root) == root / "audio-llm"
    local = tmp_path / "mine"
    local.mkdir()
    assert resolve_models(local, root) == local  # a path is a path
    assert resolve_models("no/such/folder", root) == Path("no/such/folder")  # the loader says why


def test_an_unknown_name_is_one_line_naming_the_shipped_pairs(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="shipped: audio-llm \\(not installed\\)"):
        resolve_models("tiny", tmp_path / "none")
    with pytest.raises(UserError, match="is not in this installation.*alm_ship.py"):
        resolve_models(SHIPPED_NAMES[0], tmp_path / "none")
    r = _as2d("eval", "--phone", "k70", "--models", "no-such-pair", "--task", "answer")
    assert r.returncode == 2 and "no shipped model pair of that name" in r.stderr
    assert "audio-llm" in r.stderr and r.stderr.strip().count("\n") == 0
    r = _as2d("models", "check", "no-such-pair")  # the positional pair of `models check` too
    assert r.returncode == 2 and "no shipped model pair of that name" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------- traces per task
def test_traces_of_a_task_hold_its_corpus_requests(fixture_pair: Path) -> None:
    for task in TASKS:
        for split in SPLITS:
            ts = load_traces(_traces_dir(fixture_pair, task) / f"{split}.jsonl.gz")
            want = CORPUS.requests(task, split)[:2]
            assert [w.id for w in ts.windows] == [w.id for w in want]
            assert [w.dataset for w in ts.windows] == [w.setting for w in want]
            assert ts.provenance["pair"]["task"] == task
    qa = load_traces(fixture_pair / "traces" / "answer" / "dev.jsonl.gz")
    assert all(w.id.startswith("dev-qa-") and w.dataset == "qa" for w in qa.windows)
    tr = load_traces(fixture_pair / "traces" / "translate" / "dev.jsonl.gz")
    assert {w.language for w in tr.windows} <= {"de", "es"}


def test_a_qa_request_is_pushed_with_its_windows_audio(tmp_path: Path) -> None:
    from as2d_cli.launch.payload import push_windows

    class Device:
        def shell(self, args: list[str], deadline_s: float) -> object:
            assert args[:2] == ["mkdir", "-p"]
            for d in args[2:]:
                (tmp_path / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
            return type("Done", (), {"check": lambda self, what: None})()

        def push(self, src: Path, dest: str) -> None:
            shutil.copyfile(src, tmp_path / dest.lstrip("/"))

    qa = CORPUS.requests("answer", "test")[0]
    remote = push_windows(Device(), "/run", [qa.id])
    pushed = load_corpus(tmp_path / remote.lstrip("/"))
    got = pushed.get(qa.id)
    assert got.of == qa.of and got.question == qa.question and got.answer == qa.answer
    assert [w.id for w in pushed.windows + pushed.translations] == [qa.of]
    assert got.load_audio().shape == qa.load_audio().shape


# ---------------------------------------------------------------------------- the K70 costs
def test_alpha_gives_back_the_papers_draft_forward() -> None:
    assert ALPHA == pytest.approx(math.log(59.391 / 23.347) / math.log(1.7 / 0.6))
    # the rule through the paper's own sizes returns its published draft forward
    assert K70["target_step"] * (0.6 / 1.7) ** ALPHA == pytest.approx(K70["draft"])
    assert scaled_draft_ms(1000, 1000) == pytest.approx(K70["target_step"])
    assert scaled_draft_ms(1000, 100) < scaled_draft_ms(1000, 500) < K70["target_step"]


def test_multiply_adds_count_projections_mlp_and_head() -> None:
    cfg = json.loads((DATA / "target" / "config.json").read_text())["text_config"]
    h, n, kv, d = (
        cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")
    )
    per_layer = h * n * d * 2 + h * kv * d * 2 + 3 * h * cfg["intermediate_size"]
    want = cfg["num_hidden_layers"] * per_layer + cfg["vocab_size"] * h
    assert decoder_macs({"text_config": cfg}) == want
    assert decoder_macs({"text_config": {**cfg, "num_hidden_layers": 4}}) > want


def test_the_pairs_profile_scales_the_drafter_and_marks_it_derived(calibrations: Path) -> None:
    (path,) = calibrations.glob("k70.*.profile.yaml")
    prof = load_profile(path, check=True)
    base = load_profile(SHIPPED_PROFILES / "k70.profile.yaml")
    assert prof.synthetic and prof.device["name"] == "k70"
    assert prof.target_step_ms == base.target_step_ms and prof.verify_idle_ms == base.verify_idle_ms
    t = json.loads((DATA / "target" / "config.json").read_text())
    d = json.loads((DATA / "drafter" / "config.json").read_text())
    step = scaled_draft_ms(decoder_macs(t), decoder_macs(d))
    assert prof.drafter is not None and prof.drafter.step_ms == pytest.approx(step, abs=1e-3)
    assert prof.sources["drafter"].step_ms_idle == prof.drafter.step_ms
    assert prof.drafter.derived and prof.sources["drafter"].derived
    assert "alpha" in prof.fit.notes and "drafter.step" not in prof.fit.samples
    f = prof.drafter.step_ms / base.drafter.step_ms  # type: ignore[union-attr]
    assert prof.drafter.paired_ms == pytest.approx(base.drafter.paired_ms * f, abs=1e-3)  # type: ignore[union-attr]


def test_find_profile_takes_the_pairs_own_synthetic_profile(
    fixture_pair: Path, calibrations: Path, tmp_path: Path
) -> None:
    ident = load_pair(fixture_pair).identity()
    found = find_profile("k70", calibrations, ident, fixture_pair)
    assert found.parent == calibrations and found.name.endswith(".profile.yaml")
    assert find_profile("k70", calibrations) == SHIPPED_PROFILES / "k70.profile.yaml"
    # a measured profile of the same pair wins
    doc = yaml.safe_load(found.read_text())
    doc.update(synthetic=False, created="2026-12-01T00:00:00Z")
    (calibrations / "k70-20261201-000000.profile.yaml").write_text(yaml.safe_dump(doc))
    try:
        assert find_profile("k70", calibrations, ident).name == "k70-20261201-000000.profile.yaml"
    finally:
        (calibrations / "k70-20261201-000000.profile.yaml").unlink()
    # a synthetic profile of another version of the pair prices nothing, and says so
    other = tmp_path / "cal"
    other.mkdir()
    shutil.copy(found, other / found.name)
    with pytest.raises(UserError, match="prices another version of that pair"):
        find_profile("k70", other, {**ident, "sha256": "0" * 64})


# ---------------------------------------------------------------------------- eval --task all
def test_eval_all_tasks_writes_the_per_task_table_in_one_folder(
    fixture_pair: Path, calibrations: Path, tmp_path: Path
) -> None:
    res = tmp_path / "res"
    r = _as2d(
        "eval",
        "--phone",
        "k70",
        "--models",
        str(fixture_pair),
        "--task",
        "all",
        "--calibrations",
        str(calibrations),
        "--results",
        str(res),
        "--accept-unvalidated",  # two dev requests per task
        "-q",
    )
    assert r.returncode == 0, r.stderr
    (folder,) = res.iterdir()
    assert folder.name.startswith("k70-test-tasks-")
    doc = json.loads((folder / "tasks.json").read_text())
    assert doc["schema"] == "as2d.results" and doc["kind"] == "eval-tasks"
    rows = {row["task"]: row for row in doc["results"]["tasks"]}
    assert list(rows) == list(TASKS)
    for task, row in rows.items():
        sub = json.loads((folder / task / "results.json").read_text())["results"]
        traces = load_traces(_traces_dir(fixture_pair, task) / "test.jsonl.gz")
        assert row["windows"] == sub["windows"] == len(traces.windows)
        assert (
            row["datasets"]
            == sub["datasets"]
            == list(dict.fromkeys(w.dataset for w in traces.windows))
        )
        by = {m["method"]: m["tps"] for m in sub["methods"]}
        assert row["tps"] == {m: by[m] for m in ("target-only", "sd", "asp", "as2d")}
        base = max(by[m] for m in ("target-only", "sd", "asp"))
        assert row["gain_percent"] == pytest.approx(100 * (by["as2d"] / base - 1))
        assert row["outputs_exact"] == row["outputs_checked"] > 0
        assert sub["provenance"]["pair"]["task"] == task
        assert read_manifest(folder / task)["complete"]  # type: ignore[index]
    manifest = read_manifest(folder)
    assert manifest is not None and manifest["complete"]
    assert {"tasks.json", "table.txt", "table3.csv", "answer/manifest.json"} <= set(
        manifest["files"]
    )
    assert not (folder / "INCOMPLETE").exists()
    for label in ("ASR", "Translation", "Spoken QA"):
        assert label in r.stdout
    assert (folder / "table.txt").read_text() in r.stdout


def test_eval_all_refuses_what_applies_to_one_task(fixture_pair: Path) -> None:
    for extra, says in (
        (["--native"], "--native applies to one task"),
        (["--traces", str(fixture_pair / "traces")], "--traces applies to one task"),
        (["--question", "Who?"], "--question replaces every request's instruction"),
    ):
        r = _as2d("eval", "--phone", "k70", "--models", str(fixture_pair), "--task", "all", *extra)
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert r.stderr.strip().count("\n") == 0
    r = _as2d("eval", "--phone", "k70", "--task", "all")
    assert r.returncode == 2 and "pass --models PAIR" in r.stderr
    r = _as2d("traces", "build", "--split", "dev", "--task", "all")
    assert r.returncode == 2 and "'all' is not one of" in r.stderr


# ---------------------------------------------------------------------------- the shipped pair
@needs_shipped
def test_the_shipped_pair_has_every_tasks_traces_a_profile_and_deployments() -> None:
    from as2d_cli.evaluate.inputs import deployment_candidates, validation_failures

    assert SHIPPED is not None
    pair = load_pair(SHIPPED)
    assert pair.name == "audio-llm" and pair.kind() == "audio-llm-onnx"
    ident = pair.identity()
    profile = find_profile("k70", Path("no-calibrations-here"), ident, SHIPPED)
    assert profile == SHIPPED_PROFILES / "k70.audio-llm.profile.yaml"
    prof = load_profile(profile, check=True)
    assert prof.synthetic and prof.device["pair"]["sha256"] == ident["sha256"]
    assert prof.drafter is not None and prof.drafter.derived
    for task in TASKS:
        folder = _traces_dir(SHIPPED, task)
        files = sorted(folder.glob("*.jsonl.gz"))
        for split in ("dev", "val", "test"):
            ts = load_traces(folder / f"{split}.jsonl.gz")
            assert [w.id for w in ts.windows] == [w.id for w in CORPUS.requests(task, split)]
            assert ts.provenance["pair"]["sha256"] == ident["sha256"]
        cands = deployment_candidates(profile, "k70", Path("no-calibrations-here"), files)
        assert cands, f"no deployment for {task} chosen on the shipped profile and traces"
        assert validation_failures(cands[0][1]) == [], cands[0][0]


@needs_shipped
def test_eval_all_on_the_shipped_pair_prints_every_task_exact_and_fast(tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = _as2d(
        "eval", "--phone", "k70", "--models", "audio-llm", "--task", "all",
        "--results", str(tmp_path), "-q",
    )  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    (folder,) = tmp_path.iterdir()
    rows = json.loads((folder / "tasks.json").read_text())["results"]["tasks"]
    assert [row["task"] for row in rows] == list(TASKS)
    assert all(row["outputs_exact"] == row["outputs_checked"] > 0 for row in rows)
    assert rows[1]["datasets"] == ["de-en", "es-en"] and rows[2]["datasets"] == ["qa"]
    # under a minute from a fresh clone on a 2-core host; room here for a busy test worker
    assert took < 90, f"eval --task all took {took:.0f} s"


def test_a_bundle_carries_a_shipped_pair_only_when_asked(tmp_path: Path) -> None:
    from as2d_cli.bundle.recipe import shipped_files

    for rel in (
        "as2d_cli/assets/models/models.json",
        "as2d_cli/assets/pairs/audio-llm/models.json",
        "as2d_cli/assets/pairs/audio-llm/traces/dev.jsonl.gz",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    files = [rel for rel, _ in shipped_files(tmp_path, ("as2d_cli",))]
    assert files == ["as2d_cli/assets/models/models.json"]
