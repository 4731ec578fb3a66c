"""The selection decides whether a deployment uses history candidates (engine/history.py):
the history axis is searched both ways by default, a configuration with history wins only
when it is faster on dev, and a deployment's choice reaches every replay of `as2d eval`
(the table, the oracle, the derived-cost sensitivity, the results) and the native runner's
commands."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from replay_helpers import EOS, hand_profile, hand_window

from as2d_cli.engine.methods import MethodOptions, MethodSpec, spec_grid
from as2d_cli.evaluate.fixed import derived_sensitivity, evaluate_fixed, render_table
from as2d_cli.evaluate.native_record import recorded_deployment
from as2d_cli.evaluate.native_runs import native_commands
from as2d_cli.formats.deployment import Deployment, ProfileRef, as2d_settings
from as2d_cli.formats.trace import AUTOREGRESSIVE, CHUNKED, SourceInfo, TraceSet, WindowTrace
from as2d_cli.replay.run import run_method
from as2d_cli.replay.selection import default_history, select_budget
from as2d_cli.replay.sweep import sweep

BUDGETS = range(1, 9)
BOTH = spec_grid(MethodSpec("as2d"), {"history": [False, True]})


def _loop(seed: int) -> list[int]:
    """A decoder looping: a short unit said over and over (where history proposes most)."""
    unit = [10 + seed % 7, 20 + seed % 5, 30 + seed % 3, 40][: 2 + seed % 3]
    return unit * (36 // len(unit)) + [EOS]


def _plain(seed: int) -> list[int]:
    """An output that never repeats a pair of tokens: history has nothing to propose."""
    return [100 + 40 * seed + i for i in range(36)] + [EOS]


def _windows(make, split: str, n: int, source_len: int = 5) -> list[WindowTrace]:
    """``n`` windows of ``split`` whose source publishes only the output's first
    ``source_len`` tokens: after them the buffer has nothing, which history may fill."""
    out = []
    for i in range(n):
        ref = make(i + (0 if split == "dev" else 50))
        wid = f"{split}-{make.__name__[1:]}-{i}"
        w = hand_window(ref, ref[:source_len], cap=24, wid=wid, dataset=f"d{i % 2}")
        out.append(dataclasses.replace(w, split=split))
    return out


def _traces(windows: list[WindowTrace]) -> TraceSet:
    prov = {"models": {"target": "t"}, "toolkit_version": "0", "created": "x"}
    sources = {"qwen": SourceInfo("qwen", AUTOREGRESSIVE), "chunky": SourceInfo("chunky", CHUNKED)}
    return TraceSet(prov, EOS, sources, "qwen", tuple(windows))


def _select(ts: TraceSet, profile=None, settings=BOTH):
    prof = profile or hand_profile(align_ms=0.5)
    return select_budget(
        ts, prof, sources=["qwen"], budgets=BUDGETS, settings=settings, processes=1
    )


def _single(ts: TraceSet, history: bool, profile=None):
    return _select(ts, profile, [MethodSpec("as2d", history=history)])


def test_history_is_chosen_where_it_wins_on_dev() -> None:
    ts = _traces(_windows(_loop, "dev", 4) + _windows(_loop, "val", 4))
    sel, off, on = _select(ts), _single(ts, False), _single(ts, True)
    assert on.dev["tps"] > off.dev["tps"]  # the traces make history pay: the test can tell
    assert sel.history is True and sel.spec == on.spec and sel.dev["tps"] == on.dev["tps"]
    assert sel.catalog["history"] == [False, True]
    assert sel.catalog["configurations"] == 2 * len(BUDGETS)
    # the ranking covers both, each row says which; validation ranks it among both too
    rows = [r.to_json() for r in sel.ranking]
    assert {r["history"] for r in rows} == {False, True} and rows[0]["history"] is True
    assert sel.val["best"]["history"] is True and sel.val["retained"]
    assert sel.to_json()["history"] is True
    # the oracle is the chosen setting's: source × budget with history candidates
    assert sel.dev["oracle"] == on.dev["oracle"]


def test_history_is_left_out_where_it_costs_on_dev() -> None:
    """No repeats: each lookup is charged (alignment work) and finds nothing, so the
    configurations without history are faster and one of them is chosen."""
    ts = _traces(_windows(_plain, "dev", 4) + _windows(_plain, "val", 4))
    sel, off, on = _select(ts), _single(ts, False), _single(ts, True)
    assert off.dev["tps"] > on.dev["tps"]
    assert sel.history is False and sel.spec == off.spec and sel.dev["tps"] == off.dev["tps"]


def test_a_tie_goes_to_the_configuration_without_history() -> None:
    """With lookups free and nothing to propose, both replay identically: the simpler wins."""
    ts = _traces(_windows(_plain, "dev", 3) + _windows(_plain, "val", 3))
    free = hand_profile(align_ms=0.0)
    sel, off, on = _select(ts, free), _single(ts, False, free), _single(ts, True, free)
    assert off.dev["tps"] == on.dev["tps"]
    assert sel.history is False and sel.spec == off.spec


def test_history_wins_on_dev_where_it_helps_some_windows_more_than_it_costs_others() -> None:
    """A dev split of loops and plain outputs: whichever pools faster is chosen, and the
    sweep's per-window times say why (history's gain on the loops, its cost elsewhere)."""
    dev = _windows(_loop, "dev", 2) + _windows(_plain, "dev", 4)
    ts = _traces(dev + _windows(_loop, "val", 2) + _windows(_plain, "val", 4))
    prof = hand_profile(align_ms=0.5)
    sel = _select(ts)
    cats = {
        h: sweep(dev, prof, ["qwen"], BUDGETS, setting=s, processes=1)
        for h, s in ((False, BOTH[0]), (True, BOTH[1]))
    }
    pooled = {h: float(c.pooled_tps().max()) for h, c in cats.items()}
    assert pooled[False] != pooled[True]
    assert sel.history is (pooled[True] > pooled[False])
    b = sel.budget
    loops, plains = [0, 1], [2, 3, 4, 5]
    assert all(cats[True].times[i, 0, b - 1] < cats[False].times[i, 0, b - 1] for i in loops)
    assert all(cats[True].times[i, 0, b - 1] > cats[False].times[i, 0, b - 1] for i in plains)


def test_the_default_history_axis() -> None:
    assert default_history("suffix", None) == [False, True]
    assert default_history("paper", None) == [False]  # the paper's rules reproduce the paper
    assert default_history("suffix", ["drafter", "ctc"]) == [False]  # the paper's sources
    assert default_history("suffix", ["drafter", "lookahead"]) == [False, True]
    assert default_history("paper", ["lookahead"]) == [False]


# ------------------------------------------------------------------ the evaluation honours it
def _deployment(history: bool, budget: int = 6) -> Deployment:
    return Deployment(
        "qwen",
        budget,
        0.4,
        8,
        ProfileRef("hand.yaml", "0" * 64, "hand"),
        selection={"catalog": {"sources": ["qwen"]}},
        align="suffix",
        history=history,
    )


def test_eval_replays_the_deployments_history_setting_everywhere() -> None:
    ts = _traces(_windows(_loop, "test", 3) + _windows(_plain, "test", 2))
    prof = hand_profile(align_ms=0.5)
    windows = list(ts.windows)
    evs = {
        h: evaluate_fixed(ts, prof, _deployment(h), budgets=BUDGETS, processes=1)
        for h in (False, True)
    }
    for h, ev in evs.items():
        want = run_method(
            windows,
            prof,
            "as2d",
            MethodOptions(default_source="qwen", default_budget=6, history=h),
            detail=False,
        )
        as2d = ev.runs["as2d"]
        assert [s.label for s in as2d.specs] == [want.specs[0].label]
        assert as2d.pooled_tps() == want.pooled_tps()
        assert ev.oracle["catalog"]["history"] is h
        assert ev.to_json()["deployment"]["history"] is h
        # the paper's ablation never takes history candidates
        assert not ev.runs["as2d-no-bc"].specs[0].history
        # the oracle's catalog is the chosen setting's: its times are that setting's sweep
        cat = sweep(
            windows, prof, ["qwen"], BUDGETS, setting=MethodSpec("as2d", history=h), processes=1
        )
        assert ev.oracle["tps_selected"] == pytest.approx(float(cat.pooled_tps()[0, 5]), rel=1e-12)
    assert evs[True].runs["as2d"].specs[0].label == "as2d(qwen+history/b6)"
    assert "qwen/budget 6 + history candidates" in render_table(evs[True])
    assert "history" not in render_table(evs[False])
    assert evs[True].runs["as2d"].pooled_tps() != evs[False].runs["as2d"].pooled_tps()
    assert evs[True].runs["target-only"].pooled_tps() == evs[False].runs["target-only"].pooled_tps()


def test_the_derived_cost_sensitivity_prices_the_deployments_history_setting() -> None:
    ts = _traces(_windows(_loop, "test", 3))
    prof = hand_profile(align_ms=0.5)
    qwen = dataclasses.replace(prof.sources["qwen"], derived="by hand, for the test")
    prof = dataclasses.replace(prof, sources={**prof.sources, "qwen": qwen})
    base = run_method(list(ts.windows), prof, "target-only", detail=False).pooled_tps()
    for h in (False, True):
        got = derived_sensitivity(ts, prof, _deployment(h))
        assert got is not None
        tps = run_method(
            list(ts.windows),
            prof,
            "as2d",
            MethodOptions(**as2d_settings(_deployment(h))),
            detail=False,
        ).pooled_tps()
        assert got["as2d_over_target_only"] == pytest.approx(tps / base, rel=1e-12)


def test_native_commands_carry_the_deployments_history_setting() -> None:
    for h in (False, True):
        cmd = native_commands(_deployment(h), 24)["as2d"]
        assert cmd["history"] is h
        spec = MethodSpec.from_wire(cmd)  # what the runner builds from it
        assert spec.history is h and spec.policy().history is h
    # a native run recorded before deployments had the setting resumes as run: without it
    old = {"path": "d.yaml", "sha256": "0" * 64, "source": "drafter", "budget": 7}
    old |= {"threshold": 0.4, "batch": 8, "align": "suffix"}
    assert recorded_deployment(old) == {**old, "history": False}
    assert recorded_deployment({**old, "history": True})["history"] is True


# ------------------------------------------------------------------ the command
DATA = Path(__file__).resolve().parent / "data" / "replay"


def _select_budget(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    for name in ("profile.yaml", "traces.jsonl.gz"):
        if not (tmp_path / name).exists():
            shutil.copy(DATA / name, tmp_path / name)
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", "select-budget", "--profile", "profile.yaml"]
        + ["--traces", "traces.jsonl.gz", "--budgets", "1-3", "--processes", "1", "--json", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "args,axis",
    [
        ((), [False, True]),
        (("--align", "paper"), [False]),
        (("--sources", "qwen,parakeet"), [False]),  # the paper's sources
        (("--history", "on"), [True]),
        (("--align", "paper", "--history", "off,on"), [False, True]),  # asked for: searched
    ],
)
def test_select_budget_searches_the_history_axis(tmp_path: Path, args, axis) -> None:
    proc = _select_budget(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["version"] == 3 and rep["catalog"]["history"] == axis
    assert rep["history"] in axis and rep["ranking"][0]["history"] == rep["history"]
    dep = (tmp_path / rep["deployment"]).read_text()
    assert f"history: {str(rep['history']).lower()}" in dep
    assert ("× history" in dep) is (len(axis) > 1)


def test_select_budget_refuses_a_bad_history_value(tmp_path: Path) -> None:
    proc = _select_budget(tmp_path, "--history", "maybe")
    assert proc.returncode == 2 and "--history" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "calibrations").exists()


def test_the_results_provenance_and_table_name_the_history_setting() -> None:
    from as2d_cli.evaluate.run import provenance, render_provenance

    ts, prof = _traces(_windows(_loop, "test", 1)), hand_profile()
    for h in (False, True):
        prov = provenance(
            prof, Path("hand.yaml"), _deployment(h), Path("d.yaml"), [Path("t.jsonl")], ts
        )
        assert prov["deployment"]["history"] is h
        line = next(x for x in render_provenance(prov).splitlines() if x.startswith("deployment"))
        assert ("history candidates" in line) is h
    old = provenance(
        prof, Path("hand.yaml"), _deployment(False), Path("d.yaml"), [Path("t.jsonl")], ts
    )
    del old["deployment"]["history"]  # results written before it was recorded
    assert "history" not in render_provenance(old)


def test_replay_with_a_deployment_runs_its_history_setting(tmp_path: Path) -> None:
    from as2d_cli.formats.deployment_io import make_deployment, write_deployment

    for name in ("profile.yaml", "traces.jsonl.gz"):
        shutil.copy(DATA / name, tmp_path / name)
    configs = {}
    for h in (False, True):
        dep = make_deployment("qwen", 5, 0.4, 8, tmp_path / "profile.yaml", "k70", {}, history=h)
        path = write_deployment(tmp_path / f"dep-{h}.yaml", dep)
        proc = subprocess.run(
            [sys.executable, "-m", "as2d_cli.cli.main", "replay", "--profile", "profile.yaml"]
            + ["--traces", "traces.jsonl.gz", "--deployment", str(path), "--json", "--no-spans"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        configs[h] = json.loads(proc.stdout)["configs"]
    assert configs == {False: ["as2d(qwen/b5)"], True: ["as2d(qwen+history/b5)"]}
