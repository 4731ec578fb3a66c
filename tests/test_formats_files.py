"""Deployments, results, version machinery and atomic no-clobber writes."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest
import yaml

import as2d_cli
from as2d_cli.engine.methods import MethodSpec
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import check_version, next_free, write_atomic
from as2d_cli.formats.deployment import as2d_settings
from as2d_cli.formats.deployment_io import (
    deployment_to_doc,
    load_deployment,
    make_deployment,
    write_deployment,
)
from as2d_cli.formats.results import load_results, make_results, write_results

DATA = Path(__file__).parent / "data"
PROFILE = DATA / "example-profile.yaml"


def test_deployment_round_trip(tmp_path):
    d = make_deployment(
        "qwen",
        7,
        0.4,
        8,
        PROFILE,
        "k70-synthetic",
        {"split": "dev", "tps": 27.92, "ranking": ((7, 27.9),)},
        device_facts={"name": "k70-synthetic", "soc": "SM8650"},
    )
    out = write_deployment(tmp_path / "k70.deployment.yaml", d)
    back = load_deployment(out, profile=PROFILE)
    assert back.max_width == 8 and back.selection["ranking"] == [[7, 27.9]]
    assert back.environment["device"] == {"name": "k70-synthetic", "soc": "SM8650"}
    assert (back.source, back.budget, back.threshold, back.batch, back.profile) == (
        d.source,
        7,
        0.4,
        8,
        d.profile,
    )
    assert back.environment["toolkit_version"] and back.environment["created"].endswith("Z")


def _older(doc: dict, version: int, *dropped: str) -> dict:
    """``doc`` as an older version wrote it: that version, without the ``config`` keys it lacked."""
    config = {k: v for k, v in doc["config"].items() if k not in dropped}
    return {**doc, "version": version, "config": config}


def test_a_version_1_deployment_is_read_with_the_papers_alignment(tmp_path):
    """Version 1 had no ``config.align``: its catalog was replayed under the paper's rules,
    so it is read as ``paper``; a new file records the rules it was selected with."""
    doc = deployment_to_doc(make_deployment("qwen", 7, 0.4, 8, PROFILE, "k70", {}, align="suffix"))
    assert doc["version"] == 3 and doc["config"]["align"] == "suffix"
    p = tmp_path / "v1.yaml"
    p.write_text(yaml.safe_dump(_older(doc, 1, "align", "history")))
    old = load_deployment(p)
    assert (old.align, old.history, old.version) == ("paper", False, 3)
    new = tmp_path / "v3.yaml"
    new.write_text(yaml.safe_dump(doc))
    assert load_deployment(new).align == "suffix"


def test_a_deployment_with_history_candidates_round_trips(tmp_path):
    d = make_deployment("drafter", 9, 0.7, 2, PROFILE, "k70", {}, align="suffix", history=True)
    out = write_deployment(tmp_path / "d.yaml", d)
    text = out.read_text()
    assert text.startswith("# as2d.deployment v3") and "history: true" in text
    back = load_deployment(out, profile=PROFILE)
    assert back.history is True and (back.source, back.budget, back.align) == (
        "drafter",
        9,
        "suffix",
    )
    assert as2d_settings(back) == {
        "source": "drafter",
        "budget": 9,
        "threshold": 0.7,
        "batch": 2,
        "align": "suffix",
        "history": True,
    }
    # The settings build the same As²d a native runner is sent (MethodSpec's wire form).
    spec = MethodSpec("as2d", **as2d_settings(back))
    assert MethodSpec.from_wire(spec.to_wire()) == spec and spec.policy().history
    # Written without history candidates, it reads so.
    off = write_deployment(tmp_path / "off.yaml", dataclasses.replace(d, history=False))
    assert load_deployment(off).history is False


def test_a_version_2_deployment_is_read_without_history_candidates(tmp_path):
    """Version 2 had no ``config.history``: its catalog was replayed without history
    candidates, so it runs without them; everything else it recorded stays."""
    doc = deployment_to_doc(
        make_deployment("lookahead", 15, 0.7, 2, PROFILE, "k70", {}, align="suffix", history=True)
    )
    p = tmp_path / "v2.yaml"
    p.write_text(yaml.safe_dump(_older(doc, 2, "history")))
    old = load_deployment(p)
    assert old.history is False and old.version == 3
    assert (old.source, old.budget, old.threshold, old.batch, old.align) == (
        "lookahead",
        15,
        0.7,
        2,
        "suffix",
    )
    # A version-3 file must say it; a non-boolean is refused in one line.
    for bad in (_older(doc, 3, "history"), {**doc, "config": {**doc["config"], "history": "yes"}}):
        p.write_text(yaml.safe_dump(bad))
        with pytest.raises(FormatError, match="config"):
            load_deployment(p)


def test_the_shipped_deployments_read_without_history_candidates():
    """The shipped K70 deployments (version 2) run without history candidates."""
    shipped = Path(as2d_cli.__file__).parent / "assets" / "profiles" / "k70"
    for name in ("deployment.yaml", "deployment-paper.yaml"):
        assert load_deployment(shipped / name).history is False


def test_deployment_profile_mismatch(tmp_path):
    d = make_deployment("qwen", 7, None, 8, PROFILE, "k70", {})
    out = write_deployment(tmp_path / "d.yaml", d)
    other = tmp_path / "other.yaml"
    other.write_text(PROFILE.read_text() + "\n# edited\n")
    with pytest.raises(FormatError) as e:
        load_deployment(out, profile=other)
    assert "was selected with profile" in str(e.value) and "select again" in str(e.value)


@pytest.mark.parametrize(
    "edit,key",
    [
        (lambda d: d["config"].update(budget=0), "config.budget"),
        (lambda d: d["config"].update(threshold=1.5), "config.threshold"),
        (lambda d: d["profile"].update(sha256="abc"), "profile.sha256"),
        (lambda d: d.update(version=4), "version 4 is newer"),
        (lambda d: d["config"].update(align="nearest"), "config.align"),
    ],
)
def test_deployment_bad_input(tmp_path, edit, key):
    doc = deployment_to_doc(make_deployment("qwen", 7, 0.4, 8, PROFILE, "k70", {}))
    edit(doc)
    p = tmp_path / "d.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(FormatError) as e:
        load_deployment(p)
    assert key in str(e.value) and str(p) in str(e.value)


def test_deployment_write_refuses_invalid(tmp_path):
    d = make_deployment("qwen", 0, 0.4, 8, PROFILE, "k70", {})
    with pytest.raises(FormatError, match="config.budget"):
        write_deployment(tmp_path / "d.yaml", d)
    assert not list(tmp_path.iterdir())


def test_results_round_trip_and_no_overwrite(tmp_path):
    doc = make_results(
        "replay",
        {"tps": 16.96, "windows": [1, 2]},
        inputs={"profile": PROFILE},
        device={"name": "k70"},
    )
    out = write_results(tmp_path / "r.json", doc)
    back = load_results(out, kind="replay")
    assert back["results"] == {"tps": 16.96, "windows": [1, 2]}
    assert back["environment"]["device"] == {"name": "k70"}
    assert len(back["inputs"]["profile"]["sha256"]) == 64
    before = out.read_bytes()
    with pytest.raises(UserError, match="never overwritten.*--force"):
        write_results(out, make_results("replay", {"tps": 1.0}))
    assert out.read_bytes() == before
    write_results(out, make_results("replay", {"tps": 1.0}), force=True)
    assert load_results(out)["results"]["tps"] == 1.0
    with pytest.raises(FormatError, match="holds 'replay' results, expected 'eval'"):
        load_results(out, kind="eval")


def test_results_refuse_impossible_numbers(tmp_path):
    with pytest.raises(FormatError, match=r"results.tps: value inf is not a finite number"):
        make_results("replay", {"tps": math.inf})
    with pytest.raises(FormatError, match="not a finite number"):
        write_results(
            tmp_path / "r.json",
            {
                "schema": "as2d.results",
                "version": 1,
                "kind": "x",
                "environment": {},
                "inputs": {},
                "results": {"x": float("nan")},
            },
        )
    assert not list(tmp_path.iterdir())


def test_results_damaged_and_future(tmp_path):
    out = write_results(tmp_path / "r.json", make_results("replay", {"a": 1}))
    text = out.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(FormatError, match="not valid JSON"):
        load_results(bad)
    doc = json.loads(text)
    doc["version"] = 2
    fut = tmp_path / "fut.json"
    fut.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="version 2 is newer"):
        load_results(fut)


def test_next_free_and_atomic_write(tmp_path):
    p = tmp_path / "r.json"
    assert next_free(p) == p
    write_atomic(p, b"1")
    assert next_free(p) == tmp_path / "r-2.json"
    write_atomic(tmp_path / "r-2.json", b"2")
    assert next_free(p) == tmp_path / "r-3.json"
    g = tmp_path / "t.jsonl.gz"
    write_atomic(g, b"x")
    assert next_free(g) == tmp_path / "t-2.jsonl.gz"
    assert sorted(x.name for x in tmp_path.iterdir()) == [
        "r-2.json",
        "r.json",
        "t.jsonl.gz",
    ]  # no temp files left
    mask = os.umask(0)
    os.umask(mask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's private 0600


def test_stepwise_upgrade_machinery():
    ups = {1: lambda d: {**d, "b": d["a"] * 2}}
    doc = check_version(
        {"schema": "s", "version": 1, "a": 2}, schema="s", version=2, where="f", upgrades=ups
    )
    assert doc == {"schema": "s", "version": 2, "a": 2, "b": 4}
    with pytest.raises(FormatError, match="version 0 is older.*cannot be upgraded"):
        check_version({"schema": "s", "version": 0}, schema="s", version=2, where="f", upgrades=ups)
    with pytest.raises(FormatError, match="'version' must be an integer"):
        check_version({"schema": "s", "version": "1"}, schema="s", version=1, where="f")
    with pytest.raises(FormatError, match="expected a JSON/YAML object"):
        check_version([1], schema="s", version=1, where="f")
