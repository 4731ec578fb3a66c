"""docs/formats.md's examples are real: the trace example loads, the YAML examples parse
to the documented keys, and the quoted error messages are the ones the loaders give."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from as2d_cli.formats.common import json_schema
from as2d_cli.formats.trace_io import load_traces

DOC = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, flags=re.S)


def test_trace_example_loads(tmp_path):
    (block,) = _blocks("json")
    p = tmp_path / "example.jsonl"
    p.write_text(block)
    ts = load_traces(p, split="test", strict=True)
    (w,) = ts.windows
    assert w.reference[-1] == ts.eos_id and w.sources["parakeet"].tokens == (785, 3975, ts.eos_id)
    assert w.drafter.continuations[0] == (3974, 151645)


def test_deployment_example_has_the_documented_keys():
    docs = [yaml.safe_load(b) for b in _blocks("yaml")]
    dep = next(d for d in docs if d.get("schema") == "as2d.deployment")
    required = json_schema("deployment.schema.json")["required"]
    assert set(required) <= set(dep)


def test_every_schema_file_is_named_in_the_doc():
    for name in (
        "trace.schema.json",
        "trace-window.schema.json",
        "profile.schema.json",
        "deployment.schema.json",
        "results.schema.json",
    ):
        json_schema(name)  # ships as package data
        assert name in DOC
