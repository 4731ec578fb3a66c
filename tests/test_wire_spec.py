"""MethodSpec's one wire form (docs/runner-protocol.md, "Method settings"): every method's
spec survives the round trip; the runner's decode and stream commands read it; stored
native runs written with runner protocol version 1's names are read as they ran."""

from __future__ import annotations

import json

import pytest

from as2d_cli.engine.methods import (
    DEFAULT_ASP_CAP,
    DEFAULT_BUDGET,
    DEFAULT_SD_K,
    METHODS,
    WIRE_FIELDS,
    WIRE_TAKES,
    MethodSpec,
    spec_grid,
    spec_of,
)
from as2d_cli.errors import UserError

SPECS = [
    MethodSpec("target-only"),
    MethodSpec("sd", k=5),
    MethodSpec("asp", budget=14),
    MethodSpec("as2d-no-td", budget=3, threshold=0.6),
    MethodSpec("as2d-no-bc", budget=24, source="ctc", batch=2, align="paper"),
    MethodSpec("as2d", budget=7, source="lookahead", threshold=None, batch=3, history=True),
    MethodSpec("as2d", budget=9, source="drafter", align_window=4, align_lookback=0),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.label)
def test_every_spec_survives_its_wire_form(spec: MethodSpec) -> None:
    wire = spec.to_wire()
    assert list(wire) == list(WIRE_FIELDS)  # one name per field, every field
    assert MethodSpec.from_wire(json.loads(json.dumps(wire))) == spec
    # a field the method does not take travels as null and is not read back
    assert all(wire[f] is None for f in WIRE_FIELDS[1:] if f not in WIRE_TAKES[spec.method])


def test_absent_fields_take_the_methods_defaults_and_others_are_not_read() -> None:
    assert MethodSpec.from_wire({"method": "asp"}).budget == DEFAULT_ASP_CAP
    assert MethodSpec.from_wire({"method": "as2d"}) == MethodSpec(
        "as2d", budget=DEFAULT_BUDGET, source="drafter"
    )
    assert MethodSpec.from_wire({"method": "sd", "budget": 3, "window": "w"}).k == DEFAULT_SD_K
    # null is a value: As²d without a confidence stop
    assert MethodSpec.from_wire({"method": "as2d", "threshold": None}).threshold is None
    assert spec_of("as2d", threshold=None).threshold == 0.4  # None: not given
    assert set(WIRE_TAKES) == set(METHODS)


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"method": "magic"}, "'method'"),
        ({"method": "as2d", "budget": 0}, "'budget'"),
        ({"method": "as2d", "budget": None}, "'budget'"),
        ({"method": "as2d", "batch": True}, "'batch'"),
        ({"method": "as2d", "threshold": "high"}, "'threshold'"),
        ({"method": "as2d", "align": "left"}, "'align'"),
        ({"method": "as2d", "align_window": -1}, "'align_window'"),
        ({"method": "as2d", "history": 1}, "'history'"),
        ({"method": "sd", "k": 2.5}, "'k'"),
    ],
)
def test_a_bad_field_is_one_line_naming_it(doc: dict, field: str) -> None:
    with pytest.raises(UserError, match=field) as err:
        MethodSpec.from_wire(doc)
    assert "\n" not in str(err.value)


def test_the_grid_is_the_product_of_the_lists_first_outermost() -> None:
    base = MethodSpec("as2d", align="paper")
    grid = spec_grid(base, {"threshold": [0.4, 0.7, 0.4], "batch": [2, 8]})
    assert [(s.threshold, s.batch) for s in grid] == [(0.4, 2), (0.4, 8), (0.7, 2), (0.7, 8)]
    assert {s.align for s in grid} == {"paper"}
    assert spec_grid(base, {"threshold": [], "batch": []}) == [base]


def test_the_runner_reads_the_wire_form_and_refuses_version_1s_cap() -> None:
    from native.protocol import PROTOCOL_VERSION, ProtocolError, decode_settings
    from native.stream_settings import stream_settings

    for spec in SPECS:
        s = decode_settings({"op": "decode", "window": "w", **spec.to_wire()})
        assert s["spec"] == spec
    with pytest.raises(
        ProtocolError, match=f"'cap' is runner protocol version 1's.*{PROTOCOL_VERSION}"
    ):
        decode_settings({"op": "decode", "window": "w", "method": "asp", "cap": 14})
    with pytest.raises(ProtocolError, match="'source' must be one of"):
        decode_settings({"op": "decode", "window": "w", "method": "as2d", "source": "oracle"})
    st = stream_settings({"op": "stream", **SPECS[-1].to_wire(), "block_s": 2.0})
    assert st.spec == SPECS[-1] and st.to_dict()["batch"] == SPECS[-1].batch
    assert stream_settings({"op": "stream"}).spec == MethodSpec("as2d", budget=7, source="drafter")
    with pytest.raises(ProtocolError, match="'method' must be one of as2d, target-only, sd"):
        stream_settings({"op": "stream", "method": "asp"})


def test_stored_native_runs_are_read_with_version_1s_names() -> None:
    """native.settings.json's commands and native.runs.jsonl's results written before the
    wire form: ASP's cap was ``cap`` (in the result, added by the host), defaults left out,
    an As²d run before its alignment was recorded ran the paper's rules."""
    from as2d_cli.evaluate.native_record import run_spec, upgrade_commands
    from as2d_cli.evaluate.native_runs import native_commands

    class Dep:
        source, budget, threshold, batch, align, history = "drafter", 7, 0.7, 2, "suffix", False

    v1 = {
        "target-only": {},
        "sd": {"k": DEFAULT_SD_K},
        "asp": {"cap": 24},
        "as2d": {"budget": 7, "source": "drafter", "threshold": 0.7, "batch": 2, "align": "suffix"},
    }
    assert upgrade_commands(v1) == native_commands(Dep(), 24)
    assert upgrade_commands(native_commands(Dep(), 24)) == native_commands(Dep(), 24)
    asp_v1 = {"method": "asp", "budget": None, "k": None, "threshold": 0.4, "cap": 24}
    assert run_spec(asp_v1) == MethodSpec("asp", budget=24)
    as2d_v1 = {"method": "as2d", "budget": 7, "source": "ctc", "threshold": 0.4, "cap": None}
    assert run_spec(as2d_v1) == MethodSpec("as2d", budget=7, source="ctc", align="paper")
    new = {**MethodSpec("asp", budget=24).to_wire(), "tokens": [1, 2]}
    assert run_spec(new) == MethodSpec("asp", budget=24)
