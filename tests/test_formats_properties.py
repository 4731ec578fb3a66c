"""Property tests: any valid trace round-trips exactly; the fast hand validator and the
published window JSON Schema agree on which records are valid."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_cli.errors import FormatError
from as2d_cli.formats.common import json_schema
from as2d_cli.formats.trace import (
    AUTOREGRESSIVE,
    CHUNKED,
    Chunk,
    DrafterTrace,
    SourceInfo,
    SourceTrace,
    TraceSet,
    WindowTrace,
)
from as2d_cli.formats.trace_io import dump_traces, load_traces, window_record

EOS = 2
VOCAB = 50
tok = st.integers(0, VOCAB - 1).filter(lambda t: t != EOS)
conf = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def windows(draw, i: int = 0) -> WindowTrace:
    body = draw(st.lists(tok, min_size=0, max_size=12))
    capped = draw(st.booleans()) and len(body) >= 1
    ref = tuple(body) if capped else tuple(body) + (EOS,)
    max_tokens = len(ref) if capped else len(ref) + draw(st.integers(0, 5))
    # A source ends at its own end: EOS only as its last token, its end marked only there.
    ar = draw(st.lists(tok, max_size=10)) + ([EOS] if draw(st.booleans()) else [])
    arc = draw(st.none() | st.lists(conf, min_size=len(ar), max_size=len(ar)))
    ar_eos = ar[-1] == EOS if ar else draw(st.booleans())
    ends = sorted(draw(st.lists(st.integers(0, 20), max_size=3)))
    chunk_toks = [list(draw(st.lists(tok, max_size=4))) for _ in ends]
    if chunk_toks:
        chunk_toks[-1].append(EOS)  # a chunked source's last chunk ends with EOS
    chunks = tuple(Chunk(tuple(t), float(e), None) for t, e in zip(chunk_toks, ends))
    eligible = draw(st.booleans())
    cap = draw(st.integers(1, 4))
    n_pos = len(ref) - 1
    conts = tuple(
        tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=cap, max_size=cap)))
        for _ in range(n_pos)
    )
    confs = tuple(tuple(draw(st.lists(conf, min_size=cap, max_size=cap))) for _ in range(n_pos))
    drafter = draw(
        st.sampled_from([None, DrafterTrace(cap, conts, confs), DrafterTrace(cap, conts, None)])
    )
    return WindowTrace(
        id=f"w{i}-{draw(st.text('abc', min_size=1, max_size=4))}",
        dataset=draw(st.sampled_from(["ami", "fleurs"])),
        split="test",
        audio_seconds=draw(st.floats(0, 100, allow_nan=False)),
        task="asr",
        language=draw(st.sampled_from(["en", "zh"])),
        reference=ref,
        eos=not capped,
        capped=capped,
        max_tokens=max_tokens,
        eos_id=EOS,
        sources={
            "ar": SourceTrace(
                AUTOREGRESSIVE,
                tuple(ar),
                None if arc is None else tuple(arc),
                None,
                ar_eos,
                True,
            ),
            "ch": SourceTrace(
                CHUNKED,
                tuple(t for c in chunks for t in c.tokens) if eligible else (),
                None,
                chunks if eligible else (),
                True,
                eligible,
            ),
        },
        drafter=drafter,
        default_source="ar",
    )


def _set(ws: list[WindowTrace]) -> TraceSet:
    prov = {
        "models": {"target": "t"},
        "tokenizer": {"name": "tiny", "vocab_size": VOCAB},
        "toolkit_version": "0",
        "created": "x",
    }
    return TraceSet(
        prov,
        EOS,
        {"ar": SourceInfo("ar", AUTOREGRESSIVE), "ch": SourceInfo("ch", CHUNKED)},
        "ar",
        tuple(ws),
    )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(windows(), min_size=0, max_size=4, unique_by=lambda w: w.id))
def test_any_valid_trace_round_trips(tmp_path_factory, ws):
    p = tmp_path_factory.mktemp("rt") / "t.jsonl"
    p.write_bytes(dump_traces(_set(ws)))
    back = load_traces(p)
    assert back.windows == tuple(ws)


# Mutations of a valid window record the JSON Schema can express on its own: both the hand
# validator and the schema must refuse each.
MUTATIONS = {
    "token float": lambda r: r["reference"].__setitem__(0, 1.5),
    "token string": lambda r: r["sources"]["ar"]["tokens"].append("7"),
    "token negative": lambda r: r["sources"]["ar"]["tokens"].append(-1),
    "token bool": lambda r: r["sources"]["ar"]["tokens"].append(True),
    "confidence > 1": lambda r: r["sources"]["ar"].__setitem__(
        "confidences", [1.5] * len(r["sources"]["ar"]["tokens"])
    ),
    "missing id": lambda r: r.pop("id"),
    "eos not bool": lambda r: r.__setitem__("eos", 1),
    "max_tokens zero": lambda r: r.__setitem__("max_tokens", 0),
    "empty reference": lambda r: r.__setitem__("reference", []),
    "unknown key": lambda r: r.__setitem__("extra", 1),
    "source unknown key": lambda r: r["sources"]["ar"].__setitem__("speed", 1),
    "source without eligible": lambda r: r["sources"]["ar"].pop("eligible"),
    "negative audio": lambda r: r.__setitem__("audio_seconds", -1),
    "chunk without end": lambda r: r["sources"]["ch"]["chunks"].append({"tokens": [1]}),
    "drafter cap zero": lambda r: r["drafter"].__setitem__("cap", 0),
    "drafter token float": lambda r: r["drafter"]["continuations"][0].__setitem__(0, 0.5),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_hand_validator_and_schema_agree(tmp_path, name):
    w = WindowTrace(
        "w",
        "ami",
        "test",
        3.0,
        "asr",
        "en",
        (5, 6, EOS),
        True,
        False,
        10,
        EOS,
        {
            "ar": SourceTrace(AUTOREGRESSIVE, (5, 6), (0.9, 0.8)),
            "ch": SourceTrace(CHUNKED, (5,), None, (Chunk((5,), 2.56),)),
        },
        DrafterTrace(2, ((6, EOS), (EOS, 9)), ((0.9, 0.8), (0.7, 0.2))),
        "ar",
    )
    good = window_record(w)
    schema = json_schema("trace-window.schema.json")
    jsonschema.validate(good, schema)
    bad = copy.deepcopy(good)
    MUTATIONS[name](bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    header = json.loads(dump_traces(_set([w])).decode().splitlines()[0])
    p = Path(tmp_path) / "t.jsonl"
    p.write_text(json.dumps(header) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(FormatError):
        load_traces(p)
