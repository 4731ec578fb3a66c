"""as2d.profile v1: round trip, width-checked costs, op pricing, bad input as one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from as2d_cli.engine.clock import Op
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import json_schema
from as2d_cli.formats.profile import IN_LOOP_KINDS
from as2d_cli.formats.profile_io import dump_profile, load_profile, write_profile
from as2d_cli.synthetic import K70, k70_verify_curve, synthetic_profile

DATA = Path(__file__).parent / "data"


@pytest.fixture()
def doc() -> dict:
    return yaml.safe_load(dump_profile(synthetic_profile()))


def _save(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def _err(path: Path) -> str:
    with pytest.raises(FormatError) as e:
        load_profile(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_round_trip(tmp_path):
    p = synthetic_profile()
    out = write_profile(tmp_path / "k70.yaml", p)
    back = load_profile(out)
    assert dataclasses.replace(back, path=p.path) == p
    assert back.path == str(out) and back.synthetic


def test_committed_example_profile():
    p = load_profile(DATA / "example-profile.yaml")
    assert p.target_step_ms == 59.391 and p.verify_ms(8) == 112.656 and p.verify_ms(12) == 142.825
    assert p.widths == tuple(range(1, 26)) and p.synthetic


def test_anchor_curve_passes_through_the_paper_constants():
    v = k70_verify_curve()
    assert v[1] == K70["target_step"] and v[8] == K70["verify_k8"] and v[12] == K70["verify_k12"]
    assert all(v[k] < v[k + 1] for k in range(1, 25))
    # Nearly linear between anchors (p ≈ 0.993): K10 lies within 0.1 ms of the chord.
    chord = K70["verify_k8"] + (K70["verify_k12"] - K70["verify_k8"]) / 2
    assert abs(v[10] - chord) < 0.1


def test_costs_and_op_pricing():
    p = synthetic_profile()
    assert p.verify_ms(8, concurrent=True) == pytest.approx(112.656 * p.verify_concurrent_ratio[8])
    assert p.draft_ms(7, catch_up=1) == pytest.approx(8 * 23.347)
    assert p.paired_ms(rows=2) == pytest.approx(35.075 + 2 * 0.951)
    assert p.refresh_ms(0) == 0.0
    assert p.op_ms(Op("target_step")) == 59.391
    assert p.op_ms(Op("verify", width=8)) == 112.656
    assert p.op_ms(Op("draft", count=3, catch_up=1, rows=3)) == pytest.approx(
        4 * 23.347 + 3 * 0.951
    )
    assert p.op_ms(Op("loop")) == 10.738
    assert p.op_ms(Op("refresh", width=5)) == p.drafter.refresh_ms[5]
    q = p.source("qwen")
    assert q.step_ms(concurrent=True) == pytest.approx(23.347 * q.concurrent_ratio)
    assert p.source("parakeet").chunk_ms() == 40.0


def test_missing_width_is_an_error_naming_width_and_file(tmp_path, doc):
    doc["costs"]["verify"]["idle_ms"] = {
        k: v for k, v in doc["costs"]["verify"]["idle_ms"].items() if k != "K9"
    }
    doc["costs"]["verify"]["concurrent_ratio"].pop("K9")
    path = _save(tmp_path, doc)
    p = load_profile(path)
    for call in (
        lambda: p.verify_ms(9),
        lambda: p.verify_ms(9, True),
        lambda: p.op_ms(Op("verify", width=9)),
    ):
        with pytest.raises(FormatError) as e:
            call()
        assert "width K9 was not measured" in str(e.value) and str(path) in str(e.value)
        assert "K1–8,10–25" in str(e.value)
    with pytest.raises(FormatError, match="K26 was not measured"):
        p.verify_ms(26)


def test_source_ratio_table_overrides(tmp_path, doc):
    doc["costs"]["sources"]["parakeet"]["verify_concurrent_ratio"] = {"K1": 1.5, "K2": 1.25}
    p = load_profile(_save(tmp_path, doc))
    assert p.verify_ms(2, True, "parakeet") == pytest.approx(p.verify_ms(2) * 1.25)
    assert p.verify_ms(2, True, "qwen") == pytest.approx(
        p.verify_ms(2) * p.verify_concurrent_ratio[2]
    )
    with pytest.raises(FormatError, match="concurrent/idle ratio for verification width K3"):
        p.verify_ms(3, True, "parakeet")


def test_unknown_source_and_missing_drafter(tmp_path, doc):
    p = synthetic_profile()
    with pytest.raises(FormatError, match="no costs for source 'whisper'.*qwen, sensevoice"):
        p.source("whisper")
    doc["costs"]["drafter"] = None
    q = load_profile(_save(tmp_path, doc))
    with pytest.raises(FormatError, match="no 'drafter' costs"):
        q.draft_ms(1)


@pytest.mark.parametrize("version,words", [(0, "older"), (4, "newer")])
def test_old_and_future_versions(tmp_path, doc, version, words):
    doc["version"] = version
    assert f"version {version} is {words}" in _err(_save(tmp_path, doc))


def test_v1_reads_as_the_current_version_without_context(tmp_path, doc):
    doc["version"] = 1
    doc["costs"].pop("context", None)
    p = load_profile(_save(tmp_path, doc))
    assert p.version == 3 and p.context is None
    assert (
        p.source("qwen").startup_for(30.0, 10.0) == p.source("qwen").startup_ms
    )  # flat without a slope


def test_context_round_trip(tmp_path, doc):
    doc["costs"]["context"] = {
        "ref_tokens": 64,
        "ref_audio_s": 10.0,
        "target": {"ms_per_token": 0.01, "ms_per_audio_s": 0.5},
        "drafter": {"ms_per_token": 0.002},
    }
    doc["costs"]["sources"]["qwen"]["startup_ms_per_audio_s"] = 2.0
    p = load_profile(_save(tmp_path, doc))
    c = p.context
    assert c is not None and c.drafter_ms_per_audio_s == 0.0
    assert c.target_ms(164, 12.0) == pytest.approx(0.01 * 100 + 0.5 * 2.0)
    assert c.drafter_ms(0, 10.0) == pytest.approx(-0.128)
    assert p.source("qwen").startup_for(12.0, c.ref_audio_s) == pytest.approx(
        p.source("qwen").startup_ms + 4.0
    )
    again = load_profile(write_profile(tmp_path / "again.yaml", p))
    assert again.context == c and again.source("qwen").startup_ms_per_audio_s == 2.0
    doc["costs"]["context"]["target"]["ms_per_frame"] = 1.0
    assert "costs.context.target" in _err(_save(tmp_path, doc))


def test_negative_cost_refused(tmp_path, doc):
    doc["costs"]["verify"]["idle_ms"]["K3"] = -1.0
    assert "key costs.verify.idle_ms.K3" in _err(_save(tmp_path, doc))


def test_zero_verify_cost_refused(tmp_path, doc):
    doc["costs"]["verify"]["idle_ms"]["K3"] = 0
    assert "key costs.verify.idle_ms.K3" in _err(_save(tmp_path, doc))


def test_ratio_without_idle_width(tmp_path, doc):
    doc["costs"]["verify"]["concurrent_ratio"]["K30"] = 1.1
    assert "concurrent_ratio.K30: a ratio for a width with no idle measurement" in _err(
        _save(tmp_path, doc)
    )


def test_bad_width_key(tmp_path, doc):
    doc["costs"]["verify"]["idle_ms"]["8"] = 1.0
    assert "costs.verify.idle_ms" in _err(_save(tmp_path, doc))


def test_chunked_source_needs_chunk_cost(tmp_path, doc):
    del doc["costs"]["sources"]["parakeet"]["chunk_ms"]
    assert "costs.sources.parakeet" in _err(_save(tmp_path, doc))


def test_unquoted_timestamp_is_accepted(tmp_path):
    text = dump_profile(synthetic_profile()).replace(
        "created: '1970-01-01T00:00:00Z'", "created: 2026-11-29T10:00:00Z"
    )
    p = tmp_path / "p.yaml"
    p.write_text(text)
    assert load_profile(p).created.startswith("2026-11-29")


def test_damaged_yaml(tmp_path):
    p = tmp_path / "p.yaml"
    text = dump_profile(synthetic_profile())
    p.write_text(text[:400])  # cut mid-file: still YAML, but incomplete
    assert "'costs' is a required property" in _err(p)
    p.write_text(text[:400] + "\nbroken: [unclosed\n")
    m = _err(p)
    assert "not valid YAML at line" in m and "truncated or damaged" in m
    with pytest.raises(UserError, match="no such profile file"):
        load_profile(tmp_path / "missing.yaml")


def test_write_validates_first_and_refuses_overwrite(tmp_path):
    p = synthetic_profile()
    bad = dataclasses.replace(p, target_step_ms=-1.0)
    with pytest.raises(FormatError, match="target_step_ms"):
        write_profile(tmp_path / "bad.yaml", bad)
    assert not list(tmp_path.iterdir())
    out = write_profile(tmp_path / "ok.yaml", p)
    with pytest.raises(UserError, match="never overwritten"):
        write_profile(out, p)


def test_numpy_and_tuple_values_are_written_as_plain_yaml(tmp_path):
    import numpy as np

    p = synthetic_profile()
    q = dataclasses.replace(
        p,
        target_step_ms=np.float64(59.391),
        device={**p.device, "clusters": ((0, 1), (2, 4)), "ram_gib": np.float32(10.5)},
    )
    back = load_profile(write_profile(tmp_path / "np.yaml", q))
    assert back.target_step_ms == 59.391 and back.device["clusters"] == [[0, 1], [2, 4]]
    assert back.device["ram_gib"] == 10.5


# ------------------------------------------------------------------ costs.in_loop

IN_LOOP = {
    "sd": {"verify": 1.21, "draft": 1.04},
    "asp": {"refresh": 1.02, "verify": 1.18},
    "as2d": {"verify": 1.06},
}


def test_in_loop_round_trip(tmp_path, doc):
    doc["costs"]["in_loop"] = IN_LOOP
    doc["costs"]["context"] = {
        "ref_tokens": 64,
        "ref_audio_s": 10.0,
        "target": {"ms_per_token": 0.01},
    }
    p = load_profile(_save(tmp_path, doc))
    assert p.version == 3
    assert p.in_loop == IN_LOOP and list(p.in_loop) == ["as2d", "asp", "sd"]
    assert list(p.in_loop["asp"]) == ["refresh", "verify"]
    assert p.in_loop_ratio("sd", "verify") == 1.21 and p.in_loop_ratio("as2d", "verify") == 1.06
    assert (
        p.in_loop_ratio("asp", "draft") == 1.0 and p.in_loop_ratio("asp", "paired") == 1.0
    )  # absent kind
    out = write_profile(tmp_path / "again.yaml", p)
    written = yaml.safe_load(out.read_text())["costs"]
    assert (
        list(written)[list(written).index("in_loop") - 1] == "context"
    )  # written right after context
    assert list(written["in_loop"]) == ["as2d", "asp", "sd"]
    again = load_profile(out)
    assert dataclasses.replace(again, path=p.path) == p


def test_in_loop_absent_is_one(tmp_path, doc):
    p = synthetic_profile()
    assert p.in_loop is None
    assert "in_loop" not in yaml.safe_load(dump_profile(p))["costs"]
    for fam, kinds in IN_LOOP_KINDS.items():
        for kind in kinds:
            assert p.in_loop_ratio(fam, kind) == 1.0
    doc["costs"]["in_loop"] = {"sd": {"draft": 1.1}}
    q = load_profile(_save(tmp_path, doc))
    assert (
        q.in_loop_ratio("asp", "verify") == 1.0 and q.in_loop_ratio("sd", "verify") == 1.0
    )  # absent family / kind
    assert q.in_loop_ratio("sd", "draft") == 1.1


@pytest.mark.parametrize(
    "block,key,words",
    [
        ({"medusa": {"verify": 1.1}}, "costs.in_loop.medusa", "unknown method family"),
        ({"as2d": {"draft": 1.1}}, "costs.in_loop.as2d.draft", "unknown op kind"),
        ({"sd": {"loop": 1.1}}, "costs.in_loop.sd.loop", "unknown op kind"),
        ({"sd": {"verify": 0}}, "costs.in_loop.sd.verify", "finite number > 0"),
        ({"sd": {"verify": -1.2}}, "costs.in_loop.sd.verify", "finite number > 0"),
        ({"asp": {"paired": "1.2"}}, "costs.in_loop.asp.paired", "finite number > 0"),
        ({"asp": {"refresh": True}}, "costs.in_loop.asp.refresh", "finite number > 0"),
        ({"sd": {"verify": float("inf")}}, "costs.in_loop.sd.verify", "finite number > 0"),
        ({"sd": {"verify": float("nan")}}, "costs.in_loop.sd.verify", "finite number > 0"),
        ({"sd": {"verify": None}}, "costs.in_loop.sd.verify", "finite number > 0"),
        ({"sd": [1.2]}, "costs.in_loop.sd", "expected a mapping"),
        ([1.2], "costs.in_loop", "expected a mapping"),
    ],
)
def test_in_loop_bad_entries_refused(tmp_path, doc, block, key, words):
    doc["costs"]["in_loop"] = block
    msg = _err(_save(tmp_path, doc))
    assert f"key {key}:" in msg and words in msg and "as2d calibrate" in msg


def test_in_loop_bad_value_never_written(tmp_path):
    bad = dataclasses.replace(synthetic_profile(), in_loop={"sd": {"verify": -1.0}})
    with pytest.raises(FormatError, match="costs.in_loop.sd.verify"):
        write_profile(tmp_path / "bad.yaml", bad)
    assert not list(tmp_path.iterdir())


def test_in_loop_schema_matches_the_reader(doc):
    import jsonschema

    schema = json_schema("profile.schema.json")
    block = schema["properties"]["costs"]["properties"]["in_loop"]
    assert {
        f: tuple(block["properties"][f]["properties"]) for f in block["properties"]
    } == IN_LOOP_KINDS
    doc["costs"]["in_loop"] = IN_LOOP
    jsonschema.validate(doc, schema)
    for bad in (
        {"medusa": {"verify": 1.1}},
        {"as2d": {"draft": 1.1}},
        {"sd": {"verify": 0}},
        {"sd": {"verify": -1.0}},
        {"sd": {"verify": "1.2"}},
    ):
        doc["costs"]["in_loop"] = bad
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema)


def test_a_v2_profile_with_episodes_reads_its_startup_as_idle(tmp_path, doc):
    """v2 stored a calibrated (in-loop) startup as observed beside the target; v3 keeps it
    idle and the replay applies the concurrent ratio, so the upgrade divides by it and the
    replay charges the same. A v2 profile without episodes kept idle figures already."""
    doc["version"] = 2
    src = doc["costs"]["sources"]["qwen"]
    src["startup_ms"], src["startup_ms_per_audio_s"] = 30.0, 0.8
    r = src["concurrent_ratio"]
    plain = load_profile(_save(tmp_path, doc)).source("qwen")
    assert (plain.startup_ms, plain.startup_ms_per_audio_s) == (30.0, 0.8)
    doc["costs"]["in_loop"] = IN_LOOP
    p = load_profile(_save(tmp_path, doc))
    got = p.source("qwen")
    assert p.version == 3
    assert got.startup_ms == pytest.approx(30.0 / r)
    assert got.startup_ms_per_audio_s == pytest.approx(0.8 / r)
    assert got.startup_ms * got.concurrent_ratio == pytest.approx(30.0)  # charged as before
    assert got.step_ms_idle == plain.step_ms_idle  # nothing else moves
