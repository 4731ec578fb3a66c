"""as2d.trace v2 (and v1): round trips, the committed examples, and every bad input as one clear line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import json_schema
from as2d_cli.formats.trace_io import dump_traces, load_traces, write_traces
from as2d_cli.synthetic import EOS_ID, example_traces, synthetic_traces

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def small():
    return synthetic_traces(5, scale=0.03, max_tokens=64, mean_scale=0.3)


def _lines(ts) -> list[dict]:
    return [json.loads(x) for x in dump_traces(ts).decode().splitlines()]


def _write(tmp_path: Path, recs: list[dict], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


def _err(path: Path, **kw) -> str:
    with pytest.raises(FormatError) as e:
        load_traces(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_round_trip(tmp_path, small, name):
    p = write_traces(tmp_path / name, small)
    if name.endswith(".gz"):
        assert p.read_bytes()[:2] == b"\x1f\x8b"
    back = load_traces(p)
    assert back.windows == small.windows
    assert back.sources == small.sources and back.default_source == "qwen" and back.eos_id == EOS_ID
    assert back.provenance["synthetic"] is True


@pytest.mark.parametrize("split", ["dev", "val", "test"])
def test_committed_examples_match_generator(split):
    ts = load_traces(DATA / f"example-{split}.jsonl", split=split)
    assert ts.windows == example_traces(split).windows
    assert any(w.capped for w in ts.windows) and any(
        not w.sources["parakeet"].eligible for w in ts.windows
    )


def test_examples_satisfy_the_published_json_schemas():
    header_schema, window_schema = (
        json_schema("trace.schema.json"),
        json_schema("trace-window.schema.json"),
    )
    for split in ("dev", "val", "test"):
        recs = [json.loads(x) for x in (DATA / f"example-{split}.jsonl").read_text().splitlines()]
        jsonschema.validate(recs[0], header_schema)
        for r in recs[1:]:
            jsonschema.validate(r, window_schema)
    load_traces(DATA / "example-test.jsonl", strict=True)


def test_write_refuses_overwrite_and_keeps_old(tmp_path, small):
    p = write_traces(tmp_path / "t.jsonl", small)
    before = p.read_bytes()
    with pytest.raises(UserError, match="never overwritten"):
        write_traces(p, example_traces("dev"))
    assert p.read_bytes() == before and list(tmp_path.iterdir()) == [p]
    write_traces(p, example_traces("dev"), force=True)
    assert load_traces(p).windows == example_traces("dev").windows


def test_window_helpers(small):
    w = next(w for w in small.windows if not w.sources["parakeet"].eligible)
    used, src = w.source_for("parakeet")
    assert used == "qwen" and src is w.sources["qwen"]
    e = next(w for w in small.windows if w.sources["parakeet"].eligible)
    assert e.source_for("parakeet")[0] == "parakeet"
    with pytest.raises(UserError, match="no source 'nope'"):
        w.source_for("nope")
    assert small.by_split("test").windows == small.windows and len(small.by_split("dev")) == 0


# ------------------------------------------------------------------ bad input
def test_wrong_schema_name(tmp_path, small):
    recs = _lines(small)
    recs[0]["schema"] = "as2d.profile"
    assert "schema is 'as2d.profile', expected 'as2d.trace'" in _err(_write(tmp_path, recs))


def test_future_version_refused(tmp_path, small):
    recs = _lines(small)
    recs[0]["version"] = 3
    m = _err(_write(tmp_path, recs))
    assert "version 3 is newer" in m and "upgrade as2d" in m and "line 1" in m


def test_old_version_refused(tmp_path, small):
    recs = _lines(small)
    recs[0]["version"] = 0
    m = _err(_write(tmp_path, recs))
    assert "version 0 is older" in m and "regenerate" in m


def test_version_1_reads_as_version_2(tmp_path, small):
    recs = _lines(small)
    assert recs[0]["version"] == 2
    recs[0]["version"] = 1
    back = load_traces(_write(tmp_path, recs))
    assert back.version == 2 and back.windows == small.windows


def test_steps_round_trip_and_must_account_for_every_token(tmp_path, small):
    recs = _lines(small)
    src = recs[1]["sources"]["qwen"]
    n = len(src["tokens"])
    steps = [2] * (n // 2) + [1] * (n % 2)
    src["steps"] = steps
    back = load_traces(_write(tmp_path, recs))
    assert back.windows[0].sources["qwen"].steps == tuple(steps)
    assert _lines(back)[1]["sources"]["qwen"]["steps"] == steps
    src["steps"] = steps + [1]
    m = _err(_write(tmp_path, recs))
    assert "steps" in m and f"sum to {n + 1} for {n} tokens" in m
    src["steps"] = [0, *steps]
    assert "positive integers" in _err(_write(tmp_path, recs))


def test_unknown_source(tmp_path, small):
    recs = _lines(small)
    recs[2]["sources"]["whisper"] = {"tokens": [1, 2], "eligible": True}
    m = _err(_write(tmp_path, recs))
    assert (
        "line 3" in m
        and f"window {recs[2]['id']}" in m
        and "sources.whisper" in m
        and "unknown source" in m
    )


def test_declared_source_missing(tmp_path, small):
    recs = _lines(small)
    del recs[1]["sources"]["sensevoice"]
    assert "sources.sensevoice: declared in the header but missing" in _err(_write(tmp_path, recs))


@pytest.mark.parametrize(
    "bad,shown", [(1.5, "1.5"), ("12", "'12'"), (None, "None"), (True, "True")]
)
def test_tokens_of_wrong_type(tmp_path, small, bad, shown):
    recs = _lines(small)
    recs[1]["sources"]["qwen"]["tokens"][3] = bad
    m = _err(_write(tmp_path, recs))
    assert "sources.qwen.tokens[3]" in m and f"expected an integer token id, got {shown}" in m


def test_reference_token_outside_vocab(tmp_path, small):
    recs = _lines(small)
    recs[1]["reference"][0] = 10**9
    assert "reference[0]: token id 1000000000 is outside the vocabulary" in _err(
        _write(tmp_path, recs)
    )


def test_drafter_confidence_out_of_range(tmp_path, small):
    recs = _lines(small)
    recs[1]["drafter"]["confidences"][2][5] = 1.5
    assert "drafter.confidences[2][5]: confidence must be a number in [0, 1], got 1.5" in _err(
        _write(tmp_path, recs)
    )


def test_drafter_wrong_length(tmp_path, small):
    recs = _lines(small)
    recs[1]["drafter"]["continuations"][0] = recs[1]["drafter"]["continuations"][0][:-1]
    assert "drafter.continuations[0]: 23 tokens, expected exactly cap=24" in _err(
        _write(tmp_path, recs)
    )


def test_split_disagrees_with_request(tmp_path, small):
    p = write_traces(tmp_path / "t.jsonl", small)
    m = _err(p, split="dev")
    assert "key split" in m and "split 'test' but 'dev' was requested" in m


def test_split_disagrees_with_header(tmp_path, small):
    recs = _lines(small)
    recs[0]["split"] = "test"
    recs[2]["split"] = "dev"
    m = _err(_write(tmp_path, recs))
    assert "line 3" in m and "split 'dev' but the file header says 'test'" in m


def test_header_split_vs_request(tmp_path):
    p = write_traces(tmp_path / "t.jsonl", example_traces("val"), split="val")
    assert "holds the 'val' split but 'test' was requested" in _err(p, split="test")


def test_eos_flag_inconsistent(tmp_path, small):
    recs = _lines(small)
    i = next(i for i, r in enumerate(recs[1:], 1) if r["eos"])
    recs[i]["reference"][-1] = 7
    assert f"eos is true but the last token is 7, not EOS {EOS_ID}" in _err(_write(tmp_path, recs))


def test_unknown_key(tmp_path, small):
    recs = _lines(small)
    recs[1]["refrence"] = [1]
    assert "key refrence: unknown key" in _err(_write(tmp_path, recs))


def test_duplicate_window(tmp_path, small):
    recs = _lines(small)
    recs.append(recs[1])
    recs[0]["windows"] += 1
    assert "appears twice" in _err(_write(tmp_path, recs))


def test_truncated_json_line(tmp_path, small):
    text = dump_traces(small).decode()
    p = tmp_path / "t.jsonl"
    p.write_text(text[: len(text) // 2])
    m = _err(p)
    assert "not valid JSON" in m and "truncated" in m


def test_truncated_at_line_boundary(tmp_path, small):
    lines = dump_traces(small).decode().splitlines(keepends=True)
    p = tmp_path / "t.jsonl"
    p.write_text("".join(lines[:-2]))
    assert f"header announces {len(lines) - 1} windows but the file holds {len(lines) - 3}" in _err(
        p
    )


def test_truncated_gzip(tmp_path, small):
    data = gzip.compress(dump_traces(small))
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(data[: len(data) // 2])
    assert "gzip data is truncated or corrupt" in _err(p)


def test_gzip_without_extension(tmp_path, small):
    p = tmp_path / "t.jsonl"
    p.write_bytes(gzip.compress(dump_traces(small)))
    assert "not UTF-8" in _err(p)


def test_empty_and_missing(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("")
    assert "empty file" in _err(p)
    with pytest.raises(UserError, match="no such trace file"):
        load_traces(tmp_path / "nope.jsonl")


def test_header_schema_error_names_key(tmp_path, small):
    recs = _lines(small)
    recs[0]["sources"]["qwen"]["kind"] = "tree"
    m = _err(_write(tmp_path, recs))
    assert "key sources.qwen.kind" in m and "line 1" in m


def test_paper_size_round_trip_through_gzip(tmp_path):
    """688 windows with 24-token drafter continuations survive write/load unchanged (the
    whole-matrix fast path of the validator must agree with the objects written)."""
    ts = synthetic_traces()
    p = write_traces(tmp_path / "all.jsonl.gz", ts)
    back = load_traces(p, split="test")
    assert back.windows == ts.windows and back.n_tokens == 94_511


def test_default_source_must_serve_the_window(small):
    import dataclasses

    w = next(w for w in small.windows if not w.sources["parakeet"].eligible)
    dead = dataclasses.replace(
        w, sources={**w.sources, "qwen": dataclasses.replace(w.sources["qwen"], eligible=False)}
    )
    with pytest.raises(UserError, match="neither 'parakeet' nor the default source 'qwen'"):
        dead.source_for("parakeet")
    orphan = dataclasses.replace(w, default_source=None)
    with pytest.raises(UserError, match="no default source"):
        orphan.source_for("parakeet")


def test_vocab_from_tokenizer_and_disagreement(tmp_path, small):
    recs = _lines(small)
    del recs[0]["vocab_size"]
    recs[1]["reference"][0] = 151_936  # == vocab size: out of range via provenance.tokenizer
    assert "outside the vocabulary (size 151936)" in _err(_write(tmp_path, recs))
    recs = _lines(small)
    recs[0]["vocab_size"] = 1000
    assert "key vocab_size: 1000 disagrees with provenance.tokenizer.vocab_size 151936" in _err(
        _write(tmp_path, recs, "b.jsonl")
    )
