"""Deployments, results, version machinery and atomic no-clobber writes."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import check_version, next_free, write_atomic
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


def test_a_version_1_deployment_is_read_with_the_papers_alignment(tmp_path):
    """Version 1 had no ``config.align``: its catalog was replayed under the paper's rules,
    so it is read as ``paper``; a new file records the rules it was selected with."""
    doc = deployment_to_doc(make_deployment("qwen", 7, 0.4, 8, PROFILE, "k70", {}, align="suffix"))
    assert doc["version"] == 2 and doc["config"]["align"] == "suffix"
    old = {**doc, "version": 1, "config": {k: v for k, v in doc["config"].items() if k != "align"}}
    p = tmp_path / "v1.yaml"
    p.write_text(yaml.safe_dump(old))
    assert load_deployment(p).align == "paper"
    new = tmp_path / "v2.yaml"
    new.write_text(yaml.safe_dump(doc))
    assert load_deployment(new).align == "suffix"


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
        (lambda d: d.update(version=3), "version 3 is newer"),
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
