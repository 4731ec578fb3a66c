"""The registry of stored schemas (as2d_cli/formats/registry.py) is the one place a
schema's name and version are written: the JSON Schemas, docs/formats.md's table and the
page documenting each document agree with it; every owner takes its constants from it; no
module outside as2d_cli/formats/ spells an ``as2d.*`` schema name of its own; and every
document keeps its version under ``version``."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from as2d_cli.formats import registry
from as2d_cli.formats.common import json_schema
from as2d_cli.formats.registry import FORMATS, Stored

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "as2d_cli" / "formats" / "schemas"
IDS = [f.schema for f in FORMATS]
# Where the source is searched for schema names: the packages, the benchmarks and the
# training scripts (not their work folder).
SOURCES = ["as2d_cli", "native", "device_agents", "benchmarks", "training"]
# ``as2d.*`` names that are no stored document: the runner protocol's messages, a wire
# format between the host and a runner (docs/runner-protocol.md), declared by its module.
NOT_STORED = {"as2d.runner": "native/protocol.py"}
NAME = re.compile(r"as2d\.[a-z][a-z0-9_-]*")


def test_the_names_are_unique_and_each_reads_its_own_version() -> None:
    assert len(set(IDS)) == len(IDS)
    for f in FORMATS:
        assert f.version in f.reads and list(f.reads) == sorted(set(f.reads)), f.schema
        assert NAME.fullmatch(f.schema), f.schema
    stream = registry.entry("as2d.stream")
    assert registry.name_version("as2d.stream") == (stream.schema, stream.version)
    with pytest.raises(KeyError, match="not in as2d_cli/formats/registry.py"):
        registry.entry("as2d.nothing")


@pytest.mark.parametrize("f", [f for f in FORMATS if f.json_schema], ids=lambda f: f.schema)
def test_its_json_schema_agrees(f: Stored) -> None:
    doc = json_schema(f.json_schema)
    props = doc["properties"]
    assert props["schema"] == {"const": f.schema}
    version = props["version"]
    allowed = {version["const"]} if "const" in version else set(version["enum"])
    # a schema checks the written version, or (applied before the upgrade) every one read
    assert allowed in ({f.version}, set(f.reads)), (f.schema, allowed)
    assert "schema_version" not in props and {"schema", "version"} <= set(doc["required"])
    if not str(doc.get("$id", "")).startswith("http"):  # an id "as2d.x/N" names the version
        assert doc.get("$id") in (None, f"{f.schema}/{f.version}")
    for part in f.parts:
        assert "schema" not in json_schema(part).get("properties", {})


def test_every_shipped_json_schema_belongs_to_an_entry() -> None:
    named = {n for f in FORMATS for n in (f.json_schema, *f.parts) if n}
    assert {p.name for p in SCHEMAS.glob("*.json")} == named


def test_the_formats_doc_shows_the_registry() -> None:
    doc = (ROOT / "docs" / "formats.md").read_text()
    assert registry.markdown_table() in doc, "regenerate the table: registry.markdown_table()"


def _sections(text: str) -> list[tuple[int, str, str]]:
    """(level, title, body) of every Markdown heading outside fenced code."""
    lines, heads, fenced = text.splitlines(), [], False
    for i, line in enumerate(lines):
        fenced ^= line.startswith("```")
        m = None if fenced else re.match(r"(#+) (.*)", line)
        if m:
            heads.append((i, len(m[1]), m[2].strip()))
    out = []
    for n, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[n + 1 :] if lv <= level), len(lines))
        out.append((level, title, "\n".join(lines[i:end])))
    return out


def _mentions(text: str, name: str, version: int) -> bool:
    """``name`` followed closely by its version: "v2", "version 2", ``"version": 2``."""
    flat = " ".join(text.split())
    pattern = re.compile(rf"^\W{{0,4}}(?:\w+\W+){{0,1}}?(?:v|version\W{{0,4}}){version}\b")
    return any(
        pattern.search(flat[m.end() : m.end() + 40])
        for m in re.finditer(re.escape(name) + r"(?![\w-])", flat)
    )


@pytest.mark.parametrize("f", FORMATS, ids=lambda f: f.schema)
def test_its_doc_section_names_it_with_its_version(f: Stored) -> None:
    sections = _sections((ROOT / f.doc_page).read_text())
    title = f.doc_section
    exact = [s for s in sections if s[1] == title]
    found = exact or [s for s in sections if s[1].startswith(title)]
    assert found, f"{f.doc_page} has no heading {title!r}"
    assert _mentions(found[0][2], f.schema, f.version), (
        f"{f.doc}: section does not name {f.schema} with version {f.version}"
    )


def test_a_stale_version_is_caught() -> None:
    assert _mentions("`as2d.trace` v2 — traces", "as2d.trace", 2)
    assert _mentions('{"schema": "as2d.devices", "version": 1}', "as2d.devices", 1)
    assert not _mentions("`as2d.trace` v1 — traces", "as2d.trace", 2)
    assert not _mentions("`as2d.trace-window` v2", "as2d.trace", 2)


@pytest.mark.parametrize("f", FORMATS, ids=lambda f: f.schema)
def test_its_owner_takes_its_constants_from_the_registry(f: Stored) -> None:
    assert f'registry.name_version("{f.schema}")' in (ROOT / f.owner).read_text(), f.owner
    if f.owner.startswith("as2d_cli/"):
        mod = importlib.import_module(f.owner.removesuffix(".py").replace("/", "."))
        if hasattr(mod, "READS"):  # a reader that lists the versions it reads
            assert tuple(mod.READS) == f.reads, f.owner


def _source_files() -> list[Path]:
    out: list[Path] = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(("as2d_cli/formats/", "training/work/")):
                out.append(path)
    return out


def _literals(path: Path) -> list[tuple[int, str]]:
    """String constants of ``path`` that are a whole ``as2d.*`` name, except a registry
    lookup's argument (``registry.name_version("as2d.stream")`` refers, it does not define)."""
    tree = ast.parse(path.read_text())
    lookups = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "registry"
        for arg in node.args
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and NAME.fullmatch(node.value)
        and id(node) not in lookups
    ]


def test_no_schema_name_is_defined_outside_formats() -> None:
    own = []
    for path in _source_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, name in _literals(path):
            if NOT_STORED.get(name) != rel:
                own.append(f"{rel}:{line}: {name!r}")
    assert not own, "take the name from as2d_cli/formats/registry.py:\n" + "\n".join(own)


def test_the_search_sees_a_name_of_its_own(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text('from x import registry\nA = registry.name_version("as2d.a")\nB = "as2d.b"\n')
    assert _literals(p) == [(3, "as2d.b")]


def test_every_document_keeps_its_version_under_version() -> None:
    """``schema_version`` survives only where energy results read their old files."""
    readers = []
    for path in _source_files():
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Constant) and n.value == "schema_version" for n in ast.walk(tree)):
            readers.append(path.relative_to(ROOT).as_posix())
    assert readers == ["as2d_cli/energy/results.py"]
    for p in SCHEMAS.glob("*.json"):
        assert "schema_version" not in p.read_text(), p.name
