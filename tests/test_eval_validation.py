"""Configurations that failed their own checks are not used silently (issue 45, item 3).

* `eval` with a deployment NOT retained on val, never checked there, or selected on fewer
  than MIN_DEV_WINDOWS dev windows stops in one line (exit 2, nothing written) unless
  `--accept-unvalidated` (or its older name `--allow-unconfirmed`) is given; then
  results.json records it and why. A selection made now is checked before it is written.
* `eval --native` with a found profile that is synthetic or another device's is refused
  before anything runs; with `--profile` given it runs, and the native report calls the
  replay-vs-native comparison an expected error, not agreement.
* `select-budget` says when no As²d configuration beats target-only on dev; the
  deployment records it and `eval` prints it above the table.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from as2d_cli.cli.main import main
from as2d_cli.evaluate.inputs import MIN_DEV_WINDOWS

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
PROFILE = DATA / "example-profile.yaml"
SHIPPED = ROOT / "as2d_cli" / "assets" / "profiles"


def _run(args: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _refused(  # type: ignore[no-untyped-def]
    args: list[str], capsys, root: Path, *said: str, progress: str | None = None
) -> str:
    """One line, exit 2, no traceback, nothing written under ``root``, saying each of
    ``said`` (after the one ``progress`` line the command printed first, when given)."""
    before = _snapshot(root)
    code, out, err = _run(args, capsys)
    assert code == 2, (out, err)
    # the command's progress lines (cli/progress.Steps: "eval: …") are neither notes nor errors
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("eval: ")]
    if progress is not None:
        assert lines[0].startswith(progress), err
        lines = lines[1:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for s in said:
        assert s in err, err
    assert _snapshot(root) == before
    return err


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    tr = tmp_path / "tr"
    tr.mkdir()
    for split in ("dev", "val", "test"):
        shutil.copy(DATA / f"example-{split}.jsonl", tr)
    return tmp_path


def _deployment(
    path: Path, *, retained: bool | None, windows: int | None, profile: Path = PROFILE
) -> Path:
    """A deployment of the example profile whose selection says what the test needs."""
    from as2d_cli.formats.deployment_io import make_deployment, write_deployment

    dev: dict[str, Any] = {"split": "dev", "tokens": 500, "tps": 30.0}
    if windows is not None:
        dev["windows"] = windows
    val = (
        None
        if retained is None
        else {
            "split": "val",
            "windows": 40,
            "tps": 25.0,
            "rank": 9,
            "best": {"source": "parakeet", "budget": 5, "tps": 26.0},
            "retention": 25.0 / 26.0,
            "tolerance": 0.01,
            "retained": retained,
        }
    )
    selection = {"split": "dev", "dev": dev, "val": val, "retained": retained}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_deployment(
        path,
        make_deployment("qwen", 7, 0.4, 8, profile, "k70-synthetic", selection, align="suffix"),
    )


def _eval(work: Path, *extra: str) -> list[str]:
    args = ["eval", "--phone", "k70", "--profile", str(PROFILE), "--traces", str(work / "tr")]
    return args + ["--calibrations", str(work / "cal"), "--results", str(work / "res"), *extra]


# ------------------------------------------------------------------ the checks, refused
@pytest.mark.parametrize(
    ("retained", "windows", "said"),
    [
        (False, 50, ["NOT retained on validation (val rank 9, 96.2 % of the val best's TPS"]),
        (True, 7, [f"selected on 7 dev windows, fewer than the minimum of {MIN_DEV_WINDOWS}"]),
        (None, 50, ["selected on dev only and never checked on val", "--allow-unconfirmed"]),
        (True, None, ["an unrecorded number of dev windows"]),
    ],
    ids=["not-retained", "few-dev-windows", "unconfirmed", "unrecorded-windows"],
)
def test_a_deployment_that_failed_its_checks_is_refused(
    work: Path, capsys, retained: bool | None, windows: int | None, said: list[str]
) -> None:
    dep = _deployment(work / "dep.yaml", retained=retained, windows=windows)
    _refused(
        _eval(work, "--deployment", str(dep)), capsys, work, str(dep), "--accept-unvalidated", *said
    )


def test_a_found_deployment_that_failed_names_one_that_passes(work: Path, capsys) -> None:
    """The newest deployment chosen on the profile was NOT retained: eval refuses it and
    names an older one that passes its checks, rather than silently using either."""
    import os

    good = _deployment(
        work / "cal" / "k70-synthetic" / "deployment.yaml", retained=True, windows=50
    )
    bad = _deployment(
        work / "cal" / "k70-synthetic" / "deployment-2.yaml", retained=False, windows=50
    )
    os.utime(good, (1, 1))  # the older one
    _refused(_eval(work), capsys, work, str(bad), "NOT retained", f"--deployment {good}")


def test_a_selection_made_now_on_too_few_dev_windows_is_refused_before_it_runs(
    work: Path, capsys
) -> None:
    _refused(
        _eval(work),
        capsys,
        work,
        "the traces hold 7 dev windows, fewer than the 20",
        "--accept-unvalidated",
    )
    assert not (work / "cal").exists() and not (work / "res").exists()


def test_a_selection_made_now_that_val_does_not_retain_is_never_written(
    work: Path, capsys, monkeypatch
) -> None:
    """With enough dev windows (the minimum lowered to the example's 7), the selection runs
    and val does not retain it: refused before the deployment file is written."""
    import as2d_cli.evaluate.inputs as inputs
    import as2d_cli.evaluate.run as run

    monkeypatch.setattr(inputs, "MIN_DEV_WINDOWS", 5)
    monkeypatch.setattr(run, "MIN_DEV_WINDOWS", 5)
    _refused(
        _eval(work),
        capsys,
        work,
        "selected now on the dev split (sensevoice/budget 7) was NOT retained on validation",
        "nothing was written: pass --accept-unvalidated",
        progress="no deployment chosen on",
    )
    assert not list(work.rglob("deployment*.yaml")) and not (work / "res").exists()


# ------------------------------------------------------------------ the checks, overridden
@pytest.mark.parametrize("flag", ["--accept-unvalidated", "--allow-unconfirmed"])
def test_an_accepted_unvalidated_deployment_is_recorded_in_the_results(
    work: Path, capsys, flag: str
) -> None:
    dep = _deployment(work / "dep.yaml", retained=False, windows=7)
    code, out, err = _run(_eval(work, "--deployment", str(dep), flag), capsys)
    assert code == 0, err
    assert f"used anyway ({flag})" in err and "NOT retained" in err
    (folder,) = (work / "res").iterdir()
    prov = json.loads((folder / "results.json").read_text())["results"]["provenance"]
    d = prov["deployment"]
    assert d["accepted_unvalidated"] is True and d["validation_retained"] is False
    assert d["dev_windows"] == 7
    assert len(d["validation_failures"]) == 2
    assert d["validation_failures"][0].startswith("NOT retained on validation (val rank 9")
    assert d["validation_failures"][1] == (
        f"selected on 7 dev windows, fewer than the minimum of {MIN_DEV_WINDOWS}"
    )
    line = next(x for x in out.splitlines() if x.startswith("deployment "))
    assert line.endswith("NOT retained on validation; used unvalidated)")


def test_a_selection_made_now_and_accepted_is_written_and_recorded(work: Path, capsys) -> None:
    code, _, err = _run(_eval(work, "--accept-unvalidated"), capsys)
    assert code == 0, err
    (dep,) = (work / "cal").rglob("deployment*.yaml")
    sel = yaml.safe_load(dep.read_text())["selection"]
    # what select-budget records: target-only on the same dev windows, and that As²d beat it
    assert (
        sel["beats_target_only"] is True and 0 < sel["dev"]["target_only_tps"] < sel["dev"]["tps"]
    )
    (folder,) = (work / "res").iterdir()
    d = json.loads((folder / "results.json").read_text())["results"]["provenance"]["deployment"]
    assert d["accepted_unvalidated"] is True and d["beats_target_only_on_dev"] is True
    assert any("7 dev windows" in f for f in d["validation_failures"])


def test_the_shipped_deployments_pass_their_checks() -> None:
    """The minimum is one the shipped K70 deployments meet: `as2d eval --phone k70` (and
    with `--align paper`) runs them without the override."""
    from as2d_cli.evaluate.inputs import validation_failures

    for name in ("deployment.yaml", "deployment-paper.yaml"):
        sel = yaml.safe_load((SHIPPED / "k70" / name).read_text())["selection"]
        assert validation_failures(sel) == [], name
        assert sel["dev"]["windows"] >= MIN_DEV_WINDOWS


# ------------------------------------------------------------------ no gain over target-only
def test_select_budget_says_when_no_configuration_beats_target_only(work: Path, capsys) -> None:
    """As²d pays 900 ms of alignment per round: no budget up to 4 beats target-only's
    59 ms step. select-budget says so, the deployment records it, eval prints it above the
    table and records it."""
    doc = yaml.safe_load(PROFILE.read_text())
    doc["costs"]["align_ms"] = 900.0
    slow = work / "slow.profile.yaml"
    slow.write_text(yaml.safe_dump(doc, sort_keys=False))
    dep = work / "slow.deployment.yaml"
    traces = ["--traces", str(work / "tr" / "example-dev.jsonl")]
    traces += ["--traces", str(work / "tr" / "example-val.jsonl")]
    args = ["select-budget", "--profile", str(slow), *traces, "--budgets", "1-4"]
    code, out, err = _run([*args, "--out", str(dep), "--processes", "1"], capsys)
    assert code == 0, err
    (note,) = [x for x in out.splitlines() if x.startswith("no As²d configuration beats")]
    assert "target-only's 17.35 over 7 dev windows" in note
    assert "`as2d eval` uses it only with --accept-unvalidated" in err  # 7 dev windows
    sel = yaml.safe_load(dep.read_text())["selection"]
    assert sel["beats_target_only"] is False and sel["dev"]["target_only_tps"] > sel["dev"]["tps"]

    args = ["eval", "--phone", "k70", "--profile", str(slow), "--deployment", str(dep)]
    args += ["--traces", str(work / "tr"), "--results", str(work / "res"), "--accept-unvalidated"]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    assert out.startswith(note + "\n\nmethod ")
    (folder,) = (work / "res").iterdir()
    assert (folder / "table.txt").read_text().startswith(note)
    d = json.loads((folder / "results.json").read_text())["results"]["provenance"]["deployment"]
    assert d["beats_target_only_on_dev"] is False


# ------------------------------------------------------------------ native: whose profile
def test_profile_mismatch_compares_the_device_identity() -> None:
    from as2d_cli.evaluate.inputs import profile_mismatch
    from as2d_cli.formats.profile_io import load_profile
    from device_agents.identity import DeviceIdentity

    prof = load_profile(SHIPPED / "k70.profile.yaml")
    k70 = DeviceIdentity("k70", "adb", "23117RK66C", "abc123", "abc123", "Redmi K70 Pro")
    assert profile_mismatch(prof, k70).startswith("synthetic profile")  # type: ignore[union-attr]
    measured = dataclasses.replace(prof, synthetic=False)
    assert profile_mismatch(measured, k70) is None  # no serial recorded: name and model agree
    other_model = dataclasses.replace(k70, model_id="2311DRK48C")
    assert "profile of another device (k70, model 23117RK66C)" in str(
        profile_mismatch(measured, other_model)
    )
    with_serial = dataclasses.replace(measured, device={**prof.device, "serial": "zzz999"})
    assert profile_mismatch(with_serial, dataclasses.replace(k70, serial="zzz999")) is None
    why = str(profile_mismatch(with_serial, k70))  # the same model, another unit
    assert "serial zzz999" in why and "not k70 (Redmi K70 Pro, serial abc123)" in why


def _local_profile(work: Path, **device: Any) -> Path:
    """The example profile, as if measured by `as2d calibrate` on a device."""
    doc = yaml.safe_load(PROFILE.read_text())
    doc["synthetic"] = False
    doc["device"] = {**doc["device"], **device}
    path = work / "cal" / "local-20261201-000000.profile.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


NATIVE = ["--native", "--windows", "1", "--repeats", "1", "--warmup", "0", "--settle", "0"]


def test_native_with_a_found_profile_of_another_device_is_refused(work: Path, capsys) -> None:
    prof = _local_profile(work, name="local", kind="local", serial="not-this-host")
    _refused(
        ["eval", "--phone", "local", "--traces", str(work / "tr"), "--calibrations",
         str(work / "cal"), "--results", str(work / "res"), *NATIVE],
        capsys,
        work,
        f"{prof} is a profile of another device (local, ",
        "serial not-this-host), not local (",
        "calibrate this device first (`as2d calibrate --phone local`)",
        f"pass --profile {prof} explicitly",
    )  # fmt: skip


def test_native_with_a_found_synthetic_profile_is_refused(work: Path, capsys) -> None:
    (work / "cal").mkdir()
    shutil.copy(PROFILE, work / "cal" / "local.profile.yaml")  # a synthetic one kept for local
    _refused(
        ["eval", "--phone", "local", "--traces", str(work / "tr"), "--calibrations",
         str(work / "cal"), "--results", str(work / "res"), *NATIVE],
        capsys,
        work,
        "local.profile.yaml is a synthetic profile: published costs, measured on no device",
        "--profile",
    )  # fmt: skip


def test_a_farm_refuses_a_phone_whose_profile_is_synthetic(work: Path, capsys, monkeypatch) -> None:
    """A farm takes no --profile: a phone whose found profile is synthetic (the shipped
    K70's) stops the farm before any replay."""
    import as2d_cli.execution.farm as farm
    import device_agents.identity as identity
    import device_agents.registry as registry
    from device_agents.identity import DeviceIdentity

    phones = {
        "k70": DeviceIdentity("k70", "adb", "23117RK66C", "s1", "emulator-1", None),
        "mi14": DeviceIdentity("mi14", "adb", "23127PN0CC", "s2", "emulator-2", None),
    }
    monkeypatch.setattr(farm, "check_phones", lambda phones, remote: None)
    monkeypatch.setattr(registry, "resolve_phone", lambda p, port=None: p)
    monkeypatch.setattr(identity, "identify", lambda d: phones[d])
    _refused(
        ["eval", "--native", "--phone", "k70", "--phone", "mi14", "--traces", str(work / "tr"),
         "--calibrations", str(work / "cal"), "--results", str(work / "res")],
        capsys,
        work,
        "k70.profile.yaml is a synthetic profile",
        "`as2d calibrate --phone k70`",
    )  # fmt: skip


def test_native_with_an_explicit_profile_of_another_device_reports_an_expected_error(
    tmp_path: Path, capsys
) -> None:
    """`--profile` given: it runs (one short window, one repetition of each method), and the
    native report calls the replay-vs-native figures an expected error, not agreement."""
    from as2d_cli.formats.trace_io import load_traces, write_traces

    ts = load_traces(ROOT / "as2d_cli" / "assets" / "traces" / "test.jsonl.gz")
    short = min(ts.windows, key=lambda w: len(w.reference))
    (tmp_path / "tr").mkdir()
    write_traces(
        tmp_path / "tr" / "test.jsonl", dataclasses.replace(ts, windows=(short,)), split="test"
    )
    profile, dep = SHIPPED / "k70.profile.yaml", SHIPPED / "k70" / "deployment.yaml"
    args = ["eval", "--phone", "local", "--profile", str(profile), "--deployment", str(dep)]
    args += ["--traces", str(tmp_path / "tr"), "--results", str(tmp_path / "res"), *NATIVE]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    (folder,) = (tmp_path / "res").iterdir()
    first = (folder / "native.txt").read_text().splitlines()[0]
    assert first.startswith(
        "replay vs native: expected error (profile of another device / synthetic), not "
        "agreement — synthetic profile: published costs, measured on no device"
    )
    assert first in out and "expected error per window:" in out
    assert "agreement per window" not in out
    summary = json.loads((folder / "native.json").read_text())["results"]["summary"]
    assert summary["replay_vs_native"] == {
        "kind": "expected_error",
        "why": "synthetic profile: published costs, measured on no device",
    }


def test_the_native_report_of_this_devices_profile_still_says_agreement() -> None:
    from as2d_cli.evaluate.native_render import render_native
    from as2d_cli.evaluate.native_stats import comparison, summarize

    summary = summarize([])
    summary["replay_vs_native"] = comparison(None)
    text = render_native(summary)
    assert text.startswith("method ") and "agreement per window" in text
    assert "expected error" not in text
